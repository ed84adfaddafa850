#include "ridge/perf/cost_model.h"

#include "ridge/backend/factory.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ridge/core/error.h"

namespace ridge::perf {

Precision Precision::named(std::string_view name) {
  Precision p;
  p.name = std::string(name);
  if (name == "bf16" || name == "fp16") {
    p.math = std::string(name);
  } else if (name == "w8a16" || name == "int8") {
    p.name = "w8a16";
    p.weight_bytes = 1.0;
  } else if (name == "fp8") {
    p.weight_bytes = 1.0, p.kv_bytes = 1.0, p.math = "fp8";
    p.head_bytes = 2.0, p.head_math = "bf16";
  } else if (name == "w4a16") {
    p.weight_bytes = 18.0 / 32.0;  // q4_0: 32 weights in 16 bytes + an f16 scale
  } else if (name == "fp4") {
    p.weight_bytes = 0.5 + 1.0 / 16.0;  // NVFP4: 4 bits + one fp8 scale per 16 elements
    p.kv_bytes = 1.0, p.math = "fp4";
  } else {
    fail("unknown precision '{}' (known: bf16, fp16, w8a16 (alias int8), fp8, w4a16, fp4)", name);
  }
  return p;
}

Precision Precision::of(const model::ModelConfig& cfg) {
  Precision p;
  const auto& info = dtype_info(cfg.weight_dtype);
  p.weight_bytes = double(info.block_bytes) / double(info.block_elems);
  if (cfg.weight_dtype == DType::f32) p.weight_bytes = 4.0;
  if (p.weight_bytes == 2.0) {
    p.name = "bf16";
  } else {
    p.name = fmt::format("w{}-a16", info.name);
  }
  return p;
}

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::embedding: return "embedding";
    case OpKind::norm: return "norm";
    case OpKind::gemm: return "gemm";
    case OpKind::rope: return "rope";
    case OpKind::kv_write: return "kv_write";
    case OpKind::attention: return "attention";
    case OpKind::elementwise: return "elementwise";
    case OpKind::sampling: return "sampling";
  }
  return "?";
}

std::string_view bound_name(Bound b) {
  return b == Bound::compute ? "compute" : b == Bound::memory ? "memory" : "latency";
}

StepShape StepShape::decode(int64_t batch, int64_t context) {
  StepShape s;
  s.seqs.assign(size_t(batch), SeqShape{1, context, true});
  return s;
}

StepShape StepShape::prefill(int64_t tokens, int64_t sequences) {
  StepShape s;
  s.seqs.assign(size_t(sequences), SeqShape{tokens, 0, true});
  return s;
}

StepAggregate StepAggregate::of(const StepShape& s) {
  StepAggregate a;
  for (const auto& q : s.seqs) {
    RIDGE_CHECK(q.new_tokens >= 1 && q.context >= 0,
                "step shape: a sequence needs >= 1 new token and context >= 0 (got {} new, context {})",
                q.new_tokens, q.context);
    a.tokens += q.new_tokens;
    a.logits_rows += q.logits ? 1 : 0;
    a.max_kv_tokens = std::max(a.max_kv_tokens, q.context + q.new_tokens);
    a.max_new_tokens = std::max(a.max_new_tokens, q.new_tokens);
    if (q.new_tokens == 1) {
      a.decode_seqs += 1;
      a.decode_kv_tokens += q.context + 1;
    } else {
      const double n = double(q.new_tokens), c = double(q.context);
      a.prefill_seqs += 1;
      a.prefill_tokens += q.new_tokens;
      a.prefill_pairs += n * c + n * (n + 1) / 2;
      a.prefill_kv_tokens += q.context + q.new_tokens;
      a.prefill_q_tiles += (q.new_tokens + 127) / 128;
      a.prefill_q_tiles64 += (q.new_tokens + 63) / 64;
    }
  }
  return a;
}

double wave_efficiency(int64_t tiles, int sms, int blocks_per_sm) {
  if (tiles <= 0 || sms <= 0) return 1.0;
  const int64_t slots = int64_t(sms) * std::max(1, blocks_per_sm);
  const int64_t waves = (tiles + slots - 1) / slots;
  return double(tiles) / double(waves * slots);
}

double kv_bytes_per_token(const model::ModelConfig& cfg, const Precision& p) {
  return double(cfg.n_layers) * 2.0 * double(cfg.kv_dim()) * p.kv_bytes;
}

double weight_bytes(const model::ModelConfig& cfg, const Precision& p) {
  const double head = double(cfg.vocab) * double(cfg.hidden) * (cfg.tied_embeddings ? 1 : 2);
  return (double(cfg.param_count()) - head) * p.weight_bytes + head * p.head_weight_bytes();
}

const OpCost& StepCost::op(std::string_view name) const {
  for (const auto& o : ops)
    if (o.name == name) return o;
  fail("step cost has no op '{}'", name);
}

