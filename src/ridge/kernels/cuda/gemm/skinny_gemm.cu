// Decode GEMV / skinny GEMM: Y[M,N] = X[M,K] · W[N,K]ᵀ (+ residual) for small M (decode).
//
// The weights dominate the bytes (N·K·2 against M·K·2), so the kernel is a weight stream: every
// weight byte is read exactly once, with 16-byte non-allocating loads, a register double buffer
// keeping two steps of loads in flight per warp, and tensor cores (mma.sync m16n8k16) doing the
// arithmetic so that M up to 64 costs no more than M = 1.
//
// Trick: the reduction over k is order-free, so each thread loads 8 consecutive k (16 bytes) of
// a weight row and of an activation row and feeds them to two m16n8k16 MMAs as k positions
// {2t,2t+1,2t+8,2t+9} of each: the A (weight) and B (activation) fragments then use the same
// permutation of k, and the product is exact. A = 16 weight rows (MMA rows), B = 8 tokens (MMA
// columns), so the MMA computes Yᵀ tiles.
//
// Launch shape: 256 threads = 8 warps. Block (bx, by) covers tokens [bx·MT, bx·MT + MT) and
// weight rows [by·16·RT, by·16·RT + 16·RT). The 8 warps split K (warp w takes steps w, w+8, …
// of 32·KU columns) and are reduced through shared memory in a fixed order (deterministic).
// Limits: K % 8 == 0, N % 8 == 0 (host-checked); partial row/token tiles are clamped on load
// and masked on store; the k tail is zero-filled per 16-byte chunk.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"

