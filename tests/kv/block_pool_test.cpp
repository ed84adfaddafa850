#include "ridge/kv/block_pool.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "ridge/core/error.h"

namespace ridge::kv {
namespace {

TEST(BlockPool, HandsOutEveryBlockOnceThenNullopt) {
  std::mt19937 rng(std::random_device{}());
  const int32_t n = std::uniform_int_distribution<int32_t>(1, 300)(rng);
  BlockPool pool(n);
  std::set<int32_t> seen;
  for (int32_t i = 0; i < n; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, n);
    EXPECT_TRUE(seen.insert(*b).second) << "block " << *b << " handed out twice";
    EXPECT_EQ(pool.ref_count(*b), 1);
  }
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_FALSE(pool.allocate().has_value());  // still nullopt, no state change
  const int32_t victim =
      *std::next(seen.begin(), std::uniform_int_distribution<int32_t>(0, n - 1)(rng));
  EXPECT_EQ(pool.unref(victim), 0);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(), victim);
}

// Random ref/unref/allocate against a reference map of counts.
TEST(BlockPool, ReferenceCountsMatchAModel) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const int32_t n = std::uniform_int_distribution<int32_t>(1, 64)(rng);
  BlockPool pool(n);
  std::map<int32_t, int32_t> model;  // block -> count, only referenced blocks
  for (int step = 0; step < 5000; ++step) {
    const int op = std::uniform_int_distribution<int>(0, 2)(rng);
    if (op == 0 || model.empty()) {
      auto b = pool.allocate();
      if (int32_t(model.size()) == n) {
        EXPECT_FALSE(b.has_value());
      } else {
        ASSERT_TRUE(b.has_value());
        ASSERT_FALSE(model.contains(*b));
        model[*b] = 1;
      }
    } else {
      auto it = std::next(model.begin(),
                          std::uniform_int_distribution<long>(0, long(model.size()) - 1)(rng));
      if (op == 1) {
        pool.ref(it->first);
        ++it->second;
      } else {
        const int32_t left = pool.unref(it->first);
        EXPECT_EQ(left, --it->second);
        if (left == 0) model.erase(it);
      }
    }
    ASSERT_EQ(pool.num_free(), n - int32_t(model.size()));
  }
  for (int32_t b = 0; b < n; ++b) EXPECT_EQ(pool.ref_count(b), model.contains(b) ? model[b] : 0);
}

TEST(BlockPool, MisuseThrowsNamingTheBlock) {
  BlockPool pool(4);
  auto b = pool.allocate();
  ASSERT_TRUE(b);
  EXPECT_THROW(pool.ref(4), Error);
  EXPECT_THROW(pool.unref(-1), Error);
  EXPECT_THROW(pool.ref_count(1000), Error);
  const int32_t free_block = *b == 0 ? 1 : 0;
  try {
    pool.unref(free_block);
    FAIL() << "unref of a free block did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("free block " + std::to_string(free_block)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pool.ref(free_block), Error);
  EXPECT_EQ(pool.unref(*b), 0);
  EXPECT_THROW(pool.unref(*b), Error);  // double free
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_THROW(BlockPool(0), Error);
}

}  // namespace
}  // namespace ridge::kv
