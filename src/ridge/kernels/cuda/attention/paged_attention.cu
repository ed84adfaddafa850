// Paged attention kernels (see paged_attention.h for layouts and limits).
//
// paged_attention_kernel<HD, MT> (the general kernel: prefill chunks, mixed batches, big groups)
//   Launch: grid (q tiles, nkv, num_seqs * num_splits), 128 threads (4 warps), dynamic shared
//   memory ((64 * MT + 4 * 64) * (HD + 8) * 2 bytes: Q tile, 2 stages of K and V tiles; 87 KB
//   (MT 1) or 102 KB (MT 2) at HD 128).
//   A block owns BM = 64 * MT "rows" of one sequence and one KV head: row r is query token
//   r / group with query head kvh * group + r % group, so the query heads sharing a KV head (GQA)
//   read each K/V tile once; a decode token fills `group` rows. Warp w owns rows 16 * MT * w ..
//   16 * MT * (w + 1) - 1 as MT 16-row MMA tiles (MT 2: FlashAttention-2's 32 rows per warp, Q
//   fragments by ldmatrix per k-step since O and S fill the registers).
//   The block walks its split's KV range in tiles of BN = 64 positions, stopping at the causal
//   limit of its last row; blocks take the q tiles from the last (the longest causal range)
//   down, so the long blocks start first. Tiles wholly inside every row's range skip the mask.
//   K/V rows are gathered from the pages with cp.async (16 bytes per
//   thread per copy; positions outside the range are zero-filled), double-buffered.
//   Per tile: S = Q K^T (mma.sync m16n8k16, bf16 in, fp32 accumulate), causal/range mask (one
//   uniform branch per tile, a select per score: no branch inside the tile loop, which ptxas
//   schedules only within basic blocks), online softmax in the exp2 domain (row max on raw
//   scores, each weight one FFMA with the scale and one ex2.approx.ftz; row max and sum across
//   the 4 threads of a quad), P rounded to
//   bf16 straight from the accumulator layout into the A-operand layout, O += P V (V read with
//   ldmatrix.trans). Shared-memory rows are padded by 16 bytes: the 32-bit fragment loads and
//   the ldmatrix phases hit 32 distinct banks.
//   Output: one split -> out (bf16, O / l). Several splits -> workspace: O / l as fp32
//   [splits, ws_rows, HD] and (m, l) [splits, ws_rows, 2] (ws_rows = tokens * nh), merged by
//   combine_splits_kernel.
//
// paged_decode_kernel<HD, STAGES> (every sequence has q_len * group <= 16)
//   Launch: grid (nkv, num_splits, num_seqs) (the KV heads of one sequence and split are
//   neighbours in launch order: they read neighbouring 256-byte pieces of the same pages),
//   128 threads (4 warps), dynamic shared memory (16 + 2 * STAGES * 64) * (HD + 8) * 2 bytes
//   (Q tile, a ring of STAGES K and V tiles): HD 128: 72 / 106 / 140 KB for 2 / 3 / 4 stages
//   (3 / 2 / 1 blocks per SM); HD 64: 38 / 56 / 74 KB (3 blocks per SM at 4 stages); plus 640
//   bytes of static merge statistics.
//   Rows as in the general kernel but one 16-row tile (rows past q_len * group are zero and
//   masked): the whole decode token of a KV head (group rows) sits in one MMA tile, and every
//   warp computes (no idle warps, no 64-row tiles mostly empty).
//   KV: tiles of 64 positions; warp w takes positions 16w .. 16w + 15 of every tile and keeps its
//   own online softmax state (m, l, O) for the 16 rows. The 128 threads fill the ring with
//   cp.async (16 bytes per copy, a warp instruction covers 2 whole 256-byte rows at HD 128; each
//   thread first issues its 8 (HD 128) or 4 (HD 64) block-table loads together, then its
//   copies). The prologue fills the whole ring (KernelArgs::fill_ring, the default: STAGES tiles
//   in flight from the start; off, STAGES - 1 and the last stage loaded in tile 0's iteration);
//   then STAGES - 1 tiles in flight while one is computed; one __syncthreads per tile (it both
//   publishes tile t and frees the stage of tile t - 1, which the loads issued right after it
//   refill).
//   Per warp and tile: S (16 x 16) = Q K^T with K fragments from ldmatrix.x4 (2 n-tiles x
//   HD/16 k-steps), mask (causal per row, and the split's range), online softmax in the exp2
//   domain, P to bf16 in registers, O += P V (V from ldmatrix.x4.trans, HD/8 n-tiles). A warp
//   whose 16 positions all lie past the range skips both MMA sections (KernelArgs::skip_empty,
//   the default: the same bits, less work in a context's last tile).
//   Merge: each warp's (m, l) per row to shared memory, M = max over warps, L = sum l_w 2^(m_w -
//   M); each warp writes O_w 2^(m_w - M) as fp32 into the (drained) ring (rows padded to
//   HD + 8 floats: conflict-free float2 stores); then all threads sum the 4 warps per element in
//   a fixed order and write O / L: bf16 to out (one split) or fp32 to the workspace with (M, L)
//   (several splits). An empty range (a split past the end of a short context) writes O = 0,
//   (M, L) = (-inf, 0), which the combine kernel skips.
//   Splits merged in the kernel (only the `active` splits that hold positions take part; the
//   others leave): cluster merge (KernelArgs::cluster_merge, 2-8 splits launched as clusters of
//   1 x num_splits x 1): each split leaves O / L in shared memory in place of warp 0's fp32 rows,
//   and split 0 merges the active splits' rows through distributed shared memory between two
//   cluster barriers; else the ticket (KernelArgs::counters): the last active split to finish
//   merges the partials from the workspace.
//
// combine_splits_kernel<HD>
//   Launch: one warp per (token, head) row, 4 rows per 128-thread block, rows from
//   cu_seqlens_q[0] * nh up to cu_seqlens_q[S] * nh read on the device (the grid covers the plan's
//   num_tokens). out = sum_i w_i O_i / sum_i w_i with w_i = l_i * 2^(m_i - max m), splits with l_i
//   = 0 skipped; fixed order (deterministic).
//
// Numerics (both kernels): scores and softmax in fp32 (exp2 domain), P rounded to bf16 for the
// P V product, fp32 accumulation, the output rounded to bf16 once.
//
// fp8 (E4M3) KV pools (PagedAttentionArgs::kv_fp8; the <..., FP8 = true> forms): the rings hold
// E4M3 rows (HD + 16 bytes, 16 positions' bytes per cp.async), MMAs run in f16 (E4M3 converts to
// f16 exactly) with Q converted to f16 (clamped to +-65504) and P rounded to f16. The general
// kernel converts each landed tile to f16 tiles in shared memory (then a barrier) and runs its
// bf16 fragment code on them. The decode kernel instead reads
// its K and V fragments straight from the E4M3 ring (head dims permuted within a k-step for Q K^T
// and within groups of 32 for P V; see the tile loop) and Q from shared memory, so that more
// blocks are resident: 2 or 3 stages at head dim 128 (4 or 3 blocks per SM), 4 at 64 (a forced
// decode_stages is mapped to those).
#include "ridge/kernels/cuda/attention/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/gemm/sm90.cuh"
#include "ridge/kernels/cuda/pdl.cuh"
#include "ridge/kernels/cuda/trace/block_trace.h"

