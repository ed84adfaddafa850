// perf/cost_model: the roofline cost of every op of one engine step of a Llama-family model.
//
//   T_math = FLOPs / (peak FLOP/s of the op's number format)
//   T_mem  = minimal HBM bytes / memory bandwidth
//   time   = max(T_math / (wave_efficiency x e_math), T_mem / e_mem) + kernels x kernel_overhead
//
// e_math, e_mem: the fraction of the roofline a real kernel of the op's class reaches
// (Hardware::efficiency; 1 unless CostOptions::achievable). The step adds the launch cost of its
// execution (CostOptions::launch: a CUDA graph's one launch, or eager launches issued by the host
// at launch_overhead each, which stall the GPU whenever kernels are shorter) and the host copies
// of its plan (KernelPlan). docs/PERF.md, "Execution", has the terms and where each figure comes
// from.
//
// Wave quantization: a grid of `tiles` blocks on S SMs with B resident blocks each runs in
// ceil(tiles / (S*B)) waves; the last one is partial: wave_efficiency = tiles / (waves * S * B).
// Minimal bytes: every weight is read once, every activation read once and written once, the
// KV of a sequence read once per step (GQA heads of a group share the load). docs/PERF.md has the
// op list and each formula.
//
// Usage from a benchmark (one step of a ForwardBatch-like description):
//   perf::StepShape s;  s.seqs = {{512, 0}, {1, 700}, {1, 300}};   // {new tokens, context}
//   perf::StepCost c = perf::predict_step(cfg, hw, s);
//   for (auto& op : c.ops) ... op.name, op.time, op.bound ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ridge/model/config.h"
#include "ridge/perf/hardware.h"

namespace ridge::perf {

// Storage and math formats of a run.
struct Precision {
  std::string name = "bf16";
  double weight_bytes = 2.0;  // per weight element, block scales included
  double kv_bytes = 2.0;      // per KV element
  double act_bytes = 2.0;     // per activation element between kernels
  std::string math = "bf16";  // the peak (Hardware::dense_flops key) GEMMs and attention run at
  // The embedding table and the LM head, where they are held apart from the layers' weights (fp8
  // keeps them bf16, as ridge's --quantization fp8 and vLLM's do): bytes per element and math.
  // 0 / "": as weight_bytes / math.
  double head_bytes = 0.0;
  std::string head_math;
  double head_weight_bytes() const { return head_bytes > 0 ? head_bytes : weight_bytes; }
  const std::string& head_math_or_math() const { return head_math.empty() ? math : head_math; }

  // bf16 | fp16 | w8a16 (int8 or fp8 weights, bf16 math; alias int8) | fp8 (fp8 weights, fp8
  // KV, fp8 math) | w4a16 (q4_0-like 4.5-bit weights, bf16 math) | fp4 (NVFP4 weights: 4 bits +
  // one fp8 scale per 16 = 4.5 bits, fp8 KV, fp4 math). Throws naming the known names.
  static Precision named(std::string_view name);
  // The weights as the model stores them (ModelConfig::weight_dtype), bf16 KV and math.
  static Precision of(const model::ModelConfig& cfg);
};

enum class OpKind { embedding, norm, gemm, rope, kv_write, attention, elementwise, sampling };
// latency: a dependent chain that neither the FLOPs nor the bytes account for sets the op's time
// (OpCost::t_latency; decode attention at few blocks).
enum class Bound { compute, memory, latency };
std::string_view op_kind_name(OpKind k);
std::string_view bound_name(Bound b);

// How a step's kernels reach the GPU.
//   graph: one captured CUDA graph, launched once (launch_overhead), whose nodes run back to back
//          (kernel_overhead each).
//   eager: one host launch per kernel (launch_overhead; gemm_launch_overhead for a cuBLASLt call);
//          the GPU runs kernel i at max(its own finish of i-1, the host's issue of i), so short
//          kernels leave it waiting for the host (the step's launch stall).
enum class Launch { graph, eager };
std::string_view launch_name(Launch l);
Launch launch_named(std::string_view name);  // "graph" | "eager"; throws otherwise

// ridge's decode-step fusions, the switches of BackendOptions::fuse (CLI --fuse LIST, --no-fusion
// = none). Each folds one op into another (docs/KERNELS.md, "Decode fusions" and "Run 8").
struct Fusions {
  bool norm = true;     // "norm": the RMSNorm before qkv_proj and gate_up_proj (T <= 8 rows)
                        // as a 1/rms scale in that GEMM, its weight folded into the GEMM's (not
                        // biased q|k|v), the sums of squares left by the o_proj / down_proj
                        // epilogue (Backend::matmul_fused) or, for the first layer's, by the
                        // embedding (Backend::embedding_sumsq)
  bool silu = true;     // "silu": SiLU·mul in gate_up_proj's epilogue (T <= 8)
  bool rope_kv = true;  // "rope_kv": RoPE and the KV store as one kernel (rope_kv_store), any T
  bool swiglu_gemm = false;  // "swiglu_gemm" (opt-in): SiLU·mul in gate_up_proj's epilogue at
                             // prefill sizes (T >= 1024, CudaBackend::kSwigluGemmMinTokens)

