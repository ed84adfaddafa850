// ModelBundle: everything one loaded model needs to run: weights, tokenizer, backend, the model
// and its KV pool. Loading logs what it takes: weights, KV pool and workspace bytes and how many
// tokens fit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ridge/backend/backend.h"
#include "ridge/backend/factory.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/llama.h"
#include "ridge/model/weights.h"
#include "ridge/tokenizer/tokenizer.h"

namespace ridge::engine {

struct BundleOptions {
  std::string model_path;
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;              // CPU threads (0: all)
  int64_t kv_tokens = 0;        // KV capacity in tokens (0: the model's context, at most 32768)
  int64_t block_size = 16;
  std::string kv_dtype = "auto";  // auto (f32 on CPU, bf16 on GPU) | f32 | bf16 | f16 | fp8_e4m3
  int64_t prefill_chunk = 512;    // largest step, in tokens (the workspace is sized for it)
  // none | fp8 (the layers' projection weights in E4M3 with per-row scales;
  // model::LoadOptions::quantize)
  std::string quantization = "none";
  backend::BackendOptions backend;  // cache root, tuning, GEMM choice, CUDA graphs
  backend::BackendOptions backend_options() const {
    backend::BackendOptions o = backend;
    o.cpu_threads = threads;
    return o;
  }
};

class ModelBundle {
 public:
  static std::unique_ptr<ModelBundle> load(const BundleOptions& options);

  const model::ModelConfig& config() const { return weights->config(); }

  std::unique_ptr<model::ModelWeights> weights;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null for a folder without tokenizer.json
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<kv::KvPool> kv_pool;
};

}  // namespace ridge::engine
