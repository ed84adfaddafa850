#include "bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "ridge/backend/backend.h"
#include "ridge/core/error.h"
#include "ridge/model/llama.h"
#include "ridge/perf/cost_model.h"
#ifdef RIDGE_HAVE_PERF_GPU
#include "ridge/perf/gpu/ceilings.h"
#endif

namespace ridge::app {
namespace {

using backend::Backend;
using backend::Buffer;
using backend::Stream;

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

// Device (or host, on the CPU backend) memory holding `bytes`, filled with small finite values of
// `dtype` (zero bytes for block-quantized types: a zero scale, so zeros).
Buffer filled(Backend& be, size_t bytes, DType dtype, float value = 0.01f) {
  Buffer b = be.allocate(std::max<size_t>(bytes, 16));
  const size_t chunk = std::min<size_t>(bytes, size_t(16) << 20);
  std::vector<uint8_t> host(std::max<size_t>(chunk, 16), 0);
  if (dtype == DType::bf16) {
    for (size_t i = 0; i + 1 < host.size(); i += 2) {
      const uint16_t v = bf16_bits(value * (1.0f + float((i / 2) % 7) / 8.0f));
      std::memcpy(&host[i], &v, 2);
    }
  } else if (dtype == DType::f32) {
    for (size_t i = 0; i + 3 < host.size(); i += 4) {
      const float v = value * (1.0f + float((i / 4) % 7) / 8.0f);
      std::memcpy(&host[i], &v, 4);
    }
  }
  for (size_t at = 0; at < bytes; at += chunk)
    be.upload({}, static_cast<char*>(b.data()) + at, host.data(), std::min(chunk, bytes - at));
  be.synchronize({});
  return b;
}

// Host memory the device copies into fastest where the backend offers it (pinned on a GPU,
// Backend::allocate_host in newer trees), else plain memory.
template <class B>
Buffer host_buffer(B& be, size_t bytes) {
  if constexpr (requires(B& x) { x.allocate_host(size_t{1}); }) {
    return be.allocate_host(bytes);
  } else {
    char* p = new char[bytes];
    return Buffer(p, bytes, [](void* q) { delete[] static_cast<char*>(q); });
  }
}

Tensor view2d(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld, Device dev) {
  Tensor t(data, dtype, {rows, cols}, dev);
  t.stride[0] = ld;
  return t;
}

// Weights of one matmul shape [n, k], rotated over `sets` copies carved from a shared pool.
struct Weights {
  std::vector<Tensor> sets;
  const Tensor& at(int i) const { return sets[size_t(i) % sets.size()]; }
};

// Times `issue(i)` for i in [0, calls): graph replay and eager on a GPU, wall time on the CPU.
class Timer {
 public:
  Timer(Backend& be, int calls, int replays) : be_(be), calls_(calls), replays_(replays) {
#ifdef RIDGE_HAVE_PERF_GPU
    if (be.device() == Device::cuda) gpu_ = std::make_unique<perf::gpu::StreamTimer>();
#endif
  }
  Stream stream() const {
#ifdef RIDGE_HAVE_PERF_GPU
    if (gpu_) return Stream{gpu_->stream()};
#endif
    return Stream{};
  }
  // Seconds per call: {graph (< 0 if not measured), eager}.
  std::pair<double, double> time(const std::function<void(int)>& issue) {
    const Stream s = stream();
    // Warm-up: plans, workspaces and kernel choices for this shape and stream, outside capture.
    for (int i = 0; i < 2; ++i) issue(i);
    be_.synchronize(s);
    auto all = [&] {
      for (int i = 0; i < calls_; ++i) issue(i);
    };
#ifdef RIDGE_HAVE_PERF_GPU
    if (gpu_) {
      const double g = gpu_->graph(all, replays_);
      double e = 1e30;
      for (int r = 0; r < 3; ++r) e = std::min(e, gpu_->eager(all));
      return {g > 0 ? g / calls_ : -1.0, e / calls_};
    }
#endif
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      all();
      be_.synchronize(s);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return {-1.0, best / calls_};
  }

