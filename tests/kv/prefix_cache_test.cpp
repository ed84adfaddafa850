#include "ridge/kv/prefix_cache.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "ridge/core/error.h"

namespace ridge::kv {
namespace {

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int32_t> d(0, 49151);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

std::span<const int32_t> block_of(const std::vector<int32_t>& tokens, int32_t i, int32_t bs) {
  return std::span<const int32_t>(tokens).subspan(size_t(i) * bs, size_t(bs));
}

// A sequence's view: allocate a block per full block of `tokens` and insert them as a chain.
std::vector<int32_t> fill_and_insert(PrefixCache& cache, const std::vector<int32_t>& tokens) {
  const int32_t bs = cache.block_size();
  std::vector<int32_t> blocks;
  uint64_t parent = PrefixCache::kRootHash;
  for (int32_t i = 0; i < int32_t(tokens.size()) / bs; ++i) {
    auto b = cache.allocate();
    EXPECT_TRUE(b.has_value());
    blocks.push_back(*b);
    parent = cache.insert(parent, block_of(tokens, i, bs), *b).value();
  }
  return blocks;
}

TEST(PrefixCache, HashNamesTheWholeChain) {
  std::mt19937 rng(std::random_device{}());
  const auto a = random_tokens(rng, 16);
  auto b = a;
  b[std::uniform_int_distribution<size_t>(0, 15)(rng)] ^= 1;
  const uint64_t p1 = PrefixCache::hash_block(PrefixCache::kRootHash, random_tokens(rng, 16));
  const uint64_t p2 = p1 ^ 1;
  // Equal content in other storage, reached by another route: the hash reads the tokens, not
  // where they are.
  std::vector<int32_t> a_copy;
  for (int32_t t : a) a_copy.push_back(t);
  EXPECT_EQ(PrefixCache::hash_block(p1, a), PrefixCache::hash_block(p1, a_copy));
  EXPECT_NE(PrefixCache::hash_block(p1, a), PrefixCache::hash_block(p2, a));  // other parent
  EXPECT_NE(PrefixCache::hash_block(p1, a), PrefixCache::hash_block(p1, b));  // other tokens
  EXPECT_NE(PrefixCache::hash_block(PrefixCache::kRootHash, a), PrefixCache::hash_block(p1, a));
}

TEST(PrefixCache, SamePrefixGivesSameBlocks) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (int32_t bs : {16, 32}) {
    BlockPool pool(64);
    PrefixCache cache(pool, bs);
    const auto a = random_tokens(rng, size_t(bs) * 4 + 5);  // 4 full blocks and a partial one
    const auto a_blocks = fill_and_insert(cache, a);
    ASSERT_EQ(a_blocks.size(), 4u);
    EXPECT_EQ(cache.num_cached(), 4);

    // The same tokens: every full block, each verified; max_blocks caps the chain.
    auto m = cache.match(a, 100);
    EXPECT_EQ(m.blocks, a_blocks);
    ASSERT_EQ(m.hashes.size(), 4u);
    EXPECT_EQ(m.hashes[0], PrefixCache::hash_block(PrefixCache::kRootHash, block_of(a, 0, bs)));
    EXPECT_EQ(m.hashes[1], PrefixCache::hash_block(m.hashes[0], block_of(a, 1, bs)));
    EXPECT_EQ(cache.match(a, 2).blocks,
              std::vector<int32_t>(a_blocks.begin(), a_blocks.begin() + 2));
    // A prompt that diverges inside block 2 shares blocks 0 and 1 only.
    auto b = a;
    b[size_t(2 * bs + std::uniform_int_distribution<int32_t>(0, bs - 1)(rng))] += 1;
    EXPECT_EQ(cache.match(b, 100).blocks,
              std::vector<int32_t>(a_blocks.begin(), a_blocks.begin() + 2));
    // Shorter than a block: nothing.
    EXPECT_TRUE(cache.match(std::span<const int32_t>(a).first(size_t(bs - 1)), 100).blocks.empty());
    // Block 1's tokens at the start of another prompt: same tokens, other parent, no match.
    std::vector<int32_t> c(a.begin() + bs, a.end());
    EXPECT_TRUE(cache.match(c, 100).blocks.empty());
    // match takes no references.
    for (int32_t blk : a_blocks) EXPECT_EQ(pool.ref_count(blk), 2);  // the sequence + the cache
  }
}

TEST(PrefixCache, DuplicateBlockStaysPrivate) {
  std::mt19937 rng(std::random_device{}());
  BlockPool pool(8);
  PrefixCache cache(pool, 16);
  const auto a = random_tokens(rng, 16);
  const int32_t b1 = *cache.allocate(), b2 = *cache.allocate();
  const uint64_t h1 = cache.insert(PrefixCache::kRootHash, a, b1).value();
  const uint64_t h2 = cache.insert(PrefixCache::kRootHash, a, b2).value();  // two computed it
  EXPECT_EQ(h1, h2);
  EXPECT_TRUE(cache.is_cached(b1));
  EXPECT_FALSE(cache.is_cached(b2));
  EXPECT_EQ(cache.insert(PrefixCache::kRootHash, a, b1), std::optional(h1));  // a no-op
  EXPECT_EQ(pool.ref_count(b1), 2);
  const int32_t free_before = pool.num_free();
  cache.release(b2);
  EXPECT_EQ(pool.num_free(), free_before + 1);  // private: straight back to the pool
  cache.release(b1);
  EXPECT_EQ(pool.num_free(), free_before + 1);  // cached: kept, evictable
  EXPECT_TRUE(cache.is_evictable(b1));
  EXPECT_THROW(cache.release(b1), Error);  // no sequence holds it any more
  EXPECT_THROW(cache.insert(PrefixCache::kRootHash, std::span<const int32_t>(a).first(8), b1),
               Error);  // not a full block
}

// The inverse of hash_block's mixing (MurmurHash3's 64-bit finalizer, a bijection): the parent hash
// under which `tokens` hash to `target`. Lets a test make a 64-bit collision on purpose.
uint64_t inverse_odd(uint64_t a) {  // a * inverse_odd(a) == 1 mod 2^64 (Newton's iteration)
  uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
uint64_t unmix(uint64_t h) {
  h ^= h >> 33;
  h *= inverse_odd(0xc4ceb9fe1a85ec53ULL);
  h ^= h >> 33;
  h *= inverse_odd(0xff51afd7ed558ccdULL);
  h ^= h >> 33;
  return h;
}
uint64_t parent_hashing_to(uint64_t target, std::span<const int32_t> tokens) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  uint64_t h = target;
  for (size_t i = tokens.size(); i-- > 0;) h = unmix(h) ^ (uint64_t(uint32_t(tokens[i])) + kGolden);
  return unmix(h) ^ (uint64_t(tokens.size()) * kGolden);
}

// A block whose hash is cached with other content (a collision, made here by choosing its parent
// hash) is not inserted, and the cached block keeps its content and its chain: insert says so
// (nullopt), and the scheduler then registers none of that sequence's later blocks.
TEST(PrefixCache, CollidingBlockIsNotInserted) {
  std::mt19937 rng(std::random_device{}());
  BlockPool pool(8);
  PrefixCache cache(pool, 16);
  const auto a = random_tokens(rng, 16);
  auto b = a;
  b[std::uniform_int_distribution<size_t>(0, 15)(rng)] ^= 1;
  const int32_t x = *cache.allocate(), y = *cache.allocate(), z = *cache.allocate();
  const uint64_t h = cache.insert(PrefixCache::kRootHash, a, x).value();
  // The helper is right: it reproduces a's own parent, and makes b collide with a.
  ASSERT_EQ(parent_hashing_to(h, a), PrefixCache::kRootHash);
  const uint64_t p = parent_hashing_to(h, b);
  ASSERT_EQ(PrefixCache::hash_block(p, b), h);
  EXPECT_EQ(cache.insert(p, b, y), std::nullopt) << "other tokens under the same hash";
  EXPECT_FALSE(cache.is_cached(y));
  // Identical content under the same parent is still the no-op it was: the block stays private.
  EXPECT_EQ(cache.insert(PrefixCache::kRootHash, a, z), std::optional(h));
  EXPECT_FALSE(cache.is_cached(z));
  // The cached block still matches its own prefix, and only that.
  const PrefixMatch ma = cache.match(a, 1);
  ASSERT_EQ(ma.blocks.size(), 1u);
  EXPECT_EQ(ma.blocks[0], x);
  EXPECT_TRUE(cache.match(b, 1).blocks.empty());
}

// Released cached blocks are evicted least recently released first, and only when the free list
// is empty; referenced blocks are never evicted.
TEST(PrefixCache, EvictsUnreferencedBlocksInLruOrder) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const int32_t bs = 16, n = 24;
  BlockPool pool(n);
  PrefixCache cache(pool, bs);
  // Six sequences of 1..4 full blocks each (fits in 24 blocks).
  std::vector<std::vector<int32_t>> prompts, tables;
  int32_t used = 0;
  while (true) {
    const int32_t k = std::uniform_int_distribution<int32_t>(1, 4)(rng);
    if (used + k > n - 2) break;
    prompts.push_back(random_tokens(rng, size_t(k * bs)));
    tables.push_back(fill_and_insert(cache, prompts.back()));
    used += k;
  }
  // Keep one sequence alive (referenced); release the others in a random order, each sequence's
  // blocks tail first (as the scheduler does, so prefix heads outlive their tails).
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t kept = order.back();
  order.pop_back();
  std::vector<int32_t> released;
  for (size_t s : order)
    for (auto it = tables[s].rbegin(); it != tables[s].rend(); ++it) {
      cache.release(*it);
      released.push_back(*it);
    }
  EXPECT_EQ(cache.eviction_order(), released);
  EXPECT_EQ(cache.num_evictable(), int32_t(released.size()));