namespace ridge::kernels {
namespace {

constexpr int kBM = 64;        // rows per block of the general kernel with one row tile per warp
constexpr int kBN = 64;        // KV positions per tile (both kernels)
constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kDecRows = 16;   // rows of the decode kernel's tile
constexpr int kDecWarpN = kBN / kWarps;  // KV positions per warp per tile (16)
constexpr int kDecMinBlock = 8;          // the decode kernels' least block size (KvTileLoader)
constexpr int kMaxSplits = 256;
constexpr float kLog2e = 1.4426950408889634f;

template <int HD>
constexpr int smem_row() { return HD + 8; }  // bf16 elements per padded shared row
// fp8 (E4M3) KV rows in the kernels' rings: HD bytes plus 16 of padding.
template <int HD>
constexpr int fp8_row() { return HD + 16; }
template <int HD, int MT, bool FP8 = false>
constexpr size_t smem_bytes() {  // Q tile (MT * 64 rows), 2 stages of K and V tiles
  if constexpr (FP8)  // ... of fp8 K and V tiles, and one converted (f16) K and V tile
    return size_t(MT * kBM + 2 * kBN) * smem_row<HD>() * 2 + size_t(4 * kBN) * fp8_row<HD>();
  return size_t(MT * kBM + 4 * kBN) * smem_row<HD>() * 2;
}
template <int HD, int STAGES, bool FP8 = false>
constexpr size_t decode_smem_bytes() {
  if constexpr (FP8)  // Q tile, a ring of fp8 K and V tiles (MMA fragments converted from it)
    return size_t(kDecRows) * smem_row<HD>() * 2 + size_t(2 * STAGES * kBN) * fp8_row<HD>();
  return size_t(kDecRows + 2 * STAGES * kBN) * smem_row<HD>() * 2;
}
// Resident decode blocks per SM that the shared memory allows (228 KB per SM, 1 KB reserved per
// block, the static merge statistics), at most 3 (a register cap of 170 per thread); the fp8
// forms, whose Q fragments are read from shared memory each tile, at most 4 (128 registers).
template <int HD, int STAGES, bool FP8 = false>
constexpr int decode_min_blocks() {
  constexpr size_t per_block = decode_smem_bytes<HD, STAGES, FP8>() + 1024 + 640;
  constexpr int n = int(size_t(228 * 1024) / per_block);
  constexpr int cap = FP8 ? 4 : 3;
  return n < 1 ? 1 : (n > cap ? cap : n);
}
// The fp32 merge scratch (kWarps x 16 rows of HD + 8 floats) reuses the drained ring: it fits in
// the K part of a 2-stage ring (the smallest), i.e. 2 tiles of 64 padded bf16 rows.
static_assert(kWarps * kDecRows * (128 + 8) * 4 <= 2 * kBN * smem_row<128>() * 2,
              "merge scratch must fit in the K tiles of the smallest ring");
static_assert(kWarps * kDecRows * (64 + 8) * 4 <= 2 * kBN * smem_row<64>() * 2,
              "merge scratch must fit in the K tiles of the smallest ring");
// With fp8 KV it takes the fp8 ring (2 stages at least at head dim 128, 4 at 64).
static_assert(kWarps * kDecRows * (128 + 8) * 4 <= 2 * 2 * kBN * fp8_row<128>(),
              "merge scratch must fit in the smallest fp8 ring");
static_assert(kWarps * kDecRows * (64 + 8) * 4 <= 2 * 4 * kBN * fp8_row<64>(),
              "merge scratch must fit in the smallest fp8 ring");

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  // src-size 0 zero-fills the 16 bytes (rows past the range, padding rows).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// D += A B, m16n8k16, fp32 accumulation: bf16 operands, or f16 ones (F16: the fp8 KV forms, where
// E4M3 converts to f16 exactly and Q and P are converted to f16).
template <bool F16 = false>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (F16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Two bf16 (low, high) as two f16: exact for values in f16's normal range; beyond it clamped to
// +-65504 (an inf would meet an E4M3 zero in Q K^T and make a NaN).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t x) {
  auto clamp = [](float v) { return fminf(fmaxf(v, -65504.0f), 65504.0f); };
  return pack_f16(clamp(__uint_as_float(x << 16)), clamp(__uint_as_float(x & 0xffff0000u)));
}
// 16 E4M3 values (one 16-byte chunk) as 16 f16 values (two 16-byte chunks), exactly.
__device__ __forceinline__ void fp8x16_to_f16(const uint8_t* src, uint16_t* dst) {
  const uint4 in = *reinterpret_cast<const uint4*>(src);
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w[i] & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w[i] >> 16), __NV_E4M3);
    out[2 * i] = uint32_t(lo.x) | (uint32_t(lo.y) << 16);
    out[2 * i + 1] = uint32_t(hi.x) | (uint32_t(hi.y) << 16);
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

// Two E4M3 values (the low 16 bits of x: the low byte first) as two f16 (the low half first),
// exactly: one cvt.rn.f16x2.e4m3x2.
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(x & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x as one MUFU.EX2 (ex2.approx.ftz): exp2f adds a range test and two conditional multiplies
// to keep denormal results, which a softmax weight rounded to bf16 next to a maximum of 1 never
// needs (a result below 2^-126 flushes to 0). exp2(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Positions per split of a sequence in fixed-split mode: whole 64-position tiles, as even as
// possible, and at least min_chunk (a multiple of 64, or 0) so that a short context takes fewer of
// the splits (the last splits may be empty).
__host__ __device__ __forceinline__ int fixed_chunk(int ctx, int splits, int min_chunk) {
  const int tiles = (ctx + kBN - 1) / kBN;
  return max((tiles + splits - 1) / splits * kBN, min_chunk);
}

struct KernelArgs {
  const uint16_t* q;
  int64_t ld_q;
  uint16_t* out;
  int64_t ld_out;
  const uint16_t* k_pool;
  const uint16_t* v_pool;
  int64_t num_blocks;
  int num_blocks_i;  // num_blocks clamped to INT_MAX (pages are i32)
  const int32_t* cu_seqlens_q;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int max_ctx;  // max_blocks_per_seq * block_size (clamped to INT_MAX): contexts are cut there
  int block_size;
  int bs_shift;  // log2(block_size) when a power of two, else -1 (the general kernel then)
  int nkv;
  int nh;
  int group;
  int num_splits;
  int kv_chunk;      // 0: fixed_chunk(ctx, num_splits, min_chunk) per sequence
  int min_chunk;     // fixed-split mode: PagedAttentionArgs::min_split_positions in whole tiles
  int64_t ws_rows;   // num_tokens * nh: rows of one split in the workspace
  float* ws_o;       // [splits, ws_rows, HD]
  float* ws_ml;      // [splits, ws_rows, 2]
  float scale_log2;  // softmax scale * log2(e)
  int* counters;     // decode kernel: [num_seqs, nkv] split tickets (in-kernel merge), or null
  bool cluster_merge;  // decode kernel: launched in clusters of its num_splits splits (along y),
                       // which merge through distributed shared memory (no workspace, no tickets)
  bool early_kv;     // decode kernel: earlier positions' first tiles loaded before the PDL wait
  bool fill_ring;    // decode kernel: the prologue loads STAGES tiles (every stage), not STAGES - 1
  bool skip_empty;   // decode kernel: a warp skips the MMAs of a tile wholly past its range
  // Decode kernel, RIDGE_ATTN_TRACE (diagnostic, trace/block_trace.h): per block, %globaltimer at
  // entry, when its first tile has landed, when its last tile is done, when its output is
  // written, and its SM; null: not traced. trace_tile0: the third stamp when tile 0 is done
  // instead of the last tile (how much of the tiles phase one tile's compute is).
  unsigned long long* trace;
  bool trace_tile0;
};

// MT: 16-row MMA tiles per warp (1: 64-row blocks; 2: 128-row blocks, FlashAttention-2's
// 32 rows per warp: every K and V fragment read from shared memory feeds two MMAs per warp
// instead of one, and each 64-position K/V tile gathered from the pages serves twice the rows).
template <int HD, int MT, bool FP8 = false>
__global__ void __launch_bounds__(kThreads, MT == 2 ? 2 : 1)
    paged_attention_kernel(const KernelArgs a) {
  constexpr int BM = kBM * MT;      // rows per block
  constexpr int WROWS = 16 * MT;    // rows per warp
  constexpr int SROW = smem_row<HD>();
  constexpr int KSTEPS = HD / 16;   // k-steps of Q K^T
  constexpr int DTILES = HD / 8;    // n8 tiles of the output
  constexpr int CHUNKS = HD / 8;    // 16-byte chunks per row
  constexpr int ROW_STEP = kThreads / CHUNKS;  // KV rows between one thread's copies (8 or 16)
  constexpr int COPIES = kBN / ROW_STEP;       // copies of K (and of V) per thread per tile
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* qs = smem;              // [BM][SROW]
  uint16_t* ks = qs + BM * SROW;    // [2][kBN][SROW]
  uint16_t* vs = ks + 2 * kBN * SROW;
  // fp8 KV (as in the decode kernel): E4M3 rows [2][K, V][kBN][FROW] bytes where ks starts, one
  // f16 K and V tile after them; Q is converted to f16 in place once it has landed.
  constexpr int FROW = fp8_row<HD>();
  uint8_t* ring8 = reinterpret_cast<uint8_t*>(ks);
  uint16_t* kc = reinterpret_cast<uint16_t*>(ring8 + 4 * kBN * FROW);
  uint16_t* vc = kc + kBN * SROW;

  const int seq = blockIdx.z / a.num_splits, split = blockIdx.z % a.num_splits;
  // Heaviest work first: blocks start in order of (x, y), and under the causal mask a row tile's
  // work grows with its index, so the (x, y) plane is walked as q tiles from the last down, all
  // KV heads of one q tile together. The long blocks then start in the first wave and the short
  // ones fill the tail (longest-processing-time-first).
  const int lin = blockIdx.x + gridDim.x * blockIdx.y;
  const int kvh = lin % gridDim.y;
  const int q_tile = gridDim.x - 1 - lin / gridDim.y;
  const int q_start = a.cu_seqlens_q[seq];
  const int q_len = a.cu_seqlens_q[seq + 1] - q_start;
  const int ctx = min(a.context_lens[seq], a.max_ctx);
  const int rows_total = q_len * a.group;
  const int row0 = q_tile * BM;
  if (row0 >= rows_total) return;
  const int rows_here = min(BM, rows_total - row0);

  const int chunk = a.kv_chunk > 0 ? a.kv_chunk : fixed_chunk(ctx, a.num_splits, a.min_chunk);
  const int kv_begin = split * chunk;
  const int last_pos = ctx - q_len + (row0 + rows_here - 1) / a.group;
  const int kv_end = min(min(ctx, kv_begin + chunk), last_pos + 1);
  const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kBN - 1) / kBN : 0;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;

  // Q tile -> shared (zero rows past the sequence).
  for (int c = tid; c < BM * CHUNKS; c += kThreads) {
    const int r = c / CHUNKS, cc = c % CHUNKS;
    const bool valid = r < rows_here;
    const int rr = row0 + (valid ? r : 0);
    const int64_t token = q_start + rr / a.group;
    const int head = kvh * a.group + rr % a.group;
    cp_async_16(qs + r * SROW + cc * 8, a.q + token * a.ld_q + int64_t(head) * HD + cc * 8, valid);
  }
  // This thread copies rows j0 + i * ROW_STEP (i < COPIES) of every tile, chunk cc: first all
  // COPIES page lookups (independent loads, in flight together), then the 2 * COPIES copies.
  // Power-of-two pages (the usual case) by shift and mask: a division by a runtime value costs
  // ~20 integer instructions, and the ALU is this kernel's busiest pipe.
  const int j0 = tid / CHUNKS, cc = tid % CHUNKS;
  const int64_t head_off = int64_t(kvh) * HD + cc * 8;
  const int64_t slot_elems = int64_t(a.nkv) * HD;  // one position of one page
  auto load_kv = [&](int tile, int stage) {
    if constexpr (FP8) {
      constexpr int CH8 = HD / 16, RS8 = kThreads / CH8, CP8 = kBN / RS8;
      const int j8 = tid / CH8, c8 = tid % CH8;
      const int p0 = kv_begin + tile * kBN + j8;
      const auto* kp8 = reinterpret_cast<const uint8_t*>(a.k_pool);
      const auto* vp8 = reinterpret_cast<const uint8_t*>(a.v_pool);
      uint8_t* kd8 = ring8 + ((stage * 2 + 0) * kBN + j8) * FROW + c8 * 16;
      uint8_t* vd8 = ring8 + ((stage * 2 + 1) * kBN + j8) * FROW + c8 * 16;
#pragma unroll
      for (int i = 0; i < CP8; ++i) {
        const int pos = p0 + i * RS8;
        const int blk = a.bs_shift >= 0 ? pos >> a.bs_shift : pos / a.block_size;
        const int in_blk = a.bs_shift >= 0 ? pos & (a.block_size - 1) : pos % a.block_size;
        const int pg = pos < kv_end ? __ldg(table + blk) : -1;
        const bool valid = unsigned(pg) < unsigned(a.num_blocks_i);
        const int64_t slot = int64_t(valid ? pg : 0) * a.block_size + in_blk;
        const int64_t off = valid ? slot * slot_elems + int64_t(kvh) * HD + c8 * 16 : 0;
        cp_async_16(kd8 + i * RS8 * FROW, kp8 + off, valid);
        cp_async_16(vd8 + i * RS8 * FROW, vp8 + off, valid);
      }
      return;
    }
    const int pos0 = kv_begin + tile * kBN + j0;
    int page[COPIES], in_blk[COPIES];
    if (a.bs_shift >= 0) {  // one uniform branch per tile, not one per copy
#pragma unroll
      for (int i = 0; i < COPIES; ++i) {
        const int pos = pos0 + i * ROW_STEP;
        page[i] = pos < kv_end ? __ldg(table + (pos >> a.bs_shift)) : -1;
        in_blk[i] = pos & (a.block_size - 1);
      }
    } else {
#pragma unroll
      for (int i = 0; i < COPIES; ++i) {
        const int pos = pos0 + i * ROW_STEP;
        page[i] = pos < kv_end ? __ldg(table + pos / a.block_size) : -1;
        in_blk[i] = pos % a.block_size;
      }
    }
    uint16_t* kd = ks + (stage * kBN + j0) * SROW + cc * 8;
    uint16_t* vd = vs + (stage * kBN + j0) * SROW + cc * 8;
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const bool valid = unsigned(page[i]) < unsigned(a.num_blocks_i);
      const int64_t slot = int64_t(valid ? page[i] : 0) * a.block_size + in_blk[i];
      const int64_t off = valid ? slot * slot_elems + head_off : 0;
      cp_async_16(kd + i * ROW_STEP * SROW, a.k_pool + off, valid);
      cp_async_16(vd + i * ROW_STEP * SROW, a.v_pool + off, valid);
    }
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  // This thread's rows (g and g + 8 of each of the warp's MT 16-row tiles): their positions; -1
  // masks a row.
  int row_pos[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * WROWS + mt * 16 + g + 8 * h;
      row_pos[mt][h] = r < rows_here ? ctx - q_len + (row0 + r) / a.group : -1;
    }
  // The warp's 16-row tiles holding real rows (only they are written; the MMAs run on all MT:
  // a branch around each MMA would cut the tile loop into basic blocks that ptxas cannot
  // schedule across, and rows past the end are zero and masked), the position of its last real
  // row (-1: none; a KV tile past it is wholly masked for the warp and skipped), and the position
  // of its first row when all WROWS of its rows are real (else -1): a KV tile wholly at or before
  // it and inside the range needs no mask.
  const int warp_row0 = warp * WROWS;
  const int warp_rows = max(0, min(WROWS, rows_here - warp_row0));
  const int mt_count = (warp_rows + 15) / 16;
  const int warp_last_pos = warp_rows > 0 ? ctx - q_len + (row0 + warp_row0 + warp_rows - 1) / a.group : -1;
  const int warp_full_pos =
      warp_rows == WROWS ? ctx - q_len + (row0 + warp_row0) / a.group : -1;

  uint32_t qa[MT == 1 ? KSTEPS : 1][4];  // MT 1: Q fragments in registers; MT 2: from shared
  float o[MT][DTILES][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int d = 0; d < DTILES; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

  // ldmatrix addresses. Q (A operand, MT 2): matrix i = lane / 8 is rows (i % 2) * 8 .. + 7,
  // k half i / 2. K (B operand of Q K^T): matrix i is n-tile 2p + i / 2, k half i % 2.
  const uint16_t* qrow = qs + (warp_row0 + (lane & 15)) * SROW + (lane >> 4) * 8;
  const int krow_off = ((lane >> 4) * 8 + (lane & 7)) * SROW + ((lane >> 3) & 1) * 8;
  const int vrow_off = (lane & 15) * SROW + (lane >> 4) * 8;

  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 1 < n_tiles) {
      load_kv(tile + 1, (tile + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (FP8) {
      if (tile == 0)  // Q (bf16, landed) to f16 in place: exact for values in f16's range
        for (int c = tid; c < BM * (HD / 8); c += kThreads) {
          uint4* p = reinterpret_cast<uint4*>(qs + (c / (HD / 8)) * SROW + (c % (HD / 8)) * 8);
          const uint4 v = *p;
          *p = make_uint4(bf16x2_to_f16x2(v.x), bf16x2_to_f16x2(v.y), bf16x2_to_f16x2(v.z),
                          bf16x2_to_f16x2(v.w));
        }
      const uint8_t* k8 = ring8 + ((tile & 1) * 2 + 0) * kBN * FROW;
      const uint8_t* v8 = ring8 + ((tile & 1) * 2 + 1) * kBN * FROW;
      for (int c = tid; c < kBN * (HD / 16); c += kThreads) {
        const int r = c / (HD / 16), cc = c % (HD / 16);
        fp8x16_to_f16(k8 + r * FROW + cc * 16, kc + r * SROW + cc * 16);
        fp8x16_to_f16(v8 + r * FROW + cc * 16, vc + r * SROW + cc * 16);
      }
      __syncthreads();
    }
    if constexpr (MT == 1) {
      if (tile == 0) {
        const uint16_t* qw = qs + (warp * 16 + g) * SROW + 2 * t4;
#pragma unroll
        for (int s = 0; s < KSTEPS; ++s) {
          qa[s][0] = lds32(qw + s * 16);
          qa[s][1] = lds32(qw + 8 * SROW + s * 16);
          qa[s][2] = lds32(qw + s * 16 + 8);
          qa[s][3] = lds32(qw + 8 * SROW + s * 16 + 8);
        }
      }
    }
    const int kv0 = kv_begin + tile * kBN;
    if (kv0 <= warp_last_pos) {
      const uint16_t* kt = (FP8 ? kc : ks + (tile & 1) * kBN * SROW) + krow_off;
      const uint16_t* vt = (FP8 ? vc : vs + (tile & 1) * kBN * SROW) + vrow_off;
      float s[MT][kBN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
      // S = Q K^T: one ldmatrix.x4 gives the b0/b1 fragments of two n-tiles for one k-step
      // (a quarter of the shared-memory instructions of 32-bit loads), used by the warp's MT row
      // tiles; each accumulator sums k ascending.
#pragma unroll
      for (int k = 0; k < KSTEPS; ++k) {
        uint32_t qf[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (MT == 1) {
            qf[0][0] = qa[k][0], qf[0][1] = qa[k][1], qf[0][2] = qa[k][2], qf[0][3] = qa[k][3];
          } else {
            ldmatrix_x4(qf[mt], qrow + mt * 16 * SROW + k * 16);
          }
        }
#pragma unroll
        for (int p = 0; p < kBN / 16; ++p) {
          uint32_t b[4];
          ldmatrix_x4(b, kt + p * 16 * SROW + k * 16);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<FP8>(s[mt][2 * p], qf[mt], b[0], b[1]);
            mma_16816<FP8>(s[mt][2 * p + 1], qf[mt], b[2], b[3]);
          }
        }
      }
      // Mask, online softmax. The raw scores are masked and their row maximum taken before the
      // scale (positive, so the maximum commutes with it); each weight is then one FFMA and one
      // MUFU: 2^(s * scale_log2 - m), m the running maximum in the scaled (exp2) domain.
      const bool unmasked = kv0 + kBN <= kv_end && kv0 + kBN - 1 <= warp_full_pos;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // One uniform branch per tile (the diagonal and range-end tiles mask), and selects
        // inside it: a short-circuit per element would put two branches on each score.
        if (!unmasked) {
          const int lim0 = min(row_pos[mt][0], kv_end - 1) - kv0 - 2 * t4;
          const int lim1 = min(row_pos[mt][1], kv_end - 1) - kv0 - 2 * t4;
#pragma unroll
          for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int off = n * 8 + (e & 1);  // pos - kv0 - 2 * t4
              s[mt][n][e] = off <= (e < 2 ? lim0 : lim1) ? s[mt][n][e] : -INFINITY;
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) mx[e / 2] = fmaxf(mx[e / 2], s[mt][n][e]);
        float alpha[2], base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
          const float m_new = fmaxf(m[mt][h], mx[h] * a.scale_log2);
          base[h] = m_new == -INFINITY ? 0.0f : m_new;
          alpha[h] = exp2_ftz(m[mt][h] - base[h]);  // 0 while the row has seen nothing
          m[mt][h] = m_new;
          l[mt][h] *= alpha[h];
        }
#pragma unroll
        for (int d = 0; d < DTILES; ++d) {
          o[mt][d][0] *= alpha[0];
          o[mt][d][1] *= alpha[0];
          o[mt][d][2] *= alpha[1];
          o[mt][d][3] *= alpha[1];
        }
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mt][n][e] = exp2_ftz(fmaf(s[mt][n][e], a.scale_log2, -base[e / 2]));
            l[mt][e / 2] += s[mt][n][e];
          }
      }
      // O += P V, 16 KV positions per k-step; each V fragment (ldmatrix.trans) serves the
      // warp's MT row tiles.
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          auto pack_p = [](float lo, float hi) { return FP8 ? pack_f16(lo, hi) : pack_bf16(lo, hi); };
          pa[mt][0] = pack_p(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack_p(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack_p(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack_p(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int d = 0; d < DTILES; d += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vt + kk * 16 * SROW + d * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<FP8>(o[mt][d], pa[mt], b[0], b[1]);
            mma_16816<FP8>(o[mt][d + 1], pa[mt], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // the stage just read is refilled by the next iteration's load
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if (mt >= mt_count) break;
    float inv_l[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 1);
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 2);
      inv_l[h] = l[mt][h] > 0.0f ? 1.0f / l[mt][h] : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row0 + mt * 16 + g + 8 * h;
      if (r >= rows_here) continue;
      const int rr = row0 + r;
      const int64_t token = q_start + rr / a.group;
      const int head = kvh * a.group + rr % a.group;
      if (a.num_splits == 1) {
        uint16_t* dst = a.out + token * a.ld_out + int64_t(head) * HD + 2 * t4;
#pragma unroll
        for (int d = 0; d < DTILES; ++d)
          *reinterpret_cast<uint32_t*>(dst + d * 8) =
              pack_bf16(o[mt][d][2 * h] * inv_l[h], o[mt][d][2 * h + 1] * inv_l[h]);
      } else {
        const int64_t row_in_split = token * a.nh + head;
        if (row_in_split >= a.ws_rows) continue;  // q_len past max_q_len (fixed mode): not ours
        const int64_t ws_row = int64_t(split) * a.ws_rows + row_in_split;
        float* dst = a.ws_o + ws_row * HD + 2 * t4;
#pragma unroll
        for (int d = 0; d < DTILES; ++d)
          *reinterpret_cast<float2*>(dst + d * 8) =
              make_float2(o[mt][d][2 * h] * inv_l[h], o[mt][d][2 * h + 1] * inv_l[h]);
        if (t4 == 0)
          *reinterpret_cast<float2*>(a.ws_ml + ws_row * 2) = make_float2(m[mt][h], l[mt][h]);
      }
    }
  }
}

// One warp's share of one KV tile in the decode kernels: S = Q K^T over its 16 positions kv0 ..
// kv0 + 15 (stage `stage` of the ring: bf16 rows ks / vs, or E4M3 rows ring8), the mask (causal
// per row by row_pos, and the range end kv_end), the online softmax update of (m, l) in the exp2
// domain, and O += P V. live false: every score is masked and the MMAs are skipped (m, l and O
// stay as they are). Q: fragments qa (bf16) or the f16 tile qs (fp8).
template <int HD, bool FP8>
__device__ __forceinline__ void decode_tile(const uint16_t* ks, const uint16_t* vs,
                                            const uint8_t* ring8, int stage, const uint16_t* qs,
                                            const uint32_t (&qa)[FP8 ? 1 : HD / 16][4],
                                            float (&o)[HD / 8][4], float (&m)[2], float (&l)[2],
                                            const int (&row_pos)[2], int kv0, int kv_end, bool live,
                                            float scale_log2) {
  constexpr int SROW = smem_row<HD>();
  constexpr int KSTEPS = HD / 16;
  constexpr int DTILES = HD / 8;
  constexpr int FROW = fp8_row<HD>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const uint16_t* kt = ks + (stage * kBN + warp * kDecWarpN) * SROW;
  const uint16_t* vt = vs + (stage * kBN + warp * kDecWarpN) * SROW;
  // S = Q K^T for this warp's 16 positions.
  float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  if (live) {
    if constexpr (FP8) {
      // The head dimension of Q and K is permuted within each k-step (the dot product does not
      // care), so that a thread's four K values of a k-step are 4 adjacent bytes: its fragment
      // columns 2t4, 2t4 + 1, 2t4 + 8, 2t4 + 9 are head dims 4t4 .. 4t4 + 3. E4M3 K rows
      // straight into f16 fragments: n-tile n's b0/b1 of k-step k are the 4 bytes at head dims
      // 16k + 4t4 of position 8n + g (one 32-bit load, two cvt.f16x2.e4m3x2; the 144-byte rows
      // put a warp's 8 rows x 16 bytes in distinct banks).
      const uint8_t* k8 = ring8 + ((stage * 2 + 0) * kBN + warp * kDecWarpN + g) * FROW + 4 * t4;
      const uint16_t* qw = qs + g * SROW + 4 * t4;
#pragma unroll
      for (int k = 0; k < KSTEPS; ++k) {
        const uint32_t q[4] = {lds32(qw + k * 16), lds32(qw + 8 * SROW + k * 16),
                               lds32(qw + k * 16 + 2), lds32(qw + 8 * SROW + k * 16 + 2)};
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint32_t w = *reinterpret_cast<const uint32_t*>(k8 + n * 8 * FROW + k * 16);
          mma_16816<true>(s[n], q, fp8x2_to_f16x2(w), fp8x2_to_f16x2(w >> 16));
        }
      }
    } else {
      // ldmatrix.x4 gives both n-tiles' b0/b1 per k-step (matrix i = lane / 8: n-tile i / 2, k
      // half i % 2).
      // The odd k-steps accumulate apart (s2) and are added at the end: four chains of KSTEPS / 2
      // dependent MMAs instead of two of KSTEPS. With one warp a sub-partition at batch 1 nothing
      // else hides an MMA's latency, and this chain is the head of the tile's critical path.
      const uint16_t* krow = kt + ((lane >> 4) * 8 + (lane & 7)) * SROW + ((lane >> 3) & 1) * 8;
      float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int k = 0; k < KSTEPS; ++k) {
        uint32_t b[4];
        ldmatrix_x4(b, krow + k * 16);
        float(&acc)[2][4] = k % 2 ? s2 : s;
        mma_16816<false>(acc[0], qa[k], b[0], b[1]);
        mma_16816<false>(acc[1], qa[k], b[2], b[3]);
      }
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] += s2[n][e];
    }
  }
  // Mask, scale, online softmax.
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2;
      const int pos = kv0 + n * 8 + 2 * t4 + (e & 1);
      const bool ok = pos <= row_pos[h] && pos < kv_end;
      s[n][e] = ok ? s[n][e] * scale_log2 : -INFINITY;
      mx[h] = fmaxf(mx[h], s[n][e]);
    }
  float alpha[2], base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    const float m_new = fmaxf(m[h], mx[h]);
    base[h] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = exp2_ftz(m[h] - base[h]);  // 0 while the row has seen nothing
    m[h] = m_new;
    l[h] *= alpha[h];
  }