namespace {

OpCost make_op(const char* name, OpKind kind, int64_t kernels) {
  OpCost o;
  o.name = name;
  o.kind = kind;
  o.kernels = kernels;
  return o;
}

// What a GEMM moves and computes beyond its weights, input [M x K] and output [M x N], per count
// (layer): a prologue (a norm's weight and FLOPs; SiLU·mul reading [M x 2K] and its FLOPs) and an
// accumulating epilogue (the residual read). Charged to the first launch of the op.
struct GemmExtra {
  double in_cols = 0;  // columns of the input read per row (0: K)
  double bytes = 0;
  double flops = 0;
  bool head = false;  // the LM head: Precision::head_bytes and head_math
};

struct Builder {
  const Hardware& hw;
  const CostOptions& opt;
  double peak;
  StepCost& out;
  int64_t cfg_layers = 0;  // L: ops run `L` times per step are per-layer ops

  // (e_math, e_mem) of an op class: the hardware's efficiency factors in the achievable model.
  std::pair<double, double> efficiency(OpKind kind) const {
    if (!opt.achievable) return {1.0, 1.0};
    const auto& e = hw.efficiency;
    switch (kind) {
      case OpKind::gemm: return {e.gemm_math, e.gemm_memory};
      case OpKind::attention: return {e.attention_math, e.attention_memory};
      default: return {1.0, e.elementwise};
    }
  }

  // Fills the derived fields of o from its flops and bytes; `tm_eff` is T_math after wave
  // quantization and efficiency when the caller summed parts itself (< 0: derive it here).
  OpCost finish(OpCost o, double wave_eff = 1.0, double tm_eff = -1, double tb_eff = -1) const {
    // (An op may run at another format's peak: the LM head of an fp8 run, Precision::head_math.)
    const double pk = o.format.empty() || o.format == opt.precision.math ? peak : hw.peak(o.format);
    if (o.format.empty()) o.format = opt.precision.math;
    o.intensity = o.bytes > 0 ? o.flops / o.bytes : std::numeric_limits<double>::infinity();
    o.t_math = o.flops / pk;
    o.t_mem = o.bytes / hw.memory_bw;
    o.wave_efficiency = wave_eff;
    std::tie(o.e_math, o.e_mem) = efficiency(o.kind);
    o.t_overhead = opt.include_overhead ? double(o.kernels) * hw.kernel_overhead_s : 0.0;
    const double tm = tm_eff >= 0 ? tm_eff : o.t_math / (wave_eff * o.e_math);
    const double stream = tb_eff >= 0 ? tb_eff : o.t_mem / o.e_mem;
    const double fill = opt.achievable && tb_eff < 0 ? o.t_fill : 0.0;
    const double tb = stream + fill;
    o.bound = tm > tb ? Bound::compute : Bound::memory;
    double t = tm_eff >= 0 ? tm_eff + tb_eff : std::max(tm, tb);
    if (opt.achievable && o.t_latency > t) t = o.t_latency, o.bound = Bound::latency;
    // Mostly the pipeline's fill, not its stream: a dependent chain too.
    if (o.bound == Bound::memory && fill > stream) o.bound = Bound::latency;
    o.time = t + o.t_overhead;
    return o;
  }
  // finish() and append to the step's ops.
  void add(OpCost o, double wave_eff = 1.0, double tm_eff = -1, double tb_eff = -1) {
    out.ops.push_back(finish(std::move(o), wave_eff, tm_eff, tb_eff));
  }

  // Wave efficiency (and split-K) of one GEMM launch of M x N in tiles.
  double gemm_waves(int64_t m, int64_t n, int64_t k, int64_t* split_out) const {
    const int64_t tm = m <= 64 ? 64 : opt.gemm_tile_m;
    int64_t tiles = ((m + tm - 1) / tm) * ((n + opt.gemm_tile_n - 1) / opt.gemm_tile_n);
    // Too few output tiles to fill the machine (small-M decode GEMMs): kernels split K (split-K
    // or stream-K), partial sums reduced in L2, so the grid grows to about one wave.
    const int64_t slots = int64_t(hw.sms.value_or(0)) * std::max(1, opt.blocks_per_sm);
    int64_t split = 1;
    if (slots > 0 && tiles < slots) {
      split = std::min<int64_t>(slots / tiles, std::max<int64_t>(1, k / 256));
      tiles *= split;
    }
    if (split_out) *split_out = split;
    return wave_efficiency(tiles, hw.sms.value_or(0), opt.blocks_per_sm);
  }

