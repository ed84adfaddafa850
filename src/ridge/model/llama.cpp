#include "ridge/model/llama.h"

#include <cstdint>
#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

#include "ridge/backend/cpu/quant.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"

namespace ridge::model {

std::vector<float> rope_inv_freq(const ModelConfig& c, const Tensor& rope_freqs) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  const float base = float(c.rope_theta);
  const float dim = float(c.head_dim);
  for (int64_t i = 0; i < half; ++i) f[i] = 1.0f / std::pow(base, float(2 * i) / dim);
  const RopeScaling& rs = c.rope_scaling;
  if (rs.kind == RopeScaling::Kind::linear) {
    for (auto& x : f) x /= float(rs.factor);
  } else if (rs.kind == RopeScaling::Kind::llama3) {
    // HF transformers' _compute_llama3_parameters.
    const float factor = float(rs.factor), lo = float(rs.low_freq_factor),
                hi = float(rs.high_freq_factor), old_ctx = float(rs.original_max_position);
    const float low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
    for (auto& x : f) {
      const float wavelen = 2.0f * float(M_PI) / x;
      float v = wavelen > low_freq_wavelen ? x / factor : x;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
        v = (1.0f - smooth) * v / factor + smooth * v;
      }
      x = v;
    }
  }
  if (rope_freqs.data) {
    std::vector<float> div(static_cast<size_t>(half));
    backend::cpu::dequantize_row(rope_freqs.dtype, rope_freqs.data, div.data(), half);
    for (int64_t i = 0; i < half; ++i) f[i] /= div[i];
  }
  return f;
}

namespace {
// A weight's device bytes: its elements, and the per-row scales of a row-scaled (fp8) matrix.
size_t held_bytes(const Tensor& t) {
  return t.nbytes() + (t.scales ? size_t(t.shape[0]) * sizeof(float) : 0);
}
}  // namespace