  // Touching a block (a prefix hit) takes it out of the LRU; releasing it again makes it newest.
  const size_t touched_seq = order[std::uniform_int_distribution<size_t>(0, order.size() - 1)(rng)];
  const auto hit = cache.match(prompts[touched_seq], 1);
  ASSERT_EQ(hit.blocks.size(), 1u);
  cache.acquire(hit.blocks[0]);
  EXPECT_FALSE(cache.is_evictable(hit.blocks[0]));
  cache.release(hit.blocks[0]);
  released.erase(std::find(released.begin(), released.end(), hit.blocks[0]));
  released.push_back(hit.blocks[0]);
  EXPECT_EQ(cache.eviction_order(), released);

  // Drain the free list, then every allocation evicts the next LRU block.
  const int32_t free_now = pool.num_free();
  for (int32_t i = 0; i < free_now; ++i) ASSERT_TRUE(cache.allocate());
  EXPECT_EQ(cache.num_available(), int32_t(released.size()));
  for (int32_t expected : released) {
    auto b = cache.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(*b, expected);
    EXPECT_FALSE(cache.is_cached(*b));
  }
  // Only the kept sequence's blocks are left cached, all referenced: nothing more to hand out.
  EXPECT_FALSE(cache.allocate().has_value());
  EXPECT_EQ(cache.num_cached(), int32_t(tables[kept].size()));
  EXPECT_EQ(cache.match(prompts[kept], 100).blocks, tables[kept]);
  for (size_t s : order) EXPECT_TRUE(cache.match(prompts[s], 100).blocks.empty());
}

