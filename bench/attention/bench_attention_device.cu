#include "bench_attention_device.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

#include "ridge/kernels/cuda/elementwise/check.h"

namespace ridge::bench_attention {
namespace {

constexpr int kUnroll = 8;

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__global__ void fill_kernel(uint16_t* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float u = (float(h >> 40) + 0.5f) * (1.f / 16777216.f);  // (0, 1)
    p[i] = __bfloat16_as_ushort(__float2bfloat16((2.f * u - 1.f) * scale));
  }
}

__global__ void compare_kernel(const uint16_t* a, const uint16_t* b, size_t n, double* sums,
                               unsigned long long* bad) {
  double num = 0, den = 0;
  unsigned long long nonfinite = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(__ushort_as_bfloat16(a[i]));
    const float y = __bfloat162float(__ushort_as_bfloat16(b[i]));
    if (!isfinite(x)) {
      ++nonfinite;
      continue;
    }
    num += double(x - y) * (x - y);
    den += double(y) * y;
  }
  for (int o = 16; o > 0; o >>= 1) {
    num += __shfl_xor_sync(0xffffffffu, num, o);
    den += __shfl_xor_sync(0xffffffffu, den, o);
    nonfinite += __shfl_xor_sync(0xffffffffu, nonfinite, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], num);
    atomicAdd(&sums[1], den);
    atomicAdd(bad, nonfinite);
  }
}

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

void fill_random_bf16(uint16_t* p, size_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_kernel<<<2048, 256, 0, stream>>>(p, n, seed, scale);
  RIDGE_CHECK_LAUNCH("fill_kernel");
}

Diff compare_bf16(const uint16_t* a, const uint16_t* b, size_t n, cudaStream_t stream) {
  double* sums = nullptr;
  unsigned long long* bad = nullptr;
  RIDGE_CHECK_CUDA(cudaMalloc(&sums, 2 * sizeof(double)));
  RIDGE_CHECK_CUDA(cudaMalloc(&bad, sizeof(unsigned long long)));
  RIDGE_CHECK_CUDA(cudaMemsetAsync(sums, 0, 2 * sizeof(double), stream));
  RIDGE_CHECK_CUDA(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), stream));
  compare_kernel<<<512, 256, 0, stream>>>(a, b, n, sums, bad);
  RIDGE_CHECK_LAUNCH("compare_kernel");
  double h[2];
  unsigned long long hb = 0;
  RIDGE_CHECK_CUDA(cudaMemcpyAsync(h, sums, sizeof h, cudaMemcpyDeviceToHost, stream));
  RIDGE_CHECK_CUDA(cudaMemcpyAsync(&hb, bad, sizeof hb, cudaMemcpyDeviceToHost, stream));
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));
  RIDGE_CHECK_CUDA(cudaFree(sums));
  RIDGE_CHECK_CUDA(cudaFree(bad));
  return {h[1] > 0 ? std::sqrt(h[0] / h[1]) : 0.0, hb};
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
