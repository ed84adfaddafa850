// Paged attention over bf16 KV pools for a mixed batch of prefill chunks and decode tokens
// (varlen, GQA, causal). Two kernels, one contract:
//   - the general kernel: FlashAttention-2 style 64- or 128-row tiles of (token, query head) rows
//     (16 or 32 rows per warp) with an online softmax in registers (mma.sync m16n8k16 bf16 ->
//     fp32); any q_len;
//   - the decode kernel: one 16-row tile per (sequence, KV head, split) holding the sequence's
//     q_len * group rows, the 4 warps of a block each taking their own 16 of every 64 KV
//     positions, K/V streamed through a 2-4 stage cp.async ring (32 KB per stage at hd 128), the
//     warps' softmax states merged in shared memory. Used when every sequence has
//     q_len * group <= 16 (decode, small GQA groups, short speculative chunks) and the block
//     size is a power of two of at least 8 (a thread's rows of a tile then share a page).
// Both split the KV range across thread blocks (flash decoding) when the batch alone would not
// fill the GPU; a combine kernel merges the splits. The split is either planned on the host from
// the host mirrors (fixed_splits == 0) or fixed (fixed_splits > 0: each block derives its
// sequence's chunk from context_lens on the device, so that a captured CUDA graph replays the
// launch for any context lengths). See docs/KERNELS.md, section "CUDA backend kernels".
//
// Layouts (all device memory):
//   q            bf16 [T, nh * hd], row stride ld_q (a multiple of 8; 16-byte aligned rows)
//   out          bf16 [T, nh * hd], row stride ld_out (even)
//   k/v pools    bf16 [num_blocks, block_size, nkv, hd] (NHD, contiguous)
//   cu_seqlens_q i32 [S + 1]; context_lens i32 [S]; block_tables i32 [S, max_blocks_per_seq]
//   Sequence s owns rows [cu[s], cu[s+1]) of q; its new token i sits at position
//   context_len - q_len + i and sees KV positions 0 ..= that position.
// Limits: hd 64 or 128; nh % nkv == 0 and nh / nkv <= 64; any block_size >= 1; q_len <=
// context_len <= max_blocks_per_seq * block_size (checked on the host from the host mirrors when
// given; in fixed-split mode the device data must also keep q_len <= max_q_len).
// Device-side guards (graph mode, where nothing is checked on the host): a context longer than
// max_blocks_per_seq * block_size is cut there, a block-table entry outside [0, num_blocks) reads
// zeros, and workspace rows past num_seqs * max_q_len are not written.
// Padding sequences (filling a graph's batch bucket): context_len 1, q_len 1, a block table of
// zeros: they read slot 0 of block 0 and write their own output rows, nothing else.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace ridge::kernels {

// Which kernel runs a call. automatic: the decode kernel when every sequence has
// q_len * group <= 16 (in fixed-split mode: max_q_len * group <= 16) and the block size is a
// power of two >= 8, else the general one. general / decode force one (tests and benchmarks;
// decode throws where rows exceed 16 or the block size does not fit).
enum class AttentionPath : int { automatic = 0, general = 1, decode = 2 };

