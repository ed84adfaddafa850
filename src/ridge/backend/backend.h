// Backend: the ops of the Llama-family forward, one instance per device. The CPU backend is the
// reference (plain, fp32 accumulation, multithreaded); the CUDA backend is the fast path. Every op
// runs on the Stream passed in (a CUDA stream; ignored on the CPU), never on a global stream.
//
// Shapes (T = tokens in the flattened batch, H = hidden, F = FFN, V = vocab, S = sequences,
// nh/nkv = query/KV heads, hd = head dim):
//   embedding   table [V, H] (any weight dtype), ids i32 [T]          -> out [T, H]
//   rmsnorm     x [T, H], weight [H]                                  -> out [T, H]
//   add_rmsnorm residual [T, H] += x [T, H]; out = rmsnorm(residual)   (fused residual add)
//   matmul      x [T, K], w [N, K] (nn.Linear layout, any weight dtype), bias [N] or null
//                                                                     -> out [T, N]
//   matmul_add  out [T, N] += x [T, K] · w [N, K]ᵀ                   (the residual add, fused)
//   matmul_fused  out (+)= P(x) · wᵀ with a prologue P on x: rmsnorm, or silu_mul of x [T, 2K]
//               (MatmulFusion; the default composes rmsnorm / silu_mul into `scratch` with
//               matmul / matmul_add, a backend may fuse them into one kernel)
//   matmul_swiglu  out [T, F] = silu_mul(P(x) · wᵀ), w = [gate; up] [2F, K] (default: matmul_fused
//               into gate_up [T, 2F], then silu_mul; a backend may fuse them)
//   rope        q [T, nh*hd], k [T, nkv*hd] in place; positions i32 [T]; inv_freq f32 [hd/2]
//               (rotate-half pairing (i, i + hd/2), as HF transformers)
//   kv_store    k, v [T, nkv*hd] -> pools at slots i32 [T] (slot = block * block_size + offset;
//               slot -1 marks a padding row: nothing is stored)
//   rope_kv_store  rope, then kv_store of the rotated k and v (default: the two ops)
//   matmul_rope_kv  matmul_fused of q|k|v, then rope_kv_store of its views, in one kernel where
//               the backend can (default: false, and the caller makes the two calls)
//   attention   q [T, nh*hd], the layer's paged KV, AttentionMeta      -> out [T, nh*hd]
//               causal: new token i of sequence s (at position context_len - q_len + i) sees
//               KV positions 0 ..= its own position.
//   silu_mul    gate_up [T, 2F] (gate first, then up)                 -> out [T, F]
//   gather_rows x [T, H], rows i32 [R]                                -> out [R, H]
// Activations are f32 on the CPU backend and bf16 on CUDA; logits are always f32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ridge/core/tensor.h"

namespace ridge::backend {

struct Stream {
  void* handle = nullptr;  // cudaStream_t on CUDA
};

// One layer's paged KV memory: K and V pools of [num_blocks, block_size, nkv, hd] (NHD).
struct KvLayer {
  Tensor k;
  Tensor v;
  int64_t block_size() const { return k.shape[1]; }
};

// Per-step attention metadata (planned once per step, shared by all layers). Tensors live on the
// backend's device; the host_* mirrors are for planning and for the CPU backend.
struct AttentionMeta {
  int32_t num_seqs = 0;
  int32_t max_q_len = 0;
  int32_t max_context_len = 0;
  int32_t max_blocks_per_seq = 0;
  Tensor cu_seqlens_q;  // i32 [S + 1]: sequence s owns rows [cu[s], cu[s+1]) of q
  Tensor context_lens;  // i32 [S]: tokens in the KV cache after this step's store
  Tensor block_tables;  // i32 [S, max_blocks_per_seq]
  const int32_t* host_cu_seqlens_q = nullptr;
  const int32_t* host_context_lens = nullptr;
  const int32_t* host_block_tables = nullptr;
  // 0: the backend plans the KV split from the host mirrors (context lengths known now).
  // > 0: a fixed number of KV splits whose ranges each block derives from context_lens on the
  // device, so that the launch does not depend on host data (a captured CUDA graph replays it
  // for any context lengths up to max_blocks_per_seq * block_size).
  // -1: like > 0, with the count chosen by the backend from num_seqs and max_blocks_per_seq only.
  int32_t fixed_splits = 0;
};

// Owning device (or host) memory handed out by a Backend; freed by its deleter.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, std::function<void(void*)> release)
      : data_(data, std::move(release)), bytes_(bytes) {}
  void* data() const { return data_.get(); }
  size_t size() const { return bytes_; }

