#include "core/parallel.h"

#include <cstdlib>
#include <mutex>

namespace visattn {

int default_num_threads() {
  for (const char* name : {"VISATTN_NUM_THREADS", "OMP_NUM_THREADS"}) {
    if (const char* value = std::getenv(name)) {
      const int n = std::atoi(value);
      if (n > 0) return n;
    }
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

void parallel_for(int64_t count, int num_threads, const std::function<void(int64_t)>& body) {
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int64_t i = next++; i < count; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = count;  // stop handing out work
      }
    }
  };
  const int64_t extra = std::min<int64_t>(num_threads, count) - 1;
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < extra; ++t) threads.emplace_back(worker);
  worker();
  for (auto& thread : threads) thread.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace visattn
