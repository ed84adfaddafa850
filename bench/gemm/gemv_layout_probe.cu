// The GEMV layout probe (ridge-bench-gemm --gemv-probe): does the order in which a decode GEMV
// walks the weights' bytes limit its DRAM throughput? Nsight Compute on the skinny kernel (run 12,
// c4) shows 81.6 % of the DRAM peak on a 512 MiB weight stream where the read-only streaming
// kernel reaches 94.2 %, and three times the bytes in flight (a bulk-copy ring) did not move it.
// The two kernels here are the same M = 1 GEMV, instruction for instruction; only the address of
// weight (n, k) differs:
//   row-major  W[n·K + k] (nn.Linear, what the engine stores): a warp's step reads 16 rows ×
//              256 bytes, 16 pieces 2·K bytes apart;
//   packed     16-row × 128-column blocks stored contiguously, blocks of one row tile in k order:
//              the same step reads 4 KiB of consecutive bytes, a block's walk over its row tile
//              is one contiguous range.
// Same summation order, so the two outputs must be bitwise equal; both are also checked against
// the library's skinny kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "bench_common.h"
#include "gemv_layout_probe.h"
#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/stream_load.cuh"

namespace ridge::bench {
namespace {

constexpr int kRows = 16;     // rows per tile
constexpr int kCols = 128;    // columns per warp step (256 bytes of a row)
constexpr int kWarps = 8;
constexpr int kLoads = kRows * kCols * 2 / 512;  // 16-byte loads per lane per step: 8

__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const uint32_t a[4] = {w.x, w.y, w.z, w.w}, b[4] = {x.x, x.y, x.z, x.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s += __uint_as_float(a[i] << 16) * __uint_as_float(b[i] << 16);
    s += __uint_as_float(a[i] & 0xffff0000u) * __uint_as_float(b[i] & 0xffff0000u);
  }
  return s;
}

// Load i of lane l in a step covers row 2i + l / 16, columns 8·(l % 16) … + 7 of the step.
template <bool PACKED>
__device__ __forceinline__ const bf16* step_address(const bf16* W, int K, int tile, int step,
                                                    int i, int lane) {
  const int r = 2 * i + (lane >> 4), c = 8 * (lane & 15);
  if (PACKED)
    return W + (static_cast<size_t>(tile) * (K / kCols) + step) * (kRows * kCols) + r * kCols + c;
  return W + static_cast<size_t>(tile * kRows + r) * K + step * kCols + c;
}

template <bool PACKED>
__global__ void __launch_bounds__(32 * kWarps) probe_gemv(const bf16* __restrict__ W,
                                                         const bf16* __restrict__ x, bf16* y,
                                                         int N, int K) {
  __shared__ float part[kWarps][kRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tiles = N / kRows, steps = K / kCols;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    float acc[kLoads] = {};
    uint4 cur[kLoads], nxt[kLoads];
    if (warp < steps)
#pragma unroll
      for (int i = 0; i < kLoads; ++i) cur[i] = ridge::kernels::load_weights16(step_address<PACKED>(W, K, tile, warp, i, lane));
    for (int s = warp; s < steps; s += kWarps) {
      if (s + kWarps < steps)
#pragma unroll
        for (int i = 0; i < kLoads; ++i)
          nxt[i] = ridge::kernels::load_weights16(step_address<PACKED>(W, K, tile, s + kWarps, i, lane));
      const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + s * kCols + 8 * (lane & 15)));
#pragma unroll
      for (int i = 0; i < kLoads; ++i) acc[i] += dot8(cur[i], xv);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) cur[i] = nxt[i];
    }
    // Lanes l and l ^ 1, ^ 2, ^ 4, ^ 8 share a row in every load: sum them, in a fixed order.
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    if ((lane & 15) == 0)
#pragma unroll
      for (int i = 0; i < kLoads; ++i) part[warp][2 * i + (lane >> 4)] = acc[i];
    __syncthreads();
    if (threadIdx.x < kRows) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += part[w][threadIdx.x];
      y[tile * kRows + threadIdx.x] = __float2bfloat16(sum);
    }
    __syncthreads();
  }
}