  // A GEMM [M x K] x [K x N] run `count` times per step (layers) as `parts` launches of
  // N = sum(parts) columns in all (q|k|v as one launch {q+2kv}, or three {q, kv, kv}).
  void gemm(const char* name, int64_t count, int64_t m, std::initializer_list<int64_t> parts,
            int64_t k, double out_bytes_per_elem, const GemmExtra& extra = {}) {
    if (m <= 0) return;
    const auto& p = opt.precision;
    OpCost o;
    o.name = name;
    o.kind = OpKind::gemm;
    o.kernels = count * int64_t(parts.size());
    o.per_layer = count == cfg_layers;
    o.m = m, o.k = k;
    if (extra.head) o.format = p.head_math_or_math();
    const auto [em, eb] = efficiency(OpKind::gemm);
    double tm_sum = 0, tb_sum = 0, t_sum = 0, tm_raw = 0;
    bool first = true;
    for (const int64_t n : parts) {
      o.n += n;
      const double in_cols = first && extra.in_cols > 0 ? extra.in_cols : double(k);
      const double fl = double(count) * (2.0 * double(m) * double(n) * double(k) +
                                         (first ? extra.flops : 0.0));
      const double wb = extra.head ? p.head_weight_bytes() : p.weight_bytes;
      const double by = double(count) *
                        (double(n) * double(k) * wb + double(m) * in_cols * p.act_bytes +
                         double(m) * double(n) * out_bytes_per_elem + (first ? extra.bytes : 0.0));
      first = false;
      o.flops += fl;
      o.bytes += by;
      int64_t split = 1;
      const double w = gemm_waves(m, n, k, &split);
      o.split_k = std::max(o.split_k, split);
      const double pk = extra.head ? hw.peak(p.head_math_or_math()) : peak;
      const double tm = fl / pk / (w * em), tb = by / hw.memory_bw / eb;
      tm_raw += fl / pk;
      tm_sum += tm, tb_sum += tb;
      t_sum += std::max(tm, tb);
    }
    if (parts.size() == 1) {
      const double w = gemm_waves(m, o.n, k, nullptr);
      add(std::move(o), w);
      return;
    }
    // Several launches: each is bound by its own max; report the sum, split between the
    // compute and memory terms in proportion for the bound.
    const double wave = tm_raw > 0 ? tm_raw / (tm_sum * em) : 1.0;
    const double share = tm_sum + tb_sum > 0 ? tm_sum / (tm_sum + tb_sum) : 0;
    add(std::move(o), wave, t_sum * share, t_sum * (1 - share));
  }
};

// KernelPlan::persistent_decode: the layers' ops, from the first one after the embedding (the
// first layer's norm, or qkv_proj) through down_proj, replaced by one "decode_layers" op with
// their FLOPs and bytes, streamed at the GEMV's efficiency (the weights are nearly all of its
// bytes), one kernel, plus L x Hardware::layer_sync (counted in its t_overhead: time the roofline
// does not explain by bytes or FLOPs). By position, not by per_layer: with one layer the final
// norm and the LM head also run once per layer.
void fold_persistent_layers(Builder& b, int64_t L) {
  auto& ops = b.out.ops;
  const auto first = std::find_if(ops.begin(), ops.end(),
                                  [](const OpCost& o) { return o.name != "embedding"; });
  const auto down = std::find_if(first, ops.end(),
                                 [](const OpCost& o) { return o.name == "down_proj"; });
  if (first == ops.end() || down == ops.end()) return;
  OpCost o = make_op("decode_layers", OpKind::gemm, 1);
  for (auto it = first; it != down + 1; ++it) o.flops += it->flops, o.bytes += it->bytes;
  o = b.finish(std::move(o));
  if (b.opt.include_overhead) {
    const double sync = double(L) * b.hw.layer_sync_s;
    o.t_overhead += sync;
    o.time += sync;
  }
  const auto at = ops.erase(first, down + 1);
  ops.insert(at, std::move(o));
}

// A mixed step whose decodes get an attention launch of their own (the decode kernel) beside
// the prefill chunks' (KernelPlan::mixed_decode_launch_blocks_per_sm).
bool mixed_decode_own_launch(const model::ModelConfig& cfg, const Hardware& hw,
                             const StepAggregate& s, const KernelPlan& plan) {
  return plan.mixed_decode_launch_blocks_per_sm > 0 && s.prefill_seqs > 0 && s.decode_seqs > 0 &&
         double(s.decode_seqs) * double(cfg.n_kv_heads) >=
             double(plan.mixed_decode_launch_blocks_per_sm) * double(hw.sms.value_or(132));
}

// One decode-kernel launch's dependent chain (docs/KERNELS.md, "Run 42"), as ridge splits it
// (kernels::plan_paged_attention / graph_attention_splits with the backend's minimum split): the
// (sequence, KV head) blocks split up to one wave of the resident blocks, the longest block's
// tiles each taking attention_tile after attention_block, one chain per wave, and the merge
// through memory when the KV splits; in graph launches the split count rounded to one wave as
// the kernels round it (KernelPlan::decode_attention_round_splits). 0 when the plan models no
// latency.
double decode_attention_latency(const model::ModelConfig& cfg, const Hardware& hw,
                                const StepAggregate& s, const KernelPlan& kp, bool graph) {
  if (kp.decode_attention_tile <= 0 || s.decode_seqs <= 0) return 0.0;
  const int64_t tile = kp.decode_attention_tile;
  const int64_t blocks = s.decode_seqs * std::max<int64_t>(1, cfg.n_kv_heads);
  const int64_t slots =
      std::max<int64_t>(1, int64_t(kp.decode_attention_blocks_per_sm) * hw.sms.value_or(1));
  const int64_t max_tiles = std::max<int64_t>(1, (s.max_kv_tokens + tile - 1) / tile);
  int64_t splits =
      blocks >= slots ? 1 : std::min<int64_t>((slots + blocks - 1) / blocks, max_tiles);
  const int64_t round = kp.decode_attention_round_splits;
  if (graph && round > 0 && splits > 1 && splits <= round + 2)
    splits = std::min<int64_t>({splits, round, std::max<int64_t>(1, slots / blocks)});
  const int64_t min_tiles = std::max<int64_t>(1, (kp.decode_attention_min_split + tile - 1) / tile);
  const int64_t chunk = std::min(max_tiles, std::max((max_tiles + splits - 1) / splits, min_tiles));
  const int64_t active = (max_tiles + chunk - 1) / chunk;
  const int64_t waves = (blocks * active + slots - 1) / slots;
  return double(waves) * (hw.attention_block_s + double(chunk) * hw.attention_tile_s) +
         (active > 1 ? hw.attention_merge_s : 0.0);
}

// Whether the (general kernel's) attention launch splits the KV range: its blocks, the prefill
// chunks' and, when they share the launch, the decodes', are fewer than the plan's target.
bool attention_splits(const model::ModelConfig& cfg, const Hardware& hw, const StepAggregate& s,
                      const KernelPlan& plan) {
  if (!hw.sms || s.max_kv_tokens <= 64) return false;
  const int64_t group = std::max<int64_t>(1, cfg.n_heads / std::max<int64_t>(1, cfg.n_kv_heads));
  const int64_t decodes = mixed_decode_own_launch(cfg, hw, s, plan) ? 0 : s.decode_seqs;
  const int64_t blocks = (s.prefill_q_tiles64 * group + decodes) * cfg.n_kv_heads;
  return blocks < int64_t(plan.split_blocks_per_sm) * *hw.sms;
}

}  // namespace

