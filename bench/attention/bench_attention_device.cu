#include "bench_attention_device.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "ridge/kernels/cuda/elementwise/check.h"

namespace ridge::bench_attention {
namespace {

constexpr int kUnroll = 8;

// One pass, no grid-stride loop: block b covers 256 * kUnroll consecutive 16-byte chunks, thread
// t loads chunks t, t + 256, ... (coalesced per warp), all before the first store.
__global__ void copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
  const size_t base = size_t(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  uint4 v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const size_t i = base + size_t(u) * blockDim.x;
    if (i < n) v[u] = __ldcs(src + i);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const size_t i = base + size_t(u) * blockDim.x;
    if (i < n) __stcs(dst + i, v[u]);
  }
}

__global__ void read_kernel(const uint4* __restrict__ src, size_t n, uint32_t* sink) {
  const size_t base = size_t(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  uint4 v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const size_t i = base + size_t(u) * blockDim.x;
    v[u] = i < n ? __ldcs(src + i) : make_uint4(0, 0, 0, 0);
  }
  uint32_t x = 0;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  if (x == 0x9e3779b9u) *sink = x;  // practically never: keeps the loads alive
}

unsigned blocks_for(size_t chunks) {
  return unsigned((chunks + size_t(256) * kUnroll - 1) / (size_t(256) * kUnroll));
}

__global__ void to_fp8_kernel(const uint16_t* src, uint8_t* fp8, uint16_t* back, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(__ushort_as_bfloat16(src[i]));
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    fp8[i] = q;
    // E4M3 values are exact in bf16 (3 mantissa bits, exponents 2^-9 .. 2^8).
    const __half_raw h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
    back[i] = __bfloat16_as_ushort(__float2bfloat16(__half2float(__half(h))));
  }
}

}  // namespace

void to_fp8(const uint16_t* src, uint8_t* fp8, uint16_t* back, size_t n, cudaStream_t stream) {
  to_fp8_kernel<<<2048, 256, 0, stream>>>(src, fp8, back, n);
  RIDGE_CHECK_LAUNCH("to_fp8_kernel");
}

void copy_bytes(void* dst, const void* src, size_t n_bytes, cudaStream_t stream) {
  const size_t n = n_bytes / 16;
  copy_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<uint4*>(dst),
                                                 static_cast<const uint4*>(src), n);
  RIDGE_CHECK_LAUNCH("copy_kernel");
}

void read_bytes(const void* src, size_t n_bytes, uint32_t* sink, cudaStream_t stream) {
  const size_t n = n_bytes / 16;
  read_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const uint4*>(src), n, sink);
  RIDGE_CHECK_LAUNCH("read_kernel");
}

}  // namespace ridge::bench_attention
