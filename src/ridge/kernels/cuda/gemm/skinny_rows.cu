// The row-warp skinny kernel (gemm_bf16_skinny_rows, gemm.h): Y = X·Wᵀ (+ residual) for 17-64
// tokens, where the skinny kernel (skinny_gemm.cu) re-reads the activations once per 16-row tile
// (as many bytes from L2 as the weights from DRAM at 32 tokens: 0.75-0.89x cuBLASLt there,
// run 14). Here the block's 8 warps each own a 16-row tile and walk the same K steps: one copy of
// each step's activations (MT tokens × 128 columns) is staged in shared memory for all 8 warps
// by cp.async in a ring of kStages steps, so L2 serves the activations once per 128 rows instead
// of once per 16. The weights stream into registers one step ahead (16-byte loads, L1 bypassed,
// 256-byte L2 prefetch), as in the skinny kernel.
// 128 rows per block leave few blocks on narrow N (32 for N = 4096), so K is split over a
// cluster of up to 8 CTAs (cluster dims 1 × 1 × S): each takes a slice of the steps, and rank 0
// adds the ranks' accumulators in rank order through distributed shared memory (deterministic,
// no workspace) and runs the epilogue.
// MMA: m16n8k16 with the weights as A (rows g and g + 8, 8 consecutive k per lane) and the
// activations as B (token g, the same 8 k): any permutation of k shared by A and B leaves the
// contraction unchanged, so each lane loads 16 contiguous bytes of both. The activation stage is
// laid out in fragment order [group j][chunk c][lane], so that a warp's reads are contiguous.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/stream_load.cuh"
#include "ridge/kernels/cuda/pdl.cuh"

namespace ridge::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // weight rows per block
constexpr int KU = 4;               // 32-column chunks per step
constexpr int KSTEP = 32 * KU;      // columns per step
constexpr int kStages = 4;          // activation steps in flight

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared through L2 only; src_bytes 0 fills zeros (tokens past M, K past K).
__device__ __forceinline__ void copy16(void* dst, const void* src, int src_bytes) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// NG token groups of 8 (MT = 8·NG tokens per block). Grid (token tiles, row blocks, split).
template <int NG>
__global__ void __launch_bounds__(kThreads, 2)
    skinny_rows_kernel(const bf16* __restrict__ X, int64_t ld_x, const bf16* __restrict__ W,
                       bf16* Y, const bf16* residual, int M, int N, int K) {
  constexpr int MT = 8 * NG;
  constexpr int kStageVecs = NG * KU * 32;  // uint4 per activation step
  extern __shared__ __align__(16) uint4 smem[];
  uint4* const xs = smem;                    // [kStages][NG][KU][32]
  float* const part = reinterpret_cast<float*>(smem + kStages * kStageVecs);  // split only

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.x * MT;
  const int n0 = blockIdx.y * kRows + warp * 16;
  const int all_steps = (K + KSTEP - 1) / KSTEP;
  const int ranks = gridDim.z, rank = blockIdx.z;
  const int s_begin = rank * all_steps / ranks, s_end = (rank + 1) * all_steps / ranks;

  // This lane's weight rows g and g + 8 of the warp's tile (clamped rows are never stored).
  const bf16* w_lo = W + size_t(min(n0 + g, N - 1)) * K + t * 8;
  const bf16* w_hi = W + size_t(min(n0 + g + 8, N - 1)) * K + t * 8;
  auto load_w = [&](uint4 (&dst)[2][KU], int s) {
#pragma unroll
    for (int c = 0; c < KU; ++c) {
      const int k = s * KSTEP + 32 * c;
      const bool ok = k + t * 8 < K;
      dst[0][c] = ok ? load_weights16(w_lo + k) : make_uint4(0, 0, 0, 0);
      dst[1][c] = ok ? load_weights16(w_hi + k) : make_uint4(0, 0, 0, 0);
    }
  };
  // Step s's activations into ring slot `slot`: kStageVecs copies over the block's threads.
  auto stage_x = [&](int s, int slot) {
#pragma unroll
    for (int q = 0; q < kStageVecs / kThreads; ++q) {
      const int i = int(threadIdx.x) + q * kThreads;
      const int ln = i & 31, c = (i >> 5) % KU, j = i / (32 * KU);
      const int m = m0 + j * 8 + (ln >> 2);
      const int k = s * KSTEP + 32 * c + (ln & 3) * 8;
      const bool ok = m < M && k < K;
      const bf16* src = ok ? X + size_t(m) * ld_x + k : X;
      copy16(xs + slot * kStageVecs + i, src, ok ? 16 : 0);
    }
  };

  // Weights do not depend on the previous kernel: the first step streams before the wait.
  pdl::launch_dependents();
  uint4 cur[2][KU], nxt[2][KU];
  if (s_begin < s_end) load_w(cur, s_begin);
  pdl::wait();
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) {
    if (s_begin + p < s_end) stage_x(s_begin + p, p);
    commit();
  }

  float acc[NG][4];