#pragma unroll
  for (int d = 0; d < DTILES; ++d) {
    o[d][0] *= alpha[0];
    o[d][1] *= alpha[0];
    o[d][2] *= alpha[1];
    o[d][3] *= alpha[1];
  }
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = exp2_ftz(s[n][e] - base[e / 2]);  // one MUFU each (exp2f: four, in a chain)
      l[e / 2] += s[n][e];
    }
  // O += P V over the warp's 16 positions (one k-step).
  auto pack_p = [](float lo, float hi) { return FP8 ? pack_f16(lo, hi) : pack_bf16(lo, hi); };
  const uint32_t pa[4] = {pack_p(s[0][0], s[0][1]), pack_p(s[0][2], s[0][3]),
                          pack_p(s[1][0], s[1][1]), pack_p(s[1][2], s[1][3])};
  if (live) {
    if constexpr (FP8) {
      // E4M3 V rows straight into f16 fragments. The output's head dims are permuted in groups
      // of 32: n-tile 4G + j, column c is head dim 32G + 4c + j (the merge below writes them
      // back in order), so that one 32-bit load per position gives 4 n-tiles' values, and the
      // 4 positions a thread's b0/b1 need (2t4, 2t4 + 1, 2t4 + 8, 2t4 + 9) make 4 n-tiles'
      // fragments with 4 byte permutes and 8 conversions. Banks: each of the 4 loads reads 4
      // rows of 32 bytes at distinct offsets (rows 2 x 144 bytes apart).
      const uint8_t* v8 =
          ring8 + ((stage * 2 + 1) * kBN + warp * kDecWarpN + 2 * t4) * FROW + 4 * g;
#pragma unroll
      for (int G = 0; G < HD / 32; ++G) {
        const uint8_t* p = v8 + G * 32;
        const uint32_t w0 = *reinterpret_cast<const uint32_t*>(p);
        const uint32_t w1 = *reinterpret_cast<const uint32_t*>(p + FROW);
        const uint32_t w2 = *reinterpret_cast<const uint32_t*>(p + 8 * FROW);
        const uint32_t w3 = *reinterpret_cast<const uint32_t*>(p + 9 * FROW);
        // Bytes j of positions (2t4, 2t4 + 1) and of (2t4 + 8, 2t4 + 9), pairwise.
        const uint32_t lo01 = __byte_perm(w0, w1, 0x5140), hi01 = __byte_perm(w0, w1, 0x7362);
        const uint32_t lo23 = __byte_perm(w2, w3, 0x5140), hi23 = __byte_perm(w2, w3, 0x7362);
        mma_16816<true>(o[4 * G + 0], pa, fp8x2_to_f16x2(lo01), fp8x2_to_f16x2(lo23));
        mma_16816<true>(o[4 * G + 1], pa, fp8x2_to_f16x2(lo01 >> 16), fp8x2_to_f16x2(lo23 >> 16));
        mma_16816<true>(o[4 * G + 2], pa, fp8x2_to_f16x2(hi01), fp8x2_to_f16x2(hi23));
        mma_16816<true>(o[4 * G + 3], pa, fp8x2_to_f16x2(hi01 >> 16), fp8x2_to_f16x2(hi23 >> 16));
      }
    } else {
      const uint16_t* vrow = vt + (lane & 15) * SROW + (lane >> 4) * 8;
#pragma unroll
      for (int d = 0; d < DTILES; d += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + d * 8);
        mma_16816<false>(o[d], pa, b[0], b[1]);
        mma_16816<false>(o[d + 1], pa, b[2], b[3]);
      }
    }
  }
}

