// ModelConfig: the shape of a Llama-family model (LlamaForCausalLM incl. SmolLM2, Llama 2, Llama
// 3.x, MistralForCausalLM, Qwen2ForCausalLM), from config.json, GGUF metadata or a named shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ridge/core/dtype.h"

namespace ridge::io {
class GgufFile;
}

namespace ridge::model {

struct RopeScaling {
  enum class Kind { none, linear, llama3 };
  Kind kind = Kind::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture;  // "llama", "mistral" or "qwen2"
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn = 0;  // intermediate size
  int64_t vocab = 0;
  int64_t max_position = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  DType weight_dtype = DType::bf16;  // storage type of the projection weights (for perf/)

  // Throws ridge::Error naming the architecture if it is not of the Llama family, or a missing
  // or out-of-range field.
  static ModelConfig from_hf(const nlohmann::json& config);
  static ModelConfig from_gguf(const io::GgufFile& gguf);
  // Named shapes for the planner and benchmarks: llama-2-7b, llama-3-8b, llama-3-70b,
  // smollm2-135m, mistral-7b, qwen2-7b.
  static ModelConfig named(std::string_view name);

  void validate() const;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Parameters (embedding and, unless tied, the LM head included).
  int64_t param_count() const;
  std::string describe() const;
};

}  // namespace ridge::model
