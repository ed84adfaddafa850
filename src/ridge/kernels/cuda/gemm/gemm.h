// Dense bf16 GEMM for the linear layers: Y = X · Wᵀ (+ residual), fp32 accumulation.
//
// Layouts (all row-major, densely packed, device memory):
//   X        [M, K] bf16   activations, one token per row
//   W        [N, K] bf16   weights in nn.Linear layout (K contiguous)
//   Y        [M, N] bf16   output
//   residual [M, N] bf16   optional; Y = X·Wᵀ + residual (may alias Y)
// Preconditions, checked on the host (ridge::Error otherwise; nothing is launched):
//   M, N, K ≥ 1; K % 8 == 0 and N % 8 == 0 (16-byte rows for vector loads and TMA);
//   X, W, Y, residual 16-byte aligned; the current device is sm_90 (Hopper) for the sm90 path.
// Shapes need not be tile multiples: partial tiles are masked (TMA zero-fills, stores are
// bounds-checked). Every function runs on the stream it is given and never synchronizes it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ridge::kernels {

using bf16 = __nv_bfloat16;

// Picks the kernel by shape: skinny (tensor-core GEMV) for M ≤ 32, else the warp-specialized
// TMA + wgmma GEMM.
void gemm_bf16(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K, cudaStream_t stream,
               const bf16* residual = nullptr);

// Fused gate_up + SwiGLU: W_gate_up is [2F, K] with the F gate rows first, then the F up rows
// (the fused gate_up weight). Out [M, F] = silu(X·W_gateᵀ) ⊙ (X·W_upᵀ), fp32 math, bf16 out.
// F % 128 == 0, K % 8 == 0, M ≥ 1 (any M runs the sm90 kernel).
void gemm_bf16_swiglu(const bf16* X, const bf16* W_gate_up, bf16* Out, int M, int F, int K,
                      cudaStream_t stream);

// Decode GEMV / skinny GEMM (tensor-core mma.sync, weights streamed once with 16-byte loads,
// split-K over the warps of a block). Meant for M ≤ 64; larger M runs in tiles of 64 tokens.
void gemm_bf16_skinny(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream, const bf16* residual = nullptr);

// The warp-row GEMV for one token (warp_gemv.cu): Y[n] = x·W[n]ᵀ (+ residual[n], which may
// alias Y), x = X[0, :K]. Each warp of the grid takes whole rows n ≡ w (mod warps of the grid), so
// the GPU reads the rows in one window and no sum leaves its warp (no workspace; deterministic).
// blocks_per_sm 0: as many as fit; walk: each warp takes a contiguous run of rows instead (the
// per-block kernels' order, for A/B runs). pdl: launched on the decode chain (pdl.cuh); the first
// weights load before the wait. Preconditions as gemm_bf16 with M = 1, K ≤ gemv_warp_max_k, sm_90.
constexpr int gemv_warp_max_k = 32768;  // x is staged in shared memory (64 KB)
void gemv_bf16_warp_rows(const bf16* X, const bf16* W, bf16* Y, int N, int K, cudaStream_t stream,
                         const bf16* residual = nullptr, bool pdl = false, int blocks_per_sm = 0,
                         bool walk = false);

// The row-warp skinny kernel for 17-64 tokens (skinny_rows.cu): each of a block's 8 warps owns
// 16 weight rows over the same K steps, whose activations are staged once per block in shared
// memory (the skinny kernel re-reads them per 16-row tile). K is split over a cluster of split_k
// CTAs (0: automatic, as many as fit in one wave of resident blocks; 1..8 forced), reduced in rank
// order by rank 0 (deterministic). Any M (tiles of 32 tokens up to 32, else 64); preconditions
// as gemm_bf16, sm_90. No PDL: it starts after the kernel before it.
void gemm_bf16_skinny_rows(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                           cudaStream_t stream, const bf16* residual = nullptr, int split_k = 0);