  static Fusions none() { return {false, false, false, false}; }
  // The decode fusions on by default (swiglu_gemm is opt-in).
  static Fusions all() { return {true, true, true, false}; }
  // As the CUDA backend reads BackendOptions::fuse: a comma list of norm, silu, rope_kv,
  // swiglu_gemm; "none" and empty items add nothing ("" and "none": no fusion). Throws on any
  // other item.
  static Fusions parse(std::string_view list);
  // The list parse() takes back: "norm,silu,rope_kv,swiglu_gemm" in that order, or "none".
  std::string describe() const;
  bool operator==(const Fusions&) const = default;
};

// The kernels an engine launches for one step and the host copies around them. The default is
// the minimal engine the roofline assumes (fused q|k|v and gate|up, a fused residual add + RMSNorm
// kernel before each block, sampling on the GPU, no host copies); KernelPlan::ridge() is ridge's
// LlamaModel::forward (src/ridge/model/llama.cpp, run_layers) on the CUDA backend.
struct KernelPlan {
  int qkv_matmuls = 1;              // 3: q, k and v as three matmuls
  int gate_up_matmuls = 1;          // 2: gate and up as two matmuls
  bool unified_attention = false;   // one attention kernel for a mixed prefill+decode step
  // ... except when the step's decodes alone give at least this many (sequence, KV head) blocks
  // per SM: then they run in a launch of their own (the decode kernel). 0: never.
  int mixed_decode_launch_blocks_per_sm = 0;
  // A combine kernel after a split-KV attention launch; the launch splits when its blocks
  // (query tiles of 64 rows x KV heads) are fewer than split_blocks_per_sm x SMs and some
  // sequence has more than one 64-position KV tile (kernels/cuda/attention: plan_paged_attention).
  bool attention_combine = false;
  int split_blocks_per_sm = 4;
  // A decode attention kernel for steps whose every sequence has new tokens x query group <= this
  // many rows (one 16-row tile per sequence and KV head; 0: none). It merges its KV splits itself
  // (the last split block of each sequence and KV head), so it never launches the combine; the
  // general kernel (prefill, mixed steps with larger chunks) still does.
  int decode_attention_max_rows = 0;
  // That kernel's split, for its latency (Hardware::attention_tile and attention_block): KV tiles
  // of this many positions; splits that bring its (sequence, KV head) blocks to this many a SM
  // (one wave: the resident blocks), each at least decode_attention_min_split positions long,
  // merged through memory (Hardware::attention_merge). 0 positions a tile: no latency modelled.
  int decode_attention_tile = 0;
  int decode_attention_blocks_per_sm = 2;
  int decode_attention_min_split = 0;
  // In graph launches (kernels::graph_attention_splits, cluster_split_count) a split count of 2
  // to this + 2 comes down to one wave (the resident blocks over the (sequence, KV head) blocks,
  // rounded down) and to this many; eager launches keep the rounded-up count. 0: no rounding.
  int decode_attention_round_splits = 0;
  // Where each block's residual add runs. false: in the norm of the next block (a fused residual
  // add + RMSNorm kernel: reads x and the block's output, writes the sum and the normed x). true:
  // in the epilogue of o_proj and down_proj (Backend::matmul_add, x += y·Wᵀ: the GEMM reads and
  // writes the residual stream x), the norms plain RMSNorm (read x, write the normed h).
  bool residual_in_matmul = false;
  // Up to this many rows (T for the layers' GEMMs, R for the LM head) the RMSNorm before qkv_proj,
  // gate_up_proj and lm_head runs in the GEMM's prologue (Backend::matmul_fused: no kernel of its
  // own, the normed activations never written); 0: never. A norm folds only into a GEMM of one
  // launch (qkv_matmuls, gate_up_matmuls 1). ridge: kernels::skinny_prologue_max_tokens = 16 with
  // the "norm" fusion.
  int norm_prologue_max_rows = 0;
  // The folded norms take their sums of squares from the epilogue of the residual-adding GEMM
  // before them (ridge's "norm" fusion: MatmulFusion::record_sumsq): the final norm (on gathered
  // rows) still runs as a kernel, and so does the first layer's attn norm (after the embedding)
  // unless norm_sums_from_embedding; a folded GEMM reads a few partial sums instead of the norm
  // weight.
  bool norm_sums_in_epilogue = false;
  // The embedding leaves its rows' sums of squares too (Backend::embedding_sumsq), so the first
  // layer's folded attn norm needs no kernel either: the embedding op writes ceil(h / 256)
  // partial sums a row (kernels::embedding_sumsq_parts), and the first qkv_proj reads them as
  // every later one reads down_proj's.
  bool norm_sums_from_embedding = false;
  // Where a norm may fold, given the model (ModelConfig::qkv_bias, tied_embeddings). ridge folds
  // a norm only by scaling the GEMM's weight by the norm weight at load (Backend::fold_norm_weight,
  // LlamaModel's constructor), the prologue then applying the 1/rms scale alone: not into q|k|v
  // with biases (matmul_fused takes no bias; run_layers composes them) nor into an LM head tied
  // to the token embedding (the embedding reads the same table, which must stay unscaled).
  bool norm_folds_into_biased_qkv = true;
  bool norm_folds_into_tied_head = true;
  // The same for the SiLU·mul between gate_up_proj and down_proj, in gate_up_proj's epilogue
  // (one launch only; ridge: 16 with the "silu" fusion).
  int silu_prologue_max_rows = 0;
  int silu_epilogue_min_rows = 0;  // > 0: SiLU·mul in the prefill GEMM's epilogue from this many rows
  bool rope_kv_fused = false;       // RoPE and the KV store as one kernel (Backend::rope_kv_store)
  // ... and that kernel's work in the q|k|v GEMM's epilogue up to this many rows
  // (Backend::matmul_rope_kv: fused unbiased q|k|v, head_dim % 16 == 0).
  int64_t rope_kv_epilogue_max_rows = 0;
  // Gathers of the logits rows before the final norm: the residual stream x (and, without
  // residual_in_matmul, the last block's output too: two gathers).
  bool gather_logits_rows = false;
  bool sampling_on_device = true;   // false: no sampling kernel (the logits go to the host)
  int metadata_uploads = 0;         // host->device copies of the step plan before its kernels
  bool logits_to_host = false;      // f32 logits rows copied to the host after the last kernel
  bool pinned_host = false;         // ... into pinned memory (pinned_copy_bandwidth)
  // A step of one sequence and one new token runs its layers in one persistent kernel
  // (Backend::decode_layers, BackendOptions::decode_kernel): the ops from the first layer's norm
  // through the last down_proj become one op, "decode_layers", that streams their bytes at the
  // GEMV's efficiency and adds Hardware::layer_sync per layer; its own kernel overhead once.
  bool persistent_decode = false;
  // Each layer GEMM's input quantized by a kernel of its own before it (ridge's --quantization
  // fp8: kernels::quantize_rows_fp8, one launch per matmul): reads T x K activations, writes T x K
  // one-byte codes and T scales. One op, "quantize_act", for all of a step's.
  bool activation_quant = false;
  // ... in steps of at least this many rows; below, the GEMV quantizes its own input (ridge's fp8
  // GEMV at 1-4 tokens, kernels::gemv_fp8: no kernel, no codes written).
  int64_t activation_quant_min_rows = 1;