LlamaModel::LlamaModel(const ModelWeights& weights, backend::Backend& be,
                       const LoadOptions& options)
    : weights_(weights), backend_(be) {
  // Progress on a terminal: weights go to the backend one tensor at a time.
  const size_t total = weights.bytes();
  size_t done = 0;
  int shown = -1;
  const bool tty = isatty(STDERR_FILENO);
  auto progress = [&](size_t bytes) {
    done += bytes;
    const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
    if (tty && pct != shown && log::level() <= log::Level::info) {
      shown = pct;
      fmt::print(stderr, "\rloading weights to {}: {:3d}% ({} of {})", be.name(), pct,
                 log::format_bytes(double(done)), log::format_bytes(double(total)));
    }
  };
  auto up = [&](const Tensor& t) {
    if (!t.data) return Tensor{};
    Tensor r = be.upload_weight(t);
    progress(t.nbytes());
    return r;
  };
  // Stacked rows (q|k|v, gate|up) when the backend can: one matmul instead of three or two.
  auto up_rows = [&](std::initializer_list<const Tensor*> parts) {
    std::vector<Tensor> v;
    size_t bytes = 0;
    for (const Tensor* t : parts) {
      if (!t->data) return Tensor{};
      v.push_back(*t);
      bytes += t->nbytes();
    }
    Tensor r = be.upload_weight_rows(v);
    if (r.data) progress(bytes);
    return r;
  };
  // --quantization: each layer's projections re-encoded right after its upload (the bf16 copies
  // of one layer at a time on the device, not the model's), before the norm folding below (a
  // folded column scale would widen every row's range; fold_norm_weight takes bf16 only).
  size_t quant_before = 0, quant_after = 0;
  int64_t quant_count = 0;
  auto quantize_layer = [&](size_t i, Layer& d) {
    const DType q = *options.quantize;
    LayerWeights& l = d.w;
    const std::pair<Tensor*, const char*> mats[] = {
        {&d.wqkv, "q|k|v"},  {&l.wq, "q"},    {&l.wk, "k"},
        {&l.wv, "v"},        {&l.wo, "o"},    {&d.w_gate_up, "gate|up"},
        {&l.w_gate, "gate"}, {&l.w_up, "up"}, {&l.w_down, "down"}};
    for (auto [t, name] : mats) {
      if (!t->data) continue;
      const std::string was = t->describe();
      const size_t bytes = t->nbytes();
      if (!be.quantize_weight(*t, q))
        fail("--quantization {}: the {} backend cannot hold layer {}'s {} weight {} as {} ({})",
             q == DType::fp8_e4m3 ? "fp8" : dtype_name(q), be.name(), i, name, was, dtype_name(q),
             "its fp8 matmuls take matrices whose row and column counts are multiples of 16");
      quant_before += bytes;
      quant_after += held_bytes(*t);
      ++quant_count;
    }
  };
  token_embd_ = up(weights.token_embd);
  output_norm_ = up(weights.output_norm);
  output_ = weights.output.data == weights.token_embd.data ? token_embd_ : up(weights.output);
  for (const LayerWeights& l : weights.layers) {
    Layer d;
    d.wqkv = up_rows({&l.wq, &l.wk, &l.wv});
    const bool has_bias = l.bq.data || l.bk.data || l.bv.data;
    if (d.wqkv.data && has_bias) {
      d.bqkv = up_rows({&l.bq, &l.bk, &l.bv});
      if (!d.bqkv.data) d.wqkv = Tensor{};  // partial biases: keep q, k, v separate
    }
    d.w_gate_up = up_rows({&l.w_gate, &l.w_up});
    const bool qkv_fused = d.wqkv.data != nullptr, gu_fused = d.w_gate_up.data != nullptr;
    d.w = {up(l.attn_norm),
           qkv_fused ? Tensor{} : up(l.wq),
           qkv_fused ? Tensor{} : up(l.wk),
           qkv_fused ? Tensor{} : up(l.wv),
           qkv_fused ? Tensor{} : up(l.bq),
           qkv_fused ? Tensor{} : up(l.bk),
           qkv_fused ? Tensor{} : up(l.bv),
           up(l.wo),
           up(l.ffn_norm),
           gu_fused ? Tensor{} : up(l.w_gate),
           gu_fused ? Tensor{} : up(l.w_up),
           up(l.w_down)};
    layers_.push_back(std::move(d));
    if (options.quantize) quantize_layer(layers_.size() - 1, layers_.back());
  }
  if (shown >= 0) fmt::print(stderr, "\n");
  if (options.quantize)
    log::info("weights: {} layer matrices quantized to {} with per-row scales: {} -> {}",
              quant_count, dtype_name(*options.quantize), log::format_bytes(double(quant_before)),
              log::format_bytes(double(quant_after)));
  // Fold each block's input RMSNorm weight into the matmul after it where the backend runs the
  // norm as a per-token scale of the product (--fuse norm); the norm then takes a weight of ones.
  // Not the final norm: it runs on the gathered logits rows, for which no matmul left the sums of
  // squares (MatmulFusion::norm_sumsq), so it stays a kernel with its own weight.
  bool folded = false;
  for (Layer& d : layers_) {
    if (d.wqkv.data && !d.bqkv.data)
      d.attn_norm_folded = be.fold_norm_weight(d.wqkv, d.w.attn_norm);
    if (d.w_gate_up.data) d.ffn_norm_folded = be.fold_norm_weight(d.w_gate_up, d.w.ffn_norm);
    folded = folded || d.attn_norm_folded || d.ffn_norm_folded;
  }
  if (folded) {
    ones_host_.assign(size_t(weights.config().hidden), 1.0f);
    ones_ = be.upload_weight(Tensor(ones_host_.data(), DType::f32, {int64_t(ones_host_.size())}));
  }
  // The persistent batch-1 decode kernel: fused and folded weights without biases only.
  {
    const ModelConfig& c = weights.config();
    bool ok = !layers_.empty();
    for (const Layer& d : layers_)
      ok = ok && d.wqkv.data && !d.bqkv.data && d.w_gate_up.data && d.attn_norm_folded &&
           d.ffn_norm_folded;
    decode_shape_ = {c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn};
    if (ok) decode_layers_bytes_ = be.decode_layers_workspace(decode_shape_);
  }
  inv_freq_host_ = rope_inv_freq(weights.config(), weights.rope_freqs);
  inv_freq_ = be.allocate(inv_freq_host_.size() * sizeof(float));
  be.upload({}, inv_freq_.data(), inv_freq_host_.data(), inv_freq_host_.size() * sizeof(float));
  be.synchronize({});
}