// The weight-stream kernel for 1-64 tokens (stream_gemm.cu): the weights are wgmma's A operand
// (swap AB, tokens as its N = 8/16/32/64), streamed by TMA into a ring of ~200 KiB per SM, one
// persistent CTA per SM taking an equal share of (128-row tile × 64-k block) iterations
// (stream-K: no wave quantization). CTAs that share a tile add their fp32 partials through
// `workspace` in a fixed order (deterministic for a given GPU). The workspace:
// gemm_bf16_stream_workspace_bytes() bytes, zeroed once before its first use, and used by one
// launch at a time (one per stream); the kernel leaves it as it needs it. M ≤ 64, N ≤
// 128 · stream_gemm_max_tiles, K % 8 == 0, N % 8 == 0, 16-byte aligned pointers, sm_90.
// max_ctas > 0 caps the grid (tests: more CTAs share each tile). Launched with PDL.
constexpr int stream_gemm_max_tokens = 64;
constexpr int stream_gemm_max_tiles = 8192;
size_t gemm_bf16_stream_workspace_bytes();
void gemm_bf16_stream(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream, void* workspace, size_t workspace_bytes,
                      const bf16* residual = nullptr, int max_ctas = 0);

// The window GEMV for 1-32 tokens (window_gemm.cu): W is read in pieces of 16 rows × a K segment
// (seg 16-byte chunks of each row, a power of two in [16, 128] whose ring fits in shared memory:
// up to 64 past 16 tokens; 0: 2 KB of a row up to 16 tokens, 1 KB above, shorter where the row
// is), the GPU's blocks taking consecutive pieces at once (one compact window, as the read
// ceiling reads memory), each block always the same segment (its part of X staged once in shared
// memory). A unit's segments are reduced across blocks through the workspace (partial sums and a
// ticket a unit and token tile; the block that completes a unit stores it, summing the segments
// in order: deterministic). Workspace: gemm_bf16_window_workspace_bytes(M, N, K, seg) bytes,
// 16-byte aligned, zeroed once before its first use (every launch leaves it zero, tickets and
// partial sums: the hand-off needs scratch zero; the tickets sit at the start for every shape, so
// a workspace serves any call it is large enough for); one
// launch at a time per workspace. M ≤ window_gemm_max_tokens, N ≤ window_gemm_max_n, K % 8 == 0,
// N % 8 == 0, 16-byte aligned X, W, Y and residual, sm_90. Launched with PDL when `pdl` (its
// weights start streaming before the previous kernel ends). `loader`: WindowLoader.
constexpr int window_gemm_max_tokens = 32;
constexpr int window_gemm_max_n = 262144;
// How the window GEMV's pieces reach shared memory (every loader gives the same bits):
//   cp_async: every loader thread copies its chunks with cp.async, and a block barrier a piece
//     tells the MMA warps that it landed;
//   bulk: a producer warp copies each piece's 16 rows with bulk copies (cp.async.bulk) that
//     complete on the slot's mbarrier; the MMA warps wait on that barrier alone and free the slot
//     on another (no block barrier a piece: run 28's profile);
//   bulk_dynamic: as bulk, but past each block's first ring of pieces the producer takes the next
//     unit of its K segment from a counter in the workspace, so that blocks that run faster do
//     more (run 28: the average SM sat empty for 30 % of a static launch).
enum class WindowLoader : uint8_t { cp_async, bulk, bulk_dynamic };
struct WindowGemmPlan {
  int token_tiles = 0;  // of 8 tokens: 1, 2 or 4
  int seg = 0;          // 16-byte chunks of a row a piece holds
  int ksegs = 0;        // K segments (pieces a 16-row unit)
  WindowLoader loader = WindowLoader::cp_async;
};
WindowGemmPlan window_gemm_plan(int M, int K, int seg = 0,
                                WindowLoader loader = WindowLoader::cp_async);
