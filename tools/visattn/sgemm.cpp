#include "sgemm.h"

#if VISATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <chrono>
#include <vector>

namespace visattn::cli {

std::optional<double> measure_sgemm_gflops(int n, int threads) {
#if !VISATTN_HAVE_OPENBLAS
  (void)n, (void)threads;
  return std::nullopt;
#else
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  std::vector<double> seconds;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);  // warm-up: thread pool start, page faults
  for (int rep = 0; rep < 9; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + 4, seconds.end());
  return 2.0 * n * n * double(n) / seconds[4] / 1e9;  // the median of 9
#endif
}

}  // namespace visattn::cli