 private:
  std::unique_ptr<void, std::function<void(void*)>> data_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
};

// A captured sequence of ops that replays on a stream (a CUDA graph on the GPU).
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void replay(const Stream& s) = 0;
};

// A matmul shape the model will run: w [n, k], for up to max_tokens rows of x. f32_out: its
// output is f32 (the LM head's logits), which a backend may serve with fewer kernels (the CUDA
// backend: its GEMVs at up to 8 tokens, else cuBLASLt) and so tune at fewer token counts.
struct MatmulShape {
  int64_t n = 0;
  int64_t k = 0;
  bool f32_out = false;
};

// A backend's kernel choice for a weight shape [n, k] at up to `tokens` tokens (a power of two:
// the token bucket, 1 for a decode step at batch 1).
struct MatmulChoice {
  int64_t tokens = 0;
  int64_t n = 0;
  int64_t k = 0;
  std::string kernel;
};

// What Backend::matmul_fused does around the product.
struct MatmulFusion {
  const Tensor* norm_weight = nullptr;  // prologue: x := rmsnorm(x; norm_weight, eps)
  float eps = 0.0f;
  // The norm's weight is already in w (fold_norm_weight) and norm_weight MUST then be a vector of
  // ones: only the 1/rms(x) scale remains, which a backend may apply to the product instead of to
  // x (ignoring norm_weight), while a composed path applies norm_weight as given.
  bool norm_folded = false;
  bool silu_mul = false;                // prologue: x [T, 2K] := silu_mul(x) [T, K]
  bool accumulate = false;              // epilogue: out += product, else out = product
  // Sums of squares of rows, so that the norm of the next block needs no kernel of its own and no
  // pass over x (hints; a backend may ignore both). record_sumsq = tag (1..kSumsqTags): keep the
  // sums of squares of out's rows, as stored, under that tag (any earlier record under it is
  // dropped). norm_sumsq = tag: x is the out of the call that last recorded under that tag and
  // has not changed since; a backend that kept the sums may take 1/rms(x) from them (norm_folded
  // only).
  static constexpr int kSumsqTags = 2;
  int record_sumsq = 0;
  int norm_sumsq = 0;
  // Hint: the op before this call on the stream is latency-bound and leaves the memory system
  // mostly idle (decode attention), so a backend may start reading w before that op ends.
  bool early_weights = false;
};

// Backend::decode_layers: every layer of a Llama-family model (fused q|k|v and gate|up weights, the
// RMSNorm weights folded into them, no biases) for one token of one sequence.
struct DecodeLayersShape {
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
};
struct DecodeLayer {
  const Tensor* wqkv = nullptr;       // [(nh + 2 nkv) hd, H], attention norm folded
  const Tensor* wo = nullptr;         // [H, nh hd]
  const Tensor* w_gate_up = nullptr;  // [2F, H], ffn norm folded
  const Tensor* w_down = nullptr;     // [H, F]
  const KvLayer* kv = nullptr;
};
struct DecodeLayersCall {
  DecodeLayersShape shape;
  std::span<const DecodeLayer> layers;
  float eps = 0.0f, scale = 0.0f;
  Tensor x;  // [1, H] activations: in, the embedding row; out, the last layer's residual
  Tensor positions, slots, context_lens;  // i32 [1] each (as rope_kv_store and attention take)
  Tensor block_table;                     // i32 [max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  Tensor inv_freq;  // f32 [hd / 2]
  void* workspace = nullptr;  // decode_layers_workspace(shape) bytes of device memory
  size_t workspace_bytes = 0;
};

