#include "ridge/core/tensor.h"

#include <cstdint>
#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge {

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> shape_, Device device_)
    : Tensor(contiguous(data_, dtype_, shape_.begin(), int(shape_.size()), device_)) {}

Tensor Tensor::contiguous(void* data, DType dtype, const int64_t* shape, int ndim, Device device) {
  RIDGE_CHECK(ndim >= 1 && ndim <= kMaxDims, "tensor rank {} is outside 1..{}", ndim, kMaxDims);
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  t.device = device;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    RIDGE_CHECK(shape[d] >= 0, "negative dimension {} at axis {}", shape[d], d);
    t.shape[d] = shape[d];
    t.stride[d] = s;
    s *= shape[d];
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

size_t Tensor::nbytes() const {
  if (ndim == 0) return 0;
  return ridge::row_bytes(dtype, shape[ndim - 1]) * size_t(numel() / std::max<int64_t>(shape[ndim - 1], 1));
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != s) return false;
    s *= shape[d];
  }
  return true;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  RIDGE_CHECK(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0],
              "row slice [{}, {}) is outside {}", begin, end, describe());
  Tensor t = *this;
  t.shape[0] = end - begin;
  t.data = static_cast<char*>(data) + begin * int64_t(ridge::row_bytes(dtype, stride[0]));
  if (scales) t.scales = scales + begin;
  return t;
}

std::string Tensor::describe() const {
  std::string s = fmt::format("{}[", dtype_name(dtype));
  for (int d = 0; d < ndim; ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + (scales ? "] (row-scaled)" : "]");
}

}  // namespace ridge