// A block's shared memory: a ring of pieces (window_gemm_slots) and X's segment, rows padded by
// window_gemm_pad chunks, and window_gemm_red_slots slots of the warps' partial sums.
constexpr int window_gemm_pad = 4, window_gemm_warps = 8, window_gemm_part = 128,
              window_gemm_red_slots = 4;
constexpr int window_gemm_slots(int token_tiles) {
  return token_tiles == 4 ? 6 : 4;
}
constexpr size_t window_gemm_smem_bytes(const WindowGemmPlan& p) {
  return size_t(window_gemm_slots(p.token_tiles) * 16 + 8 * p.token_tiles) *
             size_t(p.seg + window_gemm_pad) * 16 +
         size_t(window_gemm_red_slots * window_gemm_warps * p.token_tiles * window_gemm_part) *
             sizeof(float) +
         (p.loader != WindowLoader::cp_async
              ? size_t(2 * window_gemm_slots(p.token_tiles)) * 8  // full, empty mbarriers
              : 0) +
         (p.loader == WindowLoader::bulk_dynamic  // each slot's unit, each partial-sum slot's
              ? size_t(window_gemm_slots(p.token_tiles) + window_gemm_red_slots) * 4
              : 0);
}
// bulk_dynamic's counters: one a K segment (the next unit to take), the last one the blocks done;
// the last block to finish resets them. At most window_gemm_counters − 1 segments.
constexpr int window_gemm_counters = 256;
struct WindowGemmWorkspace {
  unsigned* tickets = nullptr;   // [units][token tiles], then the counters
  unsigned* counters = nullptr;  // [window_gemm_counters]
  float* scratch = nullptr;      // [units][ksegs][token tiles][4 × 32] partial sums
};
// The tickets and counters, at the start of the workspace for every shape.
constexpr size_t window_gemm_ticket_bytes =
    (size_t(window_gemm_max_n / 16) * 4 + window_gemm_counters) * sizeof(unsigned);
size_t gemm_bf16_window_workspace_bytes(int M, int N, int K, int seg = 0);
void gemm_bf16_window(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream, void* workspace, size_t workspace_bytes,
                      const bf16* residual = nullptr, int seg = 0, bool pdl = false,
                      WindowLoader loader = WindowLoader::cp_async);

// The skinny kernel with a prologue on its activations and a choice of output type (the decode
// step's fusions). Y[M,N] = P(X)·Wᵀ (+ residual), with P:
//   none      X [M, K] (row stride ld_x)
//   rms_sumsq X [M, K]: row m scaled by 1/sqrt(sumsq(X[m]) / K + eps), the sums of squares given
//             as sumsq_in [sumsq_parts, M] partial sums (summed in a fixed order), as the
//             sumsq_out epilogue of the matmul that wrote X leaves them (sumsq_parts =
//             skinny_sumsq_parts(K), or skinny_warp_sumsq_parts(K) from the warp-row GEMV), or
//             the embedding (embedding_sumsq_parts(K), elementwise.h): any count from 1 up to
//             the larger of the first two.
//             The norm's weight must be folded into W beforehand (scale_columns_bf16); the
//             scale is applied to the product in the epilogue, X goes to the MMA unchanged:
//             the loop is the plain one
// Epilogue sumsq_out (bf16 Y, M ≤ 16): each stored row's sum of squares (of the bf16 values
// stored, residual included) as partial sums over this call's row tiles, sumsq_out[p·M + m] for
// p = n / skinny_sumsq_rows: skinny_sumsq_parts(N) of them (the warp-row GEMV, SkinnyArgs::warp,
// writes one a block and zeros to skinny_warp_sumsq_parts(N); skinny_sumsq_out_parts(a) says
// which and sizes the buffer). So the next matmul's RMSNorm needs neither its own kernel nor a
// pass over X.
// Epilogue swiglu (bf16 Y, no residual, no sumsq_out): W = [gate; up] has N = 2F rows (F % 8 ==
// 0) and Y [M, F] (row stride F) = bf16(silu(g) · u) for the bf16-rounded products g, u of the
// gate and up rows, as silu_mul_bf16 computes it from a stored gate|up product.
// Y is bf16, or f32 when y_f32 (then residual must be null); Y has row stride N. The prologues
// are implemented for M ≤ 16 (skinny_prologue_max_tokens); the plain kernel for any M.
// Preconditions as gemm_bf16_skinny, plus ld_x ≥ K, ld_x % 8 == 0.
// Launched with programmatic dependent launch (pdl.cuh).
enum class SkinnyPrologue { none, rms_sumsq };
// The rope_kv epilogue's inputs (SkinnyArgs::rope, described there).
struct SkinnyRopeKv {
  const int32_t* positions = nullptr;  // [M]
  const float* inv_freq = nullptr;     // [head_dim / 2]
  const int32_t* slots = nullptr;      // [M]
  void* k_pool = nullptr;              // [num_slots, kv_dim] bf16 or E4M3
  void* v_pool = nullptr;
  int64_t num_slots = 0;
  bool kv_fp8 = false;
  int q_dim = 0, kv_dim = 0, head_dim = 0;
};