struct PagedAttentionArgs {
  const uint16_t* q = nullptr;
  int64_t ld_q = 0;
  uint16_t* out = nullptr;
  int64_t ld_out = 0;
  const uint16_t* k_pool = nullptr;
  const uint16_t* v_pool = nullptr;
  // The pools hold E4M3 bytes ([num_blocks, block_size, nkv, hd] of uint8, k_pool / v_pool cast)
  // instead of bf16: both kernels convert E4M3 to f16 exactly and run f16 MMAs (Q, clamped to
  // +-65504, and P rounded to f16). The decode kernel's rings (the plan's decode_stages): 2 or 3
  // at head dim 128 (a forced 4 is 3), 4 at 64.
  bool kv_fp8 = false;
  int64_t num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int num_q_heads = 0;
  int head_dim = 0;
  const int32_t* cu_seqlens_q = nullptr;  // device
  const int32_t* context_lens = nullptr;  // device
  const int32_t* block_tables = nullptr;  // device
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  float scale = 1.0f;
  // From the host mirrors (planning and validation only; never read by the kernels). Required
  // when fixed_splits == 0; optional (validated when given) when fixed_splits > 0.
  const int32_t* host_cu_seqlens_q = nullptr;
  const int32_t* host_context_lens = nullptr;
  // Graph mode. fixed_splits > 0: exactly that many KV splits (<= 256), each block computing its
  // sequence's chunk on the device as ceil(ceil(context_len / 64) / fixed_splits) * 64 positions;
  // the grid, kernel choice and workspace then depend only on num_seqs, max_q_len and the shapes,
  // never on the host mirrors. 0: the split is planned from the host mirrors (as before).
  int fixed_splits = 0;
  // Upper bound on every sequence's q_len; required (>= 1) when fixed_splits > 0 (decode: 1).
  int max_q_len = 0;
  // Tests and benchmarks: force a kernel, and the decode kernel's cp.async ring depth (2, 3 or 4;
  // 0: the default, 3 at hd 128 and 4 at hd 64).
  AttentionPath path = AttentionPath::automatic;
  int decode_stages = 0;
  // The general kernel's rows per block: 64 (one 16-row MMA tile per warp) or 128 (two, as
  // FlashAttention-2); 0: automatic, 128 when some sequence has more than 64 rows (q_len * group)
  // and, in planned mode, the 128-row blocks reach half of the plan's block target.
  int general_block_rows = 0;
  // The decode kernel loads the first ring stages of the positions before each sequence's new
  // tokens before its programmatic-dependent-launch wait (they were written by earlier steps;
  // the step's metadata by a copy before its first kernel). false: everything after the wait.
  bool early_kv = true;
  // The decode kernel's prologue fills every stage of its ring (STAGES tiles in flight from its
  // start, the last of them loaded after the wait) instead of STAGES - 1 (false; the last stage
  // is then loaded in tile 0's iteration). H100, run 34: fp8 KV at 512 x 130 positions 2.2 %
  // faster, one sequence of 1,024 positions 5 %, bandwidth-bound shapes unchanged.
  bool decode_fill_ring = true;
  // The decode kernel's warps skip a tile's MMAs when all 16 of their positions lie past the
  // range (the tail of a context's last tile): the same bits out (AttentionKernelSkipEmptyIsExact).
  // false: they compute the masked scores as before. H100, run 34: fp8 KV at 512 x 130 positions
  // 3 % faster alone, the 512-sequence fp8 step 1.2 %; bf16 level.
  bool decode_skip_empty = true;
  // Fixed-split mode (graph replays, whose split count is set for the bucket's longest context):
  // each split covers at least this many positions (rounded up to whole 64-position tiles), so a
  // short context takes fewer blocks' worth of splits and the rest are empty. 0: an even share.
  int min_split_positions = 0;
  // Zero-initialized device ints (at least num_seqs * num_kv_heads of them), left zero by every
  // call: with them, a split decode-kernel launch merges its splits itself (the last block of
  // each (sequence, KV head) to finish, by an atomic ticket) and no combine kernel runs. Null, or
  // too few: the separate combine kernel (always for the general kernel).
  int* split_counters = nullptr;
  int64_t split_counters_len = 0;
  // A decode-kernel launch of 2 to kClusterSplits splits runs as thread-block clusters of its
  // splits, which merge through distributed shared memory: no partials in the workspace, no
  // ticket, no combine (the split counters are then unused). Its splits are then at least
  // cluster_min_split_positions long (fixed-split mode; planned: the split count's floor), instead
  // of min_split_positions, which prices the global merge. false: the global merge as before.
  // Off: on an H100 (run 43) it was level at batch 1 and 128 positions (-9 us a 4.8 ms step) and
  // 2.6 % slower at 1,024 (8 one- to two-tile splits in clusters against 4 merged through memory);
  // the kernel tests take it on explicitly.
  bool cluster_merge = false;
  int cluster_min_split_positions = 64;
};

