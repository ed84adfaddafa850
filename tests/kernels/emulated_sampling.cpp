#include "kernels/cuda_host_shim.h"
// The device code, compiled for the host.
#include "ridge/kernels/cuda/sampling/sample_row.cuh"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/emulated_sampling.h"
#include "ridge/core/error.h"

namespace ridge::kernels::emulation {

namespace {
std::atomic<int64_t> g_calls{0};
}

int64_t sample_calls() {
  return g_calls.load();
}

std::string sample(SampleArgs a, int threads) {
  if (a.rows <= 0) return "";
  const int64_t padded = (a.vocab + 3) / 4 * 4;
  a.staged = a.vocab <= 50000;  // as on an H200 (the staging limit is ~50k floats)
  a.ws_ld = padded;
  std::vector<float4> stage(size_t(padded / 4));
  std::vector<float4> workspace;
  if (!a.staged && !a.workspace) {
    workspace.resize(size_t(a.rows * padded / 4));
    a.workspace = reinterpret_cast<float*>(workspace.data());
  }
  auto sh = std::make_unique<sampling_detail::Shared>();
  simt::Block block(threads, simt::Order::random, 1);
  for (int64_t r = 0; r < a.rows; ++r) {
    std::string err;
    auto run_row = [&] {
      float* st = a.staged ? reinterpret_cast<float*>(stage.data()) : nullptr;
      switch (threads) {
        case 32:
          sampling_detail::sample_row<32>(a, int(r), st, *sh);
          break;
        case 64:
          sampling_detail::sample_row<64>(a, int(r), st, *sh);
          break;
        default:
          sampling_detail::sample_row<512>(a, int(r), st, *sh);
          break;
      }
    };
    err = block.run(int(r), run_row);
    if (!err.empty()) return "row " + std::to_string(r) + ": " + err;
  }
  return "";
}

namespace {

// Host memory as "device" memory; sample() is the emulated kernel; the rest goes to `inner`.
class SamplingBackend final : public backend::Backend {
 public:
  explicit SamplingBackend(std::unique_ptr<backend::Backend> inner) : inner_(std::move(inner)) {}