std::string_view launch_name(Launch l) { return l == Launch::eager ? "eager" : "graph"; }

Launch launch_named(std::string_view name) {
  if (name == "graph") return Launch::graph;
  if (name == "eager") return Launch::eager;
  fail("unknown launch mode '{}' (known: graph, eager)", name);
}

Fusions Fusions::parse(std::string_view list) {
  const backend::FuseList l = backend::parse_fuse_list(list);
  return {l.norm, l.silu, l.rope_kv, l.swiglu_gemm};
}

std::string Fusions::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ',';
    s += name;
  };
  add(norm, "norm");
  add(silu, "silu");
  add(rope_kv, "rope_kv");
  add(swiglu_gemm, "swiglu_gemm");
  return s.empty() ? "none" : s;
}

KernelPlan KernelPlan::ridge(bool fused_projections, bool pinned_staging, Fusions fusions) {
  KernelPlan k;
  k.qkv_matmuls = fused_projections ? 1 : 3;
  k.gate_up_matmuls = fused_projections ? 1 : 2;
  k.unified_attention = true;
  k.mixed_decode_launch_blocks_per_sm = 1;  // CudaBackend::attention: decodes x KV heads >= SMs
  k.attention_combine = true;                // the general kernel's, when it splits
  k.decode_attention_max_rows = 16;          // paged_decode_kernel (kDecRows), in-kernel merge
  k.decode_attention_tile = 64;              // kBN
  k.decode_attention_blocks_per_sm = 2;      // kernels::kAttentionBlocksPerSm
  k.decode_attention_min_split = 256;        // CudaBackend: attention_min_split()
  k.decode_attention_round_splits = 8;       // kernels: kClusterSplits (cluster_split_count)
  k.residual_in_matmul = true;               // Backend::matmul_add (cuBLASLt beta = 1, or the
                                             // skinny / sm90 GEMMs' residual epilogue)
  // kernels::skinny_prologue_max_tokens: the skinny GEMM's prologue, where switched on.
  // CudaBackend::kFusedMaxTokens: the decode fusions up to 8 tokens.
  k.norm_prologue_max_rows = fusions.norm ? 8 : 0;
  k.norm_sums_in_epilogue = true;
  k.norm_sums_from_embedding = true;         // CudaBackend::embedding_sumsq (tag 2, <= 8 tokens)
  k.norm_folds_into_biased_qkv = false;      // LlamaModel folds q|k|v only without biases
  k.norm_folds_into_tied_head = false;       // ... and the LM head only when not tied
  k.silu_prologue_max_rows = fusions.silu ? 8 : 0;
  k.silu_epilogue_min_rows = fusions.swiglu_gemm ? 1024 : 0;
  k.rope_kv_fused = fusions.rope_kv;
  k.rope_kv_epilogue_max_rows = fusions.rope_kv ? 8 : 0;  // CudaBackend::kFusedMaxTokens
  k.gather_logits_rows = true;
  k.sampling_on_device = false;
  k.metadata_uploads = pinned_staging ? 1 : 7;
  k.logits_to_host = true;
  k.pinned_host = pinned_staging;
  return k;
}

