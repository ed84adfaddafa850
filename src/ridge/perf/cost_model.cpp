#include "ridge/perf/cost_model.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <limits>

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

std::string_view bound_name(Bound b) { return b == Bound::compute ? "compute" : "memory"; }

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
  return double(cfg.param_count()) * p.weight_bytes;
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

struct Builder {
  const Hardware& hw;
  const CostOptions& opt;
  double peak;
  StepCost& out;

  void add(OpCost o, double wave_eff = 1.0) {
    o.format = opt.precision.math;
    o.intensity = o.bytes > 0 ? o.flops / o.bytes : std::numeric_limits<double>::infinity();
    o.t_math = o.flops / peak;
    o.t_mem = o.bytes / hw.memory_bw;
    o.wave_efficiency = wave_eff;
    o.t_overhead = opt.include_overhead ? double(o.kernels) * hw.kernel_overhead_s : 0.0;
    const double tm = o.t_math / wave_eff;
    o.bound = tm > o.t_mem ? Bound::compute : Bound::memory;
    o.time = std::max(tm, o.t_mem) + o.t_overhead;
    out.ops.push_back(std::move(o));
  }

  // A GEMM [M x K] x [K x N] run `count` times per step (layers); weights N x K.
  void gemm(const char* name, int64_t count, int64_t m, int64_t n, int64_t k, double out_bytes_per_elem) {
    if (m <= 0) return;
    const auto& p = opt.precision;
    OpCost o;
    o.name = name;
    o.kind = OpKind::gemm;
    o.kernels = count;
    o.m = m, o.n = n, o.k = k;
    o.flops = double(count) * 2.0 * double(m) * double(n) * double(k);
    o.bytes = double(count) * (double(n) * double(k) * p.weight_bytes + double(m) * double(k) * p.act_bytes +
                               double(m) * double(n) * out_bytes_per_elem);
    const int64_t tm = m <= 64 ? 64 : opt.gemm_tile_m;
    int64_t tiles = ((m + tm - 1) / tm) * ((n + opt.gemm_tile_n - 1) / opt.gemm_tile_n);
    // Too few output tiles to fill the machine (small-M decode GEMMs): kernels split K (split-K
    // or stream-K), partial sums reduced in L2, so the grid grows to about one wave.
    const int64_t slots = int64_t(hw.sms.value_or(0)) * std::max(1, opt.blocks_per_sm);
    if (slots > 0 && tiles < slots) {
      const int64_t split = std::min<int64_t>(slots / tiles, std::max<int64_t>(1, k / 256));
      o.split_k = split;
      tiles *= split;
    }
    add(std::move(o), wave_efficiency(tiles, hw.sms.value_or(0), opt.blocks_per_sm));
  }
};

}  // namespace

