// Decode GEMV / skinny GEMM: Y[M,N] = P(X)[M,K] · W[N,K]ᵀ (+ residual) for small M (decode),
// where the prologue P is the identity or an RMSNorm of each row of X (gemm.h, SkinnyPrologue),
// and the epilogue may apply SwiGLU to a [gate; up] product (swiglu) or leave the sums of squares
// of the rows it stores for the next GEMV's RMSNorm (sumsq_out): the normalized row and the
// gate|up product are never written to memory, so the decode step saves the norm and SwiGLU
// kernels and their round trips.
//
// The weights dominate the bytes (N·K·2 against M·K·2), so the kernel is a weight stream: every
// weight byte is read exactly once, with 16-byte non-allocating loads, and tensor cores
// (mma.sync m16n8k16) doing the arithmetic so that M up to 64 costs no more than M = 1. Up to 8
// tokens the weights go through a ring of 2 steps a warp in shared memory (cp.async, RING below);
// otherwise through registers, the next step loaded while the current one is multiplied. The
// register path keeps one step a warp in flight, not two: ptxas tracks all of a warp's weight
// loads on one scoreboard, so copying the next step into the current one's registers waits for
// the loads just issued (read in the SASS, run 30).
//
// Trick: the reduction over k is order-free, so each thread loads 8 consecutive k (16 bytes) of
// a weight row and of an activation row and feeds them to two m16n8k16 MMAs as k positions
// {2t,2t+1,2t+8,2t+9} of each: the A (weight) and B (activation) fragments then use the same
// permutation of k, and the product is exact. A = 16 weight rows (MMA rows), B = 8 tokens (MMA
// columns), so the MMA computes Yᵀ tiles.
//
// Launch shape: 256 threads = 8 warps. Block (bx, by) covers tokens [bx·MT, bx·MT + MT) and
// weight rows [by·16·RT, by·16·RT + 16·RT). The 8 warps split K (warp w
// takes steps w, w+8, … of 32·KU columns) and are reduced through shared memory in a fixed
// order (deterministic).
// Limits: K % 8 == 0, N % 8 == 0 (host-checked); partial row/token tiles are clamped on load
// and masked on store; the k tail is zero-filled per 16-byte chunk.
// Prologues: rms_sumsq — rmsnorm(x; w)·Wᵀ = (1/rms(x)) · x·(W·diag(w))ᵀ per token: the norm
// weight is folded into W at load (scale_columns_bf16), x goes to the MMA as loaded, and the
// epilogue scales each token's outputs by 1/rms, from sums of squares that the GEMM which wrote x
// left in its epilogue (sumsq_out: the squares of each block's stored outputs, reduced per token
// over its 16 rows by shuffles and shared memory; one float per token and row tile). The main
// loop is the plain one. (Three forms that computed the sums here lost to the separate norm
// kernel: the rows reduced up front in every block, x·w per chunk, and the squares summed in the
// loop, which slowed the q|k|v and gate|up GEMVs by ~30 µs a layer; docs/KERNELS.md.)
// Epilogue swiglu: each block takes 8 gate rows and the 8 up rows of the same outputs as the
// two 8-row halves of its MMA tile, so that gate and up of an output meet in one thread after the
// reduction; silu(g)·u costs one exp per output. (SwiGLU as a prologue of the down projection
// lost: every block of it recomputed the whole row, bound by the special-function units;
// docs/KERNELS.md.)
// Epilogue rope_kv (q|k|v of a decode step, gemm.h): the same pairing for RoPE: a block's two
// 8-row halves are rows i and i + hd/2 of a q or k head (v rows in plain 16-row tiles), so that a
// rotated pair meets in one thread; it stores q and k rotated and v into Y, and k and v into the
// KV pools, which saves the rope_kv_store kernel and its round trip.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/skinny_device.cuh"
#include "ridge/kernels/cuda/gemm/stream_load.cuh"
#include "ridge/kernels/cuda/pdl.cuh"
#include "ridge/kernels/cuda/rope.cuh"

namespace ridge::kernels {
namespace {

using namespace skinny_device;

constexpr int kSkinnyWarps = 8;

// RIDGE_SKINNY_PERSISTENT=0: one block per row tile (A/B runs); else, at one token tile, a grid
// of the resident blocks walking the row tiles. (The resident count is taken once, for the first
// device that launches: every GPU of one ridge process is the same model.)
constexpr bool skinny_persists(int token_groups) { return token_groups <= 2; }
// The integer of the environment variable `name` (an A/B knob below), or `unset` when it is not
// set or empty.
int env_int(const char* name, int unset) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : unset;
}
bool skinny_persistent() {
  static const bool on = [] {
    const char* v = std::getenv("RIDGE_SKINNY_PERSISTENT");
    return !(v && v[0] == '0' && v[1] == 0);
  }();
  return on;
}
constexpr int kSkinnyThreads = 32 * kSkinnyWarps;

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// ---- the rms_sumsq sums and the tile's epilogue ----------------------------------------------
constexpr int kSumsqRegs = 8;

// rms_sumsq: the partial sums of squares of the block's token rows, written by the previous
// kernel, are loaded once after pdl::wait() and summed before the first epilogue (off the loop's
// critical path). Thread i takes token i % MT and the parts i / MT, i / MT + SLICES, … (the first
// kSumsqRegs of them in registers, any further ones in finish_inv_rms); the order is fixed.
template <int MT>
__device__ __forceinline__ void load_sumsq_parts(const SkinnyArgs& a, int m0,
                                                 float (&part_ss)[kSumsqRegs]) {
  constexpr int SLICES = kSkinnyThreads / MT;
  const int m = m0 + int(threadIdx.x) % MT, slice = int(threadIdx.x) / MT;
#pragma unroll
  for (int i = 0; i < kSumsqRegs; ++i) {
    const int p = slice + i * SLICES;
    part_ss[i] = (m < a.M && p < a.sumsq_parts) ? a.sumsq_in[size_t(p) * a.M + m] : 0.0f;
  }
}

template <int MT>
__device__ __forceinline__ void finish_inv_rms(const SkinnyArgs& a, int m0,
                                               const float (&part_ss)[kSumsqRegs],
                                               float* inv_rms) {
  constexpr int SLICES = kSkinnyThreads / MT;
  __shared__ float slice_ss[SLICES][MT];
  const int tm = int(threadIdx.x) % MT, slice = int(threadIdx.x) / MT;
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kSumsqRegs; ++i) total += part_ss[i];
  if (m0 + tm < a.M)
    for (int p = slice + kSumsqRegs * SLICES; p < a.sumsq_parts; p += SLICES)
      total += a.sumsq_in[size_t(p) * a.M + m0 + tm];
  slice_ss[slice][tm] = total;
  __syncthreads();
  if (threadIdx.x < MT) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < SLICES; ++i) sum += slice_ss[i][threadIdx.x];
    inv_rms[threadIdx.x] = 1.0f / sqrtf(sum / float(a.K) + a.eps);
  }
}

// rope_kv: the weight rows behind MMA rows g (first) and g + 8 (second) of 16-row unit u, and
// the pair's inv_freq index (q and k units: rows i and i + hd/2 of one head), or -1 (v units:
// plain rows).
__device__ __forceinline__ RopeRows rope_rows(const SkinnyArgs& a, int u, int g) {
  const int half = a.rope.head_dim / 2, per_head = half / 8;
  const int qk_units = (a.rope.q_dim + a.rope.kv_dim) / 16;
  if (u < qk_units) {
    const int i = (u % per_head) * 8 + g;
    const int n = (u / per_head) * a.rope.head_dim + i;
    return {n, n + half, i};
  }
  const int n = a.rope.q_dim + a.rope.kv_dim + (u - qk_units) * 16 + g;
  return {n, n + 8, -1};
}