backend::Buffer& LlamaModel::scratch(size_t slot, size_t bytes) {
  if (scratch_.size() <= slot) scratch_.resize(slot + 1);
  if (scratch_[slot].size() < bytes) {
    scratch_[slot] = backend::Buffer();  // free first: peak memory is the new size only
    scratch_[slot] = backend_.allocate(bytes);
    ++scratch_generation_;
  }
  return scratch_[slot];
}

size_t LlamaModel::weight_bytes() const {
  size_t total = token_embd_.nbytes() + output_norm_.nbytes() + ones_.nbytes();
  if (output_.data != token_embd_.data) total += output_.nbytes();
  for (const Layer& d : layers_) {
    const LayerWeights& l = d.w;
    for (const Tensor* t : {&d.wqkv, &d.bqkv, &d.w_gate_up, &l.attn_norm, &l.wq, &l.wk, &l.wv,
                            &l.bq, &l.bk, &l.bv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up,
                            &l.w_down})
      if (t->data) total += held_bytes(*t);
  }
  return total;
}

size_t LlamaModel::workspace_bytes() const {
  size_t total = 0;
  for (const auto& b : scratch_) total += b.size();
  return total;
}

namespace {
constexpr size_t kMeta = 0;  // scratch slot of the packed metadata
int64_t align4(int64_t n) { return (n + 3) / 4 * 4; }  // 16-byte aligned arrays
// Decode graph buckets (sequences per step).
constexpr int64_t kGraphBuckets[] = {1,   2,   4,   8,   16,  32,  48,  64,  96,
                                     128, 160, 192, 224, 256, 320, 384, 448, 512};
}  // namespace

LlamaModel::Packing LlamaModel::pack_layout(int64_t T, int64_t S, int64_t R, int64_t max_blocks) {
  Packing p;
  int64_t at = 0;
  p.tokens = at;
  at += align4(T);
  p.positions = at;
  at += align4(T);
  p.slots = at;
  at += align4(T);
  p.cu = at;
  at += align4(S + 1);
  p.ctx = at;
  at += align4(S);
  p.tables = at;
  at += align4(S * max_blocks);
  p.rows = at;
  at += align4(R);
  p.total = at;
  return p;
}

