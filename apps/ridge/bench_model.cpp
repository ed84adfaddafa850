// ridge bench model: step times of a model's forward on one device, for the phases of the issue's
// table: prefill of P tokens, decode at batch 1, decode at batch B (ctx in / out tokens), and a
// long-context decode; each next to the roofline model's prediction (perf/) for the hardware
// given. A benchmark, not a test: it prints what it measured and writes JSON with --json-out
// (command, device, date). Sampling is greedy on the host from the logits (its copy counts).
#include <cstdint>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/perf/cost_model.h"
#include "ridge/perf/hardware.h"
#include "subcommand.h"

namespace {

using namespace ridge;
using clock_type = std::chrono::steady_clock;

struct BenchModelFlags {
  engine::BundleOptions model;
  int prefill_tokens = 0;     // 0: 2048 on a GPU, 128 on the CPU
  int decode_in = 128;
  int decode_out = 0;         // 0: 128 on a GPU, 32 on the CPU
  std::vector<int> batches;   // empty: {1, 64} on a GPU, {1, 4} on the CPU
  int long_batch = 16;
  int long_context = 4096;
  bool skip_long = false;
  int repeats = 3;
  std::string hardware;       // roofline prediction for this device id (default: h200 on CUDA)
  std::string json_out;
  std::vector<std::string> argv;
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Runs sequences through prefill then `steps` decode steps, all in lockstep; returns seconds of
// the prefill phase and of the decode phase.
struct PhaseTimes {
  double prefill = 0, decode = 0;
};

class StepRunner {
 public:
  StepRunner(engine::ModelBundle& b) : b_(b), rng_(1234) {}

  PhaseTimes run(int batch, int prompt, int steps, int prefill_chunk) {
    auto& pool = *b_.kv_pool;
    const int bs = int(pool.block_size());
    const int per_seq_blocks = (prompt + steps + bs - 1) / bs;
    RIDGE_CHECK(int64_t(batch) * per_seq_blocks <= pool.num_blocks(),
                "bench: {} sequences of {} tokens need {} KV blocks, the pool has {} (raise "
                "--ctx-size)",
                batch, prompt + steps, int64_t(batch) * per_seq_blocks, pool.num_blocks());
    std::uniform_int_distribution<int32_t> tok(0, int32_t(b_.config().vocab) - 1);
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
    for (int s = 0; s < batch; ++s)
      for (int i = 0; i < per_seq_blocks; ++i) tables[size_t(s)].push_back(s * per_seq_blocks + i);
    std::vector<float> logits;
    std::vector<int32_t> last(static_cast<size_t>(batch));
    model::ForwardBatch fb;
    PhaseTimes t;
    auto t0 = clock_type::now();
    // Prefill: sequences packed into steps of at most prefill_chunk tokens.
    for (int s = 0; s < batch;) {
      fb.clear();
      int tokens = 0;
      while (s < batch && tokens + prompt <= std::max(prefill_chunk, prompt)) {
        std::vector<int32_t> p(static_cast<size_t>(prompt));
        for (auto& x : p) x = tok(rng_);
        fb.add_sequence(p, prompt, tables[size_t(s)], bs, true);
        tokens += prompt;
        ++s;
        if (tokens + prompt > prefill_chunk) break;
      }
      logits.resize(fb.logits_rows.size() * size_t(b_.config().vocab));
      b_.model->forward({}, fb, pool.layers(), logits.data());
    }
    auto t1 = clock_type::now();
    for (int step = 0; step < steps; ++step) {
      fb.clear();
      for (int s = 0; s < batch; ++s)
        fb.add_sequence(std::vector<int32_t>{last[size_t(s)]}, prompt + step + 1, tables[size_t(s)], bs, true);
      logits.resize(size_t(batch) * size_t(b_.config().vocab));
      b_.model->forward({}, fb, pool.layers(), logits.data());
      const int64_t V = b_.config().vocab;
      for (int s = 0; s < batch; ++s) {
        const float* row = logits.data() + s * V;
        last[size_t(s)] = int32_t(std::max_element(row, row + V) - row);
      }
    }
    auto t2 = clock_type::now();
    t.prefill = std::chrono::duration<double>(t1 - t0).count();
    t.decode = std::chrono::duration<double>(t2 - t1).count();
    return t;
  }