// The decode kernels' Q rows of one (sequence, KV head) into shared memory: `slots` rows of
// SROW, row r the query head kvh * group + r % group of token q_start + r / group; rows from
// `rows` on zero-filled. One cp.async of 16 bytes per thread and chunk.
template <int HD>
__device__ __forceinline__ void load_q_rows(uint16_t* dst, int slots, int rows, const uint16_t* q,
                                            int64_t ld_q, int q_start, int kvh, int group) {
  constexpr int CHUNKS = HD / 8;
  for (int c = threadIdx.x; c < slots * CHUNKS; c += kThreads) {
    const int r = c / CHUNKS, cc = c % CHUNKS;
    const bool valid = r < rows;
    const int rr = valid ? r : 0;
    const int64_t token = q_start + rr / group;
    const int head = kvh * group + rr % group;
    cp_async_16(dst + r * smem_row<HD>() + cc * 8, q + token * ld_q + int64_t(head) * HD + cc * 8,
                valid);
  }
}

// The decode kernel's merge of its 4 warps' states, in pieces (the same arithmetic,
// the same order). merge_publish: each warp's row sums over its quad (m is quad-uniform), and (m,
// l) per warp and row to red_m / red_l (the caller then waits at a barrier).
__device__ __forceinline__ void merge_publish(const float (&m)[2], float (&l)[2],
                                              float (*red_m)[kDecRows], float (*red_l)[kDecRows]) {
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t4 = threadIdx.x % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  if (t4 == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      red_m[warp][g + 8 * h] = m[h];
      red_l[warp][g + 8 * h] = l[h];
    }
  }
}
// Row r's maximum over the warps.
__device__ __forceinline__ float merge_max(const float (*red_m)[kDecRows], int r) {
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, red_m[w][r]);
  return M;
}
// Row r's (M, L): L = sum over the warps of l_w 2^(m_w - M).
__device__ __forceinline__ float2 merge_row_stats(const float (*red_m)[kDecRows],
                                                  const float (*red_l)[kDecRows], int r) {
  const float M = merge_max(red_m, r);
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w)
    if (red_m[w][r] != -INFINITY) L += red_l[w][r] * exp2f(red_m[w][r] - M);
  return make_float2(M, L);
}
// This thread's part of row h (g + 8h) of its warp's O, scaled by f, in head-dim order into `row`
// (fp32; the fp8 forms' n-tiles 4G .. 4G + 3 at column c are head dims 32G + 4c .. 32G + 4c + 3).
template <int HD, bool FP8>
__device__ __forceinline__ void store_scaled_row(float* row, const float (&o)[HD / 8][4], int h,
                                                 float f) {
  const int t4 = threadIdx.x % 4;
  if constexpr (FP8) {
#pragma unroll
    for (int G = 0; G < HD / 32; ++G)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        *reinterpret_cast<float4*>(row + 32 * G + 4 * (2 * t4 + e)) =
            make_float4(o[4 * G][2 * h + e] * f, o[4 * G + 1][2 * h + e] * f,
                        o[4 * G + 2][2 * h + e] * f, o[4 * G + 3][2 * h + e] * f);
  } else {
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
      *reinterpret_cast<float2*>(row + 2 * t4 + d * 8) =
          make_float2(o[d][2 * h] * f, o[d][2 * h + 1] * f);
  }
}
// Columns d, d + 1 of a row summed over the warps' scaled rows (warp w's at row + w * stride), in
// warp order.
__device__ __forceinline__ float2 sum_warps(const float* row, int stride, int d) {
  float2 acc = *reinterpret_cast<const float2*>(row + d);
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    const float2 v = *reinterpret_cast<const float2*>(row + w * stride + d);
    acc.x += v.x;
    acc.y += v.y;
  }
  return acc;
}

// KV tiles into the decode kernels' rings (bf16 rows ks / vs, or E4M3 rows
// [STAGES][K, V][kBN][FROW] where ks starts): 16-byte copies, HD / 8 (fp8: HD / 16) a row, so
// that the 128 threads cover LSTEP rows a round; this thread copies the LCOPIES consecutive rows
// lj * LCOPIES + i (i < LCOPIES, at most 8) of every tile, chunk lc. A tile starts on a multiple
// of 64 and pages hold at least kDecMinBlock = 8 positions (a power of two), so a thread's rows
// lie in one page: one page lookup a tile, and its copies are one 64-bit offset plus multiples of
// a row (the shared addresses immediates). Each copy instruction of a warp still reads whole
// rows (32 / LCH of them). Made once a block (the per-thread constants), then load() a tile.
template <int HD, bool FP8>
struct KvTileLoader {
  static constexpr int ROW = FP8 ? fp8_row<HD>() : smem_row<HD>();  // ring row: bytes / elements
  static constexpr int LCH = FP8 ? HD / 16 : HD / 8;
  static constexpr int LSTEP = kThreads / LCH;
  static constexpr int LCOPIES = kBN / LSTEP;
  static_assert(LCOPIES <= kDecMinBlock, "a thread's rows of a tile must share a page");
  const KernelArgs& a;
  uint16_t* ks;
  uint16_t* vs;
  int lj, lc;
  int64_t page_elems;  // one page of one pool
  int row_elems;       // one position of one page
  int bs_mask;         // the decode kernels take power-of-two block sizes
  int last_blk;

  __device__ __forceinline__ KvTileLoader(const KernelArgs& args, uint16_t* k_ring,
                                          uint16_t* v_ring, int tid)
      : a(args),
        ks(k_ring),
        vs(v_ring),
        lj(tid / LCH),
        lc(tid % LCH),
        page_elems(int64_t(args.block_size) * args.nkv * HD),
        row_elems(args.nkv * HD),
        bs_mask(args.block_size - 1),
        last_blk(args.max_blocks_per_seq - 1) {}

