#include "core/parallel.h"

#include <condition_variable>
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

namespace {

// One loop's shared state: items are handed out in order from `next`; with lookahead each
// thread holds one claimed item ahead of the one it runs.
struct Loop {
  int64_t count;
  bool lookahead;
  const std::function<void(int64_t, int64_t)>* body;
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;

  void work() {
    for (int64_t i = next++; i < count;) {
      const int64_t ahead = lookahead ? next++ : -1;
      try {
        (*body)(i, ahead < count ? ahead : -1);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = count;  // stop handing out work
        return;
      }
      i = lookahead ? ahead : next++;
    }
  }
};

// Worker threads kept for the life of the process, so each keeps its thread_local scratch
// (no allocation and no page faults per call once warm). One loop runs on it at a time; a
// call that finds it busy (another thread's attention) starts threads of its own instead.
class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool;  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // Runs `loop` on the caller and up to `helpers` workers; false if the pool is busy.
  bool try_run(Loop& loop, int helpers) {
    std::unique_lock busy(busy_, std::try_to_lock);
    if (!busy) return false;
    {
      std::lock_guard lock(mutex_);
      while (int(workers_.size()) < helpers) workers_.emplace_back([this] { serve(); });
      loop_ = &loop;
      wanted_ = helpers;
      active_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    loop.work();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return wanted_ == 0 && active_ == 0; });
    loop_ = nullptr;
    return true;
  }

 private:
  void serve() {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen && wanted_ > 0; });
      seen = generation_;
      --wanted_;
      ++active_;
      Loop* loop = loop_;
      lock.unlock();
      loop->work();
      lock.lock();
      --active_;
      if (wanted_ == 0 && active_ == 0) done_.notify_all();
    }
  }

  std::mutex busy_;   // held by the one loop the pool runs
  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Loop* loop_ = nullptr;
  int wanted_ = 0, active_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace

void parallel_for(int64_t count, int num_threads, const std::function<void(int64_t)>& body) {
  parallel_for(count, num_threads, false, [&body](int64_t item, int64_t) { body(item); });
}

void parallel_for(int64_t count, int num_threads, bool lookahead,
                  const std::function<void(int64_t item, int64_t next)>& body) {
  Loop loop;
  loop.count = count;
  loop.lookahead = lookahead;
  loop.body = &body;
  const int helpers = int(std::min<int64_t>(num_threads, count)) - 1;
  if (helpers <= 0) {
    loop.work();
  } else if (!Pool::instance().try_run(loop, helpers)) {
    std::vector<std::thread> threads;
    for (int t = 0; t < helpers; ++t) threads.emplace_back([&] { loop.work(); });
    loop.work();
    for (auto& thread : threads) thread.join();
  }
  if (loop.error) std::rethrow_exception(loop.error);
}

}  // namespace visattn