// The end of a row tile: the warps' partial sums (each warp a slice of K) are reduced through
// shared memory in a fixed order and stored with the epilogue `a` asks for. The caller
// synchronizes before the next tile writes reduce_smem and reg_ss again.
// SPLIT (split-K over a cluster of gridDim.z CTAs, each a slice of K): every CTA reduces its
// warps into split_part (its shared memory), and after a cluster barrier rank 0 adds the other
// ranks' parts in rank order (distributed shared memory) and runs the epilogue alone; a second
// barrier keeps the other CTAs, and so their shared memory, alive until rank 0 has read it.
// Returns false on the CTAs that stored nothing.
template <int RT, int NG, SkinnyPrologue P, bool SPLIT, bool ROPE>
__device__ __forceinline__ bool finish_tile(const SkinnyArgs& a, const float (&acc)[RT][NG][4],
                                            int tile, int m0, float* reduce_smem,
                                            const float* inv_rms, float (*reg_ss)[4],
                                            [[maybe_unused]] float* split_part) {
  constexpr int kRegs = RT * NG * 4;
  constexpr int MT = 8 * NG;
  const int M = a.M, N = a.N, F = N / 2;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        reduce_smem[(warp * kRegs + (rt * NG + j) * 4 + r) * 32 + lane] = acc[rt][j][r];
  __syncthreads();
  // Element e = register · 32 + lane of the C fragment, summed over the 8 warps in order (and,
  // split, over the cluster's ranks in order, into reduce_smem[e]).
  if constexpr (SPLIT) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    for (int e = threadIdx.x; e < kRegs * 32; e += kSkinnyThreads) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kSkinnyWarps; ++w) sum += reduce_smem[w * kRegs * 32 + e];
      split_part[e] = sum;
    }
    cluster.sync();
    const unsigned ranks = cluster.num_blocks();
    const bool leader = cluster.block_rank() == 0;
    if (leader) {
      for (int e = threadIdx.x; e < kRegs * 32; e += kSkinnyThreads) {
        float sum = split_part[e];
        for (unsigned r = 1; r < ranks; ++r) sum += cluster.map_shared_rank(split_part, r)[e];
        reduce_smem[e] = sum;
      }
    }
    cluster.sync();
    if (!leader) return false;
  }
  auto reduced = [&](int e) {
    if constexpr (SPLIT) {
      return reduce_smem[e];
    } else {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kSkinnyWarps; ++w) sum += reduce_smem[w * kRegs * 32 + e];
      return sum;
    }
  };

  if constexpr (ROPE) {
    // As swiglu: registers r < 2 hold the first rows of the unit's pairs, r + 2 their partners;
    // one thread per pair, each value rounded to bf16 first (as the plain product stores it and
    // rope_kv_store_bf16 reads it back).
    for (int e = threadIdx.x; e < kRegs * 16; e += kSkinnyThreads) {
      const int pair = e >> 5, ln = e & 31;
      const int reg = (pair >> 1) * 4 + (pair & 1);
      float s1 = reduced(reg * 32 + ln), s2 = reduced((reg + 2) * 32 + ln);
      const int rt = reg / (NG * 4), j = (reg >> 2) % NG;
      const int u = tile * RT + rt;
      const int m = m0 + j * 8 + (ln & 3) * 2 + (reg & 1);
      if (u >= N / 16 || m >= M) continue;
      if constexpr (P == SkinnyPrologue::rms_sumsq) s1 *= inv_rms[m - m0], s2 *= inv_rms[m - m0];
      store_rope_pair(a, rope_rows(a, u, ln >> 2), m, s1, s2);
    }
    return true;
  }
  if (a.swiglu) {
    // Registers r < 2 of the C fragment hold gate rows, r + 2 the up rows of the same outputs:
    // one thread per (gate, up) pair; each rounded to bf16 first, as the product stored and
    // then read back by silu_mul_bf16 would be.
    for (int e = threadIdx.x; e < kRegs * 16; e += kSkinnyThreads) {
      const int pair = e >> 5, ln = e & 31;
      const int reg = (pair >> 1) * 4 + (pair & 1);
      float sg = reduced(reg * 32 + ln), su = reduced((reg + 2) * 32 + ln);
      const int rt = reg / (NG * 4), j = (reg >> 2) % NG;
      const int f = (tile * RT + rt) * 8 + (ln >> 2);
      const int m = m0 + j * 8 + (ln & 3) * 2 + (reg & 1);
      if constexpr (P == SkinnyPrologue::rms_sumsq) sg *= inv_rms[m - m0], su *= inv_rms[m - m0];
      if (f < F && m < M) store_swiglu(a, f, m, sg, su);
    }
    return true;
  }
  // sumsq_out: per register of the C fragment, the squares of the stored values summed over
  // the 8 rows (lanes with the same lane & 3) of each of the 4 token pairs.
  const bool want_ss = a.sumsq_out != nullptr;  // uniform
  const int n0 = tile * 16 * RT;
  for (int e = threadIdx.x; e < kRegs * 32; e += kSkinnyThreads) {
    float sum = reduced(e);
    const int reg = e >> 5;
    const int ln = e & 31;
    const int rt = reg / (NG * 4);
    const int j = (reg >> 2) % NG;
    const int r = reg & 3;
    // C fragment of m16n8: c0,c1 at (row g, cols 2t, 2t+1); c2,c3 at (row g+8, same cols).
    const int n = n0 + rt * 16 + (ln >> 2) + (r >= 2 ? 8 : 0);
    const int m = m0 + j * 8 + (ln & 3) * 2 + (r & 1);
    if constexpr (P == SkinnyPrologue::rms_sumsq) sum *= inv_rms[m - m0];
    const float stored = n < N && m < M ? store_output(a, n, m, sum) : 0.0f;
    if (want_ss) {  // all 32 lanes of the warp are here (kRegs·32 is a multiple of 32)
      float q = stored * stored;
      q += __shfl_xor_sync(0xffffffffu, q, 4);
      q += __shfl_xor_sync(0xffffffffu, q, 8);
      q += __shfl_xor_sync(0xffffffffu, q, 16);
      if (ln < 4) reg_ss[reg][ln] = q;
    }
  }
  if (want_ss) {
    __syncthreads();
    // Token tm = j·8 + 2q + b of the block: registers (rt·NG + j)·4 + b (rows g) and + 2
    // (rows g + 8) of every row tile rt, lane group q; summed in this fixed order.
    if (threadIdx.x < MT) {
      const int tm = threadIdx.x, j = tm / 8, q = (tm % 8) / 2, b = tm & 1;
      float total = 0.0f;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) total += reg_ss[(rt * NG + j) * 4 + b + 2 * h][q];
      if (m0 + tm < M) a.sumsq_out[size_t(tile) * M + m0 + tm] = total;
    }
  }
  return true;
}

