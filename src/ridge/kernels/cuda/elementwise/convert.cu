// Weight conversion at load time (not a hot path): plain types to bf16/f32, and GGUF
// block-quantized rows to bf16.
// Launch: one thread per output element, 1-D grid of 256-thread blocks.
// Layout: src is n contiguous elements in its stored layout; every block type is decoded by
// ridge/core/quant_blocks.h, the CPU reference's decoder (blocks are 2-byte aligned, so the f16
// scales are read as aligned uint16).
// Limits: n < 2^62; quantized n a multiple of the type's block (32 or 256 elements).
#include <cstdint>
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

}  // namespace ridge::kernels