StepCost predict_step(const model::ModelConfig& cfg, const Hardware& hw, const StepAggregate& s,
                      const CostOptions& opt) {
  RIDGE_CHECK(s.tokens >= 1, "step shape: a step needs at least one new token (got {})", s.tokens);
  StepCost c;
  c.ops.reserve(16);
  const auto& p = opt.precision;
  const double peak = hw.peak(p.math);
  Builder b{hw, opt, peak, c};
  const int64_t L = cfg.n_layers, T = s.tokens, R = s.logits_rows;
  const double h = double(cfg.hidden), q = double(cfg.q_dim()), kv = double(cfg.kv_dim());
  const double f = double(cfg.ffn), V = double(cfg.vocab), Td = double(T), Ld = double(L);
  const double ab = p.act_bytes, kvb = p.kv_bytes;

  {
    OpCost o = make_op("embedding", OpKind::embedding, 1);
    o.bytes = Td * h * (p.weight_bytes + ab);
    b.add(o);
  }
  auto norm = [&](const char* name, int64_t count) {
    // Fused residual add + RMSNorm: read x and the residual, write the sum and the normed x.
    OpCost o = make_op(name, OpKind::norm, count);
    o.flops = double(count) * 5.0 * Td * h;
    o.bytes = double(count) * (4.0 * Td * h * ab + 2.0 * h);
    if (opt.fuse_elementwise) o.bytes = double(count) * 2.0 * Td * h * ab, o.kernels = 0;  // residual stream only
    b.add(o);
  };
  norm("attn_norm", L);
  b.gemm("qkv_proj", L, T, cfg.q_dim() + 2 * cfg.kv_dim(), cfg.hidden, ab);
  {
    OpCost o = make_op("rope", OpKind::rope, L);
    o.flops = Ld * 3.0 * Td * (q + kv);
    o.bytes = Ld * 2.0 * Td * (q + kv) * ab;
    if (opt.fuse_elementwise) o.bytes = 0, o.kernels = 0;
    b.add(o);
  }
  {
    OpCost o = make_op("kv_write", OpKind::kv_write, L);
    o.bytes = Ld * Td * 2.0 * kv * (ab + kvb);
    if (opt.fuse_elementwise) o.bytes = Ld * Td * 2.0 * kv * kvb, o.kernels = 0;
    b.add(o);
  }
  const double per_pair = 4.0 * double(cfg.n_heads) * double(cfg.head_dim);  // QK^T and PV
  if (s.prefill_seqs > 0) {
    OpCost o = make_op("attn_prefill", OpKind::attention, L);
    o.flops = Ld * per_pair * s.prefill_pairs;
    o.bytes = Ld * (2.0 * double(s.prefill_tokens) * q * ab + double(s.prefill_kv_tokens) * 2.0 * kv * kvb);
    const int64_t tiles = s.prefill_q_tiles * cfg.n_heads;
    b.add(o, wave_efficiency(tiles, hw.sms.value_or(0), 1));
  }
  if (s.decode_seqs > 0) {
    // Split-KV (flash-decoding) keeps the SMs busy: no wave loss modelled.
    OpCost o = make_op("attn_decode", OpKind::attention, L);
    o.flops = Ld * per_pair * double(s.decode_kv_tokens);
    o.bytes = Ld * (2.0 * double(s.decode_seqs) * q * ab + double(s.decode_kv_tokens) * 2.0 * kv * kvb);
    b.add(o);
  }
  b.gemm("o_proj", L, T, cfg.hidden, cfg.q_dim(), ab);
  norm("mlp_norm", L);
  b.gemm("gate_up_proj", L, T, 2 * cfg.ffn, cfg.hidden, ab);
  {
    OpCost o = make_op("silu_mul", OpKind::elementwise, L);
    o.flops = Ld * 5.0 * Td * f;
    o.bytes = Ld * 3.0 * Td * f * ab;
    if (opt.fuse_elementwise) o.bytes = 0, o.kernels = 0;
    b.add(o);
  }
  b.gemm("down_proj", L, T, cfg.hidden, cfg.ffn, ab);
  norm("final_norm", 1);
  if (R > 0) {
    b.gemm("lm_head", 1, R, cfg.vocab, cfg.hidden, 4.0);  // fp32 logits
    OpCost o = make_op("sampling", OpKind::sampling, 1);
    o.flops = 5.0 * double(R) * V;
    o.bytes = double(R) * V * 4.0;
    b.add(o);
  }

  c.peak_flops = peak;
  c.memory_bw = hw.memory_bw;
  c.critical_intensity = peak / hw.memory_bw;
  c.tokens = T;
  c.logits_rows = R;
  double busy = 0;
  for (const auto& o : c.ops) {
    c.flops += o.flops;
    c.bytes += o.bytes;
    c.t_math += o.t_math;
    c.t_mem += o.t_mem;
    c.t_overhead += o.t_overhead;
    c.time += o.time;
    busy += std::max(o.t_math, o.t_mem);  // time the busier unit is saturated
  }
  c.lower_bound = std::max(c.t_math, c.t_mem);
  c.upper_bound = c.t_math + c.t_mem + c.t_overhead;
  c.flop_utilization = c.flops / (c.time * peak);
  c.bw_utilization = c.bytes / (c.time * hw.memory_bw);
  if (hw.tdp_w) {
    if (hw.idle_w) {
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