// NG: token groups of 8 (MT = 8·NG tokens per block); RT: 16-row weight tiles per warp;
// KU: 32-column chunks per step (bytes in flight per thread = RT·2·KU·16 on the register path);
// MIN_BLOCKS: blocks per SM the register budget must allow (2 keeps 16 warps streaming);
// P: what is applied to the activations as they are loaded (gemm.h).
// Row tiles: block (bx, by) takes row tiles by, by + gridDim.y, … (one each when the grid covers
// them all; persistent when it is sized to the resident blocks): each warp's last step of one
// tile is followed by the first step of its next tile, so the weight stream does not stop while
// the block reduces and stores a tile, nor for a block to retire and a new one to start.
// Launched with programmatic dependent launch (pdl.cuh): before pdl::wait() the block lets the
// next kernel launch and issues its first step of weight loads, so a block that is resident while
// the previous kernel runs starts streaming early. (An L2 bulk prefetch of the first 4-16 KB of
// each of the block's rows before the wait measured slower, in the decode step and alone:
// docs/KERNELS.md.)
// Early weights (a.stage_steps > 0; only the one-token-group, one-row-tile, plain-prologue
// configuration compiles them): before the wait, each warp also copies steps warp + 8i
// (i = 1..stage_steps) of its first row tile into shared memory, laid out [i][warp][slot][lane]
// so that a warp's 16-byte reads are contiguous; the loop reads those steps from there (same
// values, same MMAs, same order: bitwise the unstaged result).
// SPLIT: split-K over a cluster of gridDim.z CTAs (cluster dims 1 × 1 × gridDim.z): rank r takes
// the steps [r·steps/S, (r+1)·steps/S) of every row tile and finish_tile reduces the ranks; one
// block per row tile (no persistence) and no staging.
// RING (SkinnyArgs::ring; one token tile of up to 16 tokens, RT = 1, no split or staging): the
// weights go through a ring of a.ring steps a warp in shared memory instead of registers. Each
// thread copies its own 16-byte pieces of a step with cp.async (one commit group a step) and
// reads back only those, so cp.async.wait_group is the only ordering; a.ring steps are in flight
// while a warp waits for the oldest (the register path has one: ptxas tracks a warp's weight loads
// on one scoreboard, so `cur = nxt` waits for the loads just issued), and the first a.ring steps
// are issued before the PDL wait. Same MMAs in the same order: bitwise the register path's result.
template <int NG, int RT, int KU, int MIN_BLOCKS, SkinnyPrologue P, bool SPLIT = false,
          bool ROPE = false, bool RING = false>
__global__ void __launch_bounds__(kSkinnyThreads, MIN_BLOCKS)
    skinny_gemm_kernel(const SkinnyArgs a) {
  static_assert(!RING || (!SPLIT && RT == 1), "the ring path: one row tile a warp, no split");
  constexpr int MT = 8 * NG;
  constexpr int KSTEP = 32 * KU;
  constexpr int kRegs = RT * NG * 4;
  // Walking several row tiles is compiled for the configurations of up to 16 tokens (decode at
  // small batch; the larger ones have no registers to spare for the next tile's row pointers).
  constexpr bool kPersist = skinny_persists(NG) && !SPLIT;
  extern __shared__ __align__(16) float reduce_smem[];  // [warp][RT·NG·4 registers][32 lanes]
  __shared__ float inv_rms[MT];           // rms_sumsq prologue: 1 / rms of each token row
  __shared__ float reg_ss[kRegs][4];      // sumsq_out: see the epilogue

  const int M = a.M, N = a.N, K = a.K;
  const bf16* __restrict__ W = a.W;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;  // MMA group: weight row g (and g+8), token g
  const int t = lane & 3;   // thread in group: 8 k-columns at 8·t within each 32-column chunk
  const int m0 = blockIdx.x * MT;
  const int F = N / 2;      // swiglu: outputs
  const int n_tiles = a.swiglu ? (F + 8 * RT - 1) / (8 * RT) : (N + 16 * RT - 1) / (16 * RT);
  const int tile0 = int(blockIdx.y);  // the block's first

  // MMA rows g and g + 8 of row tile rt of tile `tile`: weight rows tile·16·RT + rt·16 + g (+ 8),
  // or with the SwiGLU epilogue gate row f and up row F + f for f = (tile·RT + rt)·8 + g.
  // Clamped rows are never stored.
  auto set_rows = [&](const bf16* (&wr)[RT][2], int tile) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int n;
        if constexpr (ROPE) {
          const RopeRows r = rope_rows(a, min(tile * RT + rt, N / 16 - 1), g);
          n = h == 0 ? r.first : r.second;
        } else if (a.swiglu) {
          const int f = min((tile * RT + rt) * 8 + g, F - 1);
          n = h == 0 ? f : F + f;
        } else {
          n = min(tile * 16 * RT + rt * 16 + h * 8 + g, N - 1);
        }
        wr[rt][h] = W + static_cast<size_t>(n) * K + t * 8;
      }
  };
  int tile = tile0;
  const bf16* wrow[RT][2];
  const bf16* wnext[RT][2];
  set_rows(wrow, tile);

  // This CTA's steps [s_begin, steps) of KSTEP columns (a slice of them when SPLIT).
  const int all_steps = (K + KSTEP - 1) / KSTEP;
  const int rank = SPLIT ? int(blockIdx.z) : 0, ranks = SPLIT ? int(gridDim.z) : 1;
  const int s_begin = SPLIT ? rank * all_steps / ranks : 0;
  const int steps = SPLIT ? (rank + 1) * all_steps / ranks : all_steps;
  uint4 cur[RT][2][KU];
  uint4 nxt[RT][2][KU];
  auto load_step = [&](uint4 (&dst)[RT][2][KU], const bf16* (&wr)[RT][2], int s) {
#pragma unroll
    for (int c = 0; c < KU; ++c) {
      const int k = s * KSTEP + 32 * c;
      const bool ok = k + t * 8 < K;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          dst[rt][h][c] = ok ? load_weights16(wr[rt][h] + k) : make_uint4(0, 0, 0, 0);
    }
  };

  // Activation addresses (computed only; nothing is read before pdl::wait()).
  const bf16* xrow[NG];
  bool token_ok[NG];
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const int m = m0 + j * 8 + g;
    token_ok[j] = m < M;
    xrow[j] = a.X + static_cast<size_t>(min(m, M - 1)) * a.ld_x + t * 8;
  }
  if constexpr (RING) {
    // The warp's items: its steps warp, warp + 8, … of each of the block's tiles in turn (tiles
    // tile0, tile0 + gridDim.y, … when persistent). A warp with no steps still takes
    // part in every tile's reduction.
    const int S = a.ring;                    // 2 or 3 (host-checked)
    constexpr int kRingSlots = RT * 2 * KU;  // 16-byte pieces a thread copies a step
    uint4* const ring = reinterpret_cast<uint4*>(reduce_smem + kSkinnyWarps * kRegs * 32);
    // Piece q of this thread in ring slot `slot`: a warp's 16-byte reads are contiguous.
    auto piece = [&](int slot, int q) {
      return ring + (slot * kRingSlots + q) * kSkinnyThreads + threadIdx.x;
    };
    const int my_steps = warp < steps ? (steps - warp + kSkinnyWarps - 1) / kSkinnyWarps : 0;
    const int my_tiles = kPersist ? (n_tiles - tile0 + int(gridDim.y) - 1) / int(gridDim.y) : 1;
    const int items = my_steps * my_tiles;
    int ls = warp, lk = 0;  // the next item to copy: step ls of the block's lk-th tile
    auto issue = [&](int slot) {
      const int k0 = ls * KSTEP;
#pragma unroll
      for (int c = 0; c < KU; ++c) {
        const int k = k0 + 32 * c;
        const bool ok = k + t * 8 < K;  // past K: zeros (the row start stays a valid address)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          stage_weights16_zfill(piece(slot, h * KU + c), ok ? wrow[0][h] + k : wrow[0][h],
                                ok ? 16 : 0);
      }
      ls += kSkinnyWarps;
      if (ls >= steps) {  // warp-uniform
        ls = warp;
        if (++lk < my_tiles) set_rows(wrow, tile0 + lk * int(gridDim.y));
      }
    };
    pdl::launch_dependents();
    for (int j = 0; j < S; ++j) {  // weights only: before the wait
      if (j < items) issue(j);
      stage_commit();
    }
    pdl::wait();
    [[maybe_unused]] float part_ss[kSumsqRegs];
    if constexpr (P == SkinnyPrologue::rms_sumsq) load_sumsq_parts<MT>(a, m0, part_ss);

    float acc[RT][NG][4];
    auto zero_acc = [&] {
#pragma unroll
      for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[0][j][r] = 0.f;
    };
    // The block's ck-th tile's reduction and epilogue; then, with more tiles to come, a barrier
    // (reduce_smem and reg_ss are read before the next tile writes them).
    auto finish = [&](int ck) {
      if constexpr (P == SkinnyPrologue::rms_sumsq) {
        if (ck == 0) finish_inv_rms<MT>(a, m0, part_ss, inv_rms);
      }
      finish_tile<RT, NG, P, false, ROPE>(a, acc, tile0 + ck * int(gridDim.y), m0, reduce_smem,
                                          inv_rms, reg_ss, nullptr);
      if (ck + 1 < my_tiles) __syncthreads();
    };
    zero_acc();
    int cs = warp, ck = 0, slot = 0;  // the item to compute: step cs of the block's ck-th tile
    for (int i = 0; i < items; ++i) {
      if (S == 2)
        stage_wait_groups<1>();  // this item's copies (this thread's) have landed
      else
        stage_wait_groups<2>();
      uint4 w[2][KU];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < KU; ++c) w[h][c] = *piece(slot, h * KU + c);
      const int k0 = cs * KSTEP;
