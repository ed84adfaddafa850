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

LlamaModel::LlamaModel(const ModelWeights& weights, backend::Backend& be)
    : weights_(weights), backend_(be) {
  // Progress on a terminal: weights go to the backend one tensor at a time.
  const size_t total = weights.bytes();
  size_t done = 0;
  int shown = -1;
  const bool tty = isatty(STDERR_FILENO);
  auto up = [&](const Tensor& t) {
    if (!t.data) return Tensor{};
    Tensor r = be.upload_weight(t);
    done += t.nbytes();
    const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
    if (tty && pct != shown && log::level() <= log::Level::info) {
      shown = pct;
      fmt::print(stderr, "\rloading weights to {}: {:3d}% ({} of {})", be.name(), pct,
                 log::format_bytes(double(done)), log::format_bytes(double(total)));
    }
    return r;
  };
  token_embd_ = up(weights.token_embd);
  output_norm_ = up(weights.output_norm);
  output_ = weights.output.data == weights.token_embd.data ? token_embd_ : up(weights.output);
  for (const LayerWeights& l : weights.layers) {
    layers_.push_back({up(l.attn_norm), up(l.wq), up(l.wk), up(l.wv), up(l.bq), up(l.bk),
                       up(l.bv), up(l.wo), up(l.ffn_norm), up(l.w_gate), up(l.w_up),
                       up(l.w_down)});
  }
  if (shown >= 0) fmt::print(stderr, "\n");
  inv_freq_host_ = rope_inv_freq(weights.config(), weights.rope_freqs);
  inv_freq_ = be.allocate(inv_freq_host_.size() * sizeof(float));
  be.upload({}, inv_freq_.data(), inv_freq_host_.data(), inv_freq_host_.size() * sizeof(float));
}

backend::Buffer& LlamaModel::scratch(size_t slot, size_t bytes) {
  if (scratch_.size() <= slot) scratch_.resize(slot + 1);
  if (scratch_[slot].size() < bytes) {
    scratch_[slot] = backend::Buffer();  // free first: peak memory is the new size only
    scratch_[slot] = backend_.allocate(bytes);
  }
  return scratch_[slot];
}

size_t LlamaModel::workspace_bytes() const {
  size_t total = 0;
  for (const auto& b : scratch_) total += b.size();
  return total;
}

size_t LlamaModel::reserve(int64_t max_tokens, int64_t max_logits) {
  const ModelConfig& c = config();
  const size_t esz = ridge::row_bytes(backend_.activation_dtype(), 1);
  const size_t T = size_t(max_tokens), R = size_t(max_logits);
  for (size_t slot = 0; slot <= 6; ++slot) scratch(slot, std::max<size_t>(T, 1) * 4);
  scratch(5, std::max<size_t>(T, 1) * 4 * 64);  // block tables grow with context; a first guess
  scratch(10, T * size_t(c.hidden) * esz);
  scratch(11, T * size_t(c.hidden) * esz);
  scratch(12, T * size_t(c.q_dim() + 2 * c.kv_dim()) * esz);
  scratch(13, T * size_t(c.q_dim()) * esz);
  scratch(14, T * size_t(c.hidden) * esz);
  scratch(15, T * size_t(2 * c.ffn) * esz);
  scratch(16, T * size_t(c.ffn) * esz);
  for (size_t slot = 17; slot <= 19; ++slot) scratch(slot, R * size_t(c.hidden) * esz);
  scratch(20, R * size_t(c.vocab) * 4);
  return workspace_bytes();
}

namespace {
Tensor view2d(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld, Device dev) {
  Tensor t(data, dtype, {rows, cols}, dev);
  t.stride[0] = ld;
  return t;
}
}  // namespace

