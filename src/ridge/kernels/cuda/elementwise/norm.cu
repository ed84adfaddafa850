// RMSNorm and the fused residual add + RMSNorm (bf16 in/out, fp32 math).
// Launch: one block of 256 threads per row (T blocks); each thread strides over the row.
// Layout: x, residual, out bf16 row-major with row strides; weight [H] f32 or bf16.
// Limits: T < 2^31 rows; any H >= 1. Two passes over the row: the second pass re-reads it from
// L1/L2 (rows of a few KiB).
#include <cstdint>
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/elementwise/elementwise.h"

namespace ridge::kernels {
namespace {

using detail::bf16_bits_to_f32;
using detail::f32_to_bf16_bits;

constexpr int kThreads = 256;

__global__ void rmsnorm_kernel(const uint16_t* __restrict__ x, int64_t ld_x,
                               const void* __restrict__ w, bool w_f32, int64_t H, float eps,
                               uint16_t* __restrict__ out, int64_t ld_out) {
  const int64_t t = blockIdx.x;
  const uint16_t* xr = x + t * ld_x;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = bf16_bits_to_f32(xr[i]);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(detail::block_sum(ss) / float(H) + eps);
  uint16_t* o = out + t * ld_out;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    o[i] = f32_to_bf16_bits(detail::load_vector_weight(w, w_f32, i) * (bf16_bits_to_f32(xr[i]) * inv));
}

__global__ void add_rmsnorm_kernel(uint16_t* __restrict__ residual, int64_t ld_r,
                                   const uint16_t* __restrict__ x, int64_t ld_x,
                                   const void* __restrict__ w, bool w_f32, int64_t H, float eps,
                                   uint16_t* __restrict__ out, int64_t ld_out) {
  const int64_t t = blockIdx.x;
  uint16_t* r = residual + t * ld_r;
  const uint16_t* xr = x + t * ld_x;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const uint16_t sum = f32_to_bf16_bits(bf16_bits_to_f32(r[i]) + bf16_bits_to_f32(xr[i]));
    r[i] = sum;  // re-read below by this same thread
    const float v = bf16_bits_to_f32(sum);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(detail::block_sum(ss) / float(H) + eps);
  uint16_t* o = out + t * ld_out;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    o[i] = f32_to_bf16_bits(detail::load_vector_weight(w, w_f32, i) * (bf16_bits_to_f32(r[i]) * inv));
}

void check_norm_args(const char* name, int64_t T, int64_t H, int64_t ld_x, int64_t ld_out,
                     DType w_dtype) {
  RIDGE_KERNEL_EXPECT(T >= 0 && T < (int64_t(1) << 31) && H >= 1 && ld_x >= H && ld_out >= H,
                      name, "rows " + detail::shape_text(T, H, ld_x) + " -> out row stride " +
                                std::to_string(ld_out));
  RIDGE_KERNEL_EXPECT(detail::is_vector_weight_dtype(w_dtype), name,
                      "weight must be f32 or bf16, got " + std::string(dtype_name(w_dtype)));
}

}  // namespace

void rmsnorm_bf16(const uint16_t* x, int64_t ld_x, const void* w, DType w_dtype, int64_t T,
                  int64_t H, float eps, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  check_norm_args("rmsnorm_bf16", T, H, ld_x, ld_out, w_dtype);
  if (T == 0) return;
  rmsnorm_kernel<<<unsigned(T), kThreads, 0, stream>>>(x, ld_x, w, w_dtype == DType::f32, H, eps,
                                                       out, ld_out);
  RIDGE_CHECK_LAUNCH("rmsnorm_kernel");
}

void add_rmsnorm_bf16(uint16_t* residual, int64_t ld_r, const uint16_t* x, int64_t ld_x,
                      const void* w, DType w_dtype, int64_t T, int64_t H, float eps,
                      uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  check_norm_args("add_rmsnorm_bf16", T, H, ld_x, ld_out, w_dtype);
  RIDGE_KERNEL_EXPECT(ld_r >= H, "add_rmsnorm_bf16",
                      "residual row stride " + std::to_string(ld_r) + " < H " + std::to_string(H));
  if (T == 0) return;
  add_rmsnorm_kernel<<<unsigned(T), kThreads, 0, stream>>>(residual, ld_r, x, ld_x, w,
                                                           w_dtype == DType::f32, H, eps, out,
                                                           ld_out);
  RIDGE_CHECK_LAUNCH("add_rmsnorm_kernel");
}

}  // namespace ridge::kernels
