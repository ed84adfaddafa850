#include "ridge/engine/model_bundle.h"

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "ridge/backend/factory.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/io/gguf.h"

namespace ridge::engine {

std::unique_ptr<ModelBundle> ModelBundle::load(const BundleOptions& opt) {
  auto b = std::make_unique<ModelBundle>();
  const auto t0 = std::chrono::steady_clock::now();
  log::info("loading model {}", opt.model_path);
  b->weights = model::ModelWeights::load(opt.model_path);
  const model::ModelConfig& c = b->weights->config();
  log::info("model: {}", c.describe());
  if (const io::GgufFile* g = b->weights->gguf()) {
    if (g->has("tokenizer.ggml.model")) {
      b->tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_gguf(*g));
    } else {
      // As a folder without tokenizer.json: a benchmark's random-weight file, token ids only.
      log::warn("{} has no tokenizer (no tokenizer.ggml.model): prompts must be given as token ids",
                opt.model_path);
    }
  } else {
    namespace fs = std::filesystem;
    fs::path dir = fs::is_directory(opt.model_path) ? fs::path(opt.model_path)
                                                    : fs::path(opt.model_path).parent_path();
    std::error_code ec;
    if (fs::exists(dir / "tokenizer.json", ec)) {
      b->tokenizer =
          std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_hf(dir.string()));
    } else {
      // Random-weight checkpoints for benchmarks carry no tokenizer: token ids only.
      log::warn("{} has no tokenizer.json: prompts must be given as token ids", dir.string());
    }
  }
  b->backend = backend::make_backend(opt.device, opt.backend_options());
  log::info("backend: {}", b->backend->name());
  model::LoadOptions load;
  if (opt.quantization == "fp8") {
    load.quantize = DType::fp8_e4m3;
  } else {
    RIDGE_CHECK(opt.quantization == "none" || opt.quantization.empty(),
                "quantization '{}' is not one of: none, fp8", opt.quantization);
  }
  b->model = std::make_unique<model::LlamaModel>(*b->weights, *b->backend, load);

  DType kv_dtype;
  if (opt.kv_dtype == "auto") {
    kv_dtype = b->backend->device() == Device::cpu ? DType::f32 : DType::bf16;
  } else {
    kv_dtype = dtype_from_name(opt.kv_dtype);
  }
  int64_t tokens = opt.kv_tokens > 0 ? opt.kv_tokens : std::min<int64_t>(c.max_position, 32768);
  RIDGE_CHECK(tokens > 0, "KV capacity {} must be positive", tokens);
  const int64_t blocks = (tokens + opt.block_size - 1) / opt.block_size;
  b->kv_pool = std::make_unique<kv::KvPool>(*b->backend, c, blocks, opt.block_size, kv_dtype);
  const int64_t max_blocks_per_seq =
      std::min<int64_t>(blocks, (c.max_position + opt.block_size - 1) / opt.block_size);
  const size_t workspace = b->model->reserve(opt.prefill_chunk, 1, max_blocks_per_seq);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t kernel_scratch = b->backend->workspace_bytes();
  const std::string scratch =
      kernel_scratch ? fmt::format(" + {} of the backend's kernel scratch",
                                   log::format_bytes(double(kernel_scratch)))
                     : std::string();
  // Weights as held (a GPU converts quantized and f16/f32 files to bf16), and the file's bytes
  // where they differ.
  const size_t held = b->model->weight_bytes(), stored = b->weights->bytes();
  const std::string weights =
      held == stored ? fmt::format("{} ({})", log::format_bytes(double(held)), b->weights->format())
                     : fmt::format("{} on the {} ({} in the {} file)",
                                   log::format_bytes(double(held)),
                                   b->backend->device() == Device::cpu ? "CPU" : "GPU",
                                   log::format_bytes(double(stored)), b->weights->format());
  log::info("memory: weights {}, KV pool {} ({} blocks of {} tokens = {} tokens, {}), "
            "workspace {} (steps of {} tokens){}; loaded in {:.2f} s",
            weights,
            log::format_bytes(double(b->kv_pool->bytes())), blocks, opt.block_size,
            b->kv_pool->num_tokens(), dtype_name(kv_dtype), log::format_bytes(double(workspace)),
            opt.prefill_chunk, scratch, secs);
  return b;
}

}  // namespace ridge::engine