size_t LlamaModel::reserve(int64_t max_tokens, int64_t max_logits, int64_t max_blocks_per_seq) {
  const ModelConfig& c = config();
  const size_t esz = ridge::row_bytes(backend_.activation_dtype(), 1);
  max_tokens = std::max<int64_t>(max_tokens, 1);
  max_logits = std::max<int64_t>(max_logits, 1);
  max_blocks_per_seq = std::max<int64_t>(max_blocks_per_seq, 1);
  reserved_tokens_ = std::max(reserved_tokens_, max_tokens);
  reserved_logits_ = std::max(reserved_logits_, max_logits);
  reserved_blocks_ = std::max(reserved_blocks_, max_blocks_per_seq);
  const size_t T = size_t(reserved_tokens_), R = size_t(reserved_logits_);
  // Sequences per step <= logits rows (every sequence of a step wants at most one row); a padded
  // decode graph has as many tokens and sequences as logits rows.
  const Packing p = pack_layout(std::max(reserved_tokens_, reserved_logits_), reserved_logits_,
                                reserved_logits_, reserved_blocks_);
  scratch(kMeta, size_t(p.total) * 4);
  if (staging_.size() < size_t(p.total) * 4) staging_ = backend_.allocate_host(size_t(p.total) * 4);
  scratch(10, T * size_t(c.hidden) * esz);
  scratch(11, T * size_t(c.hidden) * esz);
  scratch(12, T * size_t(c.q_dim() + 2 * c.kv_dim()) * esz);
  scratch(13, T * size_t(c.q_dim()) * esz);
  scratch(15, T * size_t(2 * c.ffn) * esz);
  scratch(16, T * size_t(c.ffn) * esz);
  for (size_t slot = 18; slot <= 19; ++slot) scratch(slot, R * size_t(c.hidden) * esz);
  scratch(20, R * size_t(c.vocab) * 4);
  if (decode_layers_bytes_) scratch(21, decode_layers_bytes_);
  // The padded decode batch lives at stable addresses: a graph's attention metadata points at its
  // host arrays (rewritten every step); growing them moves them, so graphs are captured again.
  {
    const size_t most = size_t(kGraphBuckets[std::size(kGraphBuckets) - 1]);
    const size_t table = most * size_t(reserved_blocks_);
    if (padded_.block_tables.capacity() < table || padded_.cu_seqlens.capacity() < most + 1) {
      padded_ = ForwardBatch{};
      for (auto* v : {&padded_.tokens, &padded_.positions, &padded_.slots, &padded_.context_lens,
                      &padded_.logits_rows})
        v->reserve(most);
      padded_.cu_seqlens.reserve(most + 1);
      padded_.block_tables.reserve(table);
      ++scratch_generation_;
    }
  }
  if (host_logits_.size() < R * size_t(c.vocab) * 4)
    host_logits_ = backend_.allocate_host(R * size_t(c.vocab) * 4);
  // The matmul shapes the layers run (fused q|k|v and gate|up where the backend stacks them).
  std::vector<backend::MatmulShape> shapes;
  const Layer& l0 = layers_.front();
  if (l0.wqkv.data) {
    shapes.push_back({c.q_dim() + 2 * c.kv_dim(), c.hidden});
  } else {
    shapes.push_back({c.q_dim(), c.hidden});
    shapes.push_back({c.kv_dim(), c.hidden});
  }
  shapes.push_back({c.hidden, c.q_dim()});
  shapes.push_back(l0.w_gate_up.data ? backend::MatmulShape{2 * c.ffn, c.hidden}
                                     : backend::MatmulShape{c.ffn, c.hidden});
  shapes.push_back({c.hidden, c.ffn});
  shapes.push_back({c.vocab, c.hidden, /*f32_out*/ true});  // the LM head (f32 logits)
  backend_.prepare_matmuls(shapes, reserved_tokens_);
  return workspace_bytes();
}

namespace {
Tensor view2d(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld, Device dev) {
  Tensor t(data, dtype, {rows, cols}, dev);
  t.stride[0] = ld;
  return t;
}
}  // namespace

int32_t* LlamaModel::upload_metadata(const backend::Stream& stream, const ForwardBatch& batch,
                                     const Packing& p) {
  const size_t bytes = size_t(p.total) * 4;
  if (staging_.size() < bytes) {
    backend_.synchronize(stream);  // the old staging buffer may still be read by a copy
    staging_ = backend_.allocate_host(bytes);
  }
  auto* h = static_cast<int32_t*>(staging_.data());
  auto put = [&](const std::vector<int32_t>& v, int64_t at) {
    std::copy(v.begin(), v.end(), h + at);
  };
  put(batch.tokens, p.tokens);
  put(batch.positions, p.positions);
  put(batch.slots, p.slots);
  put(batch.cu_seqlens, p.cu);
  put(batch.context_lens, p.ctx);
  put(batch.block_tables, p.tables);
  put(batch.logits_rows, p.rows);
  auto* d = static_cast<int32_t*>(scratch(kMeta, bytes).data());
  backend_.upload(stream, d, h, bytes);
  return d;
}

