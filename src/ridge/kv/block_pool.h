// BlockPool: which KV blocks are in use. A free list plus a reference count per block; blocks are
// named by id (0 .. num_blocks - 1), the same ids as the KvPool's pages. A block is shared
// copy-free by taking another reference; it returns to the free list when its last reference goes.
// Misuse (an id out of range, unreferencing a free block) throws ridge::Error, never UB.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ridge::kv {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return int32_t(ref_counts_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }

  // Takes a free block (reference count 1); nullopt when every block is referenced.
  std::optional<int32_t> allocate();
  // One more reference to a block in use.
  void ref(int32_t block);
  // One reference fewer; at zero the block is free again. Returns the remaining count.
  int32_t unref(int32_t block);
  int32_t ref_count(int32_t block) const;

 private:
  void check_id(int32_t block, const char* what) const;

  std::vector<int32_t> ref_counts_;
  // Free ids used as a stack: the most recently freed block is reused first (warm in caches).
  std::vector<int32_t> free_;
};

}  // namespace ridge::kv
