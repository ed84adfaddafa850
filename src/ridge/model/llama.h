// LlamaModel: the Llama-family forward (Llama 2/3, SmolLM2, Mistral, Qwen2) over a Backend.
//   x = embed(tokens)
//   per layer: h = rmsnorm(x); q,k,v = h·Wq,k,vᵀ (+bias); rope(q, k); store k, v in the paged KV;
//              a = attention(q, KV); x += a·Woᵀ   [tensor-parallel all-reduce point]
//              h = rmsnorm(x); x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ   [all-reduce point]
//   logits = rmsnorm(x)[logits_rows] · Woutputᵀ, in fp32
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/model/forward_batch.h"
#include "ridge/model/weights.h"

namespace ridge::model {

// RoPE inverse frequencies [head_dim / 2] in fp32, computed the way HF transformers does
// (including llama3 and linear scaling, and GGUF's rope_freqs divisors when present).
std::vector<float> rope_inv_freq(const ModelConfig& config, const Tensor& rope_freqs = {});

// How the model holds its weights on the backend.
struct LoadOptions {
  // Re-encode every layer's projection matrices (q|k|v, o, gate|up, down) in this dtype at load
  // (Backend::quantize_weight; fp8_e4m3: per-row scales, per-token activation scales at run
  // time). The embedding, the LM head and the norms stay as they are. Unset: as uploaded.
  std::optional<DType> quantize;
};

class LlamaModel {
 public:
  LlamaModel(const ModelWeights& weights, backend::Backend& backend,
             const LoadOptions& options = {});

  const ModelConfig& config() const { return weights_.config(); }
  backend::Backend& backend() const { return backend_; }

  // Allocates the step workspace for up to max_tokens tokens, max_logits logits rows and block
  // tables of max_blocks_per_seq entries now (so that steps of that size allocate nothing), and
  // lets the backend choose its matmul kernels for these sizes; returns the workspace bytes.
  size_t reserve(int64_t max_tokens, int64_t max_logits, int64_t max_blocks_per_seq = 64);
  size_t workspace_bytes() const;
  // Bytes of the weights as the backend holds them (device copies on a GPU, converted to bf16 /
  // f32 there; the mapped file's bytes on the CPU), the folded norms' ones included.
  size_t weight_bytes() const;

  // Runs one step. kv: one KvLayer per layer. logits: host f32 [batch.logits_rows.size(), vocab],
  // or null to leave them on the device (device_logits()).
  //
  // Decode steps (one new token per sequence, every sequence wanting its logits) run as a CUDA
  // graph when the backend has graphs: the batch is padded to a bucket of sequences and block-table
  // width, captured once per bucket and replayed (padding rows: token 0 at position 0, KV slot -1
  // which kv_store skips, a context of one token). Everything else runs op by op.
  void forward(const backend::Stream& stream, const ForwardBatch& batch,
               std::span<backend::KvLayer> kv, float* logits);
  // forward() with the logits left on the device and no wait at the end: the step is queued on
  // `stream` (on a GPU it may still run when this returns) and device_logits() is valid in that
  // stream's order. The caller synchronizes the stream before the next call (the metadata
  // staging is reused) and before reading anything the step wrote. The serving engine uses this
  // to hand out the previous step's tokens while the GPU runs this one.
  void enqueue(const backend::Stream& stream, const ForwardBatch& batch,
               std::span<backend::KvLayer> kv);
  // The last step's logits on the device, f32 [rows, vocab] (rows: the step's logits rows, or
  // the graph bucket's padded rows of which the first logits_rows.size() are the step's).
  const Tensor& device_logits() const { return logits_dev_; }
  // forward() into a host buffer the model owns (pinned on a GPU: the fastest download); valid
  // until the next call. Rows as batch.logits_rows.
  std::span<float> forward_logits(const backend::Stream& stream, const ForwardBatch& batch,
                                        std::span<backend::KvLayer> kv);