  // Whether the norm before / the SiLU·mul after a GEMM of `rows` rows runs inside that GEMM.
  bool norm_folded(int64_t rows) const { return rows >= 1 && rows <= norm_prologue_max_rows; }
  bool silu_folded(int64_t rows) const {
    return (rows >= 1 && rows <= silu_prologue_max_rows) ||
           (silu_epilogue_min_rows > 0 && rows >= silu_epilogue_min_rows);
  }
  // The three norms of a step of `rows` rows (T for the blocks, R for the LM head) of model `cfg`:
  // folded into qkv_proj (one launch, and no biases unless norm_folds_into_biased_qkv), into
  // gate_up_proj (one launch), into lm_head (not tied unless norm_folds_into_tied_head, and never
  // with norm_sums_in_epilogue: no GEMM leaves sums for the gathered rows).
  bool attn_norm_folded(const model::ModelConfig& cfg, int64_t rows) const {
    return norm_folded(rows) && qkv_matmuls == 1 && (norm_folds_into_biased_qkv || !cfg.qkv_bias);
  }
  bool rope_in_qkv(const model::ModelConfig& cfg, int64_t rows) const {
    return rope_kv_fused && qkv_matmuls == 1 && !cfg.qkv_bias && cfg.head_dim % 16 == 0 &&
           rows <= rope_kv_epilogue_max_rows;
  }
  bool mlp_norm_folded(int64_t rows) const { return norm_folded(rows) && gate_up_matmuls == 1; }
  bool final_norm_folded(const model::ModelConfig& cfg, int64_t rows) const {
    return norm_folded(rows) && !norm_sums_in_epilogue &&
           (norm_folds_into_tied_head || !cfg.tied_embeddings);
  }

