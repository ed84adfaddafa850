#include "ridge/io/tensor_data.h"

#include <cstdint>

#include "ridge/core/error.h"

namespace ridge::io {

int64_t TensorData::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the readers have checked that this product fits
  return n;
}

Tensor TensorData::view() const {
  RIDGE_CHECK(shape.size() <= size_t(Tensor::kMaxDims),
              "tensor '{}' has rank {}; a Tensor view holds at most {} dimensions", name,
              shape.size(), Tensor::kMaxDims);
  void* p = const_cast<std::byte*>(data);
  if (shape.empty()) {  // a scalar (safetensors shape []) is viewed as one element
    const int64_t one = 1;
    return Tensor::contiguous(p, dtype, &one, 1);
  }
  return Tensor::contiguous(p, dtype, shape.data(), int(shape.size()));
}

}  // namespace ridge::io
