#include "ridge/core/thread_pool.h"

#include <atomic>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ridge {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 4, 17, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ManyRoundsAgree) {
  ThreadPool pool(3);
  std::vector<int64_t> v(10007);
  std::iota(v.begin(), v.end(), 1);
  for (int round = 0; round < 200; ++round) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(int64_t(v.size()), [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += v[i];
      sum += s;
    });
    ASSERT_EQ(sum.load(), int64_t(v.size()) * int64_t(v.size() + 1) / 2);
  }
}

// Jobs back to back (workers still spinning), after pauses longer than ThreadPool::kSpin
// (workers asleep), and with fewer chunks than threads (workers without a chunk must still let
// the next job start only after they have seen this one): every index exactly once, each time.
TEST(ThreadPool, SpinningAndSleepingWorkersCoverEveryIndex) {
  ThreadPool pool(4);
  for (int round = 0; round < 300; ++round) {
    const int64_t n = 1 + round % 7;  // 1..7 items: 1 to 4 chunks
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << round << " " << i;
    if (round % 10 == 9) std::this_thread::sleep_for(2 * ThreadPool::kSpin);
  }
}

TEST(ThreadPool, DestroyedWhileWorkersSpinOrSleep) {
  for (int sleep : {0, 1}) {
    ThreadPool pool(3);
    std::atomic<int> sum{0};
    pool.parallel_for(30, [&](int64_t b, int64_t e) { sum += int(e - b); });
    EXPECT_EQ(sum.load(), 30);
    if (sleep) std::this_thread::sleep_for(2 * ThreadPool::kSpin);
  }  // the destructor must join both spinning and sleeping workers
}

}  // namespace
}  // namespace ridge
