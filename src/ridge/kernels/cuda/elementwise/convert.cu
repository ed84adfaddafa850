// Weight conversion at load time (not a hot path): plain types to bf16/f32, and GGUF
// block-quantized rows to bf16.
// Launch: one thread per output element, 1-D grid of 256-thread blocks.
// Layout: src is n contiguous elements in its stored layout (dtype.h describes the q8_0, q4_0
// and q4_1 blocks; blocks are 2-byte aligned, so the f16 scales are read as aligned uint16).
// Limits: n < 2^62; quantized n a multiple of 32.
#include <cstdint>
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/elementwise/elementwise.h"

namespace ridge::kernels {
namespace {

using detail::bf16_bits_to_f32;
using detail::f16_bits_to_f32;
using detail::f32_to_bf16_bits;

constexpr int kThreads = 256;

enum class Src : int { f32, f16, bf16, q8_0, q4_0, q4_1 };

__device__ __forceinline__ float load_element(const uint8_t* __restrict__ src, Src type,
                                              int64_t i) {
  switch (type) {
    case Src::f32:
      return reinterpret_cast<const float*>(src)[i];
    case Src::f16:
      return f16_bits_to_f32(reinterpret_cast<const uint16_t*>(src)[i]);
    case Src::bf16:
      return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(src)[i]);
    case Src::q8_0: {
      const uint8_t* b = src + (i / 32) * 34;
      const float d = f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(b));
      return __fmul_rn(d, float(reinterpret_cast<const int8_t*>(b + 2)[i % 32]));
    }
    case Src::q4_0: {
      const uint8_t* b = src + (i / 32) * 18;
      const float d = f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(b));
      const int j = int(i % 32);
      const int nib = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
      return __fmul_rn(d, float(nib - 8));
    }
    case Src::q4_1: {
      const uint8_t* b = src + (i / 32) * 20;
      const float d = f16_bits_to_f32(reinterpret_cast<const uint16_t*>(b)[0]);
      const float m = f16_bits_to_f32(reinterpret_cast<const uint16_t*>(b)[1]);
      const int j = int(i % 32);
      const int nib = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
      return __fadd_rn(__fmul_rn(d, float(nib)), m);
    }
  }
  return 0.0f;
}

__global__ void convert_kernel(const uint8_t* __restrict__ src, Src type, int64_t n,
                               void* __restrict__ dst, bool dst_f32) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = load_element(src, type, i);
  if (dst_f32)
    static_cast<float*>(dst)[i] = v;
  else
    static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(v);
}

}  // namespace

void convert_weight(const void* src, DType src_dtype, int64_t n, void* dst, DType dst_dtype,
                    cudaStream_t stream) {
  Src type{};
  switch (src_dtype) {
    case DType::f32: type = Src::f32; break;
    case DType::f16: type = Src::f16; break;
    case DType::bf16: type = Src::bf16; break;
    case DType::q8_0: type = Src::q8_0; break;
    case DType::q4_0: type = Src::q4_0; break;
    case DType::q4_1: type = Src::q4_1; break;
    default:
      ridge::cuda::throw_precondition("convert_weight",
                         "cannot convert weights stored as " + std::string(dtype_name(src_dtype)));
  }
  RIDGE_KERNEL_EXPECT(dst_dtype == DType::bf16 || dst_dtype == DType::f32, "convert_weight",
                      "destination must be bf16 or f32, got " + std::string(dtype_name(dst_dtype)));
  RIDGE_KERNEL_EXPECT(n >= 0 && (!is_quantized(src_dtype) || n % 32 == 0), "convert_weight",
                      std::to_string(n) + " elements of " + std::string(dtype_name(src_dtype)));
  if (n == 0) return;
  convert_kernel<<<unsigned(detail::ceil_div(n, kThreads)), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(src), type, n, dst, dst_dtype == DType::f32);
  RIDGE_CHECK_LAUNCH("convert_kernel");
}

}  // namespace ridge::kernels