  // The tile at positions tile0 .. of KV head kvh into stage `stage`, through `table` (a
  // sequence's page-table row; the lookup clamped to the row's last entry, no branch). Positions
  // at or past kv_end, and a page outside the pool, are zero-filled (their source addresses stay
  // inside the pool: the page itself, or page 0 for one outside); skip(pos) true: that row is not
  // copied at all (a decode kernel's new rows, loaded in another group).
  template <typename Skip>
  __device__ __forceinline__ void load(const int32_t* table, int64_t head_off, int tile0,
                                       int kv_end, int stage, Skip skip) const {
    const int p0 = tile0 + lj * LCOPIES;
    const int pg = __ldg(table + min(p0 >> a.bs_shift, last_blk));
    const bool page_ok = unsigned(pg) < unsigned(a.num_blocks_i);
    const int64_t off0 =
        int64_t(page_ok ? pg : 0) * page_elems + (p0 & bs_mask) * row_elems + head_off;
    const int r0 = stage * (FP8 ? 2 : 1) * kBN + lj * LCOPIES;  // the first row in the ring
#pragma unroll
    for (int i = 0; i < LCOPIES; ++i) {
      const int pos = p0 + i;
      if (skip(pos)) continue;
      const bool valid = page_ok && pos < kv_end;
      const int64_t off = off0 + int64_t(i) * row_elems;
      if constexpr (FP8) {
        uint8_t* ring8 = reinterpret_cast<uint8_t*>(ks);
        const int r = (r0 + i) * ROW + lc * 16;
        cp_async_16(ring8 + r, reinterpret_cast<const uint8_t*>(a.k_pool) + off, valid);
        cp_async_16(ring8 + r + kBN * ROW, reinterpret_cast<const uint8_t*>(a.v_pool) + off, valid);
      } else {
        const int r = (r0 + i) * ROW + lc * 8;
        cp_async_16(ks + r, a.k_pool + off, valid);
        cp_async_16(vs + r, a.v_pool + off, valid);
      }
    }
  }
  // This thread's offset of KV head kvh in a pool position (elements; fp8: bytes).
  __device__ __forceinline__ int64_t head_offset(int kvh) const {
    return int64_t(kvh) * HD + lc * (FP8 ? 16 : 8);
  }
};

template <int HD, int STAGES, bool FP8 = false>
__global__ void __launch_bounds__(kThreads, decode_min_blocks<HD, STAGES, FP8>())
    paged_decode_kernel(const KernelArgs a) {
  static_assert(STAGES >= 2 && STAGES <= 4, "2 to 4 ring stages");
  // The fp32 merge scratch reuses the ring.
  static_assert(kWarps * kDecRows * (HD + 8) * 4 <=
                    decode_smem_bytes<HD, STAGES, FP8>() - kDecRows * smem_row<HD>() * 2,
                "merge scratch must fit after the Q tile");
  constexpr int SROW = smem_row<HD>();
  constexpr int KSTEPS = HD / 16;               // k-steps of Q K^T
  constexpr int DTILES = HD / 8;                // n8 tiles of the output
  constexpr int RROW = HD + 8;                  // fp32 row of the merge scratch
  extern __shared__ __align__(16) uint16_t smem[];
  __shared__ float red_m[kWarps][kDecRows], red_l[kWarps][kDecRows];
  __shared__ float row_m[kDecRows], row_l[kDecRows];
  uint16_t* qs = smem;                          // [16][SROW]
  uint16_t* ks = qs + kDecRows * SROW;          // [STAGES][kBN][SROW]
  uint16_t* vs = ks + STAGES * kBN * SROW;      // [STAGES][kBN][SROW]
  // fp8 KV: the ring holds E4M3 rows ([STAGES][K, V][kBN][FROW] bytes where ks starts), read
  // straight into f16 MMA fragments (see the tile loop).
  constexpr int FROW = fp8_row<HD>();
  uint8_t* ring8 = reinterpret_cast<uint8_t*>(ks);

  // Launched with PDL (pdl.cuh). The step's metadata (cu_seqlens, context lengths, block tables)
  // was copied before the step's first kernel, and every KV position before the sequence's new
  // tokens was written by earlier steps: the first ring stages of those are loaded before
  // waiting for the kernels before this one (q, and the new tokens' K/V from rope_kv_store), so
  // that their page-table reads and HBM round trips overlap the previous kernels' tail.
  pdl::launch_dependents();
  const int kvh = blockIdx.x, split = blockIdx.y, seq = blockIdx.z;
  unsigned long long* const stamps =
      a.trace && threadIdx.x == 0
          ? a.trace + (size_t(seq * gridDim.y + split) * gridDim.x + kvh) * detail::kPhaseEntries
          : nullptr;
  if (stamps) stamps[0] = globaltimer_ns(), stamps[4] = sm_id();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int q_start = a.cu_seqlens_q[seq];
  const int q_len = a.cu_seqlens_q[seq + 1] - q_start;
  const int ctx = min(a.context_lens[seq], a.max_ctx);
  // q_len * group <= 16 is a precondition (checked on the host); clamped so that a violation
  // in graph mode stays inside the tile (its extra rows are then not written).
  const int rows = min(q_len * a.group, kDecRows);
  if (rows <= 0) {  // no tokens: nothing of this sequence is read by the combine
    pdl::wait();
    return;
  }

  const int chunk = a.kv_chunk > 0 ? a.kv_chunk : fixed_chunk(ctx, a.num_splits, a.min_chunk);
  // With the in-kernel merge only the splits that hold positions take part: `active` of them
  // (every block of the (sequence, head) sees the same ctx, so the same count). The rest leave at
  // once (no partials, no tickets), and the last active split to finish merges. A graph launch
  // has a fixed split count for the longest context it may meet: at a short one most splits are
  // empty, and without this they would all write empty partials and queue for the ticket. A
  // context that lies wholly in split 0 needs no merge: split 0 writes the output as an unsplit
  // launch does (the counters stay zero).
  // In cluster-merge mode the empty splits stay for the two cluster barriers below (peers of the
  // merging CTA), unless no merge happens at all (`sole`: the same in every CTA of the cluster).
  const bool merged = (a.counters != nullptr || a.cluster_merge) && a.num_splits > 1;
  const int active = merged ? min(a.num_splits, max(1, (ctx + chunk - 1) / chunk)) : a.num_splits;
  const bool sole = merged && active == 1;
  if (merged && split >= active) {
    pdl::wait();
    if (a.cluster_merge && !sole) {
      sm90::cluster_sync();
      sm90::cluster_sync();
    }
    return;
  }
  const int kv_begin = split * chunk;
  // The last row's position is ctx - 1 (rows == q_len * group), so the causal limit is ctx.
  const int kv_end = min(ctx, kv_begin + chunk);
  const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kBN - 1) / kBN : 0;

  // Positions [stable_end, kv_end) are this step's new tokens (written by the kernel before).
  // part: 0 all rows; 1 the earlier rows (the new ones are skipped: no copy, no zero fill); 2 only
  // the new rows. Every shared row of a tile is written by exactly one copy.
  const int stable_end = ctx - q_len;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const KvTileLoader<HD, FP8> kv_tiles(a, ks, vs, tid);
  const int64_t head_off = kv_tiles.head_offset(kvh);
  auto load_kv = [&](int tile, int stage, int part) {
    kv_tiles.load(table, head_off, kv_begin + tile * kBN, kv_end, stage, [&](int pos) {
      const bool fresh = pos >= stable_end && pos < kv_end;
      return part == 1 ? fresh : part == 2 ? !fresh : false;
    });
  };
  // Prologue, before the wait: tiles 0 .. STAGES - 2 without the new rows, one group each (empty
  // groups past the end keep the group count uniform for cp.async.wait_group). After it: Q and
  // the new rows of those tiles in one more group; the first tile then waits for every group.
  if (!a.early_kv) pdl::wait();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) load_kv(s, s, 1);
    cp_async_commit();
  }
  if (a.early_kv) pdl::wait();
  // Q tile -> shared (rows past `rows` zero-filled).
  load_q_rows<HD>(qs, kDecRows, rows, a.q, a.ld_q, q_start, kvh, a.group);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s)
    if (s < n_tiles) load_kv(s, s, 2);
  cp_async_commit();
  // fill_ring: the last stage is free until tile 0 is consumed, so tile STAGES - 1 (all its rows:
  // after the wait) is loaded now, as the group tile 0's iteration would have committed; the
  // first wait then leaves it in flight. STAGES tiles in flight from the start instead of
  // STAGES - 1: a block of a short context (2-3 tiles at 128-192 positions) no longer waits one
  // round trip per tile, and the group sequence below is the same as without it.
  if (a.fill_ring) {
    if (STAGES - 1 < n_tiles) load_kv(STAGES - 1, STAGES - 1, 0);
    cp_async_commit();
  }

  // This thread's rows (g and g + 8 of the tile): their positions; -1 masks a row.
  int row_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    row_pos[h] = r < rows ? ctx - q_len + r / a.group : -1;
  }

  // Q fragments: in registers (bf16), or read from the shared Q tile each tile (fp8: converted
  // to f16 in place at tile 0; the 32 registers buy a fourth resident block).
  uint32_t qa[FP8 ? 1 : KSTEPS][4];
  float o[DTILES][4];
