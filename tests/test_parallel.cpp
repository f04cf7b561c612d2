// parallel_for: every item runs once, and the lookahead form names the item the same thread
// runs next.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace visattn {
namespace {

TEST(ParallelFor, RunsEveryItemOnce) {
  std::vector<std::atomic<int>> runs(1000);
  parallel_for(1000, 4, [&](int64_t i) { ++runs[i]; });
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(ParallelFor, NextIsWhatTheSameThreadRunsNext) {
  constexpr int64_t kItems = 500;
  std::mutex mutex;
  std::map<std::thread::id, std::vector<std::pair<int64_t, int64_t>>> by_thread;
  parallel_for(kItems, 3, true, [&](int64_t item, int64_t next) {
    std::lock_guard lock(mutex);
    by_thread[std::this_thread::get_id()].push_back({item, next});
  });
  std::vector<int> runs(kItems);
  for (const auto& [id, calls] : by_thread) {
    for (size_t c = 0; c < calls.size(); ++c) {
      ++runs[calls[c].first];
      EXPECT_EQ(calls[c].second, c + 1 < calls.size() ? calls[c + 1].first : -1);
    }
  }
  for (int r : runs) EXPECT_EQ(r, 1);
}

TEST(ParallelFor, RethrowsTheFirstErrorAndStops) {
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(100000, 2, true,
                            [&](int64_t i, int64_t) {
                              ++ran;
                              if (i == 10) throw std::runtime_error("item 10");
                            }),
               std::runtime_error);
  EXPECT_LT(ran.load(), 100000);
}

}  // namespace
}  // namespace visattn