namespace ridge::kernels {
namespace {

constexpr int kSkinnyWarps = 8;
constexpr int kSkinnyThreads = 32 * kSkinnyWarps;

// Streamed weights: no L1 allocation (read once), 256-byte L2 prefetch (a warp reads 128-256
// contiguous bytes of each row per step).
__device__ __forceinline__ uint4 load_weights16(const bf16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Activations are re-read by every row tile: keep them cacheable in L1.
__device__ __forceinline__ uint4 load_activations16(const bf16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                  uint32_t a2, uint32_t a3, uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// NG: token groups of 8 (MT = 8·NG tokens per block); RT: 16-row weight tiles per warp;
// KU: 32-column chunks per step (bytes in flight per thread = RT·2·KU·16, twice buffered);
// MIN_BLOCKS: blocks per SM the register budget must allow (2 keeps 16 warps streaming).
template <int NG, int RT, int KU, int MIN_BLOCKS>
__global__ void __launch_bounds__(kSkinnyThreads, MIN_BLOCKS)
    skinny_gemm_kernel(const bf16* __restrict__ X, const bf16* __restrict__ W, bf16* Y,
                       const bf16* residual, int M, int N, int K) {
  constexpr int MT = 8 * NG;
  constexpr int KSTEP = 32 * KU;
  extern __shared__ float reduce_smem[];  // [warp][RT·NG·4 registers][32 lanes]

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;  // MMA group: weight row g (and g+8), token g
  const int t = lane & 3;   // thread in group: 8 k-columns at 8·t within each 32-column chunk
  const int m0 = blockIdx.x * MT;
  const int n0 = blockIdx.y * 16 * RT;

  const bf16* wrow[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = min(n0 + rt * 16 + h * 8 + g, N - 1);  // clamped rows are never stored
      wrow[rt][h] = W + static_cast<size_t>(n) * K + t * 8;
    }
  const bf16* xrow[NG];
  bool token_ok[NG];
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const int m = m0 + j * 8 + g;
    token_ok[j] = m < M;
    xrow[j] = X + static_cast<size_t>(min(m, M - 1)) * K + t * 8;
  }

  float acc[RT][NG][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[rt][j][r] = 0.f;

  const int steps = (K + KSTEP - 1) / KSTEP;
  uint4 cur[RT][2][KU];
  uint4 nxt[RT][2][KU];
  auto load_step = [&](uint4 (&a)[RT][2][KU], int s) {
#pragma unroll
    for (int c = 0; c < KU; ++c) {
      const int k = s * KSTEP + 32 * c;
      const bool ok = k + t * 8 < K;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          a[rt][h][c] = ok ? load_weights16(wrow[rt][h] + k) : make_uint4(0, 0, 0, 0);
    }
  };

  int s = warp;
  if (s < steps) load_step(cur, s);
  for (; s < steps; s += kSkinnyWarps) {
    if (s + kSkinnyWarps < steps) load_step(nxt, s + kSkinnyWarps);
#pragma unroll
    for (int c = 0; c < KU; ++c) {
      const int k = s * KSTEP + 32 * c;
      const bool k_ok = k + t * 8 < K;
#pragma unroll
      for (int j = 0; j < NG; ++j) {
        const uint4 b =
            (k_ok && token_ok[j]) ? load_activations16(xrow[j] + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          const uint4 lo = cur[rt][0][c];  // row g
          const uint4 hi = cur[rt][1][c];  // row g + 8
          mma_m16n8k16_bf16(acc[rt][j], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
          mma_m16n8k16_bf16(acc[rt][j], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
        }
      }
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < KU; ++c) cur[rt][h][c] = nxt[rt][h][c];
  }

  constexpr int kRegs = RT * NG * 4;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        reduce_smem[(warp * kRegs + (rt * NG + j) * 4 + r) * 32 + lane] = acc[rt][j][r];
  __syncthreads();

  for (int e = threadIdx.x; e < kRegs * 32; e += kSkinnyThreads) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kSkinnyWarps; ++w) sum += reduce_smem[w * kRegs * 32 + e];
    const int reg = e >> 5;
    const int ln = e & 31;
    const int rt = reg / (NG * 4);
    const int j = (reg >> 2) % NG;
    const int r = reg & 3;
    // C fragment of m16n8: c0,c1 at (row g, cols 2t, 2t+1); c2,c3 at (row g+8, same cols).
    const int n = n0 + rt * 16 + (ln >> 2) + (r >= 2 ? 8 : 0);
    const int m = m0 + j * 8 + (ln & 3) * 2 + (r & 1);
    if (n < N && m < M) {
      const size_t idx = static_cast<size_t>(m) * N + n;
      if (residual != nullptr) sum += __bfloat162float(residual[idx]);
      Y[idx] = __float2bfloat16(sum);
    }
  }
}

template <int NG, int RT, int KU, int MIN_BLOCKS>
void launch_skinny_config(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M,
                          int N, int K, cudaStream_t stream) {
  constexpr int MT = 8 * NG;
  const size_t smem = sizeof(float) * kSkinnyWarps * RT * NG * 4 * 32;
  auto kernel = skinny_gemm_kernel<NG, RT, KU, MIN_BLOCKS>;
  if (smem > 48 * 1024)
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid((M + MT - 1) / MT, (N + 16 * RT - 1) / (16 * RT));
  kernel<<<grid, kSkinnyThreads, smem, stream>>>(X, W, Y, residual, M, N, K);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

namespace detail {

void launch_skinny(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int N,
                   int K, cudaStream_t stream, int tokens_per_block) {
  if (tokens_per_block == 16) {
    launch_skinny_config<2, 1, 4, 2>(X, W, Y, residual, M, N, K, stream);
    return;
  }
  if (M <= 8)
    launch_skinny_config<1, 1, 4, 2>(X, W, Y, residual, M, N, K, stream);
  else if (M <= 16)
    launch_skinny_config<2, 1, 4, 2>(X, W, Y, residual, M, N, K, stream);
  else if (M <= 32)
    launch_skinny_config<4, 2, 2, 2>(X, W, Y, residual, M, N, K, stream);
  else
    launch_skinny_config<8, 2, 1, 2>(X, W, Y, residual, M, N, K, stream);
}

}  // namespace detail
}  // namespace ridge::kernels