// One row of Backend::sample: engine::SamplingParams plus the row's place in its sequence.
struct SampleRow {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_logprobs = 0;  // 0..20
  uint64_t seed = 0;
  uint64_t step = 0;  // the index of the token being drawn among the sequence's generated tokens
  // This row's entries in SamplingBatch::penalty_tokens / penalty_counts: [begin, end).
  int32_t penalty_begin = 0;
  int32_t penalty_end = 0;
  // This row's entries in SamplingBatch::bias_tokens / bias_values: [begin, end).
  int32_t bias_begin = 0;
  int32_t bias_end = 0;
  // >= 0: this row's banned tokens are the set bits of SamplingBatch::ban_masks words
  // [ban_mask * W, (ban_mask + 1) * W), W = ceil(vocab / 32); -1: none.
  int32_t ban_mask = -1;
};

// The host side of one Backend::sample call.
struct SamplingBatch {
  std::span<const SampleRow> rows;
  // Per row (its [penalty_begin, penalty_end)): the distinct tokens seen so far, each once, and
  // how often each occurs in the generated output (0: prompt only). The repetition penalty
  // applies to every entry, presence and frequency penalties to entries with count > 0. Rows
  // without penalties need no entries.
  std::span<const int32_t> penalty_tokens;
  std::span<const int32_t> penalty_counts;
  // Per row (its [bias_begin, bias_end)): distinct tokens and what is added to their logits before
  // the penalties (-inf bans a token). Ids outside [0, vocab) are skipped.
  std::span<const int32_t> bias_tokens;
  std::span<const float> bias_values;
  // Ban masks (bit t % 32 of word t / 32: token t becomes -inf), W words each: for rows that ban
  // much of the vocabulary (JSON mode), where a list would cost 8 bytes a token.
  std::span<const uint32_t> ban_masks;
};

// The device's power state at one moment (Backend::power_reading): what the card's power
// controller is doing to the clocks, and the energy counter that energy per token is read from.
struct PowerReading {
  double power_w = 0;         // board power now
  std::optional<double> energy_j;  // the card's energy counter (since its driver loaded), where it
                                   // has one
  double sm_clock_mhz = 0;    // SM clock now
  double power_limit_w = 0;   // the enforced power limit
  bool power_capped = false;  // the clock is held down by the power cap now
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // dtype of activations between ops
  virtual DType activation_dtype() const = 0;
  // The KV cache dtypes its kv_store / rope_kv_store / attention take (a pool of another dtype is
  // refused at load, naming these).
  virtual std::vector<DType> kv_dtypes() const = 0;