#pragma unroll
  for (int j = 0; j < NG; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.f;

  for (int s = s_begin; s < s_end; ++s) {
    const int i = s - s_begin;
    if (s + 1 < s_end) load_w(nxt, s + 1);
    wait_groups<kStages - 2>();  // step s's copies (this thread's) have landed
    __syncthreads();             // everyone's have; and everyone is done with step s - 1's slot
    if (s + kStages - 1 < s_end) stage_x(s + kStages - 1, (i + kStages - 1) % kStages);
    commit();
    const uint4* xst = xs + (i % kStages) * kStageVecs;
#pragma unroll
    for (int c = 0; c < KU; ++c) {
      const uint4 lo = cur[0][c], hi = cur[1][c];
#pragma unroll
      for (int j = 0; j < NG; ++j) {
        const uint4 b = xst[(j * KU + c) * 32 + lane];
        mma_bf16(acc[j], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
        mma_bf16(acc[j], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
      }
    }
#pragma unroll
    for (int c = 0; c < KU; ++c) cur[0][c] = nxt[0][c], cur[1][c] = nxt[1][c];
  }
  wait_groups<0>();  // no copy may land after the block exits

  if (ranks > 1) {
    // Every rank's accumulators to its own shared memory; rank 0 adds the others in rank order.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) part[((warp * NG + j) * 4 + r) * 32 + lane] = acc[j][r];
    cluster.sync();
    const bool leader = cluster.block_rank() == 0;
    if (leader) {
      for (unsigned q = 1; q < unsigned(ranks); ++q) {
        const float* other = cluster.map_shared_rank(part, q);
#pragma unroll
        for (int j = 0; j < NG; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[j][r] += other[((warp * NG + j) * 4 + r) * 32 + lane];
      }
    }
    cluster.sync();  // the other ranks' shared memory stays until rank 0 has read it
    if (!leader) return;
  }
  // C fragment of m16n8: c0, c1 at (row g, tokens 2t, 2t + 1); c2, c3 at row g + 8.
#pragma unroll
  for (int j = 0; j < NG; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int n = n0 + g + (r >= 2 ? 8 : 0);
      const int m = m0 + j * 8 + 2 * t + (r & 1);
      if (n < N && m < M) {
        const size_t idx = size_t(m) * N + n;
        float v = acc[j][r];
        if (residual != nullptr) v += __bfloat162float(residual[idx]);
        Y[idx] = __float2bfloat16(v);
      }
    }
}

template <int NG>
void launch_rows(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int N,
                 int K, int split, cudaStream_t stream) {
  constexpr int MT = 8 * NG;
  auto kernel = skinny_rows_kernel<NG>;
  const size_t ring = sizeof(uint4) * kStages * NG * KU * 32;
  const size_t part = sizeof(float) * kWarps * NG * 4 * 32;
  const int token_tiles = (M + MT - 1) / MT, row_blocks = (N + kRows - 1) / kRows;
  const int all_steps = (K + KSTEP - 1) / KSTEP;
  static const int resident = [&] {
    const int sms = detail::device_sms(detail::current_device());
    int per_sm = 0;
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring + part)));
    RIDGE_GEMM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads,
                                                                        ring + part));
    return std::max(1, sms * per_sm);
  }();
  if (split == 0) {  // automatic: the largest split whose CTAs all fit at once (no tail wave)
    const int blocks = token_tiles * row_blocks;
    split = std::clamp(resident / blocks, 1, skinny_max_split_k);
  }
  split = std::clamp(std::min(split, all_steps), 1, skinny_max_split_k);
  const size_t smem = ring + (split > 1 ? part : 0);
  RIDGE_GEMM_CUDA_CHECK(pdl::launch(false, unsigned(split), kernel,
                                    dim3(token_tiles, row_blocks, split), dim3(kThreads), smem,
                                    stream, X, int64_t(K), W, Y, residual, M, N, K));
}

}  // namespace

void detail::launch_skinny_rows(const bf16* X, const bf16* W, bf16* Y, const bf16* residual,
                                int M, int N, int K, int split_k, cudaStream_t stream) {
  if (M <= 32)
    launch_rows<4>(X, W, Y, residual, M, N, K, split_k, stream);
  else
    launch_rows<8>(X, W, Y, residual, M, N, K, split_k, stream);
}

}  // namespace ridge::kernels