#pragma unroll
      for (int c = 0; c < KU; ++c) {
        const int k = k0 + 32 * c;
        const bool k_ok = k + t * 8 < K;
#pragma unroll
        for (int j = 0; j < NG; ++j) {
          const uint4 b =
              (k_ok && token_ok[j]) ? load_activations16(xrow[j] + k) : make_uint4(0, 0, 0, 0);
          mma_m16n8k16_bf16(acc[0][j], w[0][c].x, w[1][c].x, w[0][c].y, w[1][c].y, b.x, b.y);
          mma_m16n8k16_bf16(acc[0][j], w[0][c].z, w[1][c].z, w[0][c].w, w[1][c].w, b.z, b.w);
        }
      }
      // The MMAs have read every piece of the slot: refill it with the item S ahead.
      if (i + S < items) issue(slot);
      stage_commit();
      slot = slot + 1 == S ? 0 : slot + 1;
      cs += kSkinnyWarps;
      if (cs >= steps) {  // warp-uniform: this warp's last step of the tile
        finish(ck);
        zero_acc();
        cs = warp;
        ++ck;
      }
    }
    if (my_steps == 0)
      for (int k = 0; k < my_tiles; ++k) finish(k);
    return;
  }
  // Weights do not depend on the previous kernel: start streaming them before waiting for it.
  pdl::launch_dependents();
  if (s_begin + warp < steps) load_step(cur, wrow, s_begin + warp);
  constexpr bool kCanStage = NG == 1 && RT == 1 && P == SkinnyPrologue::none && !SPLIT && !ROPE;
  constexpr int kSlots = RT * 2 * KU;  // 16-byte loads per thread and step
  [[maybe_unused]] uint4* const stage =
      reinterpret_cast<uint4*>(reduce_smem + kSkinnyWarps * kRegs * 32);
  [[maybe_unused]] const int stage_steps = kCanStage ? a.stage_steps : 0;
  // Shared-memory slot of load (rt, h, c) of this thread in the warp's staged step i (from 1).
  [[maybe_unused]] auto staged = [&](int i, int rt, int h, int c) {
    return stage + (((i - 1) * kSkinnyWarps + warp) * kSlots + (rt * 2 + h) * KU + c) * 32 + lane;
  };
  if constexpr (kCanStage) {
    for (int i = 1; i <= stage_steps; ++i) {
      const int s = warp + i * kSkinnyWarps;
      if (s >= steps) break;  // warp-uniform
#pragma unroll
      for (int c = 0; c < KU; ++c) {
        const int k = s * KSTEP + 32 * c;
        if (k + t * 8 < K)
#pragma unroll
          for (int rt = 0; rt < RT; ++rt)
#pragma unroll
            for (int h = 0; h < 2; ++h) stage_weights16(staged(i, rt, h, c), wrow[rt][h] + k);
      }
    }
    stage_commit();
  }
  pdl::wait();

  [[maybe_unused]] float part_ss[kSumsqRegs];
  if constexpr (P == SkinnyPrologue::rms_sumsq) load_sumsq_parts<MT>(a, m0, part_ss);

  bool first = true;
  for (;;) {
    const int next_tile = tile + int(gridDim.y);
    const bool has_next = kPersist && next_tile < n_tiles;  // uniform
    if (has_next) set_rows(wnext, next_tile);

    float acc[RT][NG][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[rt][j][r] = 0.f;

    // cur holds step `warp` of this tile (when warp < steps); the step after a warp's last one
    // of this tile is step `warp` of the next tile.
    for (int s = s_begin + warp; s < steps; s += kSkinnyWarps) {
      // The warp's next step of this tile is in shared memory (early weights): read it after
      // this step's MMAs instead of loading it now.
      const int next_i = (s - warp) / kSkinnyWarps + 1;
      const bool next_staged =
          kCanStage && first && next_i <= stage_steps && s + kSkinnyWarps < steps;
      if (!next_staged) {
        if (s + kSkinnyWarps < steps)
          load_step(nxt, wrow, s + kSkinnyWarps);
        else if (has_next)
          load_step(nxt, wnext, warp);
      }
#pragma unroll
      for (int c = 0; c < KU; ++c) {
        const int k = s * KSTEP + 32 * c;
        const bool k_ok = k + t * 8 < K;
#pragma unroll
        for (int j = 0; j < NG; ++j) {
          const uint4 b = (k_ok && token_ok[j]) ? load_activations16(xrow[j] + k)
                                                : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            const uint4 lo = cur[rt][0][c];  // row g
            const uint4 hi = cur[rt][1][c];  // row g + 8
            mma_m16n8k16_bf16(acc[rt][j], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
            mma_m16n8k16_bf16(acc[rt][j], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
          }
        }
      }
      if constexpr (kCanStage) {
        if (next_staged) {
          if (next_i == 1) stage_wait_all();
#pragma unroll
          for (int c = 0; c < KU; ++c) {
            const bool ok = (s + kSkinnyWarps) * KSTEP + 32 * c + t * 8 < K;
#pragma unroll
            for (int rt = 0; rt < RT; ++rt)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                cur[rt][h][c] = ok ? *staged(next_i, rt, h, c) : make_uint4(0, 0, 0, 0);
          }
          continue;
        }
      }
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int c = 0; c < KU; ++c) cur[rt][h][c] = nxt[rt][h][c];
    }

    if constexpr (P == SkinnyPrologue::rms_sumsq) {
      if (first) finish_inv_rms<MT>(a, m0, part_ss, inv_rms);
    }
    first = false;
    if constexpr (SPLIT) {
      // One row tile per CTA: the split part sits after the warps' partials.
      finish_tile<RT, NG, P, true, false>(a, acc, tile, m0, reduce_smem, inv_rms, reg_ss,
                                   reduce_smem + kSkinnyWarps * kRegs * 32);
      break;
    } else {
      finish_tile<RT, NG, P, false, ROPE>(a, acc, tile, m0, reduce_smem, inv_rms, reg_ss, nullptr);
    }
    if (!has_next) break;
    __syncthreads();  // reduce_smem and reg_ss are read before the next tile writes them
    tile = next_tile;
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) wrow[rt][h] = wnext[rt][h];
  }
}

