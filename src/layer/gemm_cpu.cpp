#include "layer/gemm_cpu.h"

#if VISATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>

#include "core/parallel.h"

namespace visattn::layer {

namespace {

#if !VISATTN_HAVE_OPENBLAS
// Eight partial sums, so that the compiler vectorizes the reduction without -ffast-math.
float dot(const float* a, const float* b, int64_t n) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  }
  float sum = 0;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float p : partial) sum += p;
  return sum;
}
#endif

}  // namespace

void linear_f32(const float* x, int64_t ldx, int64_t rows, const float* w, const float* b,
                int64_t out_features, int64_t in_features, float* y, int64_t ldy, int threads) {
  if (rows == 0 || out_features == 0) return;
#if VISATTN_HAVE_OPENBLAS
  (void)threads;  // OpenBLAS keeps its own pool (OPENBLAS_NUM_THREADS)
  // The bias goes in as y's initial value (beta = 1): no second pass over y.
  if (b) {
    for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out_features, y + r * ldy);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(out_features), int(in_features), 1.0f,
              x, int(ldx), w, int(in_features), b ? 1.0f : 0.0f, y, int(ldy));
#else
  // Blocks of rows × output features, so a block of w stays in cache across its rows.
  constexpr int64_t kRows = 16, kOut = 64;
  const int64_t row_blocks = (rows + kRows - 1) / kRows, out_blocks = (out_features + kOut - 1) / kOut;
  parallel_for(row_blocks * out_blocks, threads ? threads : default_num_threads(), [&](int64_t item) {
    const int64_t r0 = item / out_blocks * kRows, o0 = item % out_blocks * kOut;
    for (int64_t r = r0; r < std::min(rows, r0 + kRows); ++r) {
      for (int64_t o = o0; o < std::min(out_features, o0 + kOut); ++o) {
        y[r * ldy + o] = dot(x + r * ldx, w + o * in_features, in_features) + (b ? b[o] : 0.0f);
      }
    }
  });
#endif
}

const char* cpu_gemm_name() {
#if VISATTN_HAVE_OPENBLAS
  return "OpenBLAS sgemm";
#else
  return "built-in loops (OpenBLAS not found at build time)";
#endif
}

}  // namespace visattn::layer