void LlamaModel::run_layers(const backend::Stream& stream, int64_t T, int64_t R, int32_t* md,
                            const Packing& pk, backend::AttentionMeta meta,
                            std::span<backend::KvLayer> kv) {
  const ModelConfig& c = config();
  backend::Backend& be = backend_;
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn;
  const DType act = be.activation_dtype();
  const Device dev = be.device();
  auto i32 = [&](int64_t at, int64_t n) { return Tensor(md + at, DType::i32, {n}, dev); };
  const int64_t S = meta.num_seqs;
  Tensor ids = i32(pk.tokens, T), positions = i32(pk.positions, T), slots = i32(pk.slots, T);
  meta.cu_seqlens_q = i32(pk.cu, S + 1);
  meta.context_lens = i32(pk.ctx, S);
  meta.block_tables = i32(pk.tables, S * meta.max_blocks_per_seq);
  Tensor rows = i32(pk.rows, R);
  be.begin_forward(T, meta.max_context_len);

  // Activations: one buffer per role (sized by reserve(); grown when a step is larger).
  const size_t esz = ridge::row_bytes(act, 1);
  auto buffer = [&](size_t slot, int64_t n_rows, int64_t n_cols) {
    backend::Buffer& b = scratch(slot, size_t(std::max<int64_t>(n_rows, 1) * n_cols) * esz);
    return Tensor(b.data(), act, {n_rows, n_cols}, dev);
  };
  Tensor x = buffer(10, T, H);  // residual stream
  Tensor h = buffer(11, T, H);  // normed input of a block
  Tensor qkv = buffer(12, T, Q + 2 * KV);
  Tensor attn = buffer(13, T, Q);
  Tensor gate_up = buffer(15, T, 2 * F);
  Tensor mlp = buffer(16, T, F);
  Tensor q = view2d(qkv.data, act, T, Q, Q + 2 * KV, dev);
  Tensor k = view2d(static_cast<char*>(qkv.data) + Q * esz, act, T, KV, Q + 2 * KV, dev);
  Tensor v = view2d(static_cast<char*>(qkv.data) + (Q + KV) * esz, act, T, KV, Q + 2 * KV, dev);
  Tensor gate = view2d(gate_up.data, act, T, F, 2 * F, dev);
  Tensor up = view2d(static_cast<char*>(gate_up.data) + F * esz, act, T, F, 2 * F, dev);

  const Tensor inv_freq(inv_freq_.data(), DType::f32, {int64_t(inv_freq_host_.size())}, dev);
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  const float eps = float(c.rms_norm_eps);
  auto bias = [](const Tensor& b) { return b.data ? &b : nullptr; };

  // The embedding keeps its rows' sums of squares (tag 2, as each MLP's adding matmul does) for
  // the first layer's norm.
  be.embedding_sumsq(stream, token_embd_, ids, x, 2);
  const bool one_kernel =
      T == 1 && S == 1 && decode_layers(stream, x, positions, slots, meta, kv, inv_freq);
  for (int64_t i = 0; i < (one_kernel ? 0 : c.n_layers); ++i) {
    const Layer& l = layers_[size_t(i)];
    // x holds the residual stream; each block's output is added into it by the block's last
    // matmul (accumulate), and each block's input norm runs inside (or, where the backend does
    // not fuse, just before) its first matmul, writing h. The adding matmul records the sums of
    // squares of x's rows (tag 1 after attention, tag 2 after the MLP) for that norm.
    backend::MatmulFusion attn_in;
    attn_in.norm_weight = l.attn_norm_folded ? &ones_ : &l.w.attn_norm;
    attn_in.norm_folded = l.attn_norm_folded;
    attn_in.eps = eps;
    attn_in.norm_sumsq = 2;  // from the embedding (layer 0) or the MLP before
    // qkv = rmsnorm(x) · wqkvᵀ, then RoPE on q and k and the KV store: one kernel where the
    // backend fuses them (decode), else two calls.
    bool stored = false;
    if (l.wqkv.data && !l.bqkv.data) {
      stored = be.matmul_rope_kv(stream, x, l.wqkv, attn_in, h, qkv, positions, inv_freq, slots,
                                 kv[size_t(i)]);
      if (!stored) be.matmul_fused(stream, x, l.wqkv, attn_in, h, qkv);
    } else {
      be.rmsnorm(stream, x, l.w.attn_norm, eps, h);
      if (l.wqkv.data) {
        be.matmul(stream, h, l.wqkv, bias(l.bqkv), qkv);
      } else {
        be.matmul(stream, h, l.w.wq, bias(l.w.bq), q);
        be.matmul(stream, h, l.w.wk, bias(l.w.bk), k);
        be.matmul(stream, h, l.w.wv, bias(l.w.bv), v);
      }
    }
    if (!stored) be.rope_kv_store(stream, q, k, v, positions, inv_freq, slots, kv[size_t(i)]);
    be.attention(stream, q, kv[size_t(i)], meta, scale, attn);
    // [tensor parallelism: wo is row-split; its partial products must be all-reduced before the
    //  residual is added once (matmul, all-reduce, add: not matmul_add on every rank)]
    backend::MatmulFusion attn_out;
    attn_out.accumulate = true;
    attn_out.record_sumsq = 1;
    attn_out.early_weights = true;  // wo streams while attention waits on its KV round trips
    be.matmul_fused(stream, attn, l.w.wo, attn_out, h, x);  // x += attn · woᵀ
    backend::MatmulFusion mlp_in;
    mlp_in.norm_weight = l.ffn_norm_folded ? &ones_ : &l.w.ffn_norm;
    mlp_in.norm_folded = l.ffn_norm_folded;
    mlp_in.eps = eps;
    mlp_in.norm_sumsq = 1;
    if (l.w_gate_up.data) {
      // mlp = silu_mul(rmsnorm(x) · w_gate_upᵀ), gate_up the product where not fused
      be.matmul_swiglu(stream, x, l.w_gate_up, mlp_in, h, gate_up, mlp);
    } else {
      be.rmsnorm(stream, x, l.w.ffn_norm, eps, h);
      be.matmul(stream, h, l.w.w_gate, nullptr, gate);
      be.matmul(stream, h, l.w.w_up, nullptr, up);
      be.silu_mul(stream, gate_up, mlp);
    }
    backend::MatmulFusion down;
    down.accumulate = true;
    down.record_sumsq = i + 1 < c.n_layers ? 2 : 0;  // the final norm runs on gathered rows
    be.matmul_fused(stream, mlp, l.w.w_down, down, h, x);  // x += mlp · w_downᵀ
  }
  if (R == 0) return;
  // Only the rows that need logits go through the final norm and LM head.
  Tensor xr = buffer(19, R, H);
  Tensor last_normed = buffer(18, R, H);
  be.gather_rows(stream, x, rows, xr);
  logits_dev_ = Tensor(scratch(20, size_t(R * c.vocab) * 4).data(), DType::f32, {R, c.vocab}, dev);
  backend::MatmulFusion head_in;
  head_in.norm_weight = &output_norm_;
  head_in.eps = eps;
  be.matmul_fused(stream, xr, output_, head_in, last_normed, logits_dev_);
}