std::atomic<int64_t> g_ring_launches{0};

// The weight ring's depth for a launch of `a` (SkinnyArgs::ring), 0 for the register path:
// automatic (ring 0) is 2 up to 8 tokens (run 30, H100: batch-1 decode 3.0-3.6 % faster; at 16
// tokens the ring lost 5-11 %), unless RIDGE_SKINNY_RING=0 (registers) or 2 / 3 (that depth up to
// 16 tokens) says otherwise, for A/B runs.
int skinny_ring_steps(const SkinnyArgs& a) {
  static const int forced = [] {
    const int n = env_int("RIDGE_SKINNY_RING", INT_MIN);
    return n == INT_MIN ? -1 : n == 2 || n == 3 ? n : 0;
  }();
  if (a.ring != 0) return std::max(a.ring, 0);
  if (forced >= 0) return forced;
  return a.M <= 8 ? 2 : 0;
}

}  // namespace

int detail::blocks_in_carveout(int percent, size_t smem) {
  static constexpr int kCapacityKb[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
  const double want_kb = 228.0 * std::clamp(percent, 0, 100) / 100.0;
  int kb = 228;
  for (int c : kCapacityKb)
    if (c >= want_kb) {
      kb = c;
      break;
    }
  return int(size_t(kb) * 1024 / (smem + 1024));
}

namespace {

// RIDGE_SKINNY_BLOCKS_PER_SM=n: at most n blocks a SM in the weight ring's persistent grid (0: no
// cap), for A/B runs of how many concurrent row-tile streams the DRAM serves best and of the L1
// the ring leaves (run 31).
int skinny_blocks_cap() {
  static const int cap = std::max(0, env_int("RIDGE_SKINNY_BLOCKS_PER_SM", 0));
  return cap;
}

// A persistent grid of at most `cap` blocks over `units` row tiles. (An even grid, the fewest
// blocks with the same number of rounds, measured no different on the H200: a block streams a
// tile at about the same rate however many run, so a GEMV costs its rounds; run 32.)
int persistent_grid(int units, int cap) {
  return std::max(1, std::min(units, cap));
}

// The blocks a SM of a persistent grid of blocks with `smem` bytes of dynamic shared memory, of
// which `resident` fit a SM: capped by what a launch carveout (the decode chain's) leaves, and by
// skinny_blocks_cap().
int persistent_blocks_per_sm(int resident, size_t smem) {
  int per_sm = resident;
  if (const int percent = pdl::launch_carveout(); percent >= 0)
    per_sm = std::max(1, std::min(per_sm, detail::blocks_in_carveout(percent, smem)));
  if (const int cap = skinny_blocks_cap(); cap > 0) per_sm = std::min(per_sm, cap);
  return per_sm;
}

// The ring configuration of launch_skinny_config (one token tile, no split-K of its own, no
// staged steps).
template <int NG, int MIN_BLOCKS, SkinnyPrologue P, bool ROPE>
void launch_skinny_ring(const SkinnyArgs& a, int ring, int n_tiles, cudaStream_t stream) {
  constexpr int KU = 4;
  auto kernel = skinny_gemm_kernel<NG, 1, KU, MIN_BLOCKS, P, false, ROPE, true>;
  const size_t smem = sizeof(float) * kSkinnyWarps * NG * 4 * 32 +
                      size_t(ring) * kSkinnyThreads * 2 * KU * sizeof(uint4);
  // Resident blocks per ring depth (2 or 3), taken once per configuration: what the occupancy
  // calculator allows with the whole split, capped by what a launch carveout leaves (the decode
  // chain's, pdl.h): a persistent grid larger than what is resident would run a second wave.
  static int resident[4] = {0, 0, 0, 0};
  if (resident[ring] == 0) {
    int per_sm = 0;
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem)));
    // A carveout for two blocks a SM and no more (one under RIDGE_SKINNY_BLOCKS_PER_SM=1), so that
    // L1 keeps the rest for the activations (re-read by every row tile; 128 KB at 16 tokens and
    // K = 4,096). A launch carveout (pdl::set_launch_carveout) overrides it, and then fewer blocks
    // may be resident. (Two blocks of ring 2 at 16 tokens take 146 KB, rounded up to a 164 KB
    // carveout: the L1 left, ~92 KB, no longer holds 16 tokens' activations, the likely cause of
    // the ring's loss at 16 tokens; one block leaves ~156 KB. Run 32: one block a SM wins back
    // 3.5 of the 5.3 µs the ring loses on q|k|v at 16 tokens on the H200.)
    const int blocks = skinny_blocks_cap() == 1 ? 1 : 2;
    const int percent = int((blocks * (smem + 1024) * 100 + 228 * 1024 - 1) / (228 * 1024));
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributePreferredSharedMemoryCarveout, std::min(percent, 100)));
    RIDGE_GEMM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSkinnyThreads, smem));
    resident[ring] = std::max(1, per_sm);
  }
  int per_sm = persistent_blocks_per_sm(resident[ring], smem);
  if (a.blocks_per_sm > 0) per_sm = std::min(per_sm, a.blocks_per_sm);
  SkinnyArgs r = a;
  r.ring = ring;
  const int grid_y = std::max(1, detail::device_sms(detail::current_device()) * per_sm);
  const dim3 grid(1, skinny_persistent() ? persistent_grid(n_tiles, grid_y) : n_tiles);
  RIDGE_GEMM_CUDA_CHECK(
      pdl::launch(r.pdl_launch, kernel, grid, dim3(kSkinnyThreads), smem, stream, r));
  g_ring_launches.fetch_add(1, std::memory_order_relaxed);
}