// Wp[tile][step][r][c] = W[tile·16 + r][step·128 + c].
__global__ void pack_kernel(const bf16* __restrict__ W, bf16* __restrict__ Wp, int N, int K) {
  const size_t total = static_cast<size_t>(N) * K / 8;
  for (size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; v < total;
       v += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t e = v * 8;
    const int n = static_cast<int>(e / K), k = static_cast<int>(e % K);
    const size_t dst = (static_cast<size_t>(n / kRows) * (K / kCols) + k / kCols) * (kRows * kCols) +
                       (n % kRows) * kCols + k % kCols;
    *reinterpret_cast<uint4*>(Wp + dst) = *reinterpret_cast<const uint4*>(W + e);
  }
}

}  // namespace

GemvProbe gemv_layout_probe(int N, int K, int rounds, cudaStream_t s) {
  if (N % kRows != 0 || K % kCols != 0 || K / kCols < kWarps)
    throw std::invalid_argument("--gemv-probe: N must be a multiple of 16 and K of 128 (K >= 1024)");
  const size_t wn = static_cast<size_t>(N) * K;
  DeviceMemory W(wn * 2), Wp(wn * 2), x(static_cast<size_t>(K) * 2), y_row(size_t(N) * 2),
      y_packed(size_t(N) * 2), y_lib(size_t(N) * 2);
  fill_random_bf16(W.bf(), wn, 4242, 1.f, s);
  fill_random_bf16(x.bf(), K, 4343, 1.f, s);
  pack_kernel<<<1024, 256, 0, s>>>(W.bf(), Wp.bf(), N, K);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
  int sms = 0;
  RIDGE_GEMM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const dim3 grid(std::min(N / kRows, 2 * sms));  // two blocks per SM, as the skinny kernel
  auto run = [&](bool packed) {
    if (packed)
      probe_gemv<true><<<grid, 32 * kWarps, 0, s>>>(Wp.bf(), x.bf(), y_packed.bf(), N, K);
    else
      probe_gemv<false><<<grid, 32 * kWarps, 0, s>>>(W.bf(), x.bf(), y_row.bf(), N, K);
    RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
  };
  // Checks: the two layouts bitwise equal (same order), and near the library's skinny kernel.
  RIDGE_GEMM_CUDA_CHECK(cudaMemsetAsync(y_row.ptr, 0xFF, size_t(N) * 2, s));
  RIDGE_GEMM_CUDA_CHECK(cudaMemsetAsync(y_packed.ptr, 0xFF, size_t(N) * 2, s));
  run(false);
  run(true);
  ridge::kernels::gemm_bf16_skinny(x.bf(), W.bf(), y_lib.bf(), 1, N, K, s);
  GemvProbe r;
  r.N = N, r.K = K;
  const Diff layouts = compare_bf16(y_packed.bf(), y_row.bf(), N, s);
  const Diff lib = compare_bf16(y_row.bf(), y_lib.bf(), N, s);
  std::vector<uint16_t> a(N), b(N);
  RIDGE_GEMM_CUDA_CHECK(cudaMemcpy(a.data(), y_row.ptr, size_t(N) * 2, cudaMemcpyDeviceToHost));
  RIDGE_GEMM_CUDA_CHECK(cudaMemcpy(b.data(), y_packed.ptr, size_t(N) * 2, cudaMemcpyDeviceToHost));
  r.bitwise_equal = a == b && layouts.non_finite == 0;
  r.rel_vs_skinny = lib.rel;
  r.ok = r.bitwise_equal && lib.non_finite == 0 && lib.rel < 1e-2;
  // Timing: rounds of (row-major, packed, skinny) in rotated order, 20 launches each; medians.
  cudaEvent_t e0, e1;
  RIDGE_GEMM_CUDA_CHECK(cudaEventCreate(&e0));
  RIDGE_GEMM_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t[3];
  for (int round = 0; round < rounds; ++round)
    for (int j = 0; j < 3; ++j) {
      const int which = (j + round) % 3;
      constexpr int kLaunches = 20;
      RIDGE_GEMM_CUDA_CHECK(cudaEventRecord(e0, s));
      for (int l = 0; l < kLaunches; ++l) {
        if (which == 2)
          ridge::kernels::gemm_bf16_skinny(x.bf(), W.bf(), y_lib.bf(), 1, N, K, s);
        else
          run(which == 1);
      }
      RIDGE_GEMM_CUDA_CHECK(cudaEventRecord(e1, s));
      RIDGE_GEMM_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      RIDGE_GEMM_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      t[which].push_back(1e3 * ms / kLaunches);
    }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  r.row_major_us = median(t[0]);
  r.packed_us = median(t[1]);
  r.skinny_us = median(t[2]);
  r.weight_bytes = static_cast<double>(wn) * 2;
  return r;
}

}  // namespace ridge::bench