CostOptions CostOptions::ridge(Launch launch, bool fused_projections, bool pinned_staging,
                               Fusions fusions, bool persistent_decode) {
  CostOptions o;
  o.launch = launch;
  o.kernels = KernelPlan::ridge(fused_projections, pinned_staging, fusions);
  o.kernels.persistent_decode = persistent_decode;
  o.achievable = true;
  return o;
}

double eager_finish(const std::vector<double>& d, const std::vector<double>& h) {
  RIDGE_CHECK(d.size() == h.size(), "eager_finish: {} durations, {} launch costs", d.size(), h.size());
  double issued = 0, finish = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    issued += h[i];
    finish = std::max(finish, issued) + d[i];
  }
  return finish;
}

StepCost predict_step(const model::ModelConfig& cfg, const Hardware& hw, const StepAggregate& s,
                      const CostOptions& opt) {
  RIDGE_CHECK(s.tokens >= 1, "step shape: a step needs at least one new token (got {})", s.tokens);
  StepCost c;
  c.ops.reserve(17);
  const auto& p = opt.precision;
  const KernelPlan& kp = opt.kernels;
  const double peak = hw.peak(p.math);
  Builder b{hw, opt, peak, c, cfg.n_layers};
  const int64_t L = cfg.n_layers, T = s.tokens, R = s.logits_rows;
  const double h = double(cfg.hidden), q = double(cfg.q_dim()), kv = double(cfg.kv_dim());
  const double f = double(cfg.ffn), V = double(cfg.vocab), Td = double(T), Ld = double(L);
  const double ab = p.act_bytes, kvb = p.kv_bytes;

  const bool fold_attn_norm = kp.attn_norm_folded(cfg, T);
  // The first layer's folded attn norm takes its sums from the embedding, which writes them:
  // ceil(h / 256) partial sums a row (kernels::embedding_sumsq_parts). qkv_proj is charged the
  // same sums read in every layer (norm_prologue: h / 16 a row, the epilogues' count).
  const bool sums_from_embedding =
      fold_attn_norm && kp.norm_sums_in_epilogue && kp.norm_sums_from_embedding;
  {
    OpCost o = make_op("embedding", OpKind::embedding, 1);
    o.bytes = Td * h * (p.head_weight_bytes() + ab);
    if (sums_from_embedding) o.bytes += 4.0 * Td * std::ceil(h / 256.0);
    b.add(o);
  }
  // RMSNorm as a kernel of its own. With the residual add in the GEMM epilogues
  // (residual_in_matmul) a plain norm: read x, write h (4 FLOPs an element: square, sum, scale,
  // weight). Otherwise the fused residual add + norm: read x and the block's output, write the
  // sum and h (5 FLOPs). Plus the norm weight (h elements at 2 bytes).
  auto norm = [&](const char* name, int64_t count, double rows) {
    OpCost o = make_op(name, OpKind::norm, count);
    o.per_layer = count == L;
    const double passes = kp.residual_in_matmul ? 2.0 : 4.0;
    o.flops = double(count) * (kp.residual_in_matmul ? 4.0 : 5.0) * rows * h;
    o.bytes = double(count) * (passes * rows * h * ab + 2.0 * h);
    if (opt.fuse_elementwise) o.bytes = double(count) * 2.0 * rows * h * ab, o.kernels = 0;  // residual stream only
    b.add(o);
  };
  // A norm folded into the prologue of the GEMM after it, over `rows` rows: the GEMM reads x
  // where it would read h (same bytes) and the norm weight; h is never written or read back.
  // With the sums from the previous epilogue: h / 16 partial sums a row (sums_bytes).
  auto norm_prologue = [&](double rows) {
    return kp.norm_sums_in_epilogue ? GemmExtra{0, 4.0 * rows * std::ceil(h / 16.0), 0}
                                    : GemmExtra{0, 2.0 * h, 4.0 * rows * h};
  };
  // The residual read of a GEMM that adds into x in its epilogue (its write is the GEMM's output),
  // and, where the next norm is folded with sums from this epilogue, their write.
  const GemmExtra residual{0, kp.residual_in_matmul ? Td * h * ab : 0.0, 0};
  const double sums_bytes = 4.0 * Td * std::ceil(h / 16.0);
  auto residual_for = [&](bool next_norm_folded) {
    GemmExtra e = residual;
    if (next_norm_folded && kp.norm_sums_in_epilogue) e.bytes += sums_bytes;
    return e;
  };

  if (!fold_attn_norm) norm("attn_norm", L, Td);
  // The first layer's, after the embedding, where no GEMM before it left the sums.
  if (fold_attn_norm && kp.norm_sums_in_epilogue && !sums_from_embedding) norm("attn_norm", 1, Td);
  GemmExtra qkv_extra = fold_attn_norm ? norm_prologue(Td) : GemmExtra{};
  const bool rope_in_qkv = kp.rope_in_qkv(cfg, T);
  if (rope_in_qkv) {  // the epilogue rotates q and k and writes k and v to the pool as well
    qkv_extra.bytes += Td * 2.0 * kv * kvb;
    qkv_extra.flops += 3.0 * Td * (q + kv);
  }
  const int64_t qkv_n = cfg.q_dim() + 2 * cfg.kv_dim();
  if (kp.qkv_matmuls == 3) {
    b.gemm("qkv_proj", L, T, {cfg.q_dim(), cfg.kv_dim(), cfg.kv_dim()}, cfg.hidden, ab, qkv_extra);
  } else {
    b.gemm("qkv_proj", L, T, {qkv_n}, cfg.hidden, ab, qkv_extra);
  }
  if (rope_in_qkv) {
    // in qkv_proj
  } else if (kp.rope_kv_fused) {
    // One kernel: q, k, v read; q and k rotated in place (written back); k and v to the pool.
    OpCost o = make_op("rope_kv_write", OpKind::kv_write, L);
    o.per_layer = true;
    o.flops = Ld * 3.0 * Td * (q + kv);
    o.bytes = Ld * (Td * (2.0 * q + 3.0 * kv) * ab + Td * 2.0 * kv * kvb);
    if (opt.fuse_elementwise) o.bytes = Ld * Td * 2.0 * kv * kvb, o.kernels = 0;
    b.add(o);
  } else {
    {
      OpCost o = make_op("rope", OpKind::rope, L);
      o.per_layer = true;
      o.flops = Ld * 3.0 * Td * (q + kv);
      o.bytes = Ld * 2.0 * Td * (q + kv) * ab;
      if (opt.fuse_elementwise) o.bytes = 0, o.kernels = 0;
      b.add(o);
    }
    {
      OpCost o = make_op("kv_write", OpKind::kv_write, L);
      o.per_layer = true;
      o.bytes = Ld * Td * 2.0 * kv * (ab + kvb);
      if (opt.fuse_elementwise) o.bytes = Ld * Td * 2.0 * kv * kvb, o.kernels = 0;
      b.add(o);
    }
  }
  const double per_pair = 4.0 * double(cfg.n_heads) * double(cfg.head_dim);  // QK^T and PV
  // Kernels of one attention launch per layer: the kernel, and its combine when the KV splits,
  // unless the decode kernel runs (every sequence's new tokens x group within its row tile),
  // which merges its splits itself.
  const int64_t group = std::max<int64_t>(1, cfg.n_heads / std::max<int64_t>(1, cfg.n_kv_heads));
  const int64_t max_q_len = std::max<int64_t>(s.max_new_tokens, s.prefill_seqs > 0 ? 2 : 1);
  const bool decode_kernel = max_q_len * group <= kp.decode_attention_max_rows;
  const int64_t attn_kernels =
      L * (1 + (kp.attention_combine && !decode_kernel && attention_splits(cfg, hw, s, kp) ? 1 : 0));
  if (s.prefill_seqs > 0) {
    OpCost o = make_op("attn_prefill", OpKind::attention, attn_kernels);
    o.per_layer = true;
    o.flops = Ld * per_pair * s.prefill_pairs;
    o.bytes = Ld * (2.0 * double(s.prefill_tokens) * q * ab + double(s.prefill_kv_tokens) * 2.0 * kv * kvb);
    const int64_t tiles = s.prefill_q_tiles * cfg.n_heads;
    b.add(o, wave_efficiency(tiles, hw.sms.value_or(0), 1));
  }
  if (s.decode_seqs > 0) {
    // Split-KV (flash-decoding) keeps the SMs busy: no wave loss modelled. With one kernel for a
    // mixed step (unified_attention) the decode rows ride in the prefill launch, unless there are
    // enough of them for a decode-kernel launch of their own.
    const bool shared =
        kp.unified_attention && s.prefill_seqs > 0 && !mixed_decode_own_launch(cfg, hw, s, kp);
    OpCost o = make_op("attn_decode", OpKind::attention,
                       shared ? 0 : s.prefill_seqs > 0 ? L : attn_kernels);
    o.per_layer = true;
    o.flops = Ld * per_pair * double(s.decode_kv_tokens);
    o.bytes = Ld * (2.0 * double(s.decode_seqs) * q * ab + double(s.decode_kv_tokens) * 2.0 * kv * kvb);
    if (decode_kernel && !shared && kp.decode_attention_tile > 0) {
      o.t_latency = Ld * decode_attention_latency(cfg, hw, s, kp, opt.launch == Launch::graph);
      // Streaming, the launch's first blocks still spend their round trips and first tile
      // before the KV flows at its rate, and nothing overlaps that: one block and one tile a
      // layer on top of the stream. Run 47 c3 (H100): batch 16 at ~192 positions measured
      // 22.5 us a layer against 17.9 of stream (predicted 20 % fast without it), batch 64 and
      // batch 16 at 4,096 positions within +3 %.
      o.t_fill = Ld * (hw.attention_block_s + hw.attention_tile_s);
    }
    b.add(o);
  }
  const bool fold_mlp_norm = kp.mlp_norm_folded(T);
  b.gemm("o_proj", L, T, {cfg.hidden}, cfg.q_dim(), ab, residual_for(fold_mlp_norm));
  if (!fold_mlp_norm) norm("mlp_norm", L, Td);
  GemmExtra gate_up_extra = fold_mlp_norm ? norm_prologue(Td) : GemmExtra{};
  const bool fold_silu = kp.silu_folded(T) && kp.gate_up_matmuls == 1;
  if (fold_silu) {
    // SiLU·mul in gate_up_proj's epilogue: it writes silu_mul's [T x f] instead of [T x 2f].
    gate_up_extra.bytes -= Td * f * ab;
    gate_up_extra.flops += 5.0 * Td * f;
  }
  if (kp.gate_up_matmuls == 2) {
    b.gemm("gate_up_proj", L, T, {cfg.ffn, cfg.ffn}, cfg.hidden, ab, gate_up_extra);
  } else {
    b.gemm("gate_up_proj", L, T, {2 * cfg.ffn}, cfg.hidden, ab, gate_up_extra);
  }
  GemmExtra down_extra = residual_for(fold_attn_norm);
  if (!fold_silu) {
    OpCost o = make_op("silu_mul", OpKind::elementwise, L);
    o.per_layer = true;
    o.flops = Ld * 5.0 * Td * f;
    o.bytes = Ld * 3.0 * Td * f * ab;
    if (opt.fuse_elementwise) o.bytes = 0, o.kernels = 0;
    b.add(o);
  }
  b.gemm("down_proj", L, T, {cfg.hidden}, cfg.ffn, ab, down_extra);
  if (kp.activation_quant && T >= kp.activation_quant_min_rows) {
    // One quantization per matmul launch, of that matmul's input: h (q|k|v, once per launch),
    // the attention output (o), h again (gate|up), the SwiGLU output (down).
    const double qkv_in = double(kp.qkv_matmuls) * h, gu_in = double(kp.gate_up_matmuls) * h;
    const double cols = qkv_in + q + gu_in + f;
    OpCost o = make_op("quantize_act", OpKind::elementwise,
                       L * (kp.qkv_matmuls + 1 + kp.gate_up_matmuls + 1));
    o.per_layer = true;
    o.flops = Ld * Td * 3.0 * cols;  // |x|, max, x / s
    o.bytes =
        Ld * (Td * cols * (ab + 1.0) + 4.0 * Td * (kp.qkv_matmuls + 1 + kp.gate_up_matmuls + 1));
    b.add(o);
  }
  if (kp.gather_logits_rows && R > 0) {
    // The logits rows gathered before the final norm (which then runs on R rows, not T): the
    // residual stream, and without residual_in_matmul the last projection too (added in the norm).
    const int64_t gathers = kp.residual_in_matmul ? 1 : 2;
    OpCost o = make_op("gather_rows", OpKind::elementwise, gathers);
    o.bytes = double(gathers) * 2.0 * double(R) * h * ab;
    b.add(o);
  }
  const bool fold_final_norm = R > 0 && kp.final_norm_folded(cfg, R);
  if (!fold_final_norm) norm("final_norm", 1, kp.gather_logits_rows && R > 0 ? double(R) : Td);
  if (R > 0) {
    // fp32 logits; the final norm of the R rows in the prologue where folded.
    GemmExtra head = fold_final_norm ? norm_prologue(double(R)) : GemmExtra{};
    head.head = true;
    b.gemm("lm_head", 1, R, {cfg.vocab}, cfg.hidden, 4.0, head);
    if (kp.sampling_on_device) {
      OpCost o = make_op("sampling", OpKind::sampling, 1);
      o.flops = 5.0 * double(R) * V;
      o.bytes = double(R) * V * 4.0;
      b.add(o);
    }
  }

  if (kp.persistent_decode && T == 1 && s.decode_seqs == 1 && s.prefill_seqs == 0)
    fold_persistent_layers(b, L);

  c.peak_flops = peak;
  c.memory_bw = hw.memory_bw;
  c.critical_intensity = peak / hw.memory_bw;
  c.tokens = T;
  c.logits_rows = R;
  c.launch = opt.launch;
  double busy = 0;
  for (const auto& o : c.ops) {
    c.flops += o.flops;
    c.bytes += o.bytes;
    c.t_math += o.t_math;
    c.t_mem += o.t_mem;
    c.t_overhead += o.t_overhead;
    c.t_gpu += o.time;
    c.kernels += o.kernels;
    busy += std::max(o.t_math, o.t_mem);  // time the busier unit is saturated
  }
  if (opt.include_overhead) {
    if (opt.launch == Launch::graph) {
      c.t_launch_stall = hw.launch_overhead_s;  // the graph's own launch
    } else {
      // The kernels in issue order: ops before the layers, L times the per-layer ops, the rest.
      // An op fused away (no kernels of its own) still takes its GPU time, at no launch cost.
      std::vector<double> d, hl;
      d.reserve(size_t(c.kernels + int64_t(c.ops.size()) * L)), hl.reserve(d.capacity());
      auto push = [&](const OpCost& o, int64_t share) {  // share: layers the op's kernels span
        const int64_t n = o.kernels / share;
        if (n == 0) {
          if (o.time > 0) d.push_back(o.time / double(share)), hl.push_back(0.0);
          return;
        }
        const double each = o.time / double(o.kernels);
        const double launch = o.kind == OpKind::gemm ? hw.gemm_launch_s() : hw.launch_overhead_s;
        for (int64_t i = 0; i < n; ++i) d.push_back(each), hl.push_back(launch);
      };
      size_t first = 0;
      while (first < c.ops.size() && !c.ops[first].per_layer) push(c.ops[first++], 1);
      size_t last = first;
      while (last < c.ops.size() && c.ops[last].per_layer) ++last;
      for (int64_t layer = 0; layer < L; ++layer)
        for (size_t i = first; i < last; ++i) push(c.ops[i], L);
      for (size_t i = last; i < c.ops.size(); ++i) push(c.ops[i], 1);
      c.t_launch_stall = std::max(0.0, eager_finish(d, hl) - c.t_gpu);
    }
    // Uploads from pinned memory are queued like a launch; from pageable memory each one is
    // staged by the host first (host_copy_latency, measured as such a copy plus a sync).
    c.t_host = double(kp.metadata_uploads) *
               (kp.pinned_host ? hw.launch_overhead_s : hw.host_copy_latency_s);
    if (kp.logits_to_host && R > 0)
      c.t_host += hw.host_copy_latency_s +
                  double(R) * V * 4.0 / (kp.pinned_host ? hw.pinned_copy_bw : hw.host_copy_bw);
  }
  c.time = c.t_gpu + c.t_launch_stall + c.t_host;
  if (opt.power_cap && hw.capped_flops && hw.capped_bandwidth) {
    // Each FLOP and byte spends a share of the cap's energy budget; the GPU's clock drops until
    // the step's power fits the cap (memory traffic at full bandwidth costs nearly the whole cap
    // on an H200, so mixing attention with GEMMs does not hide either).
    const double capped =
        hw.has_peak("bf16") ? *hw.capped_flops * peak / hw.peak("bf16") : *hw.capped_flops;
    c.t_power = c.flops / capped + c.bytes / *hw.capped_bandwidth;
    if (c.t_power > c.time) c.time = c.t_power, c.power_bound = true;
  }
  // Under the cap (t_power > 0) no step goes below its energy's time: both bounds include it.
  c.lower_bound = std::max({c.t_math, c.t_mem, c.t_power});
  c.upper_bound =
      std::max(c.t_math + c.t_mem + c.t_overhead + c.t_launch_stall + c.t_host, c.t_power);
  c.flop_utilization = c.flops / (c.time * peak);
  c.bw_utilization = c.bytes / (c.time * hw.memory_bw);
  if (hw.tdp_w) {
    if (c.power_bound) {
      c.energy_at_tdp = false;
      c.power_w = *hw.tdp_w;  // held at the cap
    } else if (hw.idle_w) {
      c.energy_at_tdp = false;
      c.power_w = *hw.idle_w + (*hw.tdp_w - *hw.idle_w) * std::min(1.0, busy / c.time);
    } else {
      c.power_w = *hw.tdp_w;
    }
    c.energy_j = c.power_w * c.time;
  } else {
    c.power_w = c.energy_j = std::numeric_limits<double>::quiet_NaN();
  }
  return c;
}