template <int NG, int RT, int KU, int MIN_BLOCKS, SkinnyPrologue P, bool ROPE = false>
void launch_skinny_config(const SkinnyArgs& a, cudaStream_t stream) {
  constexpr int MT = 8 * NG;
  // An automatic ring takes the place of staged steps: its first steps, too, are copied before
  // the PDL wait.
  if constexpr (NG <= 2 && RT == 1 && KU == 4) {
    if (a.ring == 0 && a.stage_steps > 0 && skinny_ring_steps(a) > 0) {
      SkinnyArgs b = a;
      b.stage_steps = 0;
      launch_skinny_config<NG, RT, KU, MIN_BLOCKS, P, ROPE>(b, stream);
      return;
    }
  }
  const size_t base_smem = sizeof(float) * kSkinnyWarps * RT * NG * 4 * 32;
  // Early weights: compiled for the one-token-group, one-row-tile, plain-prologue configuration
  // (the kernel ignores stage_steps elsewhere, and so does the launch).
  const int stage_steps = NG == 1 && RT == 1 && P == SkinnyPrologue::none ? a.stage_steps : 0;
  const size_t smem =
      base_smem + size_t(stage_steps) * kSkinnyThreads * RT * 2 * KU * sizeof(uint4);
  auto kernel = skinny_gemm_kernel<NG, RT, KU, MIN_BLOCKS, P, false, ROPE>;
  static size_t smem_opted_in = 48 * 1024;  // per configuration; launches come from one thread
  if (smem > smem_opted_in) {
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    smem_opted_in = smem;
  }
  const int rows = a.swiglu ? a.N / 2 : a.N, tile = a.swiglu ? 8 * RT : 16 * RT;
  const int n_tiles = (rows + tile - 1) / tile;
  const int token_tiles = (a.M + MT - 1) / MT;
  // One token tile: as many blocks as are resident at once, each walking its row tiles
  // (persistent); more token tiles: one block per (token tile, row tile).
  static const int resident = [&] {
    const int sms = detail::device_sms(detail::current_device());
    int per_sm = 0;
    RIDGE_GEMM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel,
                                                                        kSkinnyThreads, base_smem));
    return std::max(1, sms * per_sm);
  }();
  // Staged launches take one block per row tile (each stages the first tile it takes).
  const int grid_y =
      skinny_persists(NG) && token_tiles == 1 && skinny_persistent() && stage_steps == 0
          ? persistent_grid(n_tiles, resident)
          : n_tiles;
  // Split-K (compiled for up to 16 tokens with one row tile per warp, SkinnyArgs::split_k).
  if constexpr (NG <= 2 && RT == 1 && !ROPE) {
    const int all_steps = (a.K + 32 * KU - 1) / (32 * KU);
    int split = a.split_k;
    if (split == 0) {  // automatic (never with staged steps, which need the unsplit kernel)
      const int blocks = token_tiles * n_tiles;
      split = 1;
      while (stage_steps == 0 && split < skinny_max_split_k && blocks * split * 4 <= resident &&
             all_steps >= 2 * split * kSkinnyWarps)
        split *= 2;
    }
    split = std::min(split, all_steps);  // every rank at least one step
    if (split > 1) {
      auto split_kernel = skinny_gemm_kernel<NG, RT, KU, MIN_BLOCKS, P, true>;
      const size_t split_smem = base_smem + sizeof(float) * RT * NG * 4 * 32;
      RIDGE_GEMM_CUDA_CHECK(pdl::launch(a.pdl_launch, unsigned(split), split_kernel,
                                        dim3(token_tiles, n_tiles, split), dim3(kSkinnyThreads),
                                        split_smem, stream, a));
      return;
    }
  }
  // The weight ring (SkinnyArgs::ring): one token tile, no staged steps, no split.
  if constexpr (NG <= 2 && RT == 1 && KU == 4) {
    const int ring = skinny_ring_steps(a);
    if (ring > 0 && token_tiles == 1 && stage_steps == 0) {
      launch_skinny_ring<NG, MIN_BLOCKS, P, ROPE>(a, ring, n_tiles, stream);
      return;
    }
  }
  const dim3 grid(token_tiles, grid_y);
  RIDGE_GEMM_CUDA_CHECK(
      pdl::launch(a.pdl_launch, kernel, grid, dim3(kSkinnyThreads), smem, stream, a));
}

// The prologue (and rope_kv epilogue) configurations: 8 or 16 tokens per block.
template <SkinnyPrologue P, bool ROPE = false>
void launch_with_prologue(const SkinnyArgs& a, cudaStream_t stream) {
  static_assert(skinny_sumsq_rows == 16, "the prologue configurations have one 16-row tile per warp");
  if (a.M <= 8)
    launch_skinny_config<1, 1, 4, 2, P, ROPE>(a, stream);
  else
    launch_skinny_config<2, 1, 4, 2, P, ROPE>(a, stream);
}

// ---- the row-stream GEMV (SkinnyArgs::stream, gemm.h) -----------------------------------------
// THREADS loader threads a block, CPT 16-byte chunks of a row per loader (K ≤ 8·CPT·THREADS), R
// rows a block takes at a time (R | 16), NT tokens (M ≤ NT). Block b takes the row groups
// it = b, b + G, … (G = gridDim.x); group it is the rows q = it·R … it·R + R − 1 of the unit order
// (unit u = q / 16, its row r = q % 16: the skinny kernel's row tile, so that rope pairs, gate/up
// pairs and the 16 rows of a sums-of-squares part meet in one unit), and loader t reads chunks
// t, t + THREADS, … of each, with cp.async into a two-slot shared-memory ring (registers would
// not do: ptxas waits for every outstanding load of a warp at once, so a register double buffer
// drains each group). The next-but-one group is issued before the current one is reduced (up to
// two groups in flight a loader), the first two before the PDL wait.
// One more warp, the publisher, issues no weight loads: it takes each group's per-warp sums from
// the loaders through a ring of kStreamSlots shared-memory slots (named barriers: the loaders
// arrive on a slot's "full" barrier, the publisher arrives on its "free" barrier once read), stores
// the rows' sums to scratch, publishes them with a release add on the unit's ticket and, when it
// completes the unit, acquires and runs the unit's epilogue. The loaders never wait for a ticket or
// a fence, so their loads stay in flight (a fence in a loader warp would wait for its own
// outstanding loads, and __threadfence also invalidates the SM's L1, where X lives).
// The 16-row units of `a` (the skinny kernel's row tiles: rope pairs, gate/up pairs or plain rows).
__host__ __device__ __forceinline__ int stream_units(const SkinnyArgs& a) {
  return a.rope.positions ? a.N / 16 : a.swiglu ? (a.N / 2 + 7) / 8 : (a.N + 15) / 16;
}
// The weight row behind row r (0..15) of unit u: rows r and r + 8 are the MMA kernel's rows g and
// g + 8 of that row tile (clamped rows are loaded, never stored).
__device__ __forceinline__ int unit_row(const SkinnyArgs& a, int u, int r) {
  if (a.rope.positions) {
    const RopeRows rr = rope_rows(a, u, r & 7);
    return r < 8 ? rr.first : rr.second;
  }
  if (a.swiglu) {
    const int F = a.N / 2, f = min(u * 8 + (r & 7), F - 1);
    return r < 8 ? f : F + f;
  }
  return min(u * 16 + r, a.N - 1);
}
constexpr int kStreamSlots = 4;
constexpr int kStreamFullBarrier =
    1;  // barriers 1..4: slot s full; 5..8: slot s free (0: __syncthreads)
