// Weight conversion at load time (not a hot path): plain types to bf16/f32, and GGUF
// block-quantized rows to bf16.
// Launch: one thread per output element, 1-D grid of 256-thread blocks.
// Layout: src is n contiguous elements in its stored layout; every block type is decoded by
// ridge/core/quant_blocks.h, the CPU reference's decoder (blocks are 2-byte aligned, so the f16
// scales are read as aligned uint16).
// Limits: n < 2^62; quantized n a multiple of the type's block (32 or 256 elements).
#include <cstdint>

#include <cuda_fp8.h>

#include "ridge/core/quant_blocks.h"
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/elementwise/elementwise.h"

namespace ridge::kernels {
namespace {

using detail::bf16_bits_to_f32;
using detail::f16_bits_to_f32;
using detail::f32_to_bf16_bits;

constexpr int kThreads = 256;

__device__ __forceinline__ float load_element(const uint8_t* __restrict__ src, DType type,
                                              int block_elems, int block_bytes, int64_t i) {
  switch (type) {
    case DType::f32:
      return reinterpret_cast<const float*>(src)[i];
    case DType::f16:
      return f16_bits_to_f32(reinterpret_cast<const uint16_t*>(src)[i]);
    case DType::bf16:
      return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(src)[i]);
    default: {
      // (D * s) * q +- M * m, each step rounded as the CPU reference rounds (no FMA).
      const uint8_t* b = src + (i / block_elems) * block_bytes;
      const quant::Element e = quant::element(type, b, int(i % block_elems));
      const float d = f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(b + e.d_at));
      float v = __fmul_rn(__fmul_rn(d, float(e.s)), float(e.q));
      if (e.m_at >= 0) {
        const float mm =
            __fmul_rn(f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(b + e.m_at)), float(e.m));
        v = e.minus ? __fsub_rn(v, mm) : __fadd_rn(v, mm);
      }
      return v;
    }
  }
}

__global__ void convert_kernel(const uint8_t* __restrict__ src, DType type, int block_elems,
                               int block_bytes, int64_t n, void* __restrict__ dst, bool dst_f32) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = load_element(src, type, block_elems, block_bytes, i);
  if (dst_f32)
    static_cast<float*>(dst)[i] = v;
  else
    static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(v);
}

}  // namespace

void convert_weight(const void* src, DType src_dtype, int64_t n, void* dst, DType dst_dtype,
                    cudaStream_t stream) {
  switch (src_dtype) {
    case DType::fp8_e4m3:
    case DType::i32:
      ridge::cuda::throw_precondition("convert_weight",
                         "cannot convert weights stored as " + std::string(dtype_name(src_dtype)));
    default:
      break;
  }
  RIDGE_KERNEL_EXPECT(dst_dtype == DType::bf16 || dst_dtype == DType::f32, "convert_weight",
                      "destination must be bf16 or f32, got " + std::string(dtype_name(dst_dtype)));
  const DTypeInfo& info = dtype_info(src_dtype);
  RIDGE_KERNEL_EXPECT(n >= 0 && n % info.block_elems == 0, "convert_weight",
                      std::to_string(n) + " elements of " + std::string(dtype_name(src_dtype)) +
                          " (blocks of " + std::to_string(info.block_elems) + ")");
  if (n == 0) return;
  convert_kernel<<<unsigned(detail::ceil_div(n, kThreads)), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(src), src_dtype, int(info.block_elems), int(info.block_bytes),
      n, dst, dst_dtype == DType::f32);
  RIDGE_CHECK_LAUNCH("convert_kernel");
}

namespace {

// One block per row: the row's amax (16-byte loads), then its codes, 16 a thread and pass. The
// second pass reads the row again (from L1/L2: rows are at most a few tens of KB).
__global__ void quantize_rows_fp8_kernel(const uint16_t* __restrict__ x, int64_t ld_x, int64_t cols,
                                         uint8_t* __restrict__ q, float* __restrict__ scales) {
  const int64_t r = blockIdx.x;
  const uint16_t* row = x + r * ld_x;
  const int64_t groups = cols / 16;  // 16 values: two 16-byte loads, one 16-byte store
  float amax = 0.0f;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    const uint4* p = reinterpret_cast<const uint4*>(row + g * 16);
    const uint4 a = p[0], b = p[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      amax = fmaxf(amax, fabsf(__uint_as_float(w[i] << 16)));
      amax = fmaxf(amax, fabsf(__uint_as_float(w[i] & 0xffff0000u)));
    }
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  __shared__ float warp_max[32];
  __shared__ float row_scale;
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int i = 0; i < int(blockDim.x / 32); ++i) m = fmaxf(m, warp_max[i]);
    const float s = m > 0.0f ? __fdiv_rn(m, 448.0f) : 1.0f;
    row_scale = s;
    scales[r] = s;
  }
  __syncthreads();
  const float s = row_scale;
  uint8_t* qrow = q + r * cols;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    const uint4* p = reinterpret_cast<const uint4*>(row + g * 16);
    const uint4 a = p[0], b = p[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 lo = make_float2(__fdiv_rn(__uint_as_float(w[2 * i] << 16), s),
                                    __fdiv_rn(__uint_as_float(w[2 * i] & 0xffff0000u), s));
      const float2 hi = make_float2(__fdiv_rn(__uint_as_float(w[2 * i + 1] << 16), s),
                                    __fdiv_rn(__uint_as_float(w[2 * i + 1] & 0xffff0000u), s));
      out[i] = uint32_t(__nv_cvt_float2_to_fp8x2(lo, __NV_SATFINITE, __NV_E4M3)) |
               (uint32_t(__nv_cvt_float2_to_fp8x2(hi, __NV_SATFINITE, __NV_E4M3)) << 16);
    }
    *reinterpret_cast<uint4*>(qrow + g * 16) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

}  // namespace

void quantize_rows_fp8(const uint16_t* x, int64_t ld_x, int64_t rows, int64_t cols, uint8_t* q,
                       float* scales, cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT(rows >= 0 && rows < (int64_t(1) << 31) && cols >= 16 && cols % 16 == 0 &&
                          ld_x >= cols && ld_x % 8 == 0 && detail::aligned16(x) &&
                          detail::aligned16(q) && scales,
                      "quantize_rows_fp8",
                      "x " + detail::shape_text(rows, cols, ld_x) +
                          " needs cols % 16 == 0, ld_x % 8 == 0, 16-byte aligned x and q, scales");
  if (rows == 0) return;
  const int threads = cols >= 4096 ? 256 : 128;
  quantize_rows_fp8_kernel<<<unsigned(rows), threads, 0, stream>>>(x, ld_x, cols, q, scales);
  RIDGE_CHECK_LAUNCH("quantize_rows_fp8_kernel");
}

}  // namespace ridge::kernels
