// PrefixCache: full KV blocks found again by content. A full block's hash is
// hash(parent block's hash, its token ids), so a block's hash names its whole prefix: identical
// prefixes map to identical hash chains and share blocks copy-free. The cache holds one reference
// of its own on every block it knows; a cached block that no sequence references is evictable,
// and evictable blocks are reused least recently released first when the pool runs dry.
//
// Only blocks whose KV is complete may be inserted (the caller inserts a block once every token
// of it has been computed). Each cached block keeps its parent hash and token ids, so a match is
// verified token by token, and a block whose hash is already cached with other content (a 64-bit
// collision) is not inserted and ends its sequence's chain of hashes: no later block can then be
// named after a prefix it does not follow, and a collision cannot hand out the wrong KV.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "ridge/kv/block_pool.h"

namespace ridge::kv {

struct PrefixMatch {
  std::vector<int32_t> blocks;   // cached blocks holding the first blocks.size() full blocks
  std::vector<uint64_t> hashes;  // their chain hashes
};

class PrefixCache {
 public:
  // The parent hash of a sequence's first block.
  static constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ULL;
  static uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens);

  PrefixCache(BlockPool& pool, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }

  // The longest chain of cached full blocks at the start of `tokens`, at most max_blocks long.
  // Takes no references (see acquire).
  PrefixMatch match(std::span<const int32_t> tokens, int32_t max_blocks) const;
  // One more reference on a cached block (found by match); it stops being evictable.
  void acquire(int32_t block);
  // Records that `block`, referenced by the caller, holds the complete KV of `tokens` (one full
  // block) after the chain ending in parent_hash. Returns the block's hash. When an identical
  // block is cached already, nothing changes and `block` stays private to the caller. nullopt:
  // another block with this hash and other content (parent or tokens) is cached; nothing changes,
  // and the caller must not use a hash for this block (nor insert the blocks after it).
  std::optional<uint64_t> insert(uint64_t parent_hash, std::span<const int32_t> tokens,
                                 int32_t block);
  // Drops the caller's reference. A cached block left with only the cache's reference becomes
  // evictable (the most recently used end of the LRU order); other blocks go back to the pool at
  // their last reference.
  void release(int32_t block);
  // A block for new KV, referenced once by the caller: a free block of the pool, else the least
  // recently used evictable block (evicted). nullopt when every block is referenced by a sequence.
  std::optional<int32_t> allocate();
  // Evicts every evictable block (they return to the pool's free list).
  void clear();

  int32_t num_cached() const { return int32_t(by_hash_.size()); }
  int32_t num_evictable() const { return int32_t(lru_.size()); }
  // Blocks allocate() can hand out: free plus evictable.
  int32_t num_available() const { return pool_.num_free() + num_evictable(); }
  bool is_cached(int32_t block) const;
  bool is_evictable(int32_t block) const;
  // Evictable blocks, least recently used first (for tests and debugging).
  std::vector<int32_t> eviction_order() const { return {lru_.begin(), lru_.end()}; }

 private:
  struct Entry {
    bool cached = false;
    bool evictable = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru_pos;
  };
  Entry& entry(int32_t block);
  const Entry& entry(int32_t block) const;
  void evict(int32_t block);

  BlockPool& pool_;
  int32_t block_size_;
  std::vector<Entry> entries_;  // by block id
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> lru_;  // evictable blocks, least recently used first
};

}  // namespace ridge::kv