constexpr int kStreamFreeBarrier = kStreamFullBarrier + kStreamSlots;
template <int THREADS, int CPT, int R, int NT>
__global__ void __launch_bounds__(THREADS + 32, 1024 / THREADS)
    gemv_stream_kernel(const SkinnyArgs a, bool rms) {
  static_assert(16 % R == 0 && THREADS % 32 == 0 && NT <= skinny_stream_max_tokens);
  static_assert(16 * NT <= 32,
                "the publisher warp runs a unit's epilogue, a lane per row and token");
  constexpr int WARPS = THREADS / 32;  // loader warps; warp WARPS is the publisher
  constexpr int kAll = THREADS + 32;
  const int M = a.M, N = a.N, K = a.K;
  const int kchunks = K / 8;
  const bool rope = a.rope.positions != nullptr;
  const int F = N / 2;
  const int groups = stream_units(a) * (16 / R);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  __shared__ float red[kStreamSlots][WARPS][R * NT];

  // The loaders' ring: two row groups, [slot][r][c][loader] 16-byte chunks; a loader reads back
  // only the chunks it copied itself, so cp.async.wait_group is the only ordering needed.
  extern __shared__ __align__(16) uint4 ring[];
  auto chunk = [&](int s, int r, int c) { return ring + ((s * R + r) * CPT + c) * THREADS + tid; };
  auto issue = [&](int it, int s) {  // group `it` into slot s (one cp.async group, maybe empty)
    if (it < groups) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int q = it * R + r;
        const uint4* w =
            reinterpret_cast<const uint4*>(a.W + size_t(unit_row(a, q >> 4, q & 15)) * K);
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
          const int k = tid + c * THREADS;
          if (k < kchunks) stage_weights16(chunk(s, r, c), w + k);
        }
      }
    }
    stage_commit();
  };

  pdl::launch_dependents();
  const int G = int(gridDim.x);
  if (warp < WARPS) {  // ---- loaders
    int it = int(blockIdx.x);
    issue(it, 0);
    issue(it + G, 1);
    pdl::wait();
    int i = 0;
    for (; it < groups; it += G, ++i) {
      // Group i has landed; group i + 1 may still be in flight.
      asm volatile("cp.async.wait_group 1;" ::: "memory");
      const int s = i & 1;
      float acc[R][NT];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < NT; ++m) acc[r][m] = 0.0f;
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
        const int k = tid + c * THREADS;
        if (k >= kchunks) break;
#pragma unroll
        for (int m = 0; m < NT; ++m) {
          const uint4 xv = load_activations16(a.X + size_t(min(m, M - 1)) * a.ld_x + k * 8);
          const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uint4 wv = *chunk(s, r, c);
            const uint32_t ws[4] = {wv.x, wv.y, wv.z, wv.w};
            float sum = acc[r][m];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              sum = fmaf(__uint_as_float(ws[j] << 16), __uint_as_float(xs[j] << 16), sum);
              sum = fmaf(__uint_as_float(ws[j] & 0xffff0000u), __uint_as_float(xs[j] & 0xffff0000u),
                         sum);
            }
            acc[r][m] = sum;
          }
        }
      }
      // Group i + 2 into the slot just read (the FMAs above consumed its values, and a warp
      // issues in order) before this group is reduced.
      issue(it + 2 * G, s);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < NT; ++m)
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], o);
      const int slot = i % kStreamSlots;
      if (i >= kStreamSlots) named_sync(kStreamFreeBarrier + slot, kAll);  // read by the publisher
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int m = 0; m < NT; ++m) red[slot][warp][r * NT + m] = acc[r][m];
      __syncwarp();
      named_arrive(kStreamFullBarrier + slot, kAll);
    }
    // The publisher's last "free" arrivals, so that every arrival is matched.
    for (int j = max(0, i - kStreamSlots); j < i; ++j)
      named_sync(kStreamFreeBarrier + j % kStreamSlots, kAll);
    stage_wait_all();  // the empty groups committed past the end
    return;
  }

  // ---- the publisher warp
  pdl::wait();
  float inv_rms[NT];  // 1 / rms of each token from the partial sums of squares, in a fixed order
#pragma unroll
  for (int m = 0; m < NT; ++m) {
    inv_rms[m] = 1.0f;
    if (rms && m < M) {
      float v = 0.0f;
      for (int p = lane; p < a.sumsq_parts; p += 32) v += a.sumsq_in[size_t(p) * M + m];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      inv_rms[m] = 1.0f / sqrtf(v / float(K) + a.eps);
    }
  }
  // inv_rms[m] for a lane's token m (NT ≤ 2: a select, no local memory).
  auto scale = [&](int m) { return NT > 1 && m == 1 ? inv_rms[NT - 1] : inv_rms[0]; };
  // Unit u's epilogue, once its 16 rows' sums are all in scratch and acquired.
  auto epilogue = [&](int u) {
    const float* raw = a.stream.scratch + size_t(u) * 16 * M;
    if (rope || a.swiglu) {
      if (lane < 8 * M) {
        const int g = lane / M, m = lane % M;
        float s1 = __ldcg(raw + size_t(g) * M + m), s2 = __ldcg(raw + size_t(g + 8) * M + m);
        if (rms) s1 *= scale(m), s2 *= scale(m);
        if (rope) {
          store_rope_pair(a, rope_rows(a, u, g), m, s1, s2);
        } else if (u * 8 + g < F) {
          store_swiglu(a, u * 8 + g, m, s1, s2);
        }
      }
    } else {
      float sq = 0.0f;
      if (lane < 16 * M) {
        const int r = lane / M, m = lane % M, n = u * 16 + r;
        float v = __ldcg(raw + size_t(r) * M + m);
        if (rms) v *= scale(m);
        const float stored = n < N ? store_output(a, n, m, v) : 0.0f;
        sq = stored * stored;
      }
      if (a.sumsq_out != nullptr) {  // token m's part: its 16 rows' squares, in row order
        float total = 0.0f;
#pragma unroll
        for (int r = 0; r < 16; ++r) total += __shfl_sync(0xffffffffu, sq, (r * M + lane) & 31);
        if (lane < M) a.sumsq_out[size_t(u) * M + lane] = total;
      }
    }
    if (lane == 0) a.stream.tickets[u] = 0;  // ready for the next launch
  };
  // The ticket pipeline (skinny_device.cuh): group i's row sums from the loaders to scratch,
  // counted on their unit's ticket, and the unit's epilogue in the block that completes it.
  auto unit_of = [&](int i) { return (int(blockIdx.x) + i * G) * R / 16; };
  const int my_groups = (groups - int(blockIdx.x) + G - 1) / G;  // (grid ≤ groups)
  ticket_pipeline(
      my_groups, lane,
      [&](int i) {  // receive
        const int slot = i % kStreamSlots;
        named_sync(kStreamFullBarrier + slot, kAll);
        float sum = 0.0f;
        if (lane < R * NT)
#pragma unroll
          for (int w = 0; w < WARPS; ++w) sum += red[slot][w][lane];
        __syncwarp();
        named_arrive(kStreamFreeBarrier + slot, kAll);
        return sum;
      },
      [&](int i, float sum) {  // store
        const int it = int(blockIdx.x) + i * G;
        if (lane < R * NT && lane % NT < M)
          __stcg(a.stream.scratch + size_t(it * R + lane / NT) * M + lane % NT, sum);
      },
      [&](int j) { return add_release_gpu(a.stream.tickets + unit_of(j), unsigned(R)); },
      [&](int j, unsigned old) {  // settle
        old = __shfl_sync(0xffffffffu, old, 0);
        if (old + R != 16) return;  // warp-uniform
        // This block completed the unit: acquire the other blocks' sums, then its epilogue.
        fence_acq_rel_gpu();
        __syncwarp();
        epilogue(unit_of(j));
      });
}

std::atomic<int64_t> g_stream_launches{0};

// RIDGE_STREAM_BLOCKS_PER_SM=n (A/B runs): at most n row-stream blocks a SM (the grid then has
// n per SM where they fit), instead of as many as are resident.
int stream_blocks_cap() {
  static const int cap = env_int("RIDGE_STREAM_BLOCKS_PER_SM", 0);
  return cap;
}

