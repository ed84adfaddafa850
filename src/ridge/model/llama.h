// LlamaModel: the Llama-family forward (Llama 2/3, SmolLM2, Mistral, Qwen2) over a Backend.
//   x = embed(tokens)
//   per layer: h = rmsnorm(x); q,k,v = h·Wq,k,vᵀ (+bias); rope(q, k); store k, v in the paged KV;
//              a = attention(q, KV); x += a·Woᵀ   [tensor-parallel all-reduce point]
//              h = rmsnorm(x); x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ   [all-reduce point]
//   logits = rmsnorm(x)[logits_rows] · Woutputᵀ, in fp32
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/model/forward_batch.h"
#include "ridge/model/weights.h"

namespace ridge::model {

// RoPE inverse frequencies [head_dim / 2] in fp32, computed the way HF transformers does
// (including llama3 and linear scaling, and GGUF's rope_freqs divisors when present).
std::vector<float> rope_inv_freq(const ModelConfig& config, const Tensor& rope_freqs = {});

class LlamaModel {
 public:
  LlamaModel(const ModelWeights& weights, backend::Backend& backend);

  const ModelConfig& config() const { return weights_.config(); }
  backend::Backend& backend() const { return backend_; }

  // Allocates the step workspace for up to max_tokens tokens and max_logits logits rows now (so
  // that steps of that size allocate nothing); returns the workspace bytes.
  size_t reserve(int64_t max_tokens, int64_t max_logits);
  size_t workspace_bytes() const;

  // Runs one step. kv: one KvLayer per layer. logits: host f32 [batch.logits_rows.size(), vocab].
  void forward(const backend::Stream& stream, const ForwardBatch& batch,
               std::span<backend::KvLayer> kv, float* logits);

 private:
  backend::Buffer& scratch(size_t slot, size_t bytes);

  const ModelWeights& weights_;
  backend::Backend& backend_;
  // The weights as the backend uses them (host views on the CPU, device copies on a GPU).
  Tensor token_embd_, output_norm_, output_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_host_;
  backend::Buffer inv_freq_;
  std::vector<backend::Buffer> scratch_;
};

}  // namespace ridge::model