void LlamaModel::forward(const backend::Stream& stream, const ForwardBatch& batch,
                         std::span<backend::KvLayer> kv, float* logits) {
  const ModelConfig& c = config();
  backend::Backend& be = backend_;
  RIDGE_CHECK(int64_t(kv.size()) == c.n_layers, "forward: {} KV layers for a {}-layer model",
              kv.size(), c.n_layers);
  batch.validate(kv[0].k.shape[0] * kv[0].k.shape[1], kv[0].k.shape[1]);
  const int64_t T = batch.num_tokens(), H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn;
  const int64_t R = int64_t(batch.logits_rows.size());
  const DType act = be.activation_dtype();
  const Device dev = be.device();

  // Metadata on the device.
  auto upload_i32 = [&](const std::vector<int32_t>& v, size_t slot) {
    backend::Buffer& b = scratch(slot, std::max<size_t>(v.size(), 1) * 4);
    if (!v.empty()) be.upload(stream, b.data(), v.data(), v.size() * 4);
    return Tensor(b.data(), DType::i32, {int64_t(v.size())}, dev);
  };
  Tensor ids = upload_i32(batch.tokens, 0);
  Tensor positions = upload_i32(batch.positions, 1);
  Tensor slots = upload_i32(batch.slots, 2);
  Tensor cu = upload_i32(batch.cu_seqlens, 3);
  Tensor ctx = upload_i32(batch.context_lens, 4);
  Tensor tables = upload_i32(batch.block_tables, 5);
  Tensor rows = upload_i32(batch.logits_rows, 6);

  // Activations: one buffer per role, grown when a step is larger than any before.
  const size_t esz = ridge::row_bytes(act, 1);
  auto buffer = [&](size_t slot, int64_t n_rows, int64_t n_cols) {
    backend::Buffer& b = scratch(slot, size_t(std::max<int64_t>(n_rows, 1) * n_cols) * esz);
    return Tensor(b.data(), act, {n_rows, n_cols}, dev);
  };
  Tensor x = buffer(10, T, H);           // residual stream
  Tensor h = buffer(11, T, H);           // normed input of a block
  Tensor qkv = buffer(12, T, Q + 2 * KV);
  Tensor attn = buffer(13, T, Q);
  Tensor proj = buffer(14, T, H);        // output of wo / w_down
  Tensor gate_up = buffer(15, T, 2 * F);
  Tensor mlp = buffer(16, T, F);
  Tensor q = view2d(qkv.data, act, T, Q, Q + 2 * KV, dev);
  Tensor k = view2d(static_cast<char*>(qkv.data) + Q * esz, act, T, KV, Q + 2 * KV, dev);
  Tensor v = view2d(static_cast<char*>(qkv.data) + (Q + KV) * esz, act, T, KV, Q + 2 * KV, dev);
  Tensor gate = view2d(gate_up.data, act, T, F, 2 * F, dev);
  Tensor up = view2d(static_cast<char*>(gate_up.data) + F * esz, act, T, F, 2 * F, dev);

  backend::AttentionMeta meta;
  meta.num_seqs = batch.num_seqs();
  meta.max_blocks_per_seq = batch.max_blocks_per_seq;
  for (int32_t s = 0; s < meta.num_seqs; ++s) {
    meta.max_q_len = std::max(meta.max_q_len, batch.cu_seqlens[s + 1] - batch.cu_seqlens[s]);
    meta.max_context_len = std::max(meta.max_context_len, batch.context_lens[s]);
  }
  meta.cu_seqlens_q = cu;
  meta.context_lens = ctx;
  meta.block_tables = tables;
  meta.host_cu_seqlens_q = batch.cu_seqlens.data();
  meta.host_context_lens = batch.context_lens.data();
  meta.host_block_tables = batch.block_tables.data();

  const Tensor inv_freq(inv_freq_.data(), DType::f32, {int64_t(inv_freq_host_.size())}, dev);
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  const float eps = float(c.rms_norm_eps);
  auto bias = [](const Tensor& b) { return b.data ? &b : nullptr; };

  be.embedding(stream, token_embd_, ids, x);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = layers_[size_t(i)];
    if (i == 0) {
      be.rmsnorm(stream, x, l.attn_norm, eps, h);
    } else {
      // x += proj (the previous layer's MLP output); h = rmsnorm(x)
      be.add_rmsnorm(stream, x, proj, l.attn_norm, eps, h);
    }
    be.matmul(stream, h, l.wq, bias(l.bq), q);
    be.matmul(stream, h, l.wk, bias(l.bk), k);
    be.matmul(stream, h, l.wv, bias(l.bv), v);
    be.rope(stream, q, k, positions, inv_freq);
    be.kv_store(stream, k, v, slots, kv[size_t(i)]);
    be.attention(stream, q, kv[size_t(i)], meta, scale, attn);
    be.matmul(stream, attn, l.wo, nullptr, proj);
    // [tensor-parallel all-reduce of proj goes here]
    be.add_rmsnorm(stream, x, proj, l.ffn_norm, eps, h);
    be.matmul(stream, h, l.w_gate, nullptr, gate);
    be.matmul(stream, h, l.w_up, nullptr, up);
    be.silu_mul(stream, gate_up, mlp);
    be.matmul(stream, mlp, l.w_down, nullptr, proj);
    // [tensor-parallel all-reduce of proj goes here]
  }
  if (R == 0) return;
  Tensor last = buffer(17, R, H);
  Tensor last_normed = buffer(18, R, H);
  // Only the rows that need logits go through the final residual add, norm and LM head.
  Tensor xr = buffer(19, R, H);
  be.gather_rows(stream, x, rows, xr);
  be.gather_rows(stream, proj, rows, last);
  be.add_rmsnorm(stream, xr, last, output_norm_, eps, last_normed);
  const size_t logit_bytes = size_t(R * c.vocab) * 4;
  Tensor out(scratch(20, logit_bytes).data(), DType::f32, {R, c.vocab}, dev);
  be.matmul(stream, last_normed, output_, nullptr, out);
  be.download(stream, logits, out.data, logit_bytes);
  be.synchronize(stream);
}

}  // namespace ridge::model
