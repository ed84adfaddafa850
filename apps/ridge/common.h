// Options shared by the subcommands that load a model, and the default model's location.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "ridge/engine/generator.h"
#include "ridge/engine/model_bundle.h"

namespace ridge::app {

// The default model: $RIDGE_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf in the current
// directory or beside the ridge checkout the binary was built in.
std::string default_model_path();

// This process's command line as typed (from /proc/self/cmdline, arguments joined by spaces;
// "ridge" where it cannot be read): what the benchmarks' JSON records as its command.
std::string command_line();

// -m/--model, --device, --threads, --ctx-size, --block-size, --kv-dtype, --prefill-chunk,
// --cache-root, --no-tune, --gemm, --no-cuda-graphs, --fuse, --no-fusion, --no-pdl,
// --decode-kernel, --gemv-stream, --gemv-warp (the last ten fill options.backend)
void add_model_options(CLI::App& app, engine::BundleOptions& options);
// Fills model_path with the default when none was given, and checks it exists.
void resolve_model(engine::BundleOptions& options);

// --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --presence-penalty,
// --frequency-penalty, --seed (random when not given or -1), --max-tokens, --ignore-eos
struct GenerationFlags {
  engine::GenerateOptions generate;
  uint64_t seed = 0;
  bool seed_given = false;  // --seed (not -1) on the command line; else resolve_seed picks one
};
void add_generation_options(CLI::App& app, GenerationFlags& flags);
// Picks a random seed when none was given; returns the seed used.
uint64_t resolve_seed(GenerationFlags& flags);
// Generation prefills prompts in steps of --prefill-chunk tokens, the size the model's workspace
// is made for.
void use_prefill_chunk(const engine::BundleOptions& model, GenerationFlags& flags);

// A validator for a real-valued option: finite (no nan or inf) and within [lo, hi]. (CLI::Range
// lets NaN through: every comparison with it is false.)
CLI::Validator finite_range(double lo, double hi);

}  // namespace ridge::app
