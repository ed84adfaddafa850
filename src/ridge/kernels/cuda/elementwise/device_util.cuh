// Device helpers shared by ridge's CUDA kernels: bf16 bits <-> fp32, block reductions, launch
// arithmetic. Included by .cu files only.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ridge/core/dtype.h"

namespace ridge::kernels::detail {

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(uint32_t(h) << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// A vector weight element (f32 or bf16), chosen at run time: these vectors are tiny.
__device__ __forceinline__ float load_vector_weight(const void* w, bool is_f32, int64_t i) {
  return is_f32 ? static_cast<const float*>(w)[i]
                : bf16_bits_to_f32(static_cast<const uint16_t*>(w)[i]);
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread gets the sum.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float s = 0.0f;
  const int warps = blockDim.x / 32;
  for (int i = 0; i < warps; ++i) s += partial[i];  // same order in every thread
  return s;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 16-byte aligned (null counts as aligned): the vectorized kernels' host-side precondition.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline std::string shape_text(int64_t rows, int64_t cols, int64_t ld) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "] (row stride " +
         std::to_string(ld) + ")";
}

inline bool is_vector_weight_dtype(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace ridge::kernels::detail
