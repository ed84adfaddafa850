// RMSNorm and the fused residual add + RMSNorm (bf16 in/out, fp32 math).
// Layout: x, residual, out bf16 row-major with row strides; weight [H] f32 or bf16.
// Two kernels:
//   vectorized (H % 8 == 0, H <= 8192, rows and strides 16-byte aligned): one block of 128
//     threads per row; each thread loads its 8-element chunks with 16-byte loads, all at once
//     (up to 8 chunks in registers), so a row costs one round trip to memory, not one per
//     element; the sum of squares is reduced over the block, the row is written from registers.
//     (A decode step's norms are latency-bound: the scalar loop below waited on each load in turn,
//     ~7 us per 4096-wide row on the H200.)
//   scalar (anything else): one block of 256 threads per row; each thread strides over the row,
//     and the second pass re-reads it from L1/L2.
// All three are launched with programmatic dependent launch (pdl.cuh): they sit on the decode
// chain between GEMVs, and the GEMV after them issues its first weight loads while they run.
// Limits: T < 2^31 rows; any H >= 1.
#include <cstdint>
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/elementwise/elementwise.h"
#include "ridge/kernels/cuda/pdl.cuh"

namespace ridge::kernels {
namespace {

using detail::bf16_bits_to_f32;
using detail::f32_to_bf16_bits;
using detail::aligned16;

constexpr int kThreads = 256;

__global__ void rmsnorm_kernel(const uint16_t* __restrict__ x, int64_t ld_x,
                               const void* __restrict__ w, bool w_f32, int64_t H, float eps,
                               uint16_t* __restrict__ out, int64_t ld_out) {
  pdl::begin();
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
  pdl::begin();
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

constexpr int kVecThreads = 128;
constexpr int kMaxChunks = 8;  // 8-element chunks per thread: H <= 128 * 8 * 8 = 8192

struct Chunk {
  float v[8];
};

__device__ __forceinline__ Chunk load_chunk(const uint16_t* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  Chunk c;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    c.v[2 * j] = __uint_as_float(w[j] << 16);
    c.v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
  return c;
}

__device__ __forceinline__ void store_chunk(uint16_t* p, const float (&v)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    w[j] = uint32_t(f32_to_bf16_bits(v[2 * j])) | (uint32_t(f32_to_bf16_bits(v[2 * j + 1])) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void load_weight_chunk(const void* w, bool w_f32, int64_t i,
                                                  float (&out)[8]) {
  if (w_f32) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + i);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + i + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const Chunk c = load_chunk(static_cast<const uint16_t*>(w) + i);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = c.v[j];
  }
}

// residual == nullptr: rmsnorm(x); else residual = bf16(residual + x), out = rmsnorm(residual).
template <int CHUNKS>
__global__ void __launch_bounds__(kVecThreads)
    norm_vec_kernel(uint16_t* __restrict__ residual, int64_t ld_r,
                    const uint16_t* __restrict__ x, int64_t ld_x, const void* __restrict__ w,
                    bool w_f32, int64_t H, float eps, uint16_t* __restrict__ out,
                    int64_t ld_out) {
  pdl::begin();
  const int64_t t = blockIdx.x;
  const int64_t n_chunks = H / 8;
  const uint16_t* xr = x + t * ld_x;
  uint16_t* rr = residual ? residual + t * ld_r : nullptr;
  Chunk c[CHUNKS];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int64_t chunk = threadIdx.x + int64_t(k) * kVecThreads;
    if (chunk < n_chunks) c[k] = load_chunk(xr + chunk * 8);
  }
  if (rr) {
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const int64_t chunk = threadIdx.x + int64_t(k) * kVecThreads;
      if (chunk < n_chunks) {
        const Chunk r = load_chunk(rr + chunk * 8);
#pragma unroll
        for (int j = 0; j < 8; ++j)  // the residual is stored, and normalized, rounded to bf16
          c[k].v[j] = bf16_bits_to_f32(f32_to_bf16_bits(r.v[j] + c[k].v[j]));
        store_chunk(rr + chunk * 8, c[k].v);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int64_t chunk = threadIdx.x + int64_t(k) * kVecThreads;
    if (chunk < n_chunks)
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += c[k].v[j] * c[k].v[j];
  }
  const float inv = 1.0f / sqrtf(detail::block_sum(ss) / float(H) + eps);
  uint16_t* o = out + t * ld_out;
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int64_t chunk = threadIdx.x + int64_t(k) * kVecThreads;
    if (chunk < n_chunks) {
      float wv[8], y[8];
      load_weight_chunk(w, w_f32, chunk * 8, wv);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = wv[j] * (c[k].v[j] * inv);
      store_chunk(o + chunk * 8, y);
    }
  }
}

// Launches the vectorized kernel when the shapes allow; false otherwise.
bool launch_norm_vec(uint16_t* residual, int64_t ld_r, const uint16_t* x, int64_t ld_x,
                     const void* w, bool w_f32, int64_t T, int64_t H, float eps, uint16_t* out,
                     int64_t ld_out, cudaStream_t stream) {
  if (H % 8 != 0 || H > int64_t(kVecThreads) * 8 * kMaxChunks || ld_x % 8 != 0 ||
      ld_out % 8 != 0 || (residual && ld_r % 8 != 0) || !aligned16(x) || !aligned16(out) ||
      !aligned16(residual) || !aligned16(w))
    return false;
  const int64_t per_thread = (H / 8 + kVecThreads - 1) / kVecThreads;
  const unsigned grid = unsigned(T);
#define RIDGE_NORM_VEC(N)                                                               \
  RIDGE_CHECK_CUDA(pdl::launch_pdl(norm_vec_kernel<N>, dim3(grid), dim3(kVecThreads), 0, stream, \
                                   residual, ld_r, x, ld_x, w, w_f32, H, eps, out, ld_out))
  if (per_thread <= 1)
    RIDGE_NORM_VEC(1);
  else if (per_thread <= 2)
    RIDGE_NORM_VEC(2);
  else if (per_thread <= 4)
    RIDGE_NORM_VEC(4);
  else
    RIDGE_NORM_VEC(8);
#undef RIDGE_NORM_VEC
  return true;
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
  if (launch_norm_vec(nullptr, 0, x, ld_x, w, w_dtype == DType::f32, T, H, eps, out, ld_out,
                      stream))
    return;
  RIDGE_CHECK_CUDA(pdl::launch_pdl(rmsnorm_kernel, dim3(unsigned(T)), dim3(kThreads), 0, stream,
                                   x, ld_x, w, w_dtype == DType::f32, H, eps, out, ld_out));
}

void add_rmsnorm_bf16(uint16_t* residual, int64_t ld_r, const uint16_t* x, int64_t ld_x,
                      const void* w, DType w_dtype, int64_t T, int64_t H, float eps,
                      uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  check_norm_args("add_rmsnorm_bf16", T, H, ld_x, ld_out, w_dtype);
  RIDGE_KERNEL_EXPECT(ld_r >= H, "add_rmsnorm_bf16",
                      "residual row stride " + std::to_string(ld_r) + " < H " + std::to_string(H));
  if (T == 0) return;
  if (launch_norm_vec(residual, ld_r, x, ld_x, w, w_dtype == DType::f32, T, H, eps, out, ld_out,
                      stream))
    return;
  RIDGE_CHECK_CUDA(pdl::launch_pdl(add_rmsnorm_kernel, dim3(unsigned(T)), dim3(kThreads), 0,
                                   stream, residual, ld_r, x, ld_x, w, w_dtype == DType::f32, H,
                                   eps, out, ld_out));
}

}  // namespace ridge::kernels