// The row-stream GEMV's workspace (SkinnyArgs::stream): raw row sums [max_rows, 2] f32 and one
// ticket per 16 rows [max_rows / 16], zeroed once by the owner (cudaMemset) and left zero by
// every launch. One launch at a time per workspace (a stream's calls are ordered).
struct SkinnyStreamWorkspace {
  float* scratch = nullptr;
  unsigned* tickets = nullptr;
  int max_rows = 0;  // a multiple of 16
};
constexpr int skinny_stream_max_tokens = 2;
constexpr int skinny_stream_max_k = 16384;    // one token
constexpr int skinny_stream_max_k_2 = 12288;  // two tokens
inline size_t skinny_stream_scratch_bytes(int max_rows) {
  return size_t(max_rows) * skinny_stream_max_tokens * sizeof(float);
}
inline size_t skinny_stream_ticket_bytes(int max_rows) {
  return size_t(max_rows / 16) * sizeof(unsigned);
}
inline size_t skinny_stream_workspace_bytes(int max_rows) {
  return skinny_stream_scratch_bytes(max_rows) + skinny_stream_ticket_bytes(max_rows);
}
// The workspace laid out in `base` (skinny_stream_workspace_bytes(max_rows) bytes, 16-byte
// aligned): the row sums, then the tickets.
inline SkinnyStreamWorkspace skinny_stream_workspace(void* base, int max_rows) {
  SkinnyStreamWorkspace w;
  w.scratch = static_cast<float*>(base);
  w.tickets =
      reinterpret_cast<unsigned*>(static_cast<char*>(base) + skinny_stream_scratch_bytes(max_rows));
  w.max_rows = max_rows;
  return w;
}