  // ridge as built: fused_projections when the backend stacks q|k|v and gate|up weights (the
  // CUDA backend's upload_weight_rows); pinned_staging when the step plan goes up in one packed
  // copy and the logits come down into pinned memory (LlamaModel::forward_logits), else seven
  // pageable uploads and a pageable download; fusions as BackendOptions::fuse (Fusions::parse;
  // none on the CPU backend, which composes every fused call; the norms fold only where the
  // model folds their weights: not into biased q|k|v, not into a tied LM head). The residual adds
  // are in the o_proj / down_proj epilogues and decode attention merges its own splits either way.
  static KernelPlan ridge(bool fused_projections = true, bool pinned_staging = true,
                          Fusions fusions = {});
};

struct OpCost {
  // embedding, attn_norm, qkv_proj, ... (a static string). An op folded into another (a norm in
  // a GEMM's prologue, RoPE in rope_kv_write) is not listed: its work is in the op it joined.
  std::string_view name;
  OpKind kind = OpKind::elementwise;
  int64_t kernels = 0; // launches per step (layers x 1 for per-layer ops)
  bool per_layer = false;  // run once per layer (its kernels are L x the kernels of one layer)
  int64_t m = 0, n = 0, k = 0;  // GEMM shape (per launch) where kind == gemm
  int64_t split_k = 1;          // K split that fills the SMs when output tiles are too few
  double flops = 0;    // per step, all layers
  double bytes = 0;    // minimal HBM bytes per step, all layers
  double intensity = 0;        // flops / bytes
  double t_math = 0, t_mem = 0;  // seconds, per step
  double wave_efficiency = 1;  // (0, 1]
  double t_overhead = 0;       // kernels x kernel overhead
  double t_latency = 0;        // seconds per step: the op's dependent chain (a floor; achievable
                               // model only, 0 where not modelled)
  double t_fill = 0;           // seconds per step added to its streaming time before the
                               // stream runs at its rate (a pipeline's fill; achievable only)
  double e_math = 1, e_mem = 1;  // efficiencies applied (CostOptions::achievable)
  double time = 0;             // predicted seconds per step (GPU time; launch stalls are the step's)
  Bound bound = Bound::memory;  // the largest of T_math / wave_efficiency, T_mem (+ t_fill) and
                                // t_latency
  std::string_view format;     // number format of the math (the Precision it came from)
};

// One sequence of a step: `new_tokens` tokens computed now (1 for decode, a chunk for prefill) on
// top of `context` tokens already in the KV cache.
struct SeqShape {
  int64_t new_tokens = 1;
  int64_t context = 0;
  bool logits = true;  // whether the step computes logits (and samples) for its last token
};

struct StepShape {
  std::vector<SeqShape> seqs;
  static StepShape decode(int64_t batch, int64_t context);
  static StepShape prefill(int64_t tokens, int64_t sequences = 1);
};

// The sums the cost depends on; the simulator builds these incrementally.
struct StepAggregate {
  int64_t tokens = 0;          // new tokens in all
  int64_t logits_rows = 0;
  int64_t prefill_seqs = 0;    // sequences with more than one new token
  int64_t prefill_tokens = 0;
  double prefill_pairs = 0;    // sum over prefill seqs of n*c + n(n+1)/2 (causal query-key pairs)
  int64_t prefill_kv_tokens = 0;  // sum of (c + n): KV rows read
  int64_t prefill_q_tiles = 0;    // sum of ceil(n / 128) query tiles
  int64_t decode_seqs = 0;
  int64_t decode_kv_tokens = 0;   // sum of (c + 1)
  int64_t prefill_q_tiles64 = 0;  // sum of ceil(n / 64) (ridge's attention row tiles)
  int64_t max_kv_tokens = 0;      // largest c + n of a sequence
  int64_t max_new_tokens = 0;     // largest n of a sequence (0 when not filled in: taken as 1,
                                  // or 2 with prefill sequences)
  static StepAggregate of(const StepShape& s);
};

struct CostOptions {
  Precision precision;
  int gemm_tile_m = 128;   // M tile when M > 64 (64 below), as Hopper wgmma kernels use
  int gemm_tile_n = 128;
  int blocks_per_sm = 1;   // resident GEMM blocks per SM (big-tile persistent kernels: 1)
  int attn_tile_q = 128;   // FlashAttention query tile (prefill)
  bool include_overhead = true;
  // Elementwise ops fused into the GEMMs and attention around them (norm in the GEMM prologue,
  // residual add / RoPE / SiLU*mul / KV store in epilogues), as optimized engines run them: they
  // then move only the residual stream and the KV they must store, and launch no kernels of their
  // own, at every T. Off by default and in CostOptions::ridge: ridge folds them only as its
  // KernelPlan says (decode-sized GEMM prologues, RoPE + KV store); this applies to the rest.
  bool fuse_elementwise = false;
  // Execution: how kernels are launched, which kernels the engine runs, and whether the
  // hardware's efficiency factors apply (the achievable model) or the bare roofline.
  Launch launch = Launch::graph;
  KernelPlan kernels;
  bool achievable = false;
  // Sustained work (a serving run, steps back to back for seconds): a step takes at least the
  // time its FLOPs and bytes need at the card's power cap (Hardware::capped_flops and
  // capped_bandwidth; no effect where the entry lacks them). Off for single benchmarked steps,
  // which finish before the power controller acts.
  bool power_cap = false;