// The most splits a cluster-merged decode launch takes (the portable cluster size).
inline constexpr int kClusterSplits = 8;

// The plan of one call: which kernel, how many KV splits, and how much workspace they take.
struct PagedAttentionPlan {
  int num_splits = 1;
  int kv_chunk = 0;            // KV positions per split (a multiple of 64); 0: per sequence on
                               // the device (fixed-split mode)
  int max_q_tiles = 0;         // grid.x of the general kernel (1 for the decode kernel)
  int64_t num_tokens = 0;      // q rows the workspace covers: cu_seqlens_q[S] (planned) or
                               // num_seqs * max_q_len (fixed)
  size_t workspace_bytes = 0;  // 0 when num_splits == 1
  bool decode = false;         // the decode kernel runs (else the general one)
  int block_rows = 64;         // rows per block: 16 (decode kernel), 64 or 128 (general)
  int decode_stages = 0;       // its cp.async ring depth
  int decode_rows = 16;        // decode kernels: rows (q_len * group) of a sequence at most
  bool cluster_merge = false;  // the decode kernel's splits merge in clusters (no workspace use)
};

// Raises the kernels' dynamic shared-memory limit; call once per device before the first launch.
void init_paged_attention();

// Validates the arguments (from the host mirrors where given) and chooses the kernel and the
// split: enough blocks for `target_blocks` (e.g. 4 x SMs), within `workspace_capacity` bytes. In
// fixed-split mode the split is args.fixed_splits and a workspace over capacity throws.
PagedAttentionPlan plan_paged_attention(const PagedAttentionArgs& args, int target_blocks,
                                        size_t workspace_capacity);

// Runs the plan on `stream`. `workspace` holds plan.workspace_bytes (fp32 partial outputs and
// their softmax statistics); unused when num_splits == 1. Graph-capturable: no allocation, no
// synchronization, no host reads; in fixed-split mode replays are valid for any device
// cu_seqlens_q / context_lens / block_tables within the limits above.
void paged_attention_bf16(const PagedAttentionArgs& args, const PagedAttentionPlan& plan,
                          void* workspace, cudaStream_t stream);

// The block target of the KV split, per SM: one wave of the decode kernel at hd 128 (2 resident
// blocks an SM). Run 19 measured it against two waves (4) on the H200: docs/KERNELS.md "Run 19".
inline constexpr int kAttentionBlocksPerSm = 2;

// The fixed split count for a captured decode graph (one per batch-size bucket): enough
// (sequence, KV head, split) blocks for blocks_per_sm x sm_count (2: one wave of the decode
// kernel at hd 128), at most ceil(max_context / 64) splits (no chunk below 64 positions at the
// longest context the graph will see, e.g. max_blocks_per_seq * block_size), at most 256, and
// within `workspace_bytes` (the backend's attention workspace, 64 MiB); a decode count of at most
// kClusterSplits + 2 comes down to one wave (blocks_per_sm x sm_count over the blocks, rounded
// down) and to kClusterSplits, so that the splits merge in one cluster. Returns >= 1.
int graph_attention_splits(int num_seqs, int max_q_len, int num_kv_heads, int group, int head_dim,
                           int max_context, int sm_count, size_t workspace_bytes,
                           int blocks_per_sm = kAttentionBlocksPerSm);

// Whether the decode kernel takes pages of `block_size` positions: a power of two, at least 8.
bool decode_block_size_ok(int block_size);

// Workspace bytes of one split: num_tokens * nh * (hd + 2) * 4 (O as fp32 plus (m, l)).
size_t paged_attention_split_bytes(int64_t num_tokens, int num_q_heads, int head_dim);

}  // namespace ridge::kernels
