// perf/cost_model: the roofline cost of every op of one engine step of a Llama-family model.
//
//   T_math = FLOPs / (peak FLOP/s of the op's number format)
//   T_mem  = minimal HBM bytes / memory bandwidth
//   time   = max(T_math / wave_efficiency, T_mem) + kernels x kernel_overhead
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

  // bf16 | fp16 | w8a16 (int8 or fp8 weights, bf16 math; alias int8) | fp8 (fp8 weights, fp8
  // KV, fp8 math) | w4a16 (q4_0-like 4.5-bit weights, bf16 math) | fp4 (NVFP4 weights: 4 bits +
  // one fp8 scale per 16 = 4.5 bits, fp8 KV, fp4 math). Throws naming the known names.
  static Precision named(std::string_view name);
  // The weights as the model stores them (ModelConfig::weight_dtype), bf16 KV and math.
  static Precision of(const model::ModelConfig& cfg);
};

enum class OpKind { embedding, norm, gemm, rope, kv_write, attention, elementwise, sampling };
enum class Bound { compute, memory };
std::string_view op_kind_name(OpKind k);
std::string_view bound_name(Bound b);

struct OpCost {
  std::string_view name;  // embedding, attn_norm, qkv_proj, ... (a static string)
  OpKind kind = OpKind::elementwise;
  int64_t kernels = 0; // launches per step (layers x 1 for per-layer ops)
  int64_t m = 0, n = 0, k = 0;  // GEMM shape (per launch) where kind == gemm
  int64_t split_k = 1;          // K split that fills the SMs when output tiles are too few
  double flops = 0;    // per step, all layers
  double bytes = 0;    // minimal HBM bytes per step, all layers
  double intensity = 0;        // flops / bytes
  double t_math = 0, t_mem = 0;  // seconds, per step
  double wave_efficiency = 1;  // (0, 1]
  double t_overhead = 0;       // kernels x kernel overhead
  double time = 0;             // predicted seconds per step
  Bound bound = Bound::memory; // the larger of T_math / wave_efficiency and T_mem
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
  // own. Off by default: ridge runs them as separate kernels today.
  bool fuse_elementwise = false;
};

struct StepCost {
  std::vector<OpCost> ops;
  double flops = 0, bytes = 0;
  double t_math = 0, t_mem = 0, t_overhead = 0;
  double time = 0;         // sum of op times: the prediction
  double lower_bound = 0;  // max(sum T_math, sum T_mem): no overlap lost anywhere
  double upper_bound = 0;  // sum of T_math + T_mem + overhead: nothing overlaps
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

// The smallest decode batch at which the step's GEMMs (weights read once per step) turn
// compute-bound: sum of GEMM FLOPs / sum of GEMM bytes >= critical intensity.
int64_t decode_compute_bound_batch(const model::ModelConfig& cfg, const Hardware& hw,
                                   const CostOptions& opt = {}, int64_t max_batch = 1 << 16);

// KV-cache bytes of one token (all layers, K and V).
double kv_bytes_per_token(const model::ModelConfig& cfg, const Precision& p);
// Weight bytes (all parameters at the precision's weight bytes).
double weight_bytes(const model::ModelConfig& cfg, const Precision& p);

}  // namespace ridge::perf
