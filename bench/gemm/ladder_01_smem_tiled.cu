// Ladder step 1: the shared-memory tiled baseline on CUDA cores (no tensor cores).
// Y[M,N] = X[M,K] · W[N,K]ᵀ. Launch: 256 threads per 128×128 output tile, grid (N/128, M/128)
// rounded up; each thread owns an 8×8 block of outputs (rows 8·ty.., cols 8·tx..). K tiles of 16
// are staged in shared memory transposed (k-major) as fp32, so the inner loop reads two float4
// per operand and does 64 FMAs. Limits: K % 8 == 0 (16-byte loads); partial tiles masked.
#include <cuda_runtime.h>

#include "bench_device.h"
#include "ridge/kernels/cuda/gemm/check.h"

namespace ridge::bench {
namespace {

constexpr int kTile = 128;
constexpr int kTileK = 16;

__global__ void __launch_bounds__(256)
    smem_tiled_kernel(const bf16* __restrict__ X, const bf16* __restrict__ W, bf16* Y, int M,
                      int N, int K) {
  __shared__ __align__(16) float xs[kTileK][kTile + 4];
  __shared__ __align__(16) float ws[kTileK][kTile + 4];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  const int load_row = tid / 2, load_k = (tid % 2) * 8;  // 128 rows × 16 k, 8 per thread
  float acc[8][8] = {};
  for (int k0 = 0; k0 < K; k0 += kTileK) {
    const int k = k0 + load_k;
    uint4 xv = make_uint4(0, 0, 0, 0), wv = make_uint4(0, 0, 0, 0);
    if (m0 + load_row < M && k < K)
      xv = *reinterpret_cast<const uint4*>(X + static_cast<size_t>(m0 + load_row) * K + k);
    if (n0 + load_row < N && k < K)
      wv = *reinterpret_cast<const uint4*>(W + static_cast<size_t>(n0 + load_row) * K + k);
    const bf16* xe = reinterpret_cast<const bf16*>(&xv);
    const bf16* we = reinterpret_cast<const bf16*>(&wv);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      xs[load_k + i][load_row] = __bfloat162float(xe[i]);
      ws[load_k + i][load_row] = __bfloat162float(we[i]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[8], b[8];
      *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&xs[kk][ty * 8]);
      *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&xs[kk][ty * 8 + 4]);
      *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&ws[kk][tx * 8]);
      *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&ws[kk][tx * 8 + 4]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + ty * 8 + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int n = n0 + tx * 8 + j;
      if (n < N) Y[static_cast<size_t>(m) * N + n] = __float2bfloat16(acc[i][j]);
    }
  }
}

}  // namespace

void ladder_smem_tiled(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                       cudaStream_t stream) {
  const dim3 grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);
  smem_tiled_kernel<<<grid, 256, 0, stream>>>(X, W, Y, M, N, K);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ridge::bench
