// ridge bench model: prefill and decode throughput of one model on one device. A benchmark, not a
// test: it prints what it measured (and writes JSON with --json-out) with the command, revision,
// device and date; comparisons against ceilings and peers are made by the callers that have them.
#include <chrono>
#include <ctime>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "ridge/core/log.h"
#include "subcommand.h"

namespace {

struct BenchModelFlags {
  ridge::engine::BundleOptions model;
  int prompt_tokens = 128;
  int decode_tokens = 128;
  int repeats = 3;
  std::string json_out;
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void bench(BenchModelFlags& f) {
  using namespace ridge;
  app::resolve_model(f.model);
  f.model.prefill_chunk = std::max<int64_t>(f.model.prefill_chunk, f.prompt_tokens);
  auto bundle = engine::ModelBundle::load(f.model);
  const auto& c = bundle->config();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab) - 1);
  std::vector<int32_t> prompt(size_t(f.prompt_tokens));
  for (auto& t : prompt) t = tok(rng);
  engine::Generator gen(*bundle->model, *bundle->kv_pool, {});
  engine::GenerateOptions opt;
  opt.max_tokens = f.decode_tokens;
  opt.ignore_eos = true;
  opt.sampling.temperature = 0;
  opt.prefill_chunk = f.prompt_tokens;
  // Warm-up, then the median of `repeats` runs.
  std::vector<double> prefill, decode;
  for (int r = 0; r <= f.repeats; ++r) {
    gen.reset();
    auto st = gen.generate(prompt, opt, [](const engine::GeneratedToken&) { return true; });
    if (r == 0) continue;
    prefill.push_back(st.prompt_tokens / st.prefill_seconds);
    decode.push_back((st.generated - 1) / st.decode_seconds);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double p = median(prefill), d = median(decode);
  const double weight_bytes = double(bundle->weights->bytes());
  fmt::print("model      {}\n", bundle->weights->path());
  fmt::print("device     {}\n", bundle->backend->name());
  fmt::print("prefill    {:>10.1f} tok/s   ({} tokens, median of {})\n", p, f.prompt_tokens,
             f.repeats);
  fmt::print("decode     {:>10.1f} tok/s   (batch 1, {} tokens after a {}-token prompt)\n", d,
             f.decode_tokens, f.prompt_tokens);
  fmt::print("decode     {:>10.2f} GB/s of weights streamed ({} per token)\n",
             d * weight_bytes / 1e9, log::format_bytes(weight_bytes));
  if (!f.json_out.empty()) {
    nlohmann::json j = {{"model", bundle->weights->path()},
                        {"device", bundle->backend->name()},
                        {"date", now_utc()},
                        {"prompt_tokens", f.prompt_tokens},
                        {"decode_tokens", f.decode_tokens},
                        {"repeats", f.repeats},
                        {"prefill_tok_s", p},
                        {"decode_bs1_tok_s", d},
                        {"weight_bytes", weight_bytes}};
    std::ofstream(f.json_out) << j.dump(2) << "\n";
  }
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<BenchModelFlags>();
  ridge::app::add_model_options(sub, f->model);
  sub.add_option("--prompt-tokens", f->prompt_tokens, "prefill length")->capture_default_str();
  sub.add_option("--decode-tokens", f->decode_tokens, "tokens decoded at batch 1")
      ->capture_default_str();
  sub.add_option("--repeats", f->repeats, "timed runs (median reported)")->capture_default_str();
  sub.add_option("--json-out", f->json_out, "write the figures as JSON to this file");
  sub.callback([f] { bench(*f); });
}

const ridge::app::BenchRegistrar reg("model", "Prefill and decode throughput of a model", &setup);

}  // namespace