// Random admissions (match, acquire, allocate, insert) and releases; afterwards every block is
// back in the pool once the cache is cleared, and reference counts always add up.
TEST(PrefixCache, RandomTrafficKeepsCountsConsistent) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const int32_t bs = 16, n = 40;
  BlockPool pool(n);
  PrefixCache cache(pool, bs);
  // Prompts built from a few shared stems so that hits happen.
  std::vector<std::vector<int32_t>> stems;
  for (int i = 0; i < 4; ++i) stems.push_back(random_tokens(rng, size_t(bs) * 3));
  std::vector<std::vector<int32_t>> live;  // block tables of live sequences
  int64_t hits = 0, admitted = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || std::bernoulli_distribution(0.55)(rng)) {
      auto tokens = stems[std::uniform_int_distribution<size_t>(0, 3)(rng)];
      tokens.resize(size_t(std::uniform_int_distribution<int32_t>(0, 3 * bs)(rng)));
      auto tail =
          random_tokens(rng, size_t(std::uniform_int_distribution<int32_t>(1, 2 * bs)(rng)));
      tokens.insert(tokens.end(), tail.begin(), tail.end());
      const int32_t need = (int32_t(tokens.size()) + bs - 1) / bs;
      const auto m = cache.match(tokens, (int32_t(tokens.size()) - 1) / bs);
      int32_t evictable_hits = 0;
      for (int32_t b : m.blocks) evictable_hits += cache.is_evictable(b);
      if (need - int32_t(m.blocks.size()) > cache.num_available() - evictable_hits) continue;
      std::vector<int32_t> table;
      hits += int64_t(m.blocks.size());
      ++admitted;
      for (int32_t b : m.blocks) {
        cache.acquire(b);
        table.push_back(b);
      }
      uint64_t parent = m.hashes.empty() ? PrefixCache::kRootHash : m.hashes.back();
      while (int32_t(table.size()) < need) {
        auto b = cache.allocate();
        ASSERT_TRUE(b.has_value()) << "accounting promised a block";
        table.push_back(*b);
        const int32_t i = int32_t(table.size()) - 1;
        if ((i + 1) * bs <= int32_t(tokens.size()))
          parent = cache.insert(parent, block_of(tokens, i, bs), *b).value();
      }
      live.push_back(table);
    } else {
      const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      for (auto it = live[i].rbegin(); it != live[i].rend(); ++it) cache.release(*it);
      live.erase(live.begin() + long(i));
    }
    // Each block's count = live sequences holding it + 1 if cached.
    std::map<int32_t, int32_t> expect;
    for (const auto& t : live)
      for (int32_t b : t) ++expect[b];
    int32_t evictable = 0;
    for (int32_t b = 0; b < n; ++b) {
      const int32_t want = (expect.contains(b) ? expect[b] : 0) + (cache.is_cached(b) ? 1 : 0);
      ASSERT_EQ(pool.ref_count(b), want) << "block " << b << " at step " << step;
      ASSERT_EQ(cache.is_evictable(b), cache.is_cached(b) && !expect.contains(b));
      evictable += cache.is_evictable(b);
    }
    ASSERT_EQ(cache.num_evictable(), evictable);
  }
  EXPECT_GT(hits, admitted / 4) << "the stems should give prefix hits";
  for (auto& t : live)
    for (int32_t b : t) cache.release(b);
  EXPECT_EQ(cache.num_available(), n);
  cache.clear();
  EXPECT_EQ(pool.num_free(), n);
  EXPECT_EQ(cache.num_cached(), 0);
}

}  // namespace
}  // namespace ridge::kv