#pragma unroll
  for (int d = 0; d < DTILES; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int tile = 0; tile < n_tiles; ++tile) {
    // This thread's copies of tile `tile` have landed (at tile 0 the prologue's last group holds
    // Q and the new rows of every prologue tile: all groups).
    if (tile == 0) {
      if (a.fill_ring)
        cp_async_wait<1>();  // every group but tile STAGES - 1's
      else
        cp_async_wait<0>();
    } else {
      cp_async_wait<STAGES - 2>();
    }
    __syncthreads();  // everyone's have; everyone is done with tile - 1's stage
    if (stamps && tile == 0) stamps[1] = globaltimer_ns();
    if (tile > 0 || !a.fill_ring) {  // (fill_ring: tile STAGES - 1 is in flight already)
      const int next = tile + STAGES - 1;
      if (next < n_tiles) load_kv(next, next % STAGES, 0);
      cp_async_commit();
    }
    if constexpr (FP8) {
      if (tile == 0) {  // the Q tile to f16 in place (every thread's copies have landed)
        for (int c = tid; c < kDecRows * HD / 2; c += kThreads) {
          uint32_t* p = reinterpret_cast<uint32_t*>(qs + c / (HD / 2) * SROW) + c % (HD / 2);
          *p = bf16x2_to_f16x2(*p);
        }
        __syncthreads();
      }
    } else if (tile == 0) {
      const uint16_t* qw = qs + g * SROW + 2 * t4;
#pragma unroll
      for (int s = 0; s < KSTEPS; ++s) {
        qa[s][0] = lds32(qw + s * 16);
        qa[s][1] = lds32(qw + 8 * SROW + s * 16);
        qa[s][2] = lds32(qw + s * 16 + 8);
        qa[s][3] = lds32(qw + 8 * SROW + s * 16 + 8);
      }
    }
    // A warp whose 16 positions all lie past the range (the tail of the last tile) has nothing to
    // add: every score would be masked, which leaves m, l and O exactly as they are, so it skips
    // the tile's MMAs (warp-uniform; the barrier at the loop's top is outside the skip).
    const int kv0 = kv_begin + tile * kBN + warp * kDecWarpN;
    const bool live = !(a.skip_empty && kv0 >= kv_end);
    const int stage = tile % STAGES;
    decode_tile<HD, FP8>(ks, vs, ring8, stage, qs, qa, o, m, l, row_pos, kv0, kv_end, live,
                         a.scale_log2);
    if (stamps && a.trace_tile0 && tile == 0) stamps[2] = globaltimer_ns();
  }
  cp_async_wait<0>();  // the ring is reused below (only empty groups can still be pending)
  __syncthreads();     // every warp is done reading the ring
  if (stamps && !(a.trace_tile0 && n_tiles > 0)) stamps[2] = globaltimer_ns();

  // Merge the 4 warps' states: (M, L) per row, each warp's O scaled by 2^(m_w - M) into the
  // (drained) ring as fp32, then summed in warp order.
  merge_publish(m, l, red_m, red_l);
  __syncthreads();
  float* red = reinterpret_cast<float*>(ks);  // [kWarps][16][RROW] fp32
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    if (r >= rows) continue;  // padding rows: never read below
    const float M = merge_max(red_m, r);
    const float f = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - M);
    store_scaled_row<HD, FP8>(red + (warp * kDecRows + r) * RROW, o, h, f);
  }
  if (tid < kDecRows) {
    const float2 ML = merge_row_stats(red_m, red_l, tid);
    row_m[tid] = ML.x;
    row_l[tid] = ML.y;
  }
  __syncthreads();

  // Sum the warps in a fixed order, normalize, write: 2 consecutive elements per thread.
  for (int idx = tid; idx < rows * (HD / 2); idx += kThreads) {
    const int r = idx / (HD / 2), d = (idx % (HD / 2)) * 2;
    const float2 acc = sum_warps(red + r * RROW, kDecRows * RROW, d);
    const float L = row_l[r];
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    const int64_t token = q_start + r / a.group;
    const int head = kvh * a.group + r % a.group;
    if (a.num_splits == 1 || sole) {
      *reinterpret_cast<uint32_t*>(a.out + token * a.ld_out + int64_t(head) * HD + d) =
          pack_bf16(acc.x * inv, acc.y * inv);
    } else if (a.cluster_merge) {
      // The split's normalized row in place of warp 0's (this thread has read every warp's
      // elements d, d + 1 of row r; no other thread touches them), beside (row_m, row_l).
      *reinterpret_cast<float2*>(red + r * RROW + d) = make_float2(acc.x * inv, acc.y * inv);
    } else {
      const int64_t row_in_split = token * a.nh + head;
      if (row_in_split >= a.ws_rows) continue;  // q_len past max_q_len (fixed mode): not ours
      const int64_t ws_row = int64_t(split) * a.ws_rows + row_in_split;
      *reinterpret_cast<float2*>(a.ws_o + ws_row * HD + d) = make_float2(acc.x * inv, acc.y * inv);
      if (d == 0) *reinterpret_cast<float2*>(a.ws_ml + ws_row * 2) = make_float2(row_m[r], L);
    }
  }
  if (stamps) stamps[3] = globaltimer_ns();  // thread 0's outputs (and partials) written
  if (a.cluster_merge && !sole) {
    // Split 0 (cluster rank 0) merges the active splits' rows from their shared memory, in the
    // order and with the arithmetic of combine_splits_kernel; the second barrier keeps every peer
    // (and its shared memory) alive until split 0 has read it. The barriers are .aligned: each
    // warp reconverges first (after thread 0's stamp, and the merge loop's idle threads).
    __syncwarp();
    sm90::cluster_sync();
    if (split == 0) {
      const uint32_t o_base = sm90::smem_addr(red), m_base = sm90::smem_addr(row_m),
                     l_base = sm90::smem_addr(row_l);
      for (int idx = tid; idx < rows * (HD / 2); idx += kThreads) {
        const int r = idx / (HD / 2), d = (idx % (HD / 2)) * 2;
        float mx = -INFINITY;
        for (int sp = 0; sp < active; ++sp)
          mx = fmaxf(mx, sm90::ld_cluster_f32(sm90::map_cluster(m_base + 4 * r, sp)));
        float2 acc = make_float2(0.0f, 0.0f);
        float total = 0.0f;
        for (int sp = 0; sp < active; ++sp) {
          const float m_sp = sm90::ld_cluster_f32(sm90::map_cluster(m_base + 4 * r, sp));
          const float l_sp = sm90::ld_cluster_f32(sm90::map_cluster(l_base + 4 * r, sp));
          if (l_sp <= 0.0f) continue;  // a split this row saw nothing of
          const float w = l_sp * exp2f(m_sp - mx);
          total += w;
          const float2 v =
              sm90::ld_cluster_f32x2(sm90::map_cluster(o_base + 4 * (r * RROW + d), sp));
          acc.x += w * v.x;
          acc.y += w * v.y;
        }
        const float inv = total > 0.0f ? 1.0f / total : 0.0f;
        const int64_t token = q_start + r / a.group;
        const int head = kvh * a.group + r % a.group;
        *reinterpret_cast<uint32_t*>(a.out + token * a.ld_out + int64_t(head) * HD + d) =
            pack_bf16(acc.x * inv, acc.y * inv);
      }
    }
    __syncwarp();
    sm90::cluster_sync();
    return;
  }
  if (a.num_splits == 1 || a.counters == nullptr || sole) return;

  // In-kernel merge of the splits: the last active block of this (sequence, KV head) to finish
  // takes a ticket equal to active - 1 and merges the active splits' partial rows, exactly as
  // combine_splits_kernel does (same order, same arithmetic; the empty splits it also reads add
  // nothing there), so no combine kernel is launched.
  __shared__ int last_block;
  __threadfence();  // this block's partials are visible device-wide before its ticket
  __syncthreads();
  if (tid == 0) {
    int* ticket = a.counters + int64_t(seq) * a.nkv + kvh;
    last_block = atomicAdd(ticket, 1) == active - 1;
    if (last_block) *ticket = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  for (int idx = tid; idx < rows * (HD / 2); idx += kThreads) {
    const int r = idx / (HD / 2), d = (idx % (HD / 2)) * 2;
    const int64_t token = q_start + r / a.group;
    const int head = kvh * a.group + r % a.group;
    const int64_t row = token * a.nh + head;
    if (row >= a.ws_rows) continue;
    float mx = -INFINITY;
    for (int sp = 0; sp < active; ++sp)
      mx = fmaxf(mx, __ldcg(a.ws_ml + (sp * a.ws_rows + row) * 2));
    float2 acc = make_float2(0.0f, 0.0f);
    float total = 0.0f;
    for (int sp = 0; sp < active; ++sp) {
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(a.ws_ml + (sp * a.ws_rows + row) * 2));
      if (ml.y <= 0.0f) continue;  // a split this row saw nothing of
      const float w = ml.y * exp2f(ml.x - mx);
      total += w;
      const float2 v = __ldcg(reinterpret_cast<const float2*>(a.ws_o + (sp * a.ws_rows + row) * HD + d));
      acc.x += w * v.x;
      acc.y += w * v.y;
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    *reinterpret_cast<uint32_t*>(a.out + token * a.ld_out + int64_t(head) * HD + d) =
        pack_bf16(acc.x * inv, acc.y * inv);
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    combine_splits_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                          int64_t ws_rows, int num_splits, int nh,
                          const int32_t* __restrict__ cu_seqlens_q, int num_seqs,
                          uint16_t* __restrict__ out, int64_t ld_out) {
  constexpr int PER_LANE = HD / 32;
  pdl::begin();  // launched with PDL: the partials come from the attention kernel
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // The rows of this call's tokens (fewer than the plan's capacity in fixed-split mode; from
  // cu_seqlens_q[0], which is not 0 when the call covers the later sequences of a batch).
  const int64_t rows = min(ws_rows, int64_t(cu_seqlens_q[num_seqs]) * nh);
  if (row >= rows || row < int64_t(cu_seqlens_q[0]) * nh) return;
  float mx = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, ws_ml[(s * ws_rows + row) * 2]);
  float acc[PER_LANE] = {};
  float total = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float2 ml = *reinterpret_cast<const float2*>(ws_ml + (s * ws_rows + row) * 2);
    if (ml.y <= 0.0f) continue;  // a split this row saw nothing of
    const float w = ml.y * exp2f(ml.x - mx);
    total += w;
    const float* src = ws_o + (s * ws_rows + row) * HD;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] += w * src[lane + 32 * i];
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int64_t token = row / nh, head = row % nh;
  uint16_t* dst = out + token * ld_out + head * HD;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i)
    dst[lane + 32 * i] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[i] * inv));
}

std::string int_text(int64_t v) { return std::to_string(v); }

template <int HD, int MT, bool FP8 = false>
void set_general_smem() {
  RIDGE_CHECK_CUDA(cudaFuncSetAttribute(paged_attention_kernel<HD, MT, FP8>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(smem_bytes<HD, MT, FP8>())));
}

template <int HD, bool FP8 = false>
void launch_general_kv(const KernelArgs& k, int block_rows, const dim3& grid, cudaStream_t stream) {
  if (block_rows == 2 * kBM) {
    paged_attention_kernel<HD, 2, FP8><<<grid, kThreads, smem_bytes<HD, 2, FP8>(), stream>>>(k);
  } else {
    paged_attention_kernel<HD, 1, FP8><<<grid, kThreads, smem_bytes<HD, 1, FP8>(), stream>>>(k);
  }
  RIDGE_CHECK_LAUNCH("paged_attention_kernel");
}

template <int HD>
void launch_general(const KernelArgs& k, bool fp8, int block_rows, const dim3& grid,
                    cudaStream_t stream) {
  if (fp8)
    launch_general_kv<HD, true>(k, block_rows, grid, stream);
  else
    launch_general_kv<HD, false>(k, block_rows, grid, stream);
}

// Rows per block of the general kernel, unless forced: 128 (two row tiles per warp) once a
// sequence has more rows than one 64-row block and, when the plan knows its block target (planned
// mode; 0 otherwise), the 128-row blocks reach half of it: a 128-row block does the work of two
// 64-row ones, and with fewer of them 64-row blocks spread the rows over more SMs before any KV
// split (which costs a combine pass over fp32 partials).
int general_rows_for(int forced, int64_t max_rows, int64_t wide_blocks = 0,
                     int64_t target_blocks = 0) {
  if (forced == kBM || forced == 2 * kBM) return forced;
  if (max_rows <= kBM) return kBM;
  return target_blocks > 0 && wide_blocks * 2 < target_blocks ? kBM : 2 * kBM;
}

template <int HD, int STAGES, bool FP8 = false>
void set_decode_smem() {
  RIDGE_CHECK_CUDA(cudaFuncSetAttribute(paged_decode_kernel<HD, STAGES, FP8>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(decode_smem_bytes<HD, STAGES, FP8>())));
}

