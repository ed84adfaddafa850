// KvPool: the paged KV memory of a model on one backend. Per layer, K and V pools of shape
// [num_blocks, block_size, n_kv_heads, head_dim] (NHD). Addressed by block ids only, so blocks
// can be handed between contexts or copied elsewhere without touching the model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/model/config.h"

namespace ridge::kv {

class KvPool {
 public:
  KvPool(backend::Backend& backend, const model::ModelConfig& config, int64_t num_blocks,
         int64_t block_size, DType dtype);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_tokens() const { return num_blocks_ * block_size_; }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return bytes_; }
  // Bytes one token takes across all layers (K and V).
  static size_t bytes_per_token(const model::ModelConfig& config, DType dtype);
  std::span<backend::KvLayer> layers() { return layers_; }

 private:
  int64_t num_blocks_;
  int64_t block_size_;
  DType dtype_;
  size_t bytes_ = 0;
  std::vector<backend::Buffer> buffers_;
  std::vector<backend::KvLayer> layers_;
};

}  // namespace ridge::kv
