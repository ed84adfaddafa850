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
//   rope        q [T, nh*hd], k [T, nkv*hd] in place; positions i32 [T]; inv_freq f32 [hd/2]
//               (rotate-half pairing (i, i + hd/2), as HF transformers)
//   kv_store    k, v [T, nkv*hd] -> pools at slots i32 [T] (slot = block * block_size + offset)
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
#include <string>

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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // dtype of activations between ops
  virtual DType activation_dtype() const = 0;

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

  virtual void embedding(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  virtual void rmsnorm(const Stream& s, const Tensor& x, const Tensor& weight, float eps,
                       Tensor& out) = 0;
  virtual void add_rmsnorm(const Stream& s, Tensor& residual, const Tensor& x, const Tensor& weight,
                           float eps, Tensor& out) = 0;
  virtual void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& out) = 0;
  virtual void rope(const Stream& s, Tensor& q, Tensor& k, const Tensor& positions,
                    const Tensor& inv_freq) = 0;
  virtual void kv_store(const Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                        KvLayer& kv) = 0;
  virtual void attention(const Stream& s, const Tensor& q, const KvLayer& kv,
                         const AttentionMeta& meta, float scale, Tensor& out) = 0;
  virtual void silu_mul(const Stream& s, const Tensor& gate_up, Tensor& out) = 0;
  virtual void gather_rows(const Stream& s, const Tensor& x, const Tensor& rows, Tensor& out) = 0;
};

}  // namespace ridge::backend