template <int THREADS, int CPT, int R, int NT>
void launch_gemv_stream_config(const SkinnyArgs& a, bool rms, cudaStream_t stream) {
  auto kernel = gemv_stream_kernel<THREADS, CPT, R, NT>;
  constexpr size_t smem = size_t(2) * R * CPT * THREADS * sizeof(uint4);  // the loaders' ring
  // Resident blocks: by the occupancy calculator (registers, barriers, shared memory at the
  // largest carveout), and by the shared memory of the carveout a decode chain gives every
  // launch (pdl::launch_carveout), where one is set: a grid larger than what is resident would
  // run a second, partial wave.
  struct Limits {
    int sms = 0, per_sm = 0, smem_per_sm = 0, reserved = 0, static_smem = 0;
  };
  static const Limits lim = [&] {
    Limits l;
    const int device = detail::current_device();
    l.sms = detail::device_sms(device);
    RIDGE_GEMM_CUDA_CHECK(cudaDeviceGetAttribute(
        &l.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    RIDGE_GEMM_CUDA_CHECK(
        cudaDeviceGetAttribute(&l.reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
    // Always: 48 KB of ring plus the kernel's static shared memory is past the default limit
    // (H200, run 27: launches at K in (8192, 12288], down's 11,008 among them, failed).
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    cudaFuncAttributes fa{};
    RIDGE_GEMM_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    l.static_smem = int(fa.sharedSizeBytes);
    RIDGE_GEMM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.per_sm, kernel, THREADS + 32, smem));
    return l;
  }();
  int per_sm = lim.per_sm;
  if (const int cap = stream_blocks_cap(); cap > 0) per_sm = std::min(per_sm, cap);
  if (const int percent = pdl::launch_carveout(); percent >= 0) {
    const int carveout = lim.smem_per_sm * percent / 100;  // rounded down to a supported size
    per_sm = std::min(per_sm, carveout / (int(smem) + lim.static_smem + lim.reserved));
  }
  const int resident = std::max(1, lim.sms * std::max(per_sm, 1));
  const int groups = stream_units(a) * (16 / R);
  RIDGE_GEMM_CUDA_CHECK(pdl::launch(a.pdl_launch, kernel,
                                    dim3(unsigned(std::min(groups, resident))), dim3(THREADS + 32),
                                    smem, stream, a, rms));
  g_stream_launches.fetch_add(1, std::memory_order_relaxed);
}

template <int NT>
void launch_gemv_stream_tokens(const SkinnyArgs& a, bool rms, cudaStream_t stream) {
  // Configurations by row length (skinny_stream_applies keeps K in (2048, skinny_stream_max_k],
  // and 2 tokens to skinny_stream_max_k_2: the register budget of ~1024 threads per SM).
  // The largest configurations must hold the longest rows skinny_stream_applies lets through.
  static_assert(skinny_stream_max_k / 8 <= 4 * 512 && skinny_stream_max_k_2 / 8 <= 3 * 512);
  const int kchunks = a.K / 8;
  if (kchunks <= 512)
    launch_gemv_stream_config<256, 2, 2, NT>(a, rms, stream);
  else if (kchunks <= 1024)
    launch_gemv_stream_config<512, 2, 2, NT>(a, rms, stream);
  else if (kchunks <= 1536 || NT > 1)
    launch_gemv_stream_config<512, 3, 1, NT>(a, rms, stream);
  else
    launch_gemv_stream_config<512, 4, 1, 1>(a, rms, stream);
}

}  // namespace

int64_t skinny_stream_launches() {
  return g_stream_launches.load(std::memory_order_relaxed);
}

int64_t skinny_ring_launches() {
  return g_ring_launches.load(std::memory_order_relaxed);
}

bool skinny_stream_applies(const SkinnyArgs& a) {
  if (a.stream.scratch == nullptr || a.stream.tickets == nullptr) return false;
  return a.M >= 1 && a.M <= skinny_stream_max_tokens && a.K % 8 == 0 && a.K > 2048 &&
         a.K <= (a.M == 1 ? skinny_stream_max_k : skinny_stream_max_k_2) && a.split_k <= 1 &&
         stream_units(a) * 16 <= a.stream.max_rows;
}

namespace detail {

void launch_skinny(const SkinnyArgs& a, SkinnyPrologue prologue, cudaStream_t stream,
                   int tokens_per_block) {
  if (tokens_per_block == 0 && skinny_warp_applies(a)) {
    launch_warp_gemv_fused(a, prologue, stream);
    return;
  }
  if (tokens_per_block == 0 && skinny_stream_applies(a)) {
    const bool rms = prologue == SkinnyPrologue::rms_sumsq;
    if (a.M == 1)
      launch_gemv_stream_tokens<1>(a, rms, stream);
    else
      launch_gemv_stream_tokens<2>(a, rms, stream);
    return;
  }
  // The prologues and the rope_kv epilogue exist for up to 16 tokens (decode at small batch), the
  // plain kernel for any M.
  if (a.rope.positions) {
    if (prologue == SkinnyPrologue::rms_sumsq)
      launch_with_prologue<SkinnyPrologue::rms_sumsq, true>(a, stream);
    else
      launch_with_prologue<SkinnyPrologue::none, true>(a, stream);
    return;
  }
  switch (prologue) {
    case SkinnyPrologue::rms_sumsq: launch_with_prologue<SkinnyPrologue::rms_sumsq>(a, stream); return;
    case SkinnyPrologue::none: break;
  }
  constexpr auto kNone = SkinnyPrologue::none;
  if (tokens_per_block == 16) {
    launch_skinny_config<2, 1, 4, 2, kNone>(a, stream);
    return;
  }
  // Above 16 tokens the activations (re-read from L2 by every row tile) cost as much as the
  // weights. Measured on the H200 (docs/KERNELS.md, run 6), per width: at 32 tokens, two 16-row
  // tiles per warp where there are row tiles enough to fill the SMs (N >= 6144), else one (twice
  // the blocks); at 64 tokens, one 64-token tile where N is wide (it spills 64 bytes and is
  // still the fastest there), else two 32-token tiles. The 32-token configuration used before
  // (two row tiles, two chunks per step) spilled 108 bytes and ran at 0.5-0.6x cuBLASLt.
  const bool wide = a.N >= 6144;
  if (a.M <= 8)
    launch_skinny_config<1, 1, 4, 2, kNone>(a, stream);
  else if (a.M <= 16)
    launch_skinny_config<2, 1, 4, 2, kNone>(a, stream);
  else if (a.M <= 32)
    wide ? launch_skinny_config<4, 2, 1, 2, kNone>(a, stream)
         : launch_skinny_config<4, 1, 2, 2, kNone>(a, stream);
  else
    wide ? launch_skinny_config<8, 2, 1, 2, kNone>(a, stream)
         : launch_skinny_config<4, 2, 1, 2, kNone>(a, stream);
}

}  // namespace detail

namespace {
__global__ void scale_columns_kernel(bf16* __restrict__ W, int64_t n_chunks, int64_t K,
                                     const float* __restrict__ scale) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_chunks) return;
  const int64_t k = (i * 8) % K;
  uint4* p = reinterpret_cast<uint4*>(W) + i;
  const uint4 v = *p;
  const uint32_t r[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    o[j] = pack_bf16x2(__uint_as_float(r[j] << 16) * scale[k + 2 * j],
                       __uint_as_float(r[j] & 0xffff0000u) * scale[k + 2 * j + 1]);
  *p = make_uint4(o[0], o[1], o[2], o[3]);
}
}  // namespace

void detail::launch_scale_columns(bf16* W, int64_t N, int64_t K, const float* scale,
                                  cudaStream_t stream) {
  const int64_t chunks = N * K / 8;
  scale_columns_kernel<<<unsigned((chunks + 255) / 256), 256, 0, stream>>>(W, chunks, K, scale);
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ridge::kernels
