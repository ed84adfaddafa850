#include "common.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::app {

namespace fs = std::filesystem;

constexpr int kMaxThreads = 1024;  // --threads: past this a typo, not a machine

// --seed: -1 (llama.cpp's spelling of a random seed) or a uint64 written in decimal (or 0x hex /
// 0 octal, as strtoull reads them), nothing else. CLI11's own conversion would wrap -7 to
// 2^64 - 7 into a uint64 (and saturate past INT64_MAX into an int64), so the text is checked here
// first. Records in seed_given whether a seed was given (-1 is none) and hands CLI11 a number.
static std::string check_seed(std::string& text, bool& seed_given) {
  if (text == "-1") {
    seed_given = false;
    text = "0";  // resolve_seed picks the random seed
    return {};
  }
  const std::string what = fmt::format(
      "{} is not a seed: seeds are integers from 0 to {} (-1, or no --seed, for a random one)",
      text, std::numeric_limits<uint64_t>::max());
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return what;
  errno = 0;
  char* end = nullptr;
  std::strtoull(text.c_str(), &end, 0);
  if (errno == ERANGE || end != text.c_str() + text.size()) return what;
  seed_given = true;
  return {};
}

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  if (raw.empty()) return "ridge";
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  return raw;
}

std::string default_model_path() {
  if (const char* env = std::getenv("RIDGE_MODEL"); env && *env) return env;
  const fs::path name = fs::path("models") / "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  if (fs::exists(name, ec)) return name.string();
  const fs::path beside = fs::path(RIDGE_SOURCE_DIR) / name;
  if (fs::exists(beside, ec)) return beside.string();
  return name.string();
}

void add_model_options(CLI::App& app, engine::BundleOptions& o) {
  app.add_option("-m,--model", o.model_path,
                 "GGUF file or Hugging Face folder (default: the SmolLM2-135M-Instruct Q4_1 "
                 "model that scripts/setup installs, or $RIDGE_MODEL)");
  app.add_option("--device", o.device, "auto | cpu | cuda (auto: CUDA when a GPU is present)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "CPU threads (0: one per core)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxThreads));
  app.add_option("--ctx-size", o.kv_tokens,
                 "KV cache capacity in tokens (0: the model's context, at most 32768)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(std::numeric_limits<int32_t>::max())));
  app.add_option("--block-size", o.block_size, "KV page size in tokens")
      ->capture_default_str()
      ->check(CLI::IsMember({16, 32, 64}));
  app.add_option("--kv-dtype", o.kv_dtype,
                 "KV cache dtype: auto (f32 on CPU, bf16 on CUDA) | f32 | bf16 | f16 (CPU) | fp8_e4m3")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16", "fp8_e4m3"}));
  app.add_option("--quantization", o.quantization,
                 "weights of the layers' projections: none (as stored; bf16 on CUDA) | fp8 "
                 "(E4M3 with per-row scales, activations quantized per token, as vLLM's "
                 "--quantization fp8; the embedding and LM head stay as they are; on the CPU a "
                 "slow reference)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--prefill-chunk", o.prefill_chunk, "largest prefill step in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  // GPU start-up: GEMM autotuning and its build cache, kernel choice, CUDA graphs.
  app.add_option("--cache-root", o.backend.cache_root,
                 "build cache of tuned kernel choices (default: $RIDGE_CACHE_ROOT, else "
                 "$XDG_CACHE_HOME/ridge, else ~/.cache/ridge); see `ridge cache ls`");
  app.add_flag_callback(
      "--no-tune", [&o] { o.backend.tune = false; },
      "GPU: do not time GEMM candidates at start-up and leave the build cache alone; each GEMM "
      "takes the fixed by-shape rule");
  app.add_option("--gemm", o.backend.gemm,
                 "GPU GEMM kernels: auto (the tuned or by-shape pick per weight shape and token "
                 "count), cublas (cuBLASLt only), ridge (ridge's own kernels wherever they apply)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cublas", "ridge"}));
  app.add_flag_callback(
      "--no-cuda-graphs", [&o] { o.backend.cuda_graphs = false; },
      "GPU: launch decode steps op by op instead of replaying captured CUDA graphs");
  app.add_option("--fuse", o.backend.fuse,
                 "GPU decode fusions, a comma list: norm (RMSNorm weight folded into the next "
                 "matmul, the norm a 1/rms scale in its epilogue from sums of squares the matmul "
                 "before it left), silu (SwiGLU inside the down "
                 "projection), rope_kv (RoPE and the KV store in one kernel); opt-in: swiglu_gemm "
                 "(prefill chunks of 1024+ tokens: gate|up with SwiGLU in ridge's sm90 GEMM "
                 "epilogue; +0.9% on prefill 2048 in run 12, within noise); none")
      ->envname("RIDGE_FUSE")
      ->capture_default_str();
  app.add_flag_callback(
      "--no-fusion", [&o] { o.backend.fuse = "none"; }, "GPU: the same as --fuse none");
  app.add_flag_callback(
      "--no-pdl", [&o] { o.backend.pdl = false; },
      "GPU: launch each kernel after the previous one ends (no programmatic dependent launch)");
  app.add_flag_callback(
      "--decode-kernel", [&o] { o.backend.decode_kernel = true; },
      "GPU (experimental): run batch-1 decode steps in one persistent kernel for every layer "
      "instead of layer by layer (on the H200 level with the layer-by-layer chain so far: 3.97 against "
      "3.95 ms a step)");
  app.add_flag_callback(
      "--gemv-stream", [&o] { o.backend.gemv_stream = true; },
      "GPU (experimental): the decode GEMVs at 1-2 tokens read the weights as the read-only "
      "ceiling kernel does (the row-stream GEMV) instead of tile by tile");
  app.add_flag_callback(
      "--gemv-warp", [&o] { o.backend.gemv_warp = true; },
      "GPU: every decode GEMV at one token takes whole rows a warp, the grid's warps on "
      "consecutive rows (the warp-row GEMV); without it the tuner picks it shape by shape where "
      "it measures faster than 16-row tiles a block");
}

