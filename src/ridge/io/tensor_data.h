// TensorData: one named tensor inside a model file, as both readers report it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ridge/core/dtype.h"
#include "ridge/core/tensor.h"

namespace ridge::io {

struct TensorData {
  std::string name;
  DType dtype = DType::f32;
  // Row-major, outermost first (PyTorch order). GGUF's ne[] is reversed into this order, so a
  // GGUF weight with ne = {in, out} has shape {out, in}.
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside the mapped file; valid while the reader lives
  size_t nbytes = 0;

  int64_t numel() const;
  // A contiguous host view (const data, the view type is shared with writable tensors).
  Tensor view() const;
};

}  // namespace ridge::io
