// Tensor: a non-owning view {data, dtype, shape, strides, device}. Shapes are row-major with the
// outermost dimension first (PyTorch order); strides are in elements, and for block-quantized
// dtypes the innermost dimension must be contiguous (stride 1) and a multiple of the block.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ridge/core/dtype.h"

namespace ridge {

enum class Device : uint8_t { cpu, cuda };

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};
  Device device = Device::cpu;
  // A row-scaled matrix (fp8_e4m3 weights from Backend::quantize_weight): one fp32 scale per row
  // of the outermost dimension, on the tensor's device; element (i, j) = scales[i] × code(i, j).
  // Null for every other tensor.
  const float* scales = nullptr;

  Tensor() = default;
  // A contiguous view of `data` with the given shape.
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::cpu);
  static Tensor contiguous(void* data, DType dtype, const int64_t* shape, int ndim,
                           Device device = Device::cpu);

  int64_t size(int dim) const { return shape[dim < 0 ? ndim + dim : dim]; }
  int64_t numel() const;
  size_t nbytes() const;  // for contiguous tensors
  bool is_contiguous() const;
  // Bytes per row of the innermost dimension.
  size_t row_bytes() const { return ridge::row_bytes(dtype, shape[ndim - 1]); }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Pointer to row i of a 2-D tensor (any dtype; rows contiguous).
  template <typename T = void>
  T* row(int64_t i) const;

  // A view of rows [begin, end) of the outermost dimension.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  std::string describe() const;  // "bf16[32, 4096]"
};

template <typename T>
T* Tensor::row(int64_t i) const {
  return reinterpret_cast<T*>(static_cast<char*>(data) +
                              i * int64_t(ridge::row_bytes(dtype, stride[0])));
}

}  // namespace ridge