template <int HD, int STAGES, bool FP8 = false>
void launch_decode(const KernelArgs& k, int nkv, int splits, int seqs, cudaStream_t stream) {
  const dim3 grid{unsigned(nkv), unsigned(splits), unsigned(seqs)};
  // RIDGE_ATTN_TRACE=1 (diagnostic): launches outside stream capture stamp their blocks' phases
  // and print a summary (trace/block_trace.h): whether the SMs run out of streaming blocks between
  // waves (run 21's fixed ~2-3 ms a 512-sequence step).
  static const bool tracing = detail::block_trace_requested("RIDGE_ATTN_TRACE");
  // With RIDGE_ATTN_TRACE, RIDGE_ATTN_TWICE=1 launches a traced kernel a second time once the
  // first's summary is printed (the same inputs, the same output; never in a graph capture, where
  // nothing is traced), so that the phases of a launch on SMs that have just run it can be set
  // against the first's, which follows other kernels (diagnostic: does the batch-1 block's time
  // go to a cold start?).
  static const bool twice = tracing && detail::block_trace_requested("RIDGE_ATTN_TWICE");
  // RIDGE_ATTN_TRACE_TILE0=1: the "tiles" phase ends when tile 0 is done (thread 0's warp).
  static const bool tile0 = tracing && detail::block_trace_requested("RIDGE_ATTN_TRACE_TILE0");
  const int blocks = nkv * splits * seqs;
  for (int launch = 0; launch < (twice ? 2 : 1); ++launch) {
    KernelArgs traced = k;
    traced.trace =
        tracing ? detail::block_trace("RIDGE_ATTN_TRACE", blocks, stream, detail::kPhaseEntries)
                : nullptr;
    traced.trace_tile0 = tile0;
    RIDGE_CHECK_CUDA(pdl::launch(true, dim3(1, k.cluster_merge ? unsigned(splits) : 1u, 1),
                                 paged_decode_kernel<HD, STAGES, FP8>, grid, dim3(kThreads),
                                 decode_smem_bytes<HD, STAGES, FP8>(), stream, traced));
    if (traced.trace) {
      static const char* const phases[3] = {"start", "tiles", "finish"};
      static const char* const names[2][2] = {
          {"decode attention", "decode attention (again)"},
          {"decode attention (fp8 KV)", "decode attention (fp8 KV, again)"}};
      detail::print_block_phases(names[FP8][launch], traced.trace, blocks, phases, stream);
    } else {
      break;  // capturing: one launch
    }
  }
}

// fp8 KV: rows of half the bytes and no Q fragments in registers, so more resident blocks: at
// head dim 128, 2 stages (42 KB, 4 blocks per SM) where every context is short, else 3 (60 KB,
// 3 per SM); at 64, 4 (43 KB, 4 per SM). Run 10 measured 5 stages (2 blocks per SM) slower than
// 3 (3 per SM) at every shape: resident blocks, not ring depth, hide the fp8 kernel's latency.
// Three instantiations, not six.
template <int HD>
void launch_decode_stages(const KernelArgs& k, int stages, bool fp8, int nkv, int splits, int seqs,
                          cudaStream_t stream) {
  if (fp8) {
    if constexpr (HD == 64)
      launch_decode<64, 4, true>(k, nkv, splits, seqs, stream);
    else if (stages <= 2)
      launch_decode<HD, 2, true>(k, nkv, splits, seqs, stream);
    else
      launch_decode<HD, 3, true>(k, nkv, splits, seqs, stream);
    return;
  }
  switch (stages) {
    case 2: launch_decode<HD, 2>(k, nkv, splits, seqs, stream); break;
    case 3: launch_decode<HD, 3>(k, nkv, splits, seqs, stream); break;
    default: launch_decode<HD, 4>(k, nkv, splits, seqs, stream); break;
  }
}

// The ring depth: at head dim 128, 2 stages (74 KB, 3 blocks per SM) where every sequence's
// context is short (blocks of a few tiles: more of them resident hide each one's start), else
// 3 (109 KB, 2 per SM: deeper prefetch for long ranges). Measured on the H200 (docs/KERNELS.md,
// "Run 8"): decode bs512 at 128-256 context 26.9 -> 23.9 ms a step, bs64 6.49 -> 6.19 ms.
// A decode launch's split count where its splits can merge in a cluster: `splits` (enough
// blocks for the target, rounded up) comes down to what fits one wave (the target over the
// blocks, rounded down) and to kClusterSplits, when it is within 2 of a cluster's (batch 1 at 32
// KV heads: 9 for a target of 264 becomes 8). One tile a split makes rounding up costly: at 4
// sequences, 3 one-tile splits are 384 blocks for 264 resident, a second wave for a 3-tile
// context that one wave of unsplit blocks finishes. Larger counts are left to the global merge.
int64_t cluster_split_count(int64_t splits, int64_t blocks, int64_t target) {
  if (splits <= 1 || splits > kClusterSplits + 2 || blocks <= 0) return splits;
  return std::min<int64_t>({splits, kClusterSplits, std::max<int64_t>(1, target / blocks)});
}

// The least positions a split covers: the cluster merge's floor, or the one that prices the
// merge through memory.
int min_split_positions(const PagedAttentionArgs& a, bool cluster) {
  return std::max(cluster ? a.cluster_min_split_positions : a.min_split_positions, 0);
}

// One plan's launches at head dim HD: the decode or the general kernel, and the combine of its
// splits where no kernel merges them.
template <int HD>
void launch_attention(const KernelArgs& k, const PagedAttentionArgs& a, const PagedAttentionPlan& p,
                      bool separate_combine, cudaStream_t stream) {
  if (p.decode) {
    launch_decode_stages<HD>(k, p.decode_stages, a.kv_fp8, a.num_kv_heads, p.num_splits, a.num_seqs,
                             stream);
  } else {
    const dim3 grid(unsigned(p.max_q_tiles), unsigned(a.num_kv_heads),
                    unsigned(a.num_seqs * p.num_splits));
    launch_general<HD>(k, a.kv_fp8, p.block_rows, grid, stream);
  }
  if (!separate_combine) return;
  const unsigned blocks = unsigned((k.ws_rows + kThreads / 32 - 1) / (kThreads / 32));
  RIDGE_CHECK_CUDA(pdl::launch_pdl(combine_splits_kernel<HD>, dim3(blocks), dim3(kThreads), 0,
                                   stream, k.ws_o, k.ws_ml, k.ws_rows, p.num_splits, k.nh,
                                   a.cu_seqlens_q, a.num_seqs, a.out, a.ld_out));
}

int default_decode_stages(int head_dim, int max_context) {
  if (head_dim != 128) return 4;
  return max_context <= 1024 ? 2 : 3;
}

}  // namespace

void init_paged_attention() {
  set_general_smem<64, 1>();
  set_general_smem<64, 2>();
  set_general_smem<128, 1>();
  set_general_smem<128, 2>();
  set_general_smem<64, 1, true>();
  set_general_smem<64, 2, true>();
  set_general_smem<128, 1, true>();
  set_general_smem<128, 2, true>();
  set_decode_smem<64, 2>();
  set_decode_smem<64, 3>();
  set_decode_smem<64, 4>();
  set_decode_smem<128, 2>();
  set_decode_smem<128, 3>();
  set_decode_smem<128, 4>();
  set_decode_smem<64, 4, true>();
  set_decode_smem<128, 2, true>();
  set_decode_smem<128, 3, true>();
}

bool decode_block_size_ok(int block_size) {
  return block_size >= kDecMinBlock && (block_size & (block_size - 1)) == 0;
}

size_t paged_attention_split_bytes(int64_t num_tokens, int num_q_heads, int head_dim) {
  return size_t(std::max<int64_t>(num_tokens, 0)) * size_t(std::max(num_q_heads, 0)) *
         size_t(std::max(head_dim, 0) + 2) * sizeof(float);
}

int graph_attention_splits(int num_seqs, int max_q_len, int num_kv_heads, int group, int head_dim,
                           int max_context, int sm_count, size_t workspace_bytes,
                           int blocks_per_sm) {
  if (num_seqs <= 0 || num_kv_heads <= 0 || group <= 0 || max_q_len <= 0) return 1;
  const int64_t rows = int64_t(max_q_len) * group;
  const int bm = general_rows_for(0, rows);
  const int64_t q_tiles = rows <= kDecRows ? 1 : (rows + bm - 1) / bm;
  const int64_t blocks = int64_t(num_seqs) * num_kv_heads * q_tiles;
  const int64_t target = int64_t(std::max(blocks_per_sm, 1)) * std::max(sm_count, 1);
  if (blocks >= target) return 1;
  int64_t splits = (target + blocks - 1) / blocks;
  splits = std::min<int64_t>({splits, std::max(1, (max_context + kBN - 1) / kBN), kMaxSplits,
                              65535 / num_seqs});
  const size_t per_split = paged_attention_split_bytes(int64_t(num_seqs) * max_q_len,
                                                       num_kv_heads * group, head_dim);
  if (splits > 1 && per_split > 0)
    splits = std::min<int64_t>(splits, int64_t(workspace_bytes / per_split));
  if (rows <= kDecRows) splits = cluster_split_count(splits, blocks, target);
  return int(std::max<int64_t>(splits, 1));
}