  Device device() const override { return inner_ ? inner_->device() : Device::cpu; }
  std::string name() const override { return "emulated GPU sampling over " + inner().name(); }
  DType activation_dtype() const override { return inner().activation_dtype(); }
  std::vector<DType> kv_dtypes() const override { return inner().kv_dtypes(); }
  backend::Buffer allocate(size_t bytes) override {
    if (inner_) return inner_->allocate(bytes);
    void* p = ::operator new(std::max<size_t>(bytes, 1));
    return backend::Buffer(p, bytes, [](void* q) { ::operator delete(q); });
  }
  void upload(const backend::Stream&, void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void download(const backend::Stream&, void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(const backend::Stream& s) override {
    if (inner_) inner_->synchronize(s);
  }
  Tensor upload_weight(const Tensor& host) override { return inner().upload_weight(host); }
  void embedding(const backend::Stream& s, const Tensor& table, const Tensor& ids,
                 Tensor& out) override {
    inner().embedding(s, table, ids, out);
  }
  void rmsnorm(const backend::Stream& s, const Tensor& x, const Tensor& weight, float eps,
               Tensor& out) override {
    inner().rmsnorm(s, x, weight, eps, out);
  }
  void add_rmsnorm(const backend::Stream& s, Tensor& residual, const Tensor& x,
                   const Tensor& weight, float eps, Tensor& out) override {
    inner().add_rmsnorm(s, residual, x, weight, eps, out);
  }
  void matmul(const backend::Stream& s, const Tensor& x, const Tensor& w, const Tensor* bias,
              Tensor& out) override {
    inner().matmul(s, x, w, bias, out);
  }
  void matmul_add(const backend::Stream& s, const Tensor& x, const Tensor& w,
                  Tensor& out) override {
    inner().matmul_add(s, x, w, out);
  }
  void matmul_fused(const backend::Stream& s, const Tensor& x, const Tensor& w,
                    const backend::MatmulFusion& fusion, Tensor& scratch, Tensor& out) override {
    inner().matmul_fused(s, x, w, fusion, scratch, out);
  }
  void rope(const backend::Stream& s, Tensor& q, Tensor& k, const Tensor& positions,
            const Tensor& inv_freq) override {
    inner().rope(s, q, k, positions, inv_freq);
  }
  void kv_store(const backend::Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                backend::KvLayer& kv) override {
    inner().kv_store(s, k, v, slots, kv);
  }
  void rope_kv_store(const backend::Stream& s, Tensor& q, Tensor& k, const Tensor& v,
                     const Tensor& positions, const Tensor& inv_freq, const Tensor& slots,
                     backend::KvLayer& kv) override {
    inner().rope_kv_store(s, q, k, v, positions, inv_freq, slots, kv);
  }
  void attention(const backend::Stream& s, const Tensor& q, const backend::KvLayer& kv,
                 const backend::AttentionMeta& meta, float scale, Tensor& out) override {
    inner().attention(s, q, kv, meta, scale, out);
  }
  void silu_mul(const backend::Stream& s, const Tensor& gate_up, Tensor& out) override {
    inner().silu_mul(s, gate_up, out);
  }
  void gather_rows(const backend::Stream& s, const Tensor& x, const Tensor& rows,
                   Tensor& out) override {
    inner().gather_rows(s, x, rows, out);
  }

  bool sample(const backend::Stream&, const Tensor& logits, const backend::SamplingBatch& batch,
              Tensor& tokens, Tensor& logprobs, Tensor& top_ids, Tensor& top_logprobs) override {
    ++g_calls;
    const int64_t R = int64_t(batch.rows.size());
    RIDGE_CHECK(logits.ndim == 2 && logits.dtype == DType::f32 && logits.shape[0] == R &&
                    logits.stride[1] == 1,
                "emulated sample: logits {} for {} rows", logits.describe(), R);
    std::vector<SampleRowParams> params(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      const backend::SampleRow& s = batch.rows[size_t(r)];
      SampleRowParams& p = params[size_t(r)];
      p.temperature = s.temperature;
      p.top_k = s.top_k;
      p.top_p = s.top_p;
      p.min_p = s.min_p;
      p.repetition_penalty = s.repetition_penalty;
      p.presence_penalty = s.presence_penalty;
      p.frequency_penalty = s.frequency_penalty;
      p.top_logprobs = s.top_logprobs;
      p.seed = s.seed;
      p.step = s.step;
      p.penalty_begin = s.penalty_begin;
      p.penalty_end = s.penalty_end;
      p.bias_begin = s.bias_begin;
      p.bias_end = s.bias_end;
      p.ban_mask = s.ban_mask;
    }
    SampleArgs a;
    a.logits = logits.ptr<float>();
    a.ld = logits.stride[0];
    a.rows = R;
    a.vocab = logits.shape[1];
    a.params = params.data();
    a.penalty_ids = batch.penalty_tokens.data();
    a.penalty_counts = batch.penalty_counts.data();
    a.bias_ids = batch.bias_tokens.data();
    a.bias_values = batch.bias_values.data();
    a.ban_masks = batch.ban_masks.data();
    a.tokens = tokens.ptr<int32_t>();
    a.logprobs = logprobs.ptr<float>();
    a.top_n = top_ids.data ? int32_t(top_ids.shape[1]) : 0;
    a.top_ids = a.top_n ? top_ids.ptr<int32_t>() : nullptr;
    a.top_logprobs = a.top_n ? top_logprobs.ptr<float>() : nullptr;
    const std::string err = emulation::sample(a, 32);
    RIDGE_CHECK(err.empty(), "emulated sample: {}", err);
    return true;
  }

 private:
  backend::Backend& inner() const {
    if (!inner_) throw Error("emulated sampling backend: no inner backend for this op");
    return *inner_;
  }
  std::unique_ptr<backend::Backend> inner_;
};

}  // namespace

std::unique_ptr<backend::Backend> make_sampling_backend(std::unique_ptr<backend::Backend> inner) {
  return std::make_unique<SamplingBackend>(std::move(inner));
}

}  // namespace ridge::kernels::emulation
