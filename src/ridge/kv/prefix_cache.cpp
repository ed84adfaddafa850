#include "ridge/kv/prefix_cache.h"

#include <algorithm>
#include <cstdint>

#include "ridge/core/error.h"

namespace ridge::kv {

namespace {
// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}
}  // namespace

uint64_t PrefixCache::hash_block(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = avalanche(parent_hash ^ (uint64_t(tokens.size()) * 0x9e3779b97f4a7c15ULL));
  for (int32_t t : tokens) h = avalanche(h ^ (uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ULL));
  return h;
}

PrefixCache::PrefixCache(BlockPool& pool, int32_t block_size)
    : pool_(pool), block_size_(block_size), entries_(size_t(pool.num_blocks())) {
  RIDGE_CHECK(block_size > 0, "prefix cache: block_size {} must be positive", block_size);
}

PrefixCache::Entry& PrefixCache::entry(int32_t block) {
  RIDGE_CHECK(block >= 0 && block < int32_t(entries_.size()),
              "prefix cache: block {} outside [0, {})", block, entries_.size());
  return entries_[size_t(block)];
}

const PrefixCache::Entry& PrefixCache::entry(int32_t block) const {
  return const_cast<PrefixCache*>(this)->entry(block);
}

bool PrefixCache::is_cached(int32_t block) const {
  return entry(block).cached;
}
bool PrefixCache::is_evictable(int32_t block) const {
  return entry(block).evictable;
}

PrefixMatch PrefixCache::match(std::span<const int32_t> tokens, int32_t max_blocks) const {
  PrefixMatch m;
  const int32_t full = int32_t(tokens.size()) / block_size_;
  uint64_t parent = kRootHash;
  for (int32_t i = 0; i < std::min(full, max_blocks); ++i) {
    const auto piece = tokens.subspan(size_t(i) * size_t(block_size_), size_t(block_size_));
    const uint64_t h = hash_block(parent, piece);
    const auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    const Entry& e = entries_[size_t(it->second)];
    if (e.parent_hash != parent || !std::equal(piece.begin(), piece.end(), e.tokens.begin()))
      break;  // a hash collision: not the same prefix
    m.blocks.push_back(it->second);
    m.hashes.push_back(h);
    parent = h;
  }
  return m;
}

void PrefixCache::acquire(int32_t block) {
  Entry& e = entry(block);
  RIDGE_CHECK(e.cached, "prefix cache: acquire of block {} that is not cached", block);
  pool_.ref(block);
  if (e.evictable) {
    lru_.erase(e.lru_pos);
    e.evictable = false;
  }
}

std::optional<uint64_t> PrefixCache::insert(uint64_t parent_hash, std::span<const int32_t> tokens,
                                            int32_t block) {
  RIDGE_CHECK(int32_t(tokens.size()) == block_size_,
              "prefix cache: insert of {} tokens into a block of {}", tokens.size(), block_size_);
  Entry& e = entry(block);
  RIDGE_CHECK(pool_.ref_count(block) > 0, "prefix cache: insert of free block {}", block);
  const uint64_t h = hash_block(parent_hash, tokens);
  if (e.cached) {
    RIDGE_CHECK(e.hash == h, "prefix cache: block {} is cached with other content", block);
    return h;
  }
  if (const auto it = by_hash_.find(h); it != by_hash_.end()) {
    const Entry& c = entries_[size_t(it->second)];
    if (c.parent_hash != parent_hash || !std::equal(tokens.begin(), tokens.end(), c.tokens.begin()))
      return std::nullopt;  // a collision: this block's prefix cannot be named by h
    return h;               // an identical block is cached; this one stays private
  }
  by_hash_.emplace(h, block);
  e.cached = true;
  e.hash = h;
  e.parent_hash = parent_hash;
  e.tokens.assign(tokens.begin(), tokens.end());
  pool_.ref(block);  // the cache's own reference
  return h;
}

void PrefixCache::release(int32_t block) {
  Entry& e = entry(block);
  if (!e.cached) {
    pool_.unref(block);
    return;
  }
  RIDGE_CHECK(!e.evictable && pool_.ref_count(block) >= 2,
              "prefix cache: release of cached block {} that no sequence references", block);
  if (pool_.unref(block) == 1) {
    e.lru_pos = lru_.insert(lru_.end(), block);
    e.evictable = true;
  }
}

void PrefixCache::evict(int32_t block) {
  Entry& e = entries_[size_t(block)];
  lru_.erase(e.lru_pos);
  by_hash_.erase(e.hash);
  e = Entry{};
  pool_.unref(block);  // the cache's reference was the last one
}

std::optional<int32_t> PrefixCache::allocate() {
  if (auto b = pool_.allocate()) return b;
  if (lru_.empty()) return std::nullopt;
  evict(lru_.front());
  return pool_.allocate();
}

void PrefixCache::clear() {
  while (!lru_.empty()) evict(lru_.front());
}

}  // namespace ridge::kv