 private:
  engine::ModelBundle& b_;
  std::mt19937 rng_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(BenchModelFlags& f) {
  app::resolve_model(f.model);
  const bool gpu_wanted = f.model.device != "cpu";
  // Size the KV pool for the largest phase unless told.
  auto bundle_probe_device = f.model.device;
  engine::BundleOptions opt = f.model;
  auto bundle = engine::ModelBundle::load([&] {
    engine::BundleOptions o = opt;
    o.prefill_chunk = std::max<int64_t>(o.prefill_chunk, 2048);
    if (o.kv_tokens == 0) o.kv_tokens = gpu_wanted ? 16 * (4096 + 64) + 64 * 320 : 4096;
    return o;
  }());
  const bool on_gpu = bundle->backend->device() == Device::cuda;
  if (f.prefill_tokens == 0) f.prefill_tokens = on_gpu ? 2048 : 128;
  if (f.decode_out == 0) f.decode_out = on_gpu ? 128 : 32;
  if (f.batches.empty()) f.batches = on_gpu ? std::vector<int>{1, 64} : std::vector<int>{1, 4};
  if (f.hardware.empty() && on_gpu) f.hardware = "h200";
  const model::ModelConfig& cfg = bundle->config();

  std::optional<perf::Hardware> hw;
  if (!f.hardware.empty()) hw = perf::HardwareDb::load_default().get(f.hardware);
  auto predict = [&](const perf::StepShape& s) {
    return hw ? perf::predict_step(cfg, *hw, s).time : 0.0;
  };

  StepRunner runner(*bundle);
  runner.run(1, 16, 2, f.prefill_tokens);  // warm-up (workspace, plans, caches)
  nlohmann::json phases = nlohmann::json::array();
  auto report = [&](const std::string& name, double measured, double predicted, double tok_s,
                    const std::string& unit) {
    fmt::print("{:<34} {:>10.3f} ms  {:>12.1f} {}", name, measured * 1e3, tok_s, unit);
    if (predicted > 0)
      fmt::print("   predicted {:>9.3f} ms ({:+.0f}%)", predicted * 1e3,
                 100.0 * (measured - predicted) / predicted);
    fmt::print("\n");
    phases.push_back({{"phase", name}, {"seconds", measured}, {"predicted_seconds", predicted},
                      {"throughput", tok_s}, {"unit", unit}});
  };
  fmt::print("model   {} ({})\ndevice  {}\n", bundle->weights->path(), cfg.describe(),
             bundle->backend->name());
  nlohmann::json figures;

  // Prefill: one sequence of P tokens in one step.
  {
    std::vector<double> ts;
    for (int r = 0; r < f.repeats; ++r) ts.push_back(runner.run(1, f.prefill_tokens, 0, f.prefill_tokens).prefill);
    const double t = median(ts);
    const double tps = f.prefill_tokens / t;
    report(fmt::format("prefill {} tokens", f.prefill_tokens), t,
           predict(perf::StepShape::prefill(f.prefill_tokens)), tps, "tok/s");
    figures[fmt::format("prefill_{}_tok_s", f.prefill_tokens)] = tps;
  }
  // Decode at each batch: prompt decode_in, then decode_out steps.
  for (int batch : f.batches) {
    std::vector<double> ts;
    for (int r = 0; r < f.repeats; ++r)
      ts.push_back(runner.run(batch, f.decode_in, f.decode_out, f.prefill_tokens).decode);
    const double t = median(ts);
    const double step = t / f.decode_out;
    const double tps = batch * f.decode_out / t;
    report(fmt::format("decode bs{} ({} in/{} out), step", batch, f.decode_in, f.decode_out), step,
           predict(perf::StepShape::decode(batch, f.decode_in + f.decode_out / 2)), tps,
           "out tok/s");
    figures[fmt::format("decode_bs{}_tok_s", batch)] = tps;
  }
  if (on_gpu && !f.skip_long) {
    const int steps = 32;
    const double t = runner.run(f.long_batch, f.long_context, steps, 8192).decode;
    const double step = t / steps;
    const double tps = f.long_batch * steps / t;
    const double kv_bytes = double(f.long_batch) * (f.long_context + steps / 2) *
                            double(bundle->kv_pool->bytes_per_token(cfg, bundle->kv_pool->dtype()));
    report(fmt::format("decode bs{} at {} context, step", f.long_batch, f.long_context), step,
           predict(perf::StepShape::decode(f.long_batch, f.long_context + steps / 2)), tps,
           "out tok/s");
    fmt::print("{:<34} {:>10.1f} GB/s of KV per step (whole step time)\n", "", kv_bytes / step / 1e9);
    figures[fmt::format("decode_bs{}_ctx{}_tok_s", f.long_batch, f.long_context)] = tps;
    figures["long_context_kv_gb_s_whole_step"] = kv_bytes / step / 1e9;
  }
  if (!f.json_out.empty()) {
    std::string cmd;
    for (auto& a : f.argv) cmd += (cmd.empty() ? "" : " ") + a;
    nlohmann::json j = {{"command", cmd},
                        {"model", bundle->weights->path()},
                        {"model_config", cfg.describe()},
                        {"device", bundle->backend->name()},
                        {"hardware_predicted", f.hardware},
                        {"date", now_utc()},
                        {"weight_bytes", bundle->weights->bytes()},
                        {"phases", phases},
                        {"figures", figures}};
    std::ofstream(f.json_out) << j.dump(2) << "\n";
  }
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<BenchModelFlags>();
  app::add_model_options(sub, f->model);
  sub.add_option("--prefill-tokens", f->prefill_tokens, "prefill length (0: 2048 GPU, 128 CPU)");
  sub.add_option("--decode-in", f->decode_in, "prompt tokens before decoding")->capture_default_str();
  sub.add_option("--decode-out", f->decode_out, "decode steps (0: 128 GPU, 32 CPU)");
  sub.add_option("--batches", f->batches, "decode batch sizes (default: 1 64 GPU, 1 4 CPU)");
  sub.add_option("--long-batch", f->long_batch, "batch of the long-context decode")->capture_default_str();
  sub.add_option("--long-context", f->long_context, "context of the long-context decode")->capture_default_str();
  sub.add_flag("--skip-long", f->skip_long, "skip the long-context decode");
  sub.add_option("--repeats", f->repeats, "timed runs per phase (median)")->capture_default_str();
  sub.add_option("--hardware", f->hardware, "roofline prediction for this device (data/hardware.json id; default h200 on CUDA)");
  sub.add_option("--json-out", f->json_out, "write the figures as JSON");
  sub.callback([f, &sub] {
    f->argv = {"ridge", "bench", "model"};
    for (const auto& r : sub.remaining()) f->argv.push_back(r);
    bench(*f);
  });
}

const app::BenchRegistrar reg("model", "Prefill and decode step times of a model (with roofline predictions)", &setup);

}  // namespace