  // Memory on this backend's device. allocate never returns null (throws ridge::Error).
  virtual Buffer allocate(size_t bytes) = 0;
  virtual void upload(const Stream& s, void* dst, const void* src, size_t bytes) = 0;
  virtual void download(const Stream& s, void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize(const Stream& s) = 0;
  // Makes a weight usable by this backend's ops. `host` is a view in its stored dtype (e.g. in a
  // mapped file, alive as long as the model). The CPU backend returns the view itself; a GPU
  // backend copies it to device memory (converting quantized types to bf16) and keeps it alive
  // until the backend is destroyed.
  virtual Tensor upload_weight(const Tensor& host) = 0;
  // Optional: one device weight made of `parts` stacked along dim 0 (each converted from its own
  // stored dtype; all matrices with the same number of columns, or all vectors), so that q/k/v or
  // gate/up run as one matmul. Returns an empty Tensor when the backend keeps parts separate (the
  // CPU backend: its weights are views of the mapped file).
  virtual Tensor upload_weight_rows(std::span<const Tensor> parts) {
    (void)parts;
    return {};
  }
  // Optional: w [N, K] := w · diag(norm_weight) in place (w's columns scaled by the RMSNorm weight
  // that precedes it), so that matmul_fused can run the norm as a per-token scale
  // (MatmulFusion::norm_folded). Returns false, changing nothing, when the backend does not fold
  // (the CPU backend: its weights are views of the mapped file).
  virtual bool fold_norm_weight(Tensor& w, const Tensor& norm_weight) {
    (void)w, (void)norm_weight;
    return false;
  }
  // Optional: re-encodes a weight matrix w [N, K] from upload_weight / upload_weight_rows in
  // `dtype` for matmul, in place (w then views the new encoding; the old one is freed where the
  // backend owns it). fp8_e4m3:
  // E4M3 codes with one fp32 scale per row (Tensor::scales; amax / 448, as
  // kernels::quantize_rows_fp8), and every matmul with it quantizes its activations per token the
  // same way. Returns false, changing nothing, where the backend or the shape does not allow it
  // (N or K not a multiple of 16 on both backends; the CPU backend owns its fp8 copy, the
  // reference for the GPU's).
  virtual bool quantize_weight(Tensor& w, DType dtype) {
    (void)w, (void)dtype;
    return false;
  }
  // Host memory the device copies to and from fastest (pinned on a GPU); plain memory on the CPU.
  virtual Buffer allocate_host(size_t bytes);
  // Device memory the backend holds for its own ops' scratch (on the GPU: per stream, cuBLASLt's
  // workspace, split-KV partials, tickets), apart from what allocate() returned. For the start-up
  // memory statement.
  virtual size_t workspace_bytes() const { return 0; }
  // Optional: the device's power now (thread safe: callable from any thread while steps run).
  // Absent on the CPU, and on a GPU whose driver gives no power readings.
  virtual std::optional<PowerReading> power_reading() const { return std::nullopt; }
  // Optional: the matmul shapes the model runs, before its first step, so that the backend can
  // choose (and tune) a kernel per shape and token count up to max_tokens.
  virtual void prepare_matmuls(std::span<const MatmulShape> shapes, int64_t max_tokens) {
    (void)shapes;
    (void)max_tokens;
  }
  // Optional: the kernel choices made so far (prepare_matmuls' tuning), ordered by n, k, tokens;
  // empty where there is nothing to choose (the CPU). For benchmark reports.
  virtual std::vector<MatmulChoice> matmul_choices() const { return {}; }
  // Optional: the kernel the fused one-token SwiGLU GEMV (gate|up with its SwiGLU epilogue) runs
  // when that is not its shape's choice in matmul_choices(); empty otherwise. For benchmark
  // reports.
  virtual std::string one_token_swiglu_kernel() const { return {}; }
  // Optional: records the ops `body` issues on `s` into a Graph (nothing runs while capturing).
  // Returns null when the backend has no graphs. The body must not allocate, synchronize, or copy
  // between host and device.
  virtual std::unique_ptr<Graph> capture(const Stream& s,
                                         const std::function<void(const Stream&)>& body) {
    (void)s;
    (void)body;
    return nullptr;
  }

  // Called by a model before the ops of one forward pass over `tokens` rows whose sequences reach
  // at most `max_context` positions (a captured graph's capacity), eager or being captured: a
  // backend may choose launch settings for the pass (the CUDA backend's small-batch decode
  // chain). The settings hold until the next call.
  virtual void begin_forward(int64_t tokens, int64_t max_context) {
    (void)tokens;
    (void)max_context;
  }
  virtual void embedding(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // embedding, with MatmulFusion's record_sumsq hint: the sums of squares of out's rows kept under
  // tag record_sumsq (1..kSumsqTags; earlier records under it dropped), so that the first layer's
  // norm can take 1/rms from them (norm_sumsq). A backend that keeps no sums: embedding.
  virtual void embedding_sumsq(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out,
                               int record_sumsq) {
    (void)record_sumsq;
    embedding(s, table, ids, out);
  }
  virtual void rmsnorm(const Stream& s, const Tensor& x, const Tensor& weight, float eps,
                       Tensor& out) = 0;
  virtual void add_rmsnorm(const Stream& s, Tensor& residual, const Tensor& x, const Tensor& weight,
                           float eps, Tensor& out) = 0;
  virtual void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& out) = 0;
  virtual void matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) = 0;
  // out (+)= P(x) · wᵀ (MatmulFusion). scratch [T, K] (act dtype) receives P(x) when the backend
  // does not fuse the prologue and is left untouched when it does (callers must not rely on
  // either). At most one prologue; bias-free.
  virtual void matmul_fused(const Stream& s, const Tensor& x, const Tensor& w,
                            const MatmulFusion& fusion, Tensor& scratch, Tensor& out);
  // out [T, F] = silu_mul(P(x) · wᵀ) for w = [gate; up] [2F, K] (gate rows first), P the norm
  // prologue of matmul_fused (no silu_mul prologue, no accumulate, no record_sumsq). gate_up
  // [T, 2F] receives the product when the backend composes (callers must not rely on it).
  virtual void matmul_swiglu(const Stream& s, const Tensor& x, const Tensor& w,
                             const MatmulFusion& fusion, Tensor& scratch, Tensor& gate_up,
                             Tensor& out);
  virtual void rope(const Stream& s, Tensor& q, Tensor& k, const Tensor& positions,
                    const Tensor& inv_freq) = 0;
  virtual void kv_store(const Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                        KvLayer& kv) = 0;
  virtual void rope_kv_store(const Stream& s, Tensor& q, Tensor& k, const Tensor& v,
                             const Tensor& positions, const Tensor& inv_freq, const Tensor& slots,
                             KvLayer& kv) {
    rope(s, q, k, positions, inv_freq);
    kv_store(s, k, v, slots, kv);
  }
  // Optional: qkv = P(x) · wᵀ (matmul_fused with at most a norm prologue: no silu_mul,
  // accumulate or record_sumsq) for w stacking q, k and v rows (q_dim + 2 kv_dim, kv_dim the
  // pools' heads × head_dim, head_dim = 2 · inv_freq's length), then rope_kv_store of qkv's q, k
  // and v views, in one kernel: qkv and kv's pools end as the two calls leave them. Returns false,
  // doing nothing, where the backend does not fuse this call; the caller then makes the two calls.
  virtual bool matmul_rope_kv(const Stream& s, const Tensor& x, const Tensor& w,
                              const MatmulFusion& fusion, Tensor& scratch, Tensor& qkv,
                              const Tensor& positions, const Tensor& inv_freq, const Tensor& slots,
                              KvLayer& kv) {
    (void)s, (void)x, (void)w, (void)fusion, (void)scratch, (void)qkv, (void)positions;
    (void)inv_freq, (void)slots, (void)kv;
    return false;
  }
  virtual void attention(const Stream& s, const Tensor& q, const KvLayer& kv,
                         const AttentionMeta& meta, float scale, Tensor& out) = 0;
  virtual void silu_mul(const Stream& s, const Tensor& gate_up, Tensor& out) = 0;
  // Optional: the device workspace decode_layers needs for this shape, 0 when the backend has no
  // such kernel or cannot run this shape (the model then never calls decode_layers).
  virtual size_t decode_layers_workspace(const DecodeLayersShape& shape) const {
    (void)shape;
    return 0;
  }
  // Optional: every layer for one token of one sequence in one call (a persistent decode
  // kernel), with the results the per-layer ops would give (x the residual after the last layer,
  // the token's K and V in every layer's pool). Returns false, doing nothing, when it does not
  // apply to this call (the model then runs the layers op by op). Enqueued on s; capturable.
  virtual bool decode_layers(const Stream& s, const DecodeLayersCall& call) {
    (void)s, (void)call;
    return false;
  }
  virtual void gather_rows(const Stream& s, const Tensor& x, const Tensor& rows, Tensor& out) = 0;