  // ridge as built on `launch`, with the efficiency factors: what `ridge bench model` compares.
  // persistent_decode: BackendOptions::decode_kernel (KernelPlan::persistent_decode).
  static CostOptions ridge(Launch launch, bool fused_projections = true, bool pinned_staging = true,
                           Fusions fusions = {}, bool persistent_decode = false);
};

struct StepCost {
  std::vector<OpCost> ops;
  double flops = 0, bytes = 0;
  double t_math = 0, t_mem = 0, t_overhead = 0;
  Launch launch = Launch::graph;
  int64_t kernels = 0;        // kernels launched in the step
  double t_gpu = 0;           // sum of op times (kernels back to back, overheads included)
  double t_launch_stall = 0;  // GPU time spent waiting for launches: a graph's one launch, or the
                              // eager issue of kernels shorter than their launch
  double t_host = 0;          // host copies: the plan's uploads before, the logits after
  double time = 0;            // t_gpu + t_launch_stall + t_host, or t_power when larger: the
                              // prediction
  double t_power = 0;         // under CostOptions::power_cap: flops / capped_flops + bytes /
                              // capped_bandwidth (0 otherwise)
  bool power_bound = false;   // t_power set the time
  double lower_bound = 0;  // max(sum T_math, sum T_mem[, t_power]): no overlap lost anywhere
  double upper_bound = 0;  // sum of T_math + T_mem + overhead (at least t_power): nothing overlaps
  double peak_flops = 0, memory_bw = 0;
  double critical_intensity = 0;
  double flop_utilization = 0;   // flops / (time * peak)
  double bw_utilization = 0;     // bytes / (time * bandwidth)
  double power_w = 0;            // see energy_j
  double energy_j = 0;           // power * time; power = idle + (TDP - idle) * busy share, or TDP
  bool energy_at_tdp = true;     // true when the device has no measured idle power
  int64_t tokens = 0, logits_rows = 0;
  const OpCost& op(std::string_view name) const;  // throws if absent
};

StepCost predict_step(const model::ModelConfig& cfg, const Hardware& hw, const StepAggregate& s,
                      const CostOptions& opt = {});
StepCost predict_step(const model::ModelConfig& cfg, const Hardware& hw, const StepShape& s,
                      const CostOptions& opt = {});

// Wave quantization: tiles over (sms x blocks_per_sm); 1 when the SM count is unknown.
double wave_efficiency(int64_t tiles, int sms, int blocks_per_sm);

// One GEMM launch Y[m, n] = X[m, k] W[n, k]^T (weights at the precision's bytes, activations and
// output at act_bytes): the cost `ridge bench kernels --op gemm` sets next to each measured shape
// (one kernel, its kernel_overhead included: the benchmark times launches inside a CUDA graph).
OpCost predict_gemm(const Hardware& hw, int64_t m, int64_t n, int64_t k, const CostOptions& opt = {});

// GPU finish time of kernels of GPU durations d[i] issued by one host thread at launch costs
// h[i] each (kernel i can start once the host has issued kernels 0..i): F_i = max(F_{i-1},
// h[0] + ... + h[i]) + d[i]. Returns F_n (0 for no kernels).
double eager_finish(const std::vector<double>& d, const std::vector<double>& h);

// The smallest decode batch at which the step's GEMMs (weights read once per step) turn
// compute-bound: sum of GEMM FLOPs / sum of GEMM bytes >= critical intensity.
int64_t decode_compute_bound_batch(const model::ModelConfig& cfg, const Hardware& hw,
                                   const CostOptions& opt = {}, int64_t max_batch = 1 << 16);

// KV-cache bytes of one token (all layers, K and V).
double kv_bytes_per_token(const model::ModelConfig& cfg, const Precision& p);
// Weight bytes (all parameters at the precision's weight bytes).
double weight_bytes(const model::ModelConfig& cfg, const Precision& p);

}  // namespace ridge::perf