struct SkinnyArgs {
  const bf16* X = nullptr;
  int64_t ld_x = 0;
  const bf16* W = nullptr;
  void* Y = nullptr;
  bool y_f32 = false;
  const bf16* residual = nullptr;  // may alias Y
  float eps = 0.0f;                // rms_sumsq prologue
  const float* sumsq_in = nullptr;  // rms_sumsq prologue: [sumsq_parts, M]
  int sumsq_parts = 0;
  float* sumsq_out = nullptr;  // epilogue: [skinny_sumsq_out_parts(*this), M], or null
  bool swiglu = false;         // epilogue: Y [M, N / 2] = silu(gate) · up
  // Launched with programmatic stream serialization (pdl.cuh), i.e. allowed to start while the
  // kernel before it runs. false: it starts after that kernel ends (its own dependents may still
  // start early). With PDL, give the kernels around it one shared-memory carveout
  // (pdl::set_launch_carveout): a block started early on an SM left in another kernel's split
  // (decode attention's) streams ~20 % slower for lack of L1 (docs/KERNELS.md, run 13).
  bool pdl_launch = true;
  // Early weights: with pdl_launch, this many further steps (of the 8 each warp takes of the
  // block's first row tile, after the one loaded into registers) are copied into shared memory
  // (cp.async, 32 KB per step and block) before pdl::wait(), so that a block resident while a
  // latency-bound kernel runs (decode attention) streams most of its tile meanwhile. 0: none.
  // Up to skinny_max_stage_steps, with the plain prologue and at most 8 tokens. An automatic
  // weight ring (`ring` below) takes their place: it copies its first steps before the wait too.
  int stage_steps = 0;
  int M = 0, N = 0, K = 0;
  // Split-K where the row tiles do not fill the SMs (small N): a cluster of split_k CTAs per row
  // tile, each a slice of K, reduced in rank order through distributed shared memory by rank 0,
  // which alone runs the epilogue (deterministic; the sums differ in order from the unsplit
  // kernel's). 0: automatic (the default: doubled from 1 while the CTAs would fill at most a
  // quarter of the resident slots and each CTA keeps two steps of K per warp, up to 8; no split past
  // 16 tokens or with stage_steps), 1: off, 2..8: forced (up to 16 tokens, not with
  // stage_steps). Measured on the H200 (run 14): 512×8192 at M = 1 9.0 → 6.1 µs, 1024×4096
  // 5.9 → 5.8; on the Llama projections the automatic choice is no split (forced 2 or 4 lose).
  int split_k = 0;
  // The weight ring (one token tile of up to 16 tokens, RT = 1; where the split-K choice is 1):
  // the weights stream through `ring` steps a warp of shared memory filled by cp.async (32 KB a
  // step and block) instead of a register buffer, so that `ring` steps a warp are in flight where
  // the register path keeps one (ptxas tracks all of a warp's weight loads on one scoreboard). Its
  // first steps are copied before the PDL wait, so an automatic ring also replaces stage_steps.
  // Bitwise the register path's result. 0: automatic (depth 2 up to 8 tokens, else the register
  // path; RIDGE_SKINNY_RING=0/2/3 overrides it for A/B runs); -1: the register path; 2 or 3: that
  // depth (not with stage_steps).
  int ring = 0;
  // The weight ring's persistent grid: at most this many blocks a SM (0: as many as are resident,
  // capped by RIDGE_SKINNY_BLOCKS_PER_SM). For A/B runs of the decode chain's q|k|v GEMV with room
  // left on each SM for decode attention's blocks, which launch early behind it (docs/KERNELS.md,
  // "Run 40").
  int blocks_per_sm = 0;
  // Epilogue rope_kv (decode q|k|v; on when rope.positions is set): W stacks q, k and v rows
  // (N = q_dim + 2·kv_dim, head_dim % 16 == 0), and each block takes 8 rows i of a q or k head's
  // first half with their partners i + head_dim/2 as the two 8-row halves of its MMA tile (v rows
  // in plain 16-row tiles), so that a rotated pair meets in one thread: the RoPE of
  // rope_kv_store_bf16 (rotate-half, angle = position · inv_freq[i], sincosf) on the bf16-rounded
  // products, q and k rotated into Y, v into Y as it is, and k and v into the KV pools at each
  // token's slot (skipped outside [0, num_slots); E4M3 when kv_fp8). Bitwise what the plain
  // product followed by rope_kv_store_bf16 leaves in Y and the pools. No residual, no f32 output,
  // no sums of squares, no swiglu, no staged steps, no split.
  SkinnyRopeKv rope;
  // The row-stream GEMV (1-2 tokens, K % 8 == 0, 2048 < K ≤ skinny_stream_max_k, or
  // skinny_stream_max_k_2 at 2 tokens; no forced split): with a workspace given, the weights are
  // read as the read-only ceiling kernel reads memory: block b takes R consecutive rows at a time
  // (rows (i·G + b)·R …, G blocks), its loader threads consecutive 16 bytes of each row, so that
  // at any moment the whole GPU reads one compact window of W. Each row's sum is reduced in its
  // block; one more warp of the block, which loads no weights, leaves the sums in scratch and
  // counts them on a ticket per 16-row unit, and the block that completes a unit runs that unit's
  // epilogue (the skinny kernel's units and formulas: any prologue and epilogue above). The sums
  // differ from the MMA kernel's in order, not in precision. Without a workspace (the default),
  // the MMA kernel.
  SkinnyStreamWorkspace stream;
  // The warp-row GEMV (warp_gemv.cu) at one token where skinny_warp_applies: each warp of the
  // grid takes whole rows (or the pair of rows a RoPE epilogue needs; SwiGLU's gate and up rows
  // go to two warps of a block, which meet in shared memory), items w, w + Wt, … of the grid's Wt
  // warps, so that the GPU reads W in one window and no sum is split. Any prologue and epilogue
  // above, with one difference: sumsq_out gets one part a block (skinny_warp_sumsq_parts), which a
  // consumer's rms_sumsq takes as it takes the MMA kernel's per-16-row parts. The sums differ from
  // the MMA kernel's in order, not in precision. The engine sets it where the GEMM tuner chose the
  // warp-row GEMV for the weight shape at one token (or --gemv-warp, RIDGE_GEMV_WARP=1, forces it).
  bool warp = false;
};
// Whether gemm_bf16_skinny_fused runs `a` in the warp-row GEMV (a.warp, one token, K % 8 == 0,
// K <= gemv_warp_max_k, no forced split).
bool skinny_warp_applies(const SkinnyArgs& a);
// How many parts of sums of squares a's sumsq_out epilogue writes per token:
// skinny_warp_sumsq_parts(N) in the warp-row GEMV, skinny_sumsq_parts(N) in the MMA kernel.
int skinny_sumsq_out_parts(const SkinnyArgs& a);
// The warp-row GEMV's sumsq_out parts for N rows on the current device: one a block it can launch
// (two a SM, at most one per 8 rows); the slots of blocks a launch does not have are zeros.
int skinny_warp_sumsq_parts(int N);
// How many warp-row GEMVs (fused or plain) this process has launched (tests).
int64_t skinny_warp_launches();
// Whether gemm_bf16_skinny_fused runs `a` in the row-stream GEMV.
bool skinny_stream_applies(const SkinnyArgs& a);
// How many row-stream GEMVs this process has launched (tests: which kernel a backend call ran).
int64_t skinny_stream_launches();
// How many launches took the weight ring (SkinnyArgs::ring; tests).
int64_t skinny_ring_launches();
constexpr int skinny_max_stage_steps = 6;
constexpr int skinny_max_split_k = 8;
constexpr int skinny_prologue_max_tokens = 16;
constexpr int skinny_sumsq_rows = 16;  // output columns per partial sum of sumsq_out
constexpr int skinny_sumsq_parts(int N) {
  return (N + skinny_sumsq_rows - 1) / skinny_sumsq_rows;
}
void gemm_bf16_skinny_fused(const SkinnyArgs& args, SkinnyPrologue prologue, cudaStream_t stream);