  // Optional: samples one token per row of logits on the device, by engine::Sampler's rules
  // (penalties, temperature, top-k, top-p, min-p; greedy ties go to the lowest id; logprobs are
  // the raw log-softmax). logits: f32 [R, V] device, rows contiguous (any row stride),
  // R = batch.rows.size(). Outputs, on the device: tokens i32 [R]; logprobs f32 [R]; top_ids i32
  // and top_logprobs f32 [R, N], contiguous, N >= every row's top_logprobs, best first, slots past
  // a row's count -1 and -inf (may be empty tensors when no row asks for them). Draws come from a
  // counter-based generator keyed by (seed, step): a row's token depends on nothing else, but it
  // is not the token engine::Sampler draws with the same seed. Returns false, doing nothing, when
  // the backend has no device sampler (then the caller samples on the host). Enqueued on s; the
  // host data of `batch` may be reused when the call returns.
  virtual bool sample(const Stream& s, const Tensor& logits, const SamplingBatch& batch,
                      Tensor& tokens, Tensor& logprobs, Tensor& top_ids, Tensor& top_logprobs) {
    (void)s, (void)logits, (void)batch, (void)tokens, (void)logprobs, (void)top_ids,
        (void)top_logprobs;
    return false;
  }
};

}  // namespace ridge::backend
