// Ladder step 2: TMA + wgmma with one warpgroup and one shared-memory stage.
// Y[M,N] = X[M,K] · W[N,K]ᵀ. Launch: 128 threads per 64×256 output tile, grid (N/256, M/64)
// rounded up. Per 64-wide K block: thread 0 arms an mbarrier with the byte count and issues TMA
// loads (X 64×64, W as two 128×64 boxes, 128-byte swizzle); everyone waits on the barrier, the
// warpgroup issues 4 wgmma m64n256k16, waits for them, and syncs before the stage is refilled.
// Nothing overlaps: load, then compute — the baseline the pipelined kernels improve on.
// Limits: sm_90a, K % 8 == 0, N % 8 == 0; partial tiles: TMA zero-fill, masked stores.
#include <cuda_runtime.h>

#include "bench_device.h"
#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/sm90.cuh"

namespace ridge::bench {
namespace {

using namespace ridge::kernels::sm90;

constexpr int kBM = 64, kBN = 256, kBK = 64;

struct alignas(1024) Smem {
  bf16 a[kBM * kBK];
  bf16 b[kBN * kBK];
  uint64_t full;
};

__global__ void __launch_bounds__(128)
    tma_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_x,
                     const __grid_constant__ CUtensorMap tmap_w, bf16* Y, int M, int N, int K) {
  extern __shared__ uint8_t raw[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                     ~static_cast<uintptr_t>(1023));
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  if (threadIdx.x == 0) {
    mbar_init(&s.full, 1);
    mbar_fence_init();
  }
  __syncthreads();
  float acc[128];
  uint32_t phase = 0;
  const int k_blocks = (K + kBK - 1) / kBK;
  for (int kb = 0; kb < k_blocks; ++kb) {
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(&s.full, (kBM + kBN) * kBK * sizeof(bf16));
      tma_load_2d(s.a, &tmap_x, &s.full, kb * kBK, m0);
      tma_load_2d(s.b, &tmap_w, &s.full, kb * kBK, n0);
      tma_load_2d(s.b + 128 * kBK, &tmap_w, &s.full, kb * kBK, n0 + 128);
    }
    mbar_wait(&s.full, phase);
    phase ^= 1;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma_m64n256k16_bf16(acc, make_desc_k128(s.a + kk * 16), make_desc_k128(s.b + kk * 16),
                            (kb > 0 || kk > 0) ? 1 : 0);
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads();  // the stage is refilled next iteration
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int row_base = m0 + warp * 16 + (lane >> 2);
  const int col_base = n0 + 2 * (lane & 3);
#pragma unroll
  for (int i = 0; i < kBN / 8; ++i) {
    const int col = col_base + 8 * i;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + 8 * h;
      if (row < M && col < N)
        *reinterpret_cast<__nv_bfloat162*>(Y + static_cast<size_t>(row) * N + col) =
            __floats2bfloat162_rn(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
    }
  }
}

}  // namespace

void ladder_tma_wgmma(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream) {
  using ridge::kernels::detail::make_tensor_map_bf16;
  const CUtensorMap tx = make_tensor_map_bf16(X, M, K, kBM, kBK);
  const CUtensorMap tw = make_tensor_map_bf16(W, N, K, 128, kBK);
  const size_t smem = sizeof(Smem) + 1024;
  RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
      tma_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
  tma_wgmma_kernel<<<grid, 128, smem, stream>>>(tx, tw, Y, M, N, K);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ridge::bench