 private:
  Backend& be_;
  int calls_, replays_;
#ifdef RIDGE_HAVE_PERF_GPU
  std::unique_ptr<perf::gpu::StreamTimer> gpu_;
#endif
};

// Whether the backend runs one row of Backend::matmul_fused with prologue `f` as one kernel (on
// the CUDA backend: the "norm" / "silu" items of BackendOptions::fuse, and not with --gemm cublas;
// the CPU backend never does). By matmul_fused's contract its `scratch` receives the prologue's
// output only when the prologue runs as a kernel of its own: the scratch row is preset to a
// sentinel and read back. x, scratch and out are the first rows of the buffers run_layers uses.
bool backend_folds(Backend& be, const Tensor& x, const Tensor& w, const backend::MatmulFusion& f,
                   const Tensor& scratch, const Tensor& out) {
  const Device dev = be.device();
  const DType act = scratch.dtype;
  const size_t bytes = ridge::row_bytes(act, scratch.shape[1]);
  const Tensor in = view2d(x.data, act, 1, x.shape[1], x.stride[0], dev);
  Tensor sc = view2d(scratch.data, act, 1, scratch.shape[1], scratch.stride[0], dev);
  Tensor o = view2d(out.data, out.dtype, 1, out.shape[1], out.stride[0], dev);
  const std::vector<uint8_t> sentinel(bytes, 0x7f);  // bf16 / f32 0x7f7f...: ~3.4e38, finite
  std::vector<uint8_t> back(bytes, 0);
  be.upload({}, sc.data, sentinel.data(), bytes);
  be.matmul_fused({}, in, w, f, sc, o);
  be.download({}, back.data(), sc.data, bytes);
  be.synchronize({});
  return back == sentinel;
}

}  // namespace

std::vector<OpTime> profile_ops(engine::ModelBundle& b, const model::ForwardBatch& fb,
                                const OpProfileOptions& o) {
  Backend& be = *b.backend;
  const model::ModelConfig& c = b.config();
  const Device dev = be.device();
  const DType act = be.activation_dtype();
  const size_t esz = ridge::row_bytes(act, 1);
  const int64_t T = fb.num_tokens(), S = fb.num_seqs(), R = int64_t(fb.logits_rows.size());
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn, V = c.vocab, L = c.n_layers;
  RIDGE_CHECK(T > 0 && S > 0, "profile_ops: an empty step");
  auto kv = b.kv_pool->layers();
  fb.validate(kv[0].k.shape[0] * kv[0].k.shape[1], kv[0].k.shape[1]);
  // Weights as the backend runs them: bf16 on a GPU, the file's storage type on the CPU.
  const DType wdt = dev == Device::cuda ? DType::bf16 : c.weight_dtype;
  const int calls = std::max(2, o.calls);

  // Step metadata on the device.
  std::vector<Buffer> keep;
  auto i32 = [&](const std::vector<int32_t>& v) {
    Buffer buf = be.allocate(std::max<size_t>(v.size(), 1) * 4);
    if (!v.empty()) be.upload({}, buf.data(), v.data(), v.size() * 4);
    Tensor t(buf.data(), DType::i32, {int64_t(v.size())}, dev);
    keep.push_back(std::move(buf));
    return t;
  };
  const Tensor ids = i32(fb.tokens), positions = i32(fb.positions), slots = i32(fb.slots);
  backend::AttentionMeta meta;
  meta.num_seqs = S;
  meta.max_blocks_per_seq = fb.max_blocks_per_seq;
  for (int64_t s = 0; s < S; ++s) {
    meta.max_q_len = std::max(meta.max_q_len, fb.cu_seqlens[size_t(s) + 1] - fb.cu_seqlens[size_t(s)]);
    meta.max_context_len = std::max(meta.max_context_len, fb.context_lens[size_t(s)]);
  }
  meta.cu_seqlens_q = i32(fb.cu_seqlens);
  meta.context_lens = i32(fb.context_lens);
  meta.block_tables = i32(fb.block_tables);
  meta.host_cu_seqlens_q = fb.cu_seqlens.data();
  meta.host_context_lens = fb.context_lens.data();
  meta.host_block_tables = fb.block_tables.data();
  const Tensor rows = i32(fb.logits_rows);
  const bool prefill = meta.max_q_len > 1;

  // Activations, one buffer per role as in LlamaModel::run_layers: x the residual stream (the
  // o_proj and down_proj epilogues add into it), h a block's normed input, mlp SiLU·mul's output.
  auto act_buf = [&](int64_t n_rows, int64_t n_cols) {
    keep.push_back(filled(be, size_t(std::max<int64_t>(n_rows, 1) * n_cols) * esz, act));
    return Tensor(keep.back().data(), act, {n_rows, n_cols}, dev);
  };
  Tensor x = act_buf(T, H), h = act_buf(T, H), qkv = act_buf(T, Q + 2 * KV), attn = act_buf(T, Q),
         gate_up = act_buf(T, 2 * F), mlp = act_buf(T, F);
  Tensor xr = act_buf(R, H), last_normed = act_buf(R, H);
  keep.push_back(filled(be, size_t(std::max<int64_t>(R, 1) * V) * 4, DType::f32));
  Tensor logits(keep.back().data(), DType::f32, {R, V}, dev);
  Tensor q = view2d(qkv.data, act, T, Q, Q + 2 * KV, dev);
  Tensor k = view2d(static_cast<char*>(qkv.data) + Q * esz, act, T, KV, Q + 2 * KV, dev);
  Tensor v = view2d(static_cast<char*>(qkv.data) + (Q + KV) * esz, act, T, KV, Q + 2 * KV, dev);
  Tensor gate = view2d(gate_up.data, act, T, F, 2 * F, dev);
  Tensor up = view2d(static_cast<char*>(gate_up.data) + F * esz, act, T, F, 2 * F, dev);
  keep.push_back(filled(be, size_t(H) * 4, DType::f32, 1.0f));
  const Tensor norm_w(keep.back().data(), DType::f32, {H}, dev);
  // The norm weight of a folded norm (MatmulFusion::norm_folded): ones, as LlamaModel's ones_.
  // It is also what the timed weights are folded with (Backend::fold_norm_weight), which leaves
  // their values, shared by every shape carved from the pool, as they are.
  const std::vector<float> ones_host(size_t(H), 1.0f);
  keep.push_back(be.allocate(ones_host.size() * 4));
  be.upload({}, keep.back().data(), ones_host.data(), ones_host.size() * 4);
  const Tensor ones(keep.back().data(), DType::f32, {H}, dev);
  const std::vector<float> inv = model::rope_inv_freq(c);
  keep.push_back(be.allocate(inv.size() * 4));
  be.upload({}, keep.back().data(), inv.data(), inv.size() * 4);
  const Tensor inv_freq(keep.back().data(), DType::f32, {int64_t(inv.size())}, dev);

  // Weights: one pool, each shape's copies carved from it (only one op runs at a time).
  auto sets_for = [&](size_t bytes) {
    return int(std::clamp<double>(std::ceil(3.0 * o.l2_bytes / double(bytes)), 2.0, 8.0));
  };
  struct Shape {
    int64_t n, k;
  };
  std::vector<Shape> shapes = {{Q, H}, {KV, H}, {Q + 2 * KV, H}, {H, Q}, {F, H}, {2 * F, H}, {H, F}, {V, H}};
  size_t pool_bytes = 0;
  for (const auto& s : shapes) {
    const size_t w = ridge::row_bytes(wdt, s.k) * size_t(s.n);
    pool_bytes = std::max(pool_bytes, w * size_t(sets_for(w)));
  }
  Buffer pool = filled(be, pool_bytes, wdt);
  auto weights = [&](int64_t n, int64_t kk) {
    const size_t w = ridge::row_bytes(wdt, kk) * size_t(n);
    Weights ws;
    const int sets = sets_for(w);
    for (int i = 0; i < sets; ++i)
      ws.sets.push_back(Tensor(static_cast<char*>(pool.data()) + size_t(i) * w, wdt, {n, kk}, dev));
    return ws;
  };
  const float eps = float(c.rms_norm_eps), scale = 1.0f / std::sqrt(float(c.head_dim));
  // The norm runs fused only into a weight it was folded into (fold_norm_weight, as the model
  // does at load). Folds every copy of `w` with the ones vector: false, changing nothing, where
  // the backend does not fold (the CPU backend; CUDA without --fuse norm or with --gemm cublas).
  auto fold = [&](const Weights& w) {
    for (Tensor t : w.sets)
      if (!be.fold_norm_weight(t, ones)) return false;
    return true;
  };

  be.synchronize({});  // every upload above done before the probes and the timed ops read them
  // Which kernels run: the cost model's plan of ridge (perf::KernelPlan::ridge) for the fuse list
  // the backend was built with (OpProfileOptions::fusions, from BackendOptions::fuse) at this
  // step's T and R rows: each timed op is one op of the plan, under its name. An op folded into
  // another at this T is not timed alone: its time is inside the op it joined (with "norm":
  // attn_norm in qkv_proj, mlp_norm in gate_up_proj, their sums of squares written by down_proj
  // and o_proj, timed after one such call, and for the first layer's attn_norm by the embedding
  // (timed as Backend::embedding_sumsq); with "silu": silu_mul in gate_up_proj (matmul_swiglu);
  // with "rope_kv": rope and kv_write in rope_kv_write), as in the prediction. A folded call is
  // Backend::matmul_fused / matmul_swiglu / rope_kv_store as run_layers issues it; where the
  // backend composes instead, the parts are issued as the composition does (rmsnorm then matmul,
  // silu_mul then matmul_add, rope then kv_store), each under its own name. The residual adds are
  // always in the o_proj / down_proj epilogues (matmul_add). A norm folds as the model folds it:
  // its weight folded into the GEMM's (Backend::fold_norm_weight, here the timed weights with
  // ones) and matmul_fused told so (norm_folded, a norm weight of ones); not into q|k|v with
  // biases nor into a tied LM head (KernelPlan::attn_norm_folded / final_norm_folded of the
  // model's config), and where the backend does not fold the weight, composed. The two prologue
  // switches are checked against the backend first (one row of qkv_proj's and down_proj's
  // matmul_fused, the norm's on a folded q|k|v weight); where it does otherwise (e.g. --gemm
  // cublas folds nothing) its behaviour is what gets timed. rope_kv cannot be observed that way
  // (fused or not, rope_kv_store writes the same memory): it is taken as given.
  perf::Fusions fusions = o.fusions;
  // The residual-adding matmuls as run_layers issues them: o_proj and down_proj record the sums of
  // squares of x's rows (tags 1 and 2) for the next block's folded norm (norm_sumsq).
  backend::MatmulFusion attn_out;
  attn_out.accumulate = true;
  attn_out.record_sumsq = 1;
  {
    backend::MatmulFusion norm_probe;
    norm_probe.norm_weight = &ones;
    norm_probe.eps = eps;
    norm_probe.norm_folded = true;
    norm_probe.norm_sumsq = 1;
    Tensor probe_w = weights(Q + 2 * KV, H).at(0);
    Tensor x1 = view2d(x.data, act, 1, H, H, dev);
    const Tensor attn1 = view2d(attn.data, act, 1, Q, Q, dev);
    be.matmul_fused({}, attn1, weights(H, Q).at(0), attn_out, h, x1);  // the sums of x's row
    const bool norm_folds = be.fold_norm_weight(probe_w, ones) &&
                            backend_folds(be, x, probe_w, norm_probe, h, qkv);
    // SwiGLU folds where matmul_swiglu leaves its gate_up scratch untouched.
    bool silu_folds = false;
    {
      const size_t bytes = ridge::row_bytes(act, 2 * F);
      const std::vector<uint8_t> sentinel(bytes, 0x7f);
      std::vector<uint8_t> back(bytes, 0);
      Tensor gu1 = view2d(gate_up.data, act, 1, 2 * F, 2 * F, dev);
      Tensor mlp1 = view2d(mlp.data, act, 1, F, F, dev), h1 = view2d(h.data, act, 1, H, H, dev);
      be.upload({}, gu1.data, sentinel.data(), bytes);
      be.matmul_swiglu({}, x1, weights(2 * F, H).at(0), backend::MatmulFusion{}, h1, gu1, mlp1);
      be.download({}, back.data(), gu1.data, bytes);
      be.synchronize({});
      silu_folds = back == sentinel;
    }
    if (norm_folds != fusions.norm || silu_folds != fusions.silu) {
      perf::Fusions seen = fusions;
      seen.norm = norm_folds, seen.silu = silu_folds;
      fmt::print(stderr,
                 "profile-ops: the fuse list is {} but the backend runs {} (prologues probed); "
                 "timing what it runs\n",
                 fusions.describe(), seen.describe());
      fusions = seen;
    }
  }
  const perf::KernelPlan plan = perf::KernelPlan::ridge(o.fused_projections, true, fusions);
  be.synchronize({});
  Timer timer(be, calls, o.replays);
  const Stream s = timer.stream();
  std::vector<OpTime> out;
  // per_step: how many times the op's calls run in one step (L for per-layer ops).
  auto record = [&](const std::string& name, int64_t per_step, int64_t backend_calls,
                    const std::function<void(int)>& issue) {
    const auto [g, e] = timer.time(issue);
    OpTime t;
    t.op = name;
    t.backend_calls = backend_calls * per_step;
    t.graph_s = g > 0 ? g * double(per_step) : -1.0;
    t.eager_s = e * double(per_step);
    out.push_back(t);
  };
  // A block's input norm in the GEMM, its weight folded into the GEMM's, its sums of squares
  // from the o_proj (tag 1) or down_proj (tag 2) epilogue.
  backend::MatmulFusion norm_in;
  norm_in.norm_weight = &ones;
  norm_in.eps = eps;
  norm_in.norm_folded = true;
  backend::MatmulFusion mlp_out;
  mlp_out.accumulate = true;
  mlp_out.record_sumsq = 2;

  {
    // The embedding table: the first V rows of the weight pool viewed as [V, H].
    const Tensor table(pool.data(), wdt, {V, H}, dev);
    // With the first layer's attn norm folded and its sums from the embedding, the embedding
    // as run_layers issues it: keeping its rows' sums of squares under tag 2.
    const bool sums = plan.norm_sums_from_embedding && plan.attn_norm_folded(c, T);
    if (ridge::row_bytes(wdt, H) * size_t(V) <= pool_bytes)
      record("embedding", 1, 1, [&](int) {
        if (sums)
          be.embedding_sumsq(s, table, ids, x, 2);
        else
          be.embedding(s, table, ids, x);
      });
  }
  auto norm = [&](int) { be.rmsnorm(s, x, norm_w, eps, h); };
  // RoPE and the KV store in qkv_proj's epilogue where the plan puts them and the backend does it
  // (one call to see: it declines with --gemm cublas); else rope_kv_write is timed apart.
  const bool rope_in_qkv =
      plan.rope_in_qkv(c, T) && be.matmul_rope_kv(s, h, weights(Q + 2 * KV, H).at(0), {}, x, qkv,
                                                  positions, inv_freq, slots, kv[0]);
  if (const Weights w = weights(Q + 2 * KV, H); plan.attn_norm_folded(c, T) && fold(w)) {
    // The first layer's norm follows the embedding: a kernel, once a step, unless the embedding
    // leaves its sums (norm_sums_from_embedding).
    if (plan.norm_sums_in_epilogue && !plan.norm_sums_from_embedding)
      record("attn_norm", 1, 1, norm);
    backend::MatmulFusion in = norm_in;
    in.norm_sumsq = 2;
    be.matmul_fused(s, mlp, weights(H, F).at(0), mlp_out, gate_up, x);  // the sums, once
    record("qkv_proj", L, 1, [&](int i) {
      if (!rope_in_qkv || !be.matmul_rope_kv(s, x, w.at(i), in, h, qkv, positions, inv_freq,
                                             slots, kv[size_t(i) % kv.size()]))
        be.matmul_fused(s, x, w.at(i), in, h, qkv);
    });
  } else {
    record("attn_norm", L, 1, norm);
    if (plan.qkv_matmuls == 1) {
      record("qkv_proj", L, 1, [&](int i) {
        if (!rope_in_qkv || !be.matmul_rope_kv(s, h, w.at(i), {}, x, qkv, positions, inv_freq,
                                               slots, kv[size_t(i) % kv.size()]))
          be.matmul(s, h, w.at(i), nullptr, qkv);
      });
    } else {
      const Weights wq = weights(Q, H), wk = weights(KV, H), wv = weights(KV, H);
      record("qkv_proj", L, 3, [&](int i) {
        be.matmul(s, h, wq.at(i), nullptr, q);
        be.matmul(s, h, wk.at(i), nullptr, k);
        be.matmul(s, h, wv.at(i), nullptr, v);
      });
    }
  }
  if (rope_in_qkv) {
    // in qkv_proj (matmul_rope_kv)
  } else if (plan.rope_kv_fused) {
    record("rope_kv_write", L, 1, [&](int i) {
      be.rope_kv_store(s, q, k, v, positions, inv_freq, slots, kv[size_t(i) % kv.size()]);
    });
  } else {
    record("rope", L, 1, [&](int) { be.rope(s, q, k, positions, inv_freq); });
    record("kv_write", L, 1, [&](int i) { be.kv_store(s, k, v, slots, kv[size_t(i) % kv.size()]); });
  }
  record(prefill ? "attn_prefill" : "attn_decode", L, 1,
         [&](int i) { be.attention(s, q, kv[size_t(i) % kv.size()], meta, scale, attn); });
  {
    const Weights w = weights(H, Q);
    record("o_proj", L, 1, [&](int i) { be.matmul_fused(s, attn, w.at(i), attn_out, h, x); });  // x += attn·woᵀ
  }
  // SiLU·mul in gate_up_proj's epilogue (matmul_swiglu), gate|up then never written.
  const bool silu_in_gate_up = plan.silu_folded(T) && plan.gate_up_matmuls == 1;
  if (const Weights w = weights(2 * F, H); plan.mlp_norm_folded(T) && fold(w)) {
    backend::MatmulFusion in = norm_in;
    in.norm_sumsq = 1;  // from o_proj's calls just timed
    if (silu_in_gate_up)
      record("gate_up_proj", L, 1,
             [&](int i) { be.matmul_swiglu(s, x, w.at(i), in, h, gate_up, mlp); });
    else
      record("gate_up_proj", L, 1, [&](int i) { be.matmul_fused(s, x, w.at(i), in, h, gate_up); });
  } else {
    record("mlp_norm", L, 1, norm);
    if (plan.gate_up_matmuls == 1 && silu_in_gate_up) {
      record("gate_up_proj", L, 1, [&](int i) {
        be.matmul_swiglu(s, h, w.at(i), backend::MatmulFusion{}, last_normed, gate_up, mlp);
      });
    } else if (plan.gate_up_matmuls == 1) {
      record("gate_up_proj", L, 1, [&](int i) { be.matmul(s, h, w.at(i), nullptr, gate_up); });
    } else {
      const Weights wg = weights(F, H), wu = weights(F, H);
      record("gate_up_proj", L, 2, [&](int i) {
        be.matmul(s, h, wg.at(i), nullptr, gate);
        be.matmul(s, h, wu.at(i), nullptr, up);
      });
    }
  }
  {
    const Weights w = weights(H, F);
    if (!silu_in_gate_up) record("silu_mul", L, 1, [&](int) { be.silu_mul(s, gate_up, mlp); });
    record("down_proj", L, 1, [&](int i) { be.matmul_fused(s, mlp, w.at(i), mlp_out, h, x); });
  }
  if (R > 0) {
    record("gather_rows", 1, 1, [&](int) { be.gather_rows(s, x, rows, xr); });  // x's rows only
    const Weights w = weights(V, H);
    if (plan.final_norm_folded(c, R) && fold(w)) {
      record("lm_head", 1, 1,
             [&](int i) { be.matmul_fused(s, xr, w.at(i), norm_in, last_normed, logits); });
    } else {
      record("final_norm", 1, 1, [&](int) { be.rmsnorm(s, xr, norm_w, eps, last_normed); });
      record("lm_head", 1, 1, [&](int i) { be.matmul(s, last_normed, w.at(i), nullptr, logits); });
    }
  }
  {
    // Host copies of a step: its plan up (one packed copy), its logits down, then a sync.
    std::vector<int32_t> plan;
    for (const auto* p : {&fb.tokens, &fb.positions, &fb.slots, &fb.cu_seqlens, &fb.context_lens,
                          &fb.block_tables, &fb.logits_rows})
      plan.insert(plan.end(), p->begin(), p->end());
    Buffer plan_dev = be.allocate(plan.size() * 4);
    Buffer host_logits = host_buffer(be, size_t(std::max<int64_t>(R, 1) * V) * 4);
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      be.upload(s, plan_dev.data(), plan.data(), plan.size() * 4);
      if (R > 0) be.download(s, host_logits.data(), logits.data, size_t(R * V) * 4);
      be.synchronize(s);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    OpTime t;
    t.op = "host_io";
    t.backend_calls = R > 0 ? 2 : 1;
    t.eager_s = best;
    out.push_back(t);
  }
  be.synchronize(s);
  return out;
}

}  // namespace ridge::app
