// ridge plan: the roofline model and planner (src/ridge/perf). Predicts every op of a step, runs
// the workload through candidate serving configurations and prints the best with their TTFT,
// TPOT, throughput, goodput, energy, cost and the resource that binds. CPU only.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/io/gguf.h"
#include "ridge/model/config.h"
#include "ridge/perf/planner.h"
#include "ridge/perf/plot.h"
#include "subcommand.h"

namespace {

struct PlanFlags {
  std::string model;
  std::string hardware = "h200";
  std::string hardware_db;
  std::string prefill_hardware;
  std::string precision;
  std::string kv_dtype;
  std::string isl = "1024", osl = "256";
  double rate = 1.0;
  double slo_ttft_ms = 1000, slo_tpot_ms = 50, attainment = 0.9;
  int gpus = 8;
  double prefix_share = 0;
  int64_t requests = 0;
  double duration = 60;
  uint64_t seed = 1;
  int top = 16;
  bool json = false;
  bool no_power_cap = false;
  std::string plot;
  ridge::perf::ServeLimits limits;
};

ridge::model::ModelConfig load_model(const std::string& spec) {
  namespace fs = std::filesystem;
  using ridge::model::ModelConfig;
  std::error_code ec;
  if (!fs::exists(spec, ec)) return ModelConfig::named(spec);  // throws listing the named shapes
  fs::path p(spec);
  if (fs::is_directory(p, ec)) p /= "config.json";
  if (p.extension() == ".gguf") return ModelConfig::from_gguf(ridge::io::GgufFile::open(p.string()));
  std::ifstream f(p);
  if (!f) ridge::fail("cannot open model config '{}'", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    ridge::fail("{}: not valid JSON: {}", p.string(), e.what());
  }
  return ModelConfig::from_hf(j);
}

void run(const PlanFlags& f) {
  using namespace ridge;
  // The options' own errors first, each naming its option (the planner's checks name fields).
  auto finite_positive = [](double v, const char* option, const char* unit) {
    RIDGE_CHECK(std::isfinite(v) && v > 0, "{} must be a finite number > 0 {} (got {})", option,
                unit, v);
  };
  finite_positive(f.rate, "--rate", "requests/s");
  finite_positive(f.duration, "--duration", "seconds");
  finite_positive(f.slo_ttft_ms, "--slo-ttft", "ms");
  finite_positive(f.slo_tpot_ms, "--slo-tpot", "ms");
  RIDGE_CHECK(std::isfinite(f.attainment) && f.attainment > 0 && f.attainment <= 1,
              "--attainment must be in (0, 1] (got {})", f.attainment);
  RIDGE_CHECK(f.requests >= 0 && f.requests <= perf::Workload::kMaxRequests,
              "--requests must be in 0..{} (0: --rate x --duration), got {}",
              perf::Workload::kMaxRequests, f.requests);
  RIDGE_CHECK(std::isfinite(f.prefix_share) && f.prefix_share >= 0 && f.prefix_share < 1,
              "--prefix-share must be in [0, 1) (got {})", f.prefix_share);
  RIDGE_CHECK(f.top >= 0, "--top must be >= 0 (got {})", f.top);
  const perf::HardwareDb db =
      f.hardware_db.empty() ? perf::HardwareDb::load_default() : perf::HardwareDb::load_file(f.hardware_db);
  perf::PlanRequest req;
  req.model = load_model(f.model);
  req.model_name = std::filesystem::path(f.model).filename().string();
  req.hw = db.resolve(f.hardware);
  if (!f.prefill_hardware.empty()) req.prefill_hw = db.resolve(f.prefill_hardware);
  req.opt.precision = f.precision.empty() ? perf::Precision::of(req.model) : perf::Precision::named(f.precision);
  if (!f.kv_dtype.empty()) {  // the KV cache's own dtype (ridge serve --kv-dtype)
    const DTypeInfo& kv = dtype_info(dtype_from_name(f.kv_dtype));
    req.opt.precision.kv_bytes = double(kv.block_bytes) / double(kv.block_elems);
    req.opt.precision.name += "+kv-" + f.kv_dtype;
  }
  req.opt.power_cap = !f.no_power_cap;  // serving runs steps back to back: sustained work
  auto lengths = [](const std::string& text, const char* option) {
    try {
      return perf::LengthDist::parse(text);
    } catch (const Error& e) {
      fail("{}: {}", option, e.what());
    }
  };
  req.workload.isl = lengths(f.isl, "--isl");
  req.workload.osl = lengths(f.osl, "--osl");
  req.workload.rate = f.rate;
  req.workload.prefix_share = f.prefix_share;
  req.workload.requests = f.requests;
  req.workload.duration_s = f.duration;
  req.workload.seed = f.seed;
  req.slo = {f.slo_ttft_ms / 1e3, f.slo_tpot_ms / 1e3, f.attainment};
  req.gpus = f.gpus;
  req.top = f.top;
  req.limits = f.limits;
  const perf::PlanResult r = perf::plan(req);

  nlohmann::json plots;
  if (!f.plot.empty()) {
    const auto splits = perf::split_sweep(req.model, req.hw, req.workload, std::max(2, req.gpus), req.opt,
                                          req.slo, {0.125, 0.25, 0.375, 0.5, 0.625, 0.75}, 5);
    for (const auto& png : perf::write_plots(r, splits, f.plot)) plots.push_back(png);
  }
  if (f.json) {
    nlohmann::json j = perf::to_json(r);
    if (!plots.is_null()) j["plots"] = plots;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}", perf::format_plan(r));
    for (const auto& p : plots) fmt::print("wrote {}\n", p.get<std::string>());
  }
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<PlanFlags>();
  sub.add_option("-m,--model", f->model,
                 "named shape (llama-2-7b, llama-3-8b, llama-3-70b, ...), config.json, HF folder or GGUF file")
      ->required();
  sub.add_option("--hardware,--hardware-file", f->hardware,
                 "accelerator id/alias in data/hardware.json, or a profile file (ridge bench ceilings --out)")
      ->capture_default_str();
  sub.add_option("--hardware-db", f->hardware_db, "the accelerator database (default: data/hardware.json)");
  sub.add_option("--prefill-hardware", f->prefill_hardware,
                 "also try disaggregated prefill on this device (e.g. rubin-cpx)");
  sub.add_option("--precision", f->precision, "bf16|fp16|w8a16|fp8|w4a16|fp4 (default: the model's weights, bf16 math)");
  sub.add_option("--kv-dtype", f->kv_dtype,
                 "KV cache dtype when it differs from the precision's (ridge serve --kv-dtype): f32, "
                 "bf16, f16, fp8_e4m3")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "fp8_e4m3"}));
  sub.add_option("--isl", f->isl, "input length: N, uniform:LO:HI, normal:MEAN:SD, exp:MEAN or lognormal:MEAN:SIGMA (ShareGPT-like, as ridge bench serve)")->capture_default_str();
  sub.add_option("--osl", f->osl, "output length, same forms")->capture_default_str();
  sub.add_option("--rate", f->rate, "offered load, requests/s (Poisson) for the whole cluster")->capture_default_str();
  sub.add_option("--slo-ttft", f->slo_ttft_ms, "time-to-first-token SLO, ms")->capture_default_str();
  sub.add_option("--slo-tpot", f->slo_tpot_ms, "time-per-output-token SLO, ms")->capture_default_str();
  sub.add_option("--attainment", f->attainment, "share of requests that must meet both SLOs")->capture_default_str();
  sub.add_option("--gpus", f->gpus, "GPUs in the cluster")->capture_default_str();
  sub.add_option("--prefix-share", f->prefix_share, "fraction of each prompt shared by all requests")->capture_default_str();
  sub.add_option("--requests", f->requests, "requests to simulate (0: rate x duration)")->capture_default_str();
  sub.add_option("--duration", f->duration, "seconds of arrivals to simulate when --requests is 0")->capture_default_str();
  sub.add_option("--seed", f->seed, "seed of the workload")->capture_default_str();
  sub.add_option("--top", f->top, "configurations that get a highest-sustainable-rate search")->capture_default_str();
  // The engine's limits, named as ridge serve names them: each one given pins the candidates.
  const auto positive = CLI::Range(int64_t(1), int64_t(std::numeric_limits<int32_t>::max()));
  sub.add_option("--max-num-seqs", f->limits.max_num_seqs,
                 "sequences running at once, as ridge serve --max-num-seqs (default: 64, 256 and "
                 "512 searched)")
      ->check(positive);
  sub.add_option("--max-num-batched-tokens", f->limits.max_num_batched_tokens,
                 "tokens per step, as ridge serve --max-num-batched-tokens (default: 512, 2048 and "
                 "8192 searched)")
      ->check(positive);
  sub.add_option(
         "--ctx-size", f->limits.kv_tokens,
         "a GPU's KV cache capacity in tokens, as ridge serve --ctx-size (default: 90 % of the "
         "memory the weights leave)")
      ->check(positive);
  sub.add_flag("--json", f->json, "print JSON");
  sub.add_flag("--no-power-cap", f->no_power_cap,
               "steps ignore the card's power cap (by default a step takes at least what its FLOPs and "
               "bytes need at the cap, where the hardware entry measures it: power_capped_flops/bandwidth)");
  sub.add_option("--plot", f->plot, "write roofline.png and splits.png (via gnuplot) into this folder");
  sub.callback([f] { run(*f); });
}

const ridge::app::Registrar reg("plan", "Roofline model and planner: predicted step times and serving configurations", &setup);

}  // namespace
