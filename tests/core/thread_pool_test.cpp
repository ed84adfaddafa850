#include "ridge/core/thread_pool.h"

#include <atomic>
#include <numeric>
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

}  // namespace
}  // namespace ridge
