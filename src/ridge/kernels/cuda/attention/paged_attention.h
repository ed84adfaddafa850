// Paged attention over bf16 KV pools for a mixed batch of prefill chunks and decode tokens
// (varlen, GQA, causal). One kernel serves both: FlashAttention-2 style tiles with an online
// softmax in registers (mma.sync m16n8k16 bf16 -> fp32), and a flash-decoding split of the KV
// range across thread blocks whenever the batch alone would not fill the GPU (one 32k-token
// decode gets ~2 waves of blocks); a combine kernel merges the splits. See docs/KERNELS.md,
// section "CUDA backend kernels".
//
// Layouts (all device memory):
//   q            bf16 [T, nh * hd], row stride ld_q (a multiple of 8; 16-byte aligned rows)
//   out          bf16 [T, nh * hd], row stride ld_out (even)
//   k/v pools    bf16 [num_blocks, block_size, nkv, hd] (NHD, contiguous)
//   cu_seqlens_q i32 [S + 1]; context_lens i32 [S]; block_tables i32 [S, max_blocks_per_seq]
//   Sequence s owns rows [cu[s], cu[s+1]) of q; its new token i sits at position
//   context_len - q_len + i and sees KV positions 0 ..= that position.
// Limits: hd 64 or 128; nh % nkv == 0 and nh / nkv <= 64; any block_size >= 1; q_len <=
// context_len (checked on the host from the host mirrors).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace ridge::kernels {

struct PagedAttentionArgs {
  const uint16_t* q = nullptr;
  int64_t ld_q = 0;
  uint16_t* out = nullptr;
  int64_t ld_out = 0;
  const uint16_t* k_pool = nullptr;
  const uint16_t* v_pool = nullptr;
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
  // From the host mirrors (planning only; never read by the kernels).
  const int32_t* host_cu_seqlens_q = nullptr;
  const int32_t* host_context_lens = nullptr;
};

// The plan of one call: how many KV splits, and how much workspace they take.
struct PagedAttentionPlan {
  int num_splits = 1;
  int kv_chunk = 0;           // KV positions per split (a multiple of the 64-position tile)
  int max_q_tiles = 0;        // grid.x
  int64_t num_tokens = 0;     // cu_seqlens_q[S]
  size_t workspace_bytes = 0; // 0 when num_splits == 1
};

// Raises the kernels' dynamic shared-memory limit; call once per device before the first launch.
void init_paged_attention();

// Validates the arguments (from the host mirrors) and chooses the split: enough blocks for
// `target_blocks` (e.g. 2 waves of resident blocks), within `workspace_capacity` bytes.
PagedAttentionPlan plan_paged_attention(const PagedAttentionArgs& args, int target_blocks,
                                        size_t workspace_capacity);

// Runs the plan on `stream`. `workspace` holds plan.workspace_bytes (fp32 partial outputs and
// their softmax statistics); unused when num_splits == 1.
void paged_attention_bf16(const PagedAttentionArgs& args, const PagedAttentionPlan& plan,
                          void* workspace, cudaStream_t stream);

}  // namespace ridge::kernels