// W [N, K] bf16 := bf16(W[n, k] · scale[k]) in place (scale f32 [K]): folds an RMSNorm weight into
// the matmul that follows the norm. K % 8 == 0, W 16-byte aligned.
void scale_columns_bf16(bf16* W, int64_t N, int64_t K, const float* scale, cudaStream_t stream);

// The warp-specialized Hopper GEMM (TMA producer warpgroup, two wgmma consumer warpgroups,
// mbarrier pipeline, 128×256×64 or 128×128×64 tiles). Options exist so the ladder in bench/gemm can time
// each step; the defaults are the production choice.
struct Sm90GemmOptions {
  bool persistent = true;   // grid = #SMs, tiles walked by a scheduler; else one CTA per tile
  int group_m = 8;          // grouped raster: GROUP_M tile rows walked column by column (1 = row order)
  int max_ctas = 0;         // persistent grid size; 0 = number of SMs
  int block_n = 0;          // output tile width 256 or 128; 0 = chosen by a wave model
  // Epilogue: true stages each 64×64 output box in shared memory and writes it with a TMA store
  // that drains while the next tile's main loop runs; false stores from registers.
  bool tma_store = true;
  // Ring depth: BN 256 → 3 (room to stage a whole 128×256 tile; the default) or 4 (half a tile
  // staged at a time; the only depth with register stores or clusters), BN 128 → 6. Register
  // stores and clusters run 256-wide tiles (block_n 0 picks 256 for them; 128 is refused).
  int stages = 0;
  // 2: clusters of two CTAs on vertically adjacent tiles share each W tile through TMA multicast
  // (L2 delivers it once per pair); runs the TMA-store epilogue, 256-wide tiles and 4 stages.
  int cluster_m = 1;
  // Wave split: when the last wave of 256-wide tiles is mostly empty, the columns that fill whole
  // waves run as one launch and the rest as 128-wide tiles in a second launch. Applies to
  // persistent TMA-store launches of 256-wide tiles without clusters or SwiGLU (H200, run 12:
  // gate|up at M = 2048 542.7 µs against 570.1 without, cuBLASLt 550.6).
  bool wave_split = true;
  // Diagnostic (bench only): false computes every tile and stores nothing, so that the
  // benchmark can separate the epilogue's cost from the main loop's. Y is left untouched.
  bool store = true;
};
void gemm_bf16_sm90(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                    cudaStream_t stream, const bf16* residual = nullptr,
                    const Sm90GemmOptions& options = {});