OpCost predict_gemm(const Hardware& hw, int64_t m, int64_t n, int64_t k, const CostOptions& opt) {
  RIDGE_CHECK(m >= 1 && n >= 1 && k >= 1, "predict_gemm: M={} N={} K={} must be >= 1", m, n, k);
  StepCost c;
  Builder b{hw, opt, hw.peak(opt.precision.math), c};
  b.gemm("gemm", 1, m, {n}, k, opt.precision.act_bytes);
  return c.ops.front();
}

StepCost predict_step(const model::ModelConfig& cfg, const Hardware& hw, const StepShape& s,
                      const CostOptions& opt) {
  return predict_step(cfg, hw, StepAggregate::of(s), opt);
}

int64_t decode_compute_bound_batch(const model::ModelConfig& cfg, const Hardware& hw,
                                   const CostOptions& opt, int64_t max_batch) {
  const double ci = hw.critical_intensity(opt.precision.math);
  auto gemm_intensity = [&](int64_t batch) {
    const StepCost c = predict_step(cfg, hw, StepShape::decode(batch, 0), opt);
    double fl = 0, by = 0;
    for (const auto& o : c.ops)
      if (o.kind == OpKind::gemm) fl += o.flops, by += o.bytes;
    return fl / by;
  };
  if (gemm_intensity(max_batch) < ci) return -1;  // never within max_batch
  int64_t lo = 1, hi = max_batch;                   // intensity grows with the batch
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (gemm_intensity(mid) >= ci) hi = mid; else lo = mid + 1;
  }
  return lo;
}

}  // namespace ridge::perf
