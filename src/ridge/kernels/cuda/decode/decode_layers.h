// The persistent decode kernel: every transformer layer of a Llama-family model for ONE token of
// ONE sequence (batch-1 decode) in a single launch, so that the weight stream never stops for the
// small ops between the projections.
//
// Why: at batch 1 the step is the weights (13 GB for Llama-2-7B) read once. Run as separate
// kernels, the GEMV chain alone streams at 88 % of copy (3.50 ms), and attention, RoPE + KV store
// and the norms add ~0.45 ms because each waits for the GEMV before it while DRAM idles (docs/
// KERNELS.md, runs 6-14). Here each warp walks a fixed list of work units (GEMV row tiles,
// attention chunks, reductions) and keeps copying the weights of its NEXT GEMV units into a
// shared-memory ring (cp.async) whatever it is waiting on: weights do not depend on activations,
// so only the arithmetic waits for the previous phase, never the loads.
//
// Phases (units of one phase depend on the previous phase having completed; a per-phase counter
// in global memory, release/acquire at GPU scope):
//   init                   x32 = x (the embedding), sums of squares of x per 16-row tile
//   per layer: qkv         part = (x · Wqkvᵀ) / rms(x)            16-row tiles × K splits
//              attention   (head, chunk of positions): RoPE of q and the new k, the new k and v to
//                          the paged cache, flash-decoding partials (max, sum, unnormalized acc);
//                          the head's last unit (a ticket) merges them -> attn (bf16)
//              o           part = attn · Woᵀ                       16-row tiles × K splits; the
//                          tile's last split (a ticket) adds the residual: x32 += Σ parts, x
//                          (bf16) and the tile's sum of squares
//              gate|up     act = silu(g) · u, [g; u] = (x · Wguᵀ) / rms(x)   16 outputs per unit
//              down        part = act · Wdownᵀ, the residual as for o
// The norm weights must be folded into Wqkv and Wgu (Backend::fold_norm_weight): the norm is then
// a per-token scale of the product. The residual stream is kept in fp32 inside the kernel; the
// GEMV inputs are its bf16 rounding (as the layer-by-layer path stores them); q, k and v are
// rounded to bf16 before and after RoPE, and the cache gets the same bf16 values the step used.
//
// Co-residency: one block per SM, launched cooperatively (every block resident, or the launch
// fails), so the spin-waits cannot deadlock: a warp only ever waits for units of earlier phases,
// and every warp takes its units in phase order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ridge::kernels {

constexpr int kDecodeMaxLayers = 160;

// One layer's operands (device pointers).
struct DecodeLayerPtrs {
  const __nv_bfloat16* wqkv = nullptr;   // [(nh + 2 nkv) hd, H], attention norm folded
  const __nv_bfloat16* wo = nullptr;     // [H, nh hd]
  const __nv_bfloat16* wgu = nullptr;    // [2F, H]: gate rows, then up rows; ffn norm folded
  const __nv_bfloat16* wdown = nullptr;  // [H, F]
  __nv_bfloat16* k_pool = nullptr;       // [blocks, block_size, nkv, hd] (NHD pages)
  __nv_bfloat16* v_pool = nullptr;
};

struct DecodeDims {
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  int block_size = 0;
  int max_blocks = 0;  // block-table width: the context capacity is max_blocks * block_size
};

// How the work is cut (decode_layers_plan): K splits of the GEMVs that have too few row tiles to
// give every warp work, positions per attention unit, and the workspace layout.
struct DecodePlan {
  int warps = 0;  // warps in the grid
  int split_qkv = 1, split_o = 1, split_down = 1;
  // Attention units per head, and the least positions per unit (a multiple of 16): a step with
  // ctx positions spreads them over the units, max(chunk, ctx / chunks rounded up to 16) each,
  // and only the units that get positions take part.
  int chunk = 0, chunks = 0;
  int resid_units = 0;        // init units, 256 elements each
  int phases = 0;
  // Timing only (RIDGE_DECODE_NO_WAIT=1 in decode_layers_plan): no unit waits for the previous
  // phase, so the results are wrong; the step then shows the kernel's bare weight stream.
  int no_wait = 0;
  // RIDGE_DECODE_TRACE=1: per phase, four globaltimer stamps (ns) at `trace` in the workspace:
  // [0] ~(first unit's arrival at its wait), [1] last unit's release, [2] ~(first release),
  // [3] last unit's end ("~t": stored complemented so that atomicMax over zeroed memory keeps
  // the minimum). Read back with decode_layers_trace(). Also per unit (flat index f, `units` in
  // all) five stamps at `unit_trace`: arrival at its wait, release, two marks inside, end.
  int trace_on = 0;
  int units = 0;
  // workspace offsets in bytes
  size_t x32 = 0, ss = 0, qkv = 0, attn_part = 0, attn = 0, rope = 0, o_part = 0, act = 0,
         down_part = 0,
         done = 0, tickets = 0, trace = 0, unit_trace = 0, bytes = 0;
};

struct DecodeLayersArgs {
  DecodeDims dims;
  float eps = 0.0f;                    // RMSNorm epsilon
  float scale = 0.0f;                  // attention scale (1/sqrt(hd))
  __nv_bfloat16* x = nullptr;          // [H]: in, the embedding row; out, the last residual
  const int32_t* positions = nullptr;  // [1]: the token's RoPE position
  const int32_t* slots = nullptr;      // [1]: its KV slot (block * block_size + offset; < 0: none)
  const int32_t* context_lens = nullptr;  // [1]: positions in the cache after this step
  const int32_t* block_table = nullptr;   // [max_blocks]
  const float* inv_freq = nullptr;        // [hd / 2]
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  DecodeLayerPtrs layer[kDecodeMaxLayers];
};

// Why the kernel cannot run these dimensions (empty when it can).
const char* decode_layers_unsupported(const DecodeDims& d);
// The plan for these dimensions on `sm_count` SMs (the workspace size is plan.bytes).
DecodePlan decode_layers_plan(const DecodeDims& d, int sm_count);
// The trace of the last launch on `stream` (plan.trace_on): waits for the stream, copies the
// stamps and returns them per phase as {first arrival, last release, first release, last end} in
// ns, or empty when tracing is off. With RIDGE_DECODE_TRACE_FILE=path it also appends every
// 16th launch's per-unit stamps to that file (4 launches at most; scripts/device/decode-trace.py
// reads them).
std::vector<uint64_t> decode_layers_trace(const DecodeLayersArgs& a, const DecodePlan& plan,
                                          cudaStream_t stream);
// Resets the phase counters and launches the kernel on `stream` (capturable in a CUDA graph).
// Throws ridge::Error on unsupported dimensions, a small workspace or a failed launch.
void decode_layers(const DecodeLayersArgs& a, const DecodePlan& plan, cudaStream_t stream);

}  // namespace ridge::kernels
