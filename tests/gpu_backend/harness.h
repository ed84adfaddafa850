// Helpers of the CUDA-vs-CPU op harness: random bf16-representable data, device tensors that
// are poisoned (NaN) before each run, downloads, and the normalized-error check that records
// every comparison for the report (RIDGE_GPU_BACKEND_REPORT=path writes it as JSON).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ridge/backend/backend.h"
#include "ridge/core/half.h"

namespace ridge::backend::gpu_test {

std::mt19937& rng();
Backend& cuda();  // the CUDA backend under test (created once)
Backend& cpu();   // the reference

// n normal(0, scale) values, each exactly representable in bf16.
std::vector<float> random_bf16(size_t n, float scale = 1.0f);
std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v);

constexpr uint16_t kPoisonBf16 = 0xffc1;  // a NaN that no kernel produces by rounding

// A device buffer with a 2-D view [rows, cols] of row stride ld at element offset `offset`.
struct DeviceMatrix {
  Buffer buffer;
  Tensor view;
  int64_t total_elems = 0;
};
// Every element of the buffer (rows * ld + offset + slack) is poisoned, then `values` (row-major
// [rows, cols], may be empty) are written into the view.
DeviceMatrix device_bf16(int64_t rows, int64_t cols, const std::vector<float>& values,
                         int64_t ld = 0, int64_t offset = 0);
DeviceMatrix device_f32(int64_t rows, int64_t cols, int64_t ld = 0, int64_t offset = 0);
Tensor device_i32(Buffer& keep, const std::vector<int32_t>& v);
// The whole buffer's bf16 bits / f32 values.
std::vector<uint16_t> download_bits(const DeviceMatrix& m);
// The view as floats, row-major [rows, cols].
std::vector<float> download_view(const DeviceMatrix& m);

// Host f32 tensor over a vector.
inline Tensor host_f32(std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor(v.data(), DType::f32, {rows, cols});
}

// ||got - ref|| / ||ref||; fails on any NaN/Inf in got or an error over `bound`. Records it.
void expect_close(const std::string& op, const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& ref, double bound);
// Elements outside the view must still hold the poison (nothing wrote out of bounds).
void expect_untouched_outside(const std::string& op, const DeviceMatrix& m);

// Every test of the harness: skips cleanly where no usable GPU is present (CI).
class GpuBackend : public ::testing::Test {
 protected:
  void SetUp() override;
};
// Cases too slow for the sanitizer runs (filtered out there by name).
class GpuBackendLarge : public GpuBackend {};

}  // namespace ridge::backend::gpu_test