bool LlamaModel::decode_layers(const backend::Stream& stream, Tensor& x, const Tensor& positions,
                               const Tensor& slots, const backend::AttentionMeta& meta,
                               std::span<backend::KvLayer> kv, const Tensor& inv_freq) {
  if (!decode_layers_bytes_) return false;
  const ModelConfig& c = config();
  decode_layers_.resize(size_t(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const Layer& l = layers_[size_t(i)];
    decode_layers_[size_t(i)] = {&l.wqkv, &l.w.wo, &l.w_gate_up, &l.w.w_down, &kv[size_t(i)]};
  }
  backend::DecodeLayersCall call;
  call.shape = decode_shape_;
  call.layers = decode_layers_;
  call.eps = float(c.rms_norm_eps);
  call.scale = 1.0f / std::sqrt(float(c.head_dim));
  call.x = x;
  call.positions = positions;
  call.slots = slots;
  call.context_lens = meta.context_lens;
  call.block_table = meta.block_tables;
  call.max_blocks_per_seq = meta.max_blocks_per_seq;
  call.inv_freq = inv_freq;
  backend::Buffer& ws = scratch(21, decode_layers_bytes_);
  call.workspace = ws.data();
  call.workspace_bytes = ws.size();
  if (!backend_.decode_layers(stream, call)) return false;
  ++stats_.decode_kernel_passes;
  return true;
}

bool LlamaModel::forward_graph(const backend::Stream& stream, const ForwardBatch& batch,
                               std::span<backend::KvLayer> kv) {
  if (!graphs_enabled_ || !graphs_supported_) return false;
  const int64_t S = batch.num_seqs();
  if (S == 0 || batch.num_tokens() != S || int64_t(batch.logits_rows.size()) != S) return false;
  for (int64_t i = 0; i < S; ++i)
    if (batch.logits_rows[size_t(i)] != i || batch.cu_seqlens[size_t(i) + 1] != i + 1) return false;
  int64_t B = 0;
  for (int64_t b : kGraphBuckets)
    if (b >= S) {
      B = b;
      break;
    }
  if (B == 0) return false;
  // Grow the workspace for the bucket first (moving buffers re-captures the graphs once).
  if (B > reserved_tokens_ || B > reserved_logits_ || batch.max_blocks_per_seq > reserved_blocks_)
    reserve(std::max(reserved_tokens_, B), std::max(reserved_logits_, B),
            std::max<int64_t>(reserved_blocks_, batch.max_blocks_per_seq));
  int64_t MB = 8;
  while (MB < batch.max_blocks_per_seq) MB *= 2;
  MB = std::min(MB, reserved_blocks_);

  // The padded batch: the step's sequences, then padding sequences of one token.
  ForwardBatch& pb = padded_;
  pb.tokens.assign(batch.tokens.begin(), batch.tokens.end());
  pb.positions.assign(batch.positions.begin(), batch.positions.end());
  pb.slots.assign(batch.slots.begin(), batch.slots.end());
  pb.context_lens.assign(batch.context_lens.begin(), batch.context_lens.end());
  pb.cu_seqlens.assign(batch.cu_seqlens.begin(), batch.cu_seqlens.end());
  pb.tokens.resize(size_t(B), 0);
  pb.positions.resize(size_t(B), 0);
  pb.slots.resize(size_t(B), -1);
  pb.context_lens.resize(size_t(B), 1);
  for (int64_t i = S + 1; i <= B; ++i) pb.cu_seqlens.push_back(int32_t(i));
  pb.max_blocks_per_seq = int32_t(MB);
  pb.block_tables.assign(size_t(B * MB), 0);
  for (int64_t s = 0; s < S; ++s)
    std::copy_n(batch.block_tables.begin() + s * batch.max_blocks_per_seq,
                batch.max_blocks_per_seq, pb.block_tables.begin() + s * MB);
  pb.logits_rows.resize(size_t(B));
  for (int64_t i = 0; i < B; ++i) pb.logits_rows[size_t(i)] = int32_t(i);

  const Packing pk = pack_layout(B, B, B, MB);
  int32_t* md = upload_metadata(stream, pb, pk);
  backend::AttentionMeta meta;
  meta.num_seqs = int32_t(B);
  meta.max_q_len = 1;
  meta.max_blocks_per_seq = int32_t(MB);
  meta.max_context_len = int32_t(MB * kv[0].block_size());
  meta.host_cu_seqlens_q = pb.cu_seqlens.data();
  meta.host_context_lens = pb.context_lens.data();
  meta.host_block_tables = pb.block_tables.data();
  meta.fixed_splits = -1;

  GraphEntry& e = graphs_[{B, MB}];
  if (!e.graph || e.generation != scratch_generation_) {
    if (e.graph && e.generation != scratch_generation_) {
      graphs_.clear();  // buffers moved: every graph points at old memory
      return forward_graph(stream, batch, kv);
    }
    const uint64_t gen = scratch_generation_;
    const int64_t passes = stats_.decode_kernel_passes;
    // By value: a graph's arguments are fixed when it is captured.
    e.graph = backend_.capture(stream, [this, B, md, pk, meta, kv](const backend::Stream& s) {
      run_layers(s, B, B, md, pk, meta, kv);
    });
    if (!e.graph) {
      graphs_supported_ = false;
      graphs_.erase({B, MB});
      return false;
    }
    RIDGE_CHECK(gen == scratch_generation_, "forward: a scratch buffer moved while capturing");
    e.generation = gen;
    e.decode_kernel = stats_.decode_kernel_passes > passes;
    ++stats_.graphs_captured;
    log::debug("captured a decode graph for {} sequences, {} blocks per sequence", B, MB);
  }
  e.graph->replay(stream);
  ++stats_.graph_steps;
  if (e.decode_kernel) ++stats_.decode_kernel_steps;
  return true;
}

void LlamaModel::enqueue(const backend::Stream& stream, const ForwardBatch& batch,
                         std::span<backend::KvLayer> kv) {
  const ModelConfig& c = config();
  RIDGE_CHECK(int64_t(kv.size()) == c.n_layers, "forward: {} KV layers for a {}-layer model",
              kv.size(), c.n_layers);
  batch.validate(kv[0].k.shape[0] * kv[0].k.shape[1], kv[0].k.shape[1]);
  if (!forward_graph(stream, batch, kv)) run_eager(stream, batch, kv);
}

void LlamaModel::forward(const backend::Stream& stream, const ForwardBatch& batch,
                         std::span<backend::KvLayer> kv, float* logits) {
  enqueue(stream, batch, kv);
  const int64_t R = int64_t(batch.logits_rows.size());
  if (R > 0 && logits)
    backend_.download(stream, logits, logits_dev_.data, size_t(R * config().vocab) * 4);
  backend_.synchronize(stream);
}

std::span<float> LlamaModel::forward_logits(const backend::Stream& stream,
                                                  const ForwardBatch& batch,
                                                  std::span<backend::KvLayer> kv) {
  const size_t n = batch.logits_rows.size() * size_t(config().vocab);
  if (host_logits_.size() < n * 4) host_logits_ = backend_.allocate_host(n * 4);
  forward(stream, batch, kv, static_cast<float*>(host_logits_.data()));
  return {static_cast<float*>(host_logits_.data()), n};
}

void LlamaModel::run_eager(const backend::Stream& stream, const ForwardBatch& batch,
                           std::span<backend::KvLayer> kv) {
  const int64_t T = batch.num_tokens();
  const int64_t R = int64_t(batch.logits_rows.size());
  const Packing pk = pack_layout(T, batch.num_seqs(), R, batch.max_blocks_per_seq);
  int32_t* md = upload_metadata(stream, batch, pk);
  backend::AttentionMeta meta;
  meta.num_seqs = batch.num_seqs();
  meta.max_blocks_per_seq = batch.max_blocks_per_seq;
  for (int32_t s = 0; s < meta.num_seqs; ++s) {
    meta.max_q_len = std::max(meta.max_q_len, batch.cu_seqlens[s + 1] - batch.cu_seqlens[s]);
    meta.max_context_len = std::max(meta.max_context_len, batch.context_lens[s]);
  }
  meta.host_cu_seqlens_q = batch.cu_seqlens.data();
  meta.host_context_lens = batch.context_lens.data();
  meta.host_block_tables = batch.block_tables.data();
  const int64_t passes = stats_.decode_kernel_passes;
  run_layers(stream, T, R, md, pk, meta, kv);
  ++stats_.eager_steps;
  if (stats_.decode_kernel_passes > passes) ++stats_.decode_kernel_steps;
}

}  // namespace ridge::model
