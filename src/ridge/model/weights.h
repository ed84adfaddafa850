// ModelWeights: every tensor of a Llama-family model, as views in their stored dtype, from a GGUF
// file or a Hugging Face safetensors folder. Names are mapped to one scheme here; GGUF's Q/K rows
// (permuted by llama.cpp's converter for interleaved RoPE in the `llama` architecture) are put
// back into Hugging Face's rotate-half order, so that every backend sees one convention.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ridge/core/buffer.h"
#include "ridge/core/tensor.h"
#include "ridge/model/config.h"

namespace ridge::io {
class GgufFile;
class SafetensorsModel;
}  // namespace ridge::io

namespace ridge::model {

struct LayerWeights {
  Tensor attn_norm;           // [H]
  Tensor wq, wk, wv;          // [q_dim, H], [kv_dim, H], [kv_dim, H]
  Tensor bq, bk, bv;          // biases (Qwen2) or empty (data == nullptr)
  Tensor wo;                  // [H, q_dim]
  Tensor ffn_norm;            // [H]
  Tensor w_gate, w_up;        // [F, H]
  Tensor w_down;              // [H, F]
};

// Source of the weights: keeps the mapped file(s) alive and owns re-ordered copies.
class ModelWeights {
 public:
  // path: a .gguf file, or a Hugging Face folder (config.json + *.safetensors), or a
  // .safetensors file with config.json beside it.
  static std::unique_ptr<ModelWeights> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const std::string& path() const { return path_; }
  // "gguf" or "safetensors"
  const std::string& format() const { return format_; }

  Tensor token_embd;          // [V, H]
  Tensor output_norm;         // [H]
  Tensor output;              // [V, H] (the embedding when tied)
  Tensor rope_freqs;          // optional [hd/2] divisors of the RoPE frequencies (GGUF llama3)
  std::vector<LayerWeights> layers;

  // Bytes of all weights in their stored dtypes (the tied output counted once).
  size_t bytes() const;
  // Every named weight tensor, for uploading to a device (name, view).
  std::vector<std::pair<std::string, Tensor*>> named_tensors();

  // The gguf / safetensors readers (one of them is set), for the tokenizer.
  const io::GgufFile* gguf() const { return gguf_.get(); }

  ~ModelWeights();

 private:
  ModelWeights();
  void load_gguf(const std::string& path);
  void load_safetensors(const std::string& path);
  void check_shapes() const;

  ModelConfig config_;
  std::string path_;
  std::string format_;
  std::unique_ptr<io::GgufFile> gguf_;
  std::unique_ptr<io::SafetensorsModel> st_;
  std::vector<HostBuffer> owned_;
};

// Un-permutes rows of a GGUF `llama` Q or K weight (or bias) of n_heads heads: GGUF row
// h*hd + 2*j + t holds Hugging Face row h*hd + t*(hd/2) + j. Returns a new buffer.
HostBuffer unpermute_gguf_rows(const Tensor& w, int64_t n_heads, std::string_view name = {});

}  // namespace ridge::model
