#include "ridge/kv/block_pool.h"

#include <cstdint>

#include "ridge/core/error.h"

namespace ridge::kv {

BlockPool::BlockPool(int32_t num_blocks) {
  RIDGE_CHECK(num_blocks > 0, "block pool: num_blocks {} must be positive", num_blocks);
  ref_counts_.assign(size_t(num_blocks), 0);
  free_.reserve(size_t(num_blocks));
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::check_id(int32_t block, const char* what) const {
  RIDGE_CHECK(block >= 0 && block < num_blocks(), "block pool: {} of block {} outside [0, {})",
              what, block, num_blocks());
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  ref_counts_[size_t(b)] = 1;
  return b;
}

void BlockPool::ref(int32_t block) {
  check_id(block, "ref");
  RIDGE_CHECK(ref_counts_[size_t(block)] > 0, "block pool: ref of free block {}", block);
  ++ref_counts_[size_t(block)];
}

int32_t BlockPool::unref(int32_t block) {
  check_id(block, "unref");
  int32_t& c = ref_counts_[size_t(block)];
  RIDGE_CHECK(c > 0, "block pool: unref of free block {}", block);
  if (--c == 0) free_.push_back(block);
  return c;
}

int32_t BlockPool::ref_count(int32_t block) const {
  check_id(block, "ref_count");
  return ref_counts_[size_t(block)];
}

}  // namespace ridge::kv