  // Counters for tests and benchmarks.
  struct Stats {
    int64_t graph_steps = 0;     // steps replayed from a graph
    int64_t eager_steps = 0;     // steps run op by op
    int64_t graphs_captured = 0;
    // Forward passes whose layers went to one Backend::decode_layers call (eager steps and graph
    // captures; a replay repeats its capture's choice).
    int64_t decode_kernel_passes = 0;
    // Steps whose layers ran in that kernel: eager ones, and replays of a graph captured with it.
    int64_t decode_kernel_steps = 0;
  };
  const Stats& stats() const { return stats_; }
  // Decode graphs on or off (on by default when the backend has them).
  void set_graphs_enabled(bool on) { graphs_enabled_ = on; }

 private:
  // Device copy of one layer's weights; wqkv / w_gate_up are fused when the backend can stack
  // rows (then wq/wk/wv and w_gate/w_up are unused).
  struct Layer {
    LayerWeights w;
    Tensor wqkv, bqkv, w_gate_up;
    // The RMSNorm weight before wqkv / w_gate_up is folded into it (Backend::fold_norm_weight).
    bool attn_norm_folded = false, ffn_norm_folded = false;
  };
  // Where each metadata array sits in the packed i32 upload (offsets in int32 units).
  struct Packing {
    int64_t tokens = 0, positions = 0, slots = 0, cu = 0, ctx = 0, tables = 0, rows = 0, total = 0;
  };
  static Packing pack_layout(int64_t T, int64_t S, int64_t R, int64_t max_blocks);
  backend::Buffer& scratch(size_t slot, size_t bytes);
  // Packs the batch's metadata into the pinned staging buffer and uploads it in one copy;
  // returns the device base of the packed arrays.
  int32_t* upload_metadata(const backend::Stream& stream, const ForwardBatch& batch,
                           const Packing& p);
  // The ops of one step, no host<->device traffic: safe to capture.
  void run_layers(const backend::Stream& stream, int64_t T, int64_t R, int32_t* meta_dev,
                  const Packing& p, backend::AttentionMeta meta, std::span<backend::KvLayer> kv);
  bool forward_graph(const backend::Stream& stream, const ForwardBatch& batch,
                     std::span<backend::KvLayer> kv);
  void run_eager(const backend::Stream& stream, const ForwardBatch& batch,
                 std::span<backend::KvLayer> kv);

  // Backend::decode_layers for a batch-1 step into x (after the embedding); false when the
  // backend or this model cannot (the layers then run op by op).
  bool decode_layers(const backend::Stream& stream, Tensor& x, const Tensor& positions,
                     const Tensor& slots, const backend::AttentionMeta& meta,
                     std::span<backend::KvLayer> kv, const Tensor& inv_freq);

  const ModelWeights& weights_;
  backend::Backend& backend_;
  // The weights as the backend uses them (host views on the CPU, device copies on a GPU).
  Tensor token_embd_, output_norm_, output_;
  std::vector<float> ones_host_;   // the norm weight of a folded norm: ones [hidden]
  Tensor ones_;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_host_;
  backend::Buffer inv_freq_;
  std::vector<backend::Buffer> scratch_;
  uint64_t scratch_generation_ = 0;  // bumped when a scratch buffer moves (graphs then re-capture)
  backend::Buffer staging_;          // pinned host staging for the packed metadata
  backend::Buffer host_logits_;      // pinned host logits (forward_logits)
  Tensor logits_dev_;
  int64_t reserved_tokens_ = 0, reserved_logits_ = 0, reserved_blocks_ = 0;

  // Decode graphs by (sequence bucket, block-table width bucket).
  struct GraphEntry {
    std::unique_ptr<backend::Graph> graph;
    uint64_t generation = 0;
    bool decode_kernel = false;  // captured with the layers in Backend::decode_layers
  };
  std::map<std::pair<int64_t, int64_t>, GraphEntry> graphs_;
  bool graphs_enabled_ = true;
  bool graphs_supported_ = true;  // false once the backend returned no graph
  ForwardBatch padded_;           // the padded decode batch (reused)
  Stats stats_;
  // The workspace Backend::decode_layers asks for this model (0: no persistent decode kernel).
  size_t decode_layers_bytes_ = 0;
  backend::DecodeLayersShape decode_shape_;
  std::vector<backend::DecodeLayer> decode_layers_;
};

}  // namespace ridge::model