PagedAttentionPlan plan_paged_attention(const PagedAttentionArgs& a, int target_blocks,
                                        size_t workspace_capacity) {
  const char* kName = "paged_attention_bf16";
  const bool fixed = a.fixed_splits > 0;
  RIDGE_KERNEL_EXPECT(a.head_dim == 64 || a.head_dim == 128, kName,
                      "head_dim must be 64 or 128, got " + int_text(a.head_dim));
  RIDGE_KERNEL_EXPECT(a.num_kv_heads >= 1 && a.num_q_heads % a.num_kv_heads == 0 &&
                          a.num_q_heads / a.num_kv_heads <= kBM,
                      kName,
                      "query heads " + int_text(a.num_q_heads) + " / KV heads " +
                          int_text(a.num_kv_heads) + " must be a whole group of at most 64");
  RIDGE_KERNEL_EXPECT(a.block_size >= 1 && a.num_seqs >= 0 && a.num_seqs < 65536 &&
                          a.max_blocks_per_seq >= 0 && a.num_blocks >= 0,
                      kName,
                      "block size " + int_text(a.block_size) + ", " + int_text(a.num_seqs) +
                          " sequences, " + int_text(a.max_blocks_per_seq) +
                          " blocks per sequence");
  RIDGE_KERNEL_EXPECT(fixed || (a.host_cu_seqlens_q && a.host_context_lens), kName,
                      "host mirrors of cu_seqlens_q and context_lens needed to plan the split "
                      "(or a fixed split count)");
  RIDGE_KERNEL_EXPECT(a.fixed_splits >= 0 && a.fixed_splits <= kMaxSplits &&
                          (!fixed || (a.max_q_len >= 1 &&
                                      int64_t(a.num_seqs) * a.fixed_splits <= 65535)),
                      kName,
                      "fixed_splits " + int_text(a.fixed_splits) + " (at most " +
                          int_text(kMaxSplits) + ", times " + int_text(a.num_seqs) +
                          " sequences at most 65535) needs max_q_len >= 1, got " +
                          int_text(a.max_q_len));
  RIDGE_KERNEL_EXPECT(a.ld_q % 8 == 0 && reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
                          a.ld_out % 2 == 0 && reinterpret_cast<uintptr_t>(a.out) % 4 == 0 &&
                          reinterpret_cast<uintptr_t>(a.k_pool) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(a.v_pool) % 16 == 0,
                      kName,
                      "q rows must be 16-byte aligned (row stride " + int_text(a.ld_q) +
                          "), out rows 4-byte aligned (row stride " + int_text(a.ld_out) +
                          "), pools 16-byte aligned");
  RIDGE_KERNEL_EXPECT(a.decode_stages == 0 || (a.decode_stages >= 2 && a.decode_stages <= 4),
                      kName, "decode_stages must be 0 (default) or 2..4");
  RIDGE_KERNEL_EXPECT(a.general_block_rows == 0 || a.general_block_rows == kBM ||
                          a.general_block_rows == 2 * kBM,
                      kName,
                      "general_block_rows must be 0 (automatic), 64 or 128, got " +
                          int_text(a.general_block_rows));
  RIDGE_KERNEL_EXPECT(a.scale > 0.0f && a.scale < INFINITY, kName,
                      "the softmax scale must be positive and finite, got " +
                          std::to_string(a.scale));
  const int group = a.num_q_heads / a.num_kv_heads;

  // Host mirrors: validation (always when given), and the plan's inputs (planned mode).
  const bool have_host = a.host_cu_seqlens_q && a.host_context_lens;
  int64_t general_blocks[2] = {0, 0}, decode_blocks = 0;  // [0]: 64-row blocks, [1]: 128
  int general_q_tiles[2] = {0, 0}, max_rows = 0, max_ctx = 0;
  int64_t host_tokens = 0;
  if (have_host) {
    for (int s = 0; s < a.num_seqs; ++s) {
      const int q_len = a.host_cu_seqlens_q[s + 1] - a.host_cu_seqlens_q[s];
      const int ctx = a.host_context_lens[s];
      RIDGE_KERNEL_EXPECT(q_len >= 0 && q_len <= ctx && a.host_cu_seqlens_q[s] >= 0, kName,
                          "sequence " + int_text(s) + " has " + int_text(q_len) +
                              " new tokens but context " + int_text(ctx));
      RIDGE_KERNEL_EXPECT((int64_t(ctx) + a.block_size - 1) / a.block_size <= a.max_blocks_per_seq,
                          kName,
                          "sequence " + int_text(s) + " context " + int_text(ctx) +
                              " needs more than " + int_text(a.max_blocks_per_seq) + " blocks");
      RIDGE_KERNEL_EXPECT(!fixed || q_len <= a.max_q_len, kName,
                          "sequence " + int_text(s) + " has " + int_text(q_len) +
                              " new tokens, more than max_q_len " + int_text(a.max_q_len));
      const int rows = q_len * group;
      for (int w = 0; w < 2; ++w) {
        const int tiles = (rows + kBM * (w + 1) - 1) / (kBM * (w + 1));
        general_q_tiles[w] = std::max(general_q_tiles[w], tiles);
        general_blocks[w] += int64_t(tiles) * a.num_kv_heads;
      }
      if (rows > 0) decode_blocks += a.num_kv_heads;
      max_rows = std::max(max_rows, rows);
      max_ctx = std::max(max_ctx, ctx);
    }
    host_tokens = a.num_seqs ? a.host_cu_seqlens_q[a.num_seqs] : 0;
  }

  PagedAttentionPlan p;
  // The kernel: decode when all rows of a sequence fit one 16-row tile.
  const int64_t rows_bound = fixed ? int64_t(a.max_q_len) * group : max_rows;
  const bool decode_fits = rows_bound <= kDecRows && decode_block_size_ok(a.block_size);
  RIDGE_KERNEL_EXPECT(a.path != AttentionPath::decode || decode_fits, kName,
                      "the decode kernel takes at most 16 rows (q_len * group) per sequence and "
                      "a power-of-two block size of at least 8, got " +
                          int_text(rows_bound) + " rows, block size " + int_text(a.block_size));
  p.decode = a.path == AttentionPath::decode || (a.path == AttentionPath::automatic && decode_fits);
  p.decode_rows = int(std::min<int64_t>(std::max<int64_t>(rows_bound, 1), kDecRows));
  // The longest context the launch can see: the block tables' capacity in fixed-split (graph)
  // mode or without host mirrors, else the longest sequence's.
  const int64_t ctx_bound =
      fixed || !have_host ? int64_t(a.max_blocks_per_seq) * a.block_size : int64_t(max_ctx);
  p.decode_stages = a.decode_stages ? a.decode_stages
                                    : default_decode_stages(a.head_dim, int(std::min<int64_t>(
                                                                            ctx_bound, 1 << 30)));
  if (a.kv_fp8)  // the rings the fp8 forms come in (launch_decode_stages)
    p.decode_stages = a.head_dim == 64 ? 4 : p.decode_stages <= 2 ? 2 : 3;
  // fp8 KV at hd 128 with the default ring: a launch of unsplit (sequence, head) blocks that fill
  // the block target takes the 2-stage ring at any context (H200, run 19 c7: batch 16 at 4,096
  // positions 142 us a layer against 184 with 3 stages; split launches, e.g. batch 1 at 4,096 or
  // 32,768 positions, stay faster with 3: 19.1 against 20.7 us, 99.9 against 124.4).
  auto fp8_ring = [&](int64_t unsplit_blocks) {
    if (a.kv_fp8 && a.head_dim == 128 && a.decode_stages == 0 && p.decode && p.num_splits == 1 &&
        unsplit_blocks >= target_blocks)
      p.decode_stages = 2;
  };
  p.block_rows = p.decode ? kDecRows
                           : general_rows_for(a.general_block_rows, rows_bound, general_blocks[1],
                                              fixed ? 0 : target_blocks);
  const int wide = p.block_rows == 2 * kBM ? 1 : 0;

  if (fixed) {
    p.num_tokens = int64_t(a.num_seqs) * a.max_q_len;
    p.max_q_tiles = a.num_seqs == 0 ? 0
                    : p.decode      ? 1
                                    : int((rows_bound + p.block_rows - 1) / p.block_rows);
    p.num_splits = a.fixed_splits;
    p.kv_chunk = 0;
    p.cluster_merge =
        a.cluster_merge && p.decode && p.num_splits > 1 && p.num_splits <= kClusterSplits;
    const size_t per_split = paged_attention_split_bytes(p.num_tokens, a.num_q_heads, a.head_dim);
    p.workspace_bytes = p.num_splits > 1 ? per_split * size_t(p.num_splits) : 0;
    RIDGE_KERNEL_EXPECT(p.workspace_bytes <= workspace_capacity, kName,
                        int_text(p.num_splits) + " fixed splits need " +
                            int_text(int64_t(p.workspace_bytes)) + " bytes of workspace, " +
                            int_text(int64_t(workspace_capacity)) +
                            " available (see graph_attention_splits)");
    fp8_ring(int64_t(a.num_seqs) * a.num_kv_heads);
    return p;
  }

  p.num_tokens = host_tokens;
  p.max_q_tiles = p.decode ? (decode_blocks > 0 ? 1 : 0) : general_q_tiles[wide];
  const int64_t blocks = p.decode ? decode_blocks : general_blocks[wide];
  const int max_tiles = std::max(1, (max_ctx + kBN - 1) / kBN);
  int splits = 1;
  const int64_t target = wide ? (int64_t(target_blocks) + 1) / 2 : target_blocks;
  if (blocks > 0 && blocks < target)
    splits = int(std::min<int64_t>({(target + blocks - 1) / blocks, max_tiles, kMaxSplits,
                                    65535 / std::max(1, a.num_seqs)}));
  const size_t per_split = paged_attention_split_bytes(p.num_tokens, a.num_q_heads, a.head_dim);
  if (per_split > 0) splits = int(std::min<size_t>(size_t(splits), workspace_capacity / per_split));
  splits = std::max(splits, 1);
  if (a.cluster_merge && p.decode) splits = int(cluster_split_count(splits, blocks, target));
  const bool cluster = a.cluster_merge && p.decode && splits <= kClusterSplits;
  const int min_tiles = (min_split_positions(a, cluster) + kBN - 1) / kBN;
  if (min_tiles > 1) splits = std::max(1, std::min(splits, max_tiles / min_tiles));
  p.kv_chunk = ((max_tiles + splits - 1) / splits) * kBN;
  p.num_splits = (std::max(max_ctx, 1) + p.kv_chunk - 1) / p.kv_chunk;
  p.cluster_merge = cluster && p.num_splits > 1;
  p.workspace_bytes = p.num_splits > 1 ? per_split * p.num_splits : 0;
  fp8_ring(decode_blocks);
  return p;
}

void paged_attention_bf16(const PagedAttentionArgs& a, const PagedAttentionPlan& p,
                          void* workspace, cudaStream_t stream) {
  if (p.max_q_tiles == 0 || p.num_tokens == 0 || a.num_seqs == 0) return;
  RIDGE_KERNEL_EXPECT(p.num_splits == 1 || workspace, "paged_attention_bf16",
                      "a split plan needs a workspace");
  KernelArgs k{};
  k.q = a.q;
  k.ld_q = a.ld_q;
  k.out = a.out;
  k.ld_out = a.ld_out;
  k.k_pool = a.k_pool;
  k.v_pool = a.v_pool;
  k.num_blocks = a.num_blocks;
  k.num_blocks_i = int(std::min<int64_t>(a.num_blocks, INT_MAX));
  k.cu_seqlens_q = a.cu_seqlens_q;
  k.context_lens = a.context_lens;
  k.block_tables = a.block_tables;
  k.max_blocks_per_seq = a.max_blocks_per_seq;
  k.max_ctx = int(std::min<int64_t>(int64_t(a.max_blocks_per_seq) * a.block_size, INT_MAX));
  k.block_size = a.block_size;
  k.bs_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if (a.block_size == (1 << sh)) k.bs_shift = sh;
  k.nkv = a.num_kv_heads;
  k.nh = a.num_q_heads;
  k.group = a.num_q_heads / a.num_kv_heads;
  k.num_splits = p.num_splits;
  k.kv_chunk = p.kv_chunk;
  k.min_chunk = (min_split_positions(a, p.cluster_merge) + kBN - 1) / kBN * kBN;
  k.ws_rows = p.num_tokens * a.num_q_heads;
  k.ws_o = p.num_splits > 1 ? static_cast<float*>(workspace) : nullptr;
  k.ws_ml = k.ws_o ? k.ws_o + size_t(p.num_splits) * k.ws_rows * a.head_dim : nullptr;
  k.scale_log2 = a.scale * kLog2e;
  k.early_kv = a.early_kv;
  k.fill_ring = a.decode_fill_ring;
  k.skip_empty = a.decode_skip_empty;
  k.cluster_merge = p.cluster_merge;
  k.counters = p.decode && p.num_splits > 1 && !p.cluster_merge && a.split_counters &&
                       a.split_counters_len >= int64_t(a.num_seqs) * a.num_kv_heads
                   ? a.split_counters
                   : nullptr;
  const bool separate_combine = p.num_splits > 1 && k.counters == nullptr && !p.cluster_merge;
  if (a.head_dim == 64)
    launch_attention<64>(k, a, p, separate_combine, stream);
  else
    launch_attention<128>(k, a, p, separate_combine, stream);
}

}  // namespace ridge::kernels
