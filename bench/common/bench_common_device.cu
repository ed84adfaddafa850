// The device helpers of bench_common.h: the random fill and the comparison of two bf16 buffers.
#include <cuda_runtime.h>

#include "bench_common.h"
#include "ridge/kernels/cuda/gemm/check.h"

namespace ridge::bench {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__global__ void fill_kernel(bf16* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    float u = (static_cast<float>(h >> 40) + 0.5f) * (1.f / 16777216.f);  // (0, 1)
    p[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}

__global__ void compare_kernel(const bf16* a, const bf16* b, size_t n, double* sums,
                               unsigned long long* bad) {
  double num = 0, den = 0;
  unsigned long long nonfinite = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    if (!isfinite(x)) {
      ++nonfinite;
      continue;
    }
    num += static_cast<double>(x - y) * (x - y);
    den += static_cast<double>(y) * y;
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

}  // namespace

void fill_random_bf16(bf16* p, size_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
}

Diff compare_bf16(const bf16* a, const bf16* b, size_t n, cudaStream_t stream) {
  double* sums = nullptr;
  unsigned long long* bad = nullptr;
  RIDGE_GEMM_CUDA_CHECK(cudaMallocAsync(&sums, 2 * sizeof(double), stream));
  RIDGE_GEMM_CUDA_CHECK(cudaMallocAsync(&bad, sizeof(unsigned long long), stream));
  RIDGE_GEMM_CUDA_CHECK(cudaMemsetAsync(sums, 0, 2 * sizeof(double), stream));
  RIDGE_GEMM_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), stream));
  compare_kernel<<<528, 256, 0, stream>>>(a, b, n, sums, bad);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
  double h[2];
  Diff d;
  RIDGE_GEMM_CUDA_CHECK(cudaMemcpyAsync(h, sums, sizeof h, cudaMemcpyDeviceToHost, stream));
  RIDGE_GEMM_CUDA_CHECK(
      cudaMemcpyAsync(&d.non_finite, bad, sizeof d.non_finite, cudaMemcpyDeviceToHost, stream));
  RIDGE_GEMM_CUDA_CHECK(cudaFreeAsync(sums, stream));
  RIDGE_GEMM_CUDA_CHECK(cudaFreeAsync(bad, stream));
  RIDGE_GEMM_CUDA_CHECK(cudaStreamSynchronize(stream));
  d.rel = h[1] > 0 ? sqrt(h[0] / h[1]) : (h[0] > 0 ? 1e30 : 0);
  return d;
}

}  // namespace ridge::bench