void resolve_model(engine::BundleOptions& o) {
  if (o.model_path.empty()) o.model_path = default_model_path();
  std::error_code ec;
  if (!fs::exists(o.model_path, ec))
    fail("model '{}' not found (run scripts/setup to install the default model, or pass -m)",
         o.model_path);
}

void add_generation_options(CLI::App& app, GenerationFlags& f) {
  auto& g = f.generate;
  auto& s = g.sampling;
  // llama.cpp's defaults: a demanding user's expectation for terminal use.
  s.temperature = 0.8f;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.min_p = 0.05f;
  app.add_option("-n,--max-tokens", g.max_tokens, "tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature,--temp", s.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0: off)")->capture_default_str();
  app.add_option("--top-p", s.top_p, "nucleus sampling mass (1: off)")->capture_default_str();
  app.add_option("--min-p", s.min_p, "drop tokens below min_p x the top probability (0: off)")
      ->capture_default_str();
  app.add_option("--repetition-penalty", s.repetition_penalty, "HF-style repetition penalty (1: off)")
      ->capture_default_str();
  app.add_option("--presence-penalty", s.presence_penalty, "OpenAI presence penalty")
      ->capture_default_str();
  app.add_option("--frequency-penalty", s.frequency_penalty, "OpenAI frequency penalty")
      ->capture_default_str();
  app.add_option("--seed", f.seed,
                 "sampling seed, 0 to 2^64-1 (default, or -1: random, printed with --json)")
      ->transform(CLI::Validator([&f](std::string& text) { return check_seed(text, f.seed_given); },
                                 "UINT64"));
  app.add_flag("--ignore-eos", g.ignore_eos, "keep generating past end-of-sequence tokens");
}

uint64_t resolve_seed(GenerationFlags& f) {
  if (!f.seed_given) {
    f.seed = uint64_t(std::random_device{}() >> 1);
    f.seed_given = true;
  }
  f.generate.sampling.seed = f.seed;
  f.generate.sampling.validate();
  return f.seed;
}

void use_prefill_chunk(const engine::BundleOptions& model, GenerationFlags& f) {
  f.generate.prefill_chunk = int32_t(model.prefill_chunk);
}

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](const std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v) || v < lo || v > hi)
          return fmt::format("Value {} not in range {} to {}", text, lo, hi);
        return {};
      },
      fmt::format("FLOAT in [{} - {}]", lo, hi));
}

}  // namespace ridge::app