// The fp8 decode GEMV (fp8_gemv.cu; --quantization fp8 at 1..kGemvFp8MaxTokens tokens):
// Y[t, n] (+)= sx[t] · sw[n] · Σ_k e4m3(xq[t, k]) · e4m3(wq[n, k]), the product cuBLASLt's fp8
// GEMM with outer-vector scales gives, fp32 sums of exact code products; Y bf16 (rounded once) or
// f32 with row stride ld_y. A first kernel quantizes the bf16 activations X into xq, sx (per
// token, quantize_rows_fp8's rule), after an optional RMSNorm prologue; with swiglu the GEMV pairs
// W's rows j and N/2 + j (gate and up) into Y[t, j] = silu(g) · u. Each fusion equals the composed
// kernels (rmsnorm, quantize_rows_fp8, the GEMV, silu_mul) bit for bit.
constexpr int kGemvFp8MaxTokens = 4;
constexpr int kGemvFp8MaxK = 16384;  // the quantization keeps a token's values in registers
enum class GemvFp8Prologue { none, rmsnorm };
struct GemvFp8Args {
  const void* X = nullptr;  // bf16 [T, K], row stride ld_x (% 8), rows 16-byte aligned
  int64_t ld_x = 0;
  GemvFp8Prologue prologue = GemvFp8Prologue::none;
  const void* norm_w = nullptr;  // rmsnorm: [K] f32 (norm_w_f32) or bf16, 16-byte aligned
  bool norm_w_f32 = false;
  float eps = 0.0f;
  uint8_t* xq = nullptr;  // workspace: [T, K] codes (16-byte aligned) and T scales
  float* sx = nullptr;
  const uint8_t* W = nullptr;  // [N, K] contiguous E4M3 codes, 16-byte aligned
  const float* sw = nullptr;   // [N] row scales
  void* Y = nullptr;           // [T, N] (swiglu: [T, N / 2], bf16), row stride ld_y
  bool y_f32 = false;
  int64_t ld_y = 0;
  bool accumulate = false;  // Y += product (not with swiglu)
  bool swiglu = false;
  int T = 0, N = 0, K = 0;
  bool pdl = false;  // launched on the decode chain (programmatic dependent launch)
};
void gemv_fp8(const GemvFp8Args& args, cudaStream_t stream);

}  // namespace ridge::kernels
