#include <cstdint>
#include "ridge/kv/kv_pool.h"

#include "ridge/core/error.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ridge::kv {

size_t KvPool::bytes_per_token(const model::ModelConfig& c, DType dtype) {
  return 2 * size_t(c.n_layers) * ridge::row_bytes(dtype, c.kv_dim());
}

KvPool::KvPool(backend::Backend& be, const model::ModelConfig& c, int64_t num_blocks,
               int64_t block_size, DType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  RIDGE_CHECK(block_size == 16 || block_size == 32 || block_size == 64,
              "KV block size {} is not one of 16, 32, 64", block_size);
  RIDGE_CHECK(num_blocks > 0, "KV pool needs at least one block, got {}", num_blocks);
  const std::vector<DType> ok = be.kv_dtypes();
  if (std::find(ok.begin(), ok.end(), dtype) == ok.end()) {
    std::string names;
    for (DType t : ok) names += std::string(names.empty() ? "" : ", ") + std::string(dtype_name(t));
    fail("KV dtype {}: the {} backend keeps its KV cache as one of {} (--kv-dtype)", dtype_name(dtype),
         be.name(), names);
  }
  const size_t layer_bytes = size_t(num_blocks * block_size) * ridge::row_bytes(dtype, c.kv_dim());
  for (int64_t i = 0; i < c.n_layers; ++i) {
    backend::KvLayer layer;
    for (Tensor* t : {&layer.k, &layer.v}) {
      buffers_.push_back(be.allocate(layer_bytes));
      *t = Tensor(buffers_.back().data(), dtype, {num_blocks, block_size, c.n_kv_heads, c.head_dim},
                  be.device());
      bytes_ += layer_bytes;
    }
    layers_.push_back(layer);
  }
}

}  // namespace ridge::kv
