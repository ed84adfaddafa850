// ridge bench model: step times of a model's forward on one device for the phases of the issue's
// table: prefill of P tokens (512 and 2048 on a GPU), decode at batch 1, 16 and 64 (ctx in / out
// tokens) and a long-context decode; each next to the cost model's prediction (perf/) for the
// hardware given, with the error. --profile-ops also times every op of each phase on its own
// (bench_ops.h) next to its predicted time. A benchmark, not a test: it prints what it measured
// and writes JSON with --json-out (command, device, date). Sampling is greedy on the host from the
// logits and timed apart: a step ends when its logits are on the host.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_ops.h"
#include "common.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/perf/cost_model.h"
#include "ridge/perf/hardware.h"
#include "ridge/perf/planner.h"
#include "subcommand.h"
#ifdef RIDGE_HAVE_PERF_GPU
#include "ridge/perf/gpu/ceilings.h"
#endif

namespace {

using namespace ridge;
using clock_type = std::chrono::steady_clock;

struct BenchModelFlags {
  engine::BundleOptions model;
  std::vector<int> prefill_tokens;  // empty: 512 2048 on a GPU, 128 on the CPU
  int decode_in = 128;
  int decode_out = 0;         // 0: 128 on a GPU, 32 on the CPU
  std::vector<int> batches;   // empty: {1, 16, 64} on a GPU, {1, 4} on the CPU
  int long_batch = 16;
  int long_context = 4096;
  bool skip_long = false;
  int repeats = 3;
  std::string hardware;       // id, alias or profile file (default: see resolve_hardware)
  std::string launch = "auto";  // the prediction's launch mode: auto (as the step ran) | graph | eager
  bool profile_ops = false;
  int profile_calls = 32;
  std::string calibrated_profile;
  std::string json_out;
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The model's API grows (host logits it owns, decode graphs, stacked weights); these detect what
// the tree at hand has, so the benchmark builds and predicts right with either.
template <class M>
constexpr bool kHasForwardLogits =
    requires(M& m, const model::ForwardBatch& fb, std::span<backend::KvLayer> kv) {
      m.forward_logits(backend::Stream{}, fb, kv);
    };

template <class M>
std::span<const float> run_forward(M& m, const model::ForwardBatch& fb,
                                   std::span<backend::KvLayer> kv, std::vector<float>& buf,
                                   int64_t vocab, backend::Stream stream = {}) {
  if constexpr (kHasForwardLogits<M>) {
    const auto s = m.forward_logits(stream, fb, kv);  // pinned host logits
    return {s.data(), s.size()};
  } else {
    buf.resize(fb.logits_rows.size() * size_t(vocab));
    m.forward(stream, fb, kv, buf.data());
    return {buf.data(), buf.size()};
  }
}

// Steps the model replayed from a CUDA graph so far (-1: this model has no graphs).
template <class M>
int64_t graph_steps(const M& m) {
  if constexpr (requires(const M& x) { x.stats().graph_steps; }) {
    return m.stats().graph_steps;
  } else {
    return -1;
  }
}
// Steps whose layers ran in the persistent decode kernel (Backend::decode_layers).
template <typename M>
int64_t decode_kernel_steps(const M& m) {
  if constexpr (requires(const M& x) { x.stats().decode_kernel_steps; }) {
    return m.stats().decode_kernel_steps;
  } else {
    return 0;
  }
}

// Whether the backend stacks q|k|v and gate|up weights into one matrix each (then the model runs
// them as one matmul): probed with two small vectors.
template <class B>
bool stacks_rows(B& be) {
  if constexpr (requires(B& x, std::span<const Tensor> p) { x.upload_weight_rows(p); }) {
    static float v[4] = {1, 1, 1, 1};
    const Tensor parts[2] = {Tensor(v, DType::f32, {4}), Tensor(v, DType::f32, {4})};
    return be.upload_weight_rows(std::span<const Tensor>(parts, 2)).data != nullptr;
  } else {
    return false;
  }
}

struct PhaseTimes {
  double prefill = 0, decode = 0;  // seconds of forward calls (logits on the host included)
  double sample = 0;               // host argmax over the decode steps
  int64_t graph_steps = 0;         // of the decode steps, how many replayed a graph
  int64_t kernel_steps = 0;        // ... and how many ran in the persistent decode kernel
};

class StepRunner {
 public:
  explicit StepRunner(engine::ModelBundle& b) : b_(b), rng_(1234) {}

  // The block tables of `batch` sequences of up to `tokens` tokens each (sequence s owns blocks
  // s * per_seq .. s * per_seq + per_seq - 1).
  std::vector<std::vector<int32_t>> tables(int batch, int tokens) const {
    auto& pool = *b_.kv_pool;
    const int bs = int(pool.block_size());
    const int per_seq_blocks = (tokens + bs - 1) / bs;
    RIDGE_CHECK(int64_t(batch) * per_seq_blocks <= pool.num_blocks(),
                "bench: {} sequences of {} tokens need {} KV blocks, the pool has {} (raise "
                "--ctx-size)",
                batch, tokens, int64_t(batch) * per_seq_blocks, pool.num_blocks());
    std::vector<std::vector<int32_t>> t(static_cast<size_t>(batch));
    for (int s = 0; s < batch; ++s)
      for (int i = 0; i < per_seq_blocks; ++i) t[size_t(s)].push_back(s * per_seq_blocks + i);
    return t;
  }

  // One step as the phases run it: `batch` sequences of `new_tokens` each at `context` tokens
  // after the step (context >= new_tokens), every one wanting its last logits.
  model::ForwardBatch step_batch(int batch, int new_tokens, int context) {
    std::uniform_int_distribution<int32_t> tok(0, int32_t(b_.config().vocab) - 1);
    const auto tb = tables(batch, context);
    model::ForwardBatch fb;
    for (int s = 0; s < batch; ++s) {
      std::vector<int32_t> p(static_cast<size_t>(new_tokens));
      for (auto& x : p) x = tok(rng_);
      fb.add_sequence(p, context, tb[size_t(s)], int32_t(b_.kv_pool->block_size()), true);
    }
    return fb;
  }

  // Prefill of `batch` prompts packed into steps of at most prefill_chunk tokens, then `steps`
  // decode steps of all of them in lockstep.
  PhaseTimes run(int batch, int prompt, int steps, int prefill_chunk) {
    auto& pool = *b_.kv_pool;
    const int bs = int(pool.block_size());
    const auto tb = tables(batch, prompt + steps);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(b_.config().vocab) - 1);
    std::vector<int32_t> last(static_cast<size_t>(batch));
    model::ForwardBatch fb;
    PhaseTimes t;
    const int64_t V = b_.config().vocab;
    for (int s = 0; s < batch;) {
      fb.clear();
      int tokens = 0;
      while (s < batch && tokens + prompt <= std::max(prefill_chunk, prompt)) {
        std::vector<int32_t> p(static_cast<size_t>(prompt));
        for (auto& x : p) x = tok(rng_);
        fb.add_sequence(p, prompt, tb[size_t(s)], bs, true);
        tokens += prompt;
        ++s;
        if (tokens + prompt > prefill_chunk) break;
      }
      const auto t0 = clock_type::now();
      run_forward(*b_.model, fb, pool.layers(), logits_, V);
      t.prefill += seconds_since(t0);
    }
    const int64_t g0 = graph_steps(*b_.model), k0 = decode_kernel_steps(*b_.model);
    for (int step = 0; step < steps; ++step) {
      fb.clear();
      for (int s = 0; s < batch; ++s)
        fb.add_sequence(std::vector<int32_t>{last[size_t(s)]}, prompt + step + 1, tb[size_t(s)], bs, true);
      const auto t0 = clock_type::now();
      const std::span<const float> logits = run_forward(*b_.model, fb, pool.layers(), logits_, V);
      const auto t1 = clock_type::now();
      for (int s = 0; s < batch; ++s) {
        const float* row = logits.data() + s * V;
        last[size_t(s)] = int32_t(std::max_element(row, row + V) - row);
      }
      t.decode += std::chrono::duration<double>(t1 - t0).count();
      t.sample += seconds_since(t1);
    }
    t.graph_steps = std::max<int64_t>(0, graph_steps(*b_.model) - g0);
    t.kernel_steps = decode_kernel_steps(*b_.model) - k0;
    return t;
  }

 private:
  engine::ModelBundle& b_;
  std::mt19937 rng_;
  std::vector<float> logits_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double error_of(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured : 0.0;
}

// The hardware the predictions are for: the flag (an id, alias or profile file), else the
// project's measured profile of this GPU (data/profiles/<id>-ridge.json) when one is committed,
// else the datasheet entry matching the GPU's name, else h200. A profile file given by the flag
// (this run's `ridge bench ceilings`) goes over that measured profile where there is one: its
// ceilings with the kernel efficiencies and latencies measured before, not the datasheet's
// estimates (which put batch 16 at 4,096 positions 21 % slow on an H100, run 47).
perf::Hardware resolve_hardware(const std::string& flag, const std::string& device_name,
                                std::string* spec_used) {
  const perf::HardwareDb db = perf::HardwareDb::load_default();
  std::string id = perf::match_entry(db, device_name);
  if (id.empty()) id = "h200";
  namespace fs = std::filesystem;
  const fs::path profile = fs::path(perf::HardwareDb::default_path()).parent_path() / "profiles" /
                           (id + "-ridge.json");
  std::error_code ec;
  const bool have_profile = fs::exists(profile, ec);
  if (!flag.empty()) {
    if (have_profile && !db.find(flag) && fs::is_regular_file(flag, ec)) {
      bool layered = false;
      perf::Hardware hw = db.resolve_over(flag, profile.string(), &layered);
      *spec_used = layered ? flag + " over " + profile.string() : flag;
      return hw;
    }
    *spec_used = flag;
    return db.resolve(flag);
  }
  if (have_profile) {
    *spec_used = profile.string();
    return db.resolve(profile.string());
  }
  *spec_used = id;
  return db.get(id);
}

// Op class of an op for the efficiency factors, by what bounds it in the model; none where its
// dependent chain does (a latency-bound op says nothing about a roofline fraction).
std::string efficiency_class(const perf::OpCost& o) {
  if (o.bound == perf::Bound::latency) return "";
  const bool compute = o.bound == perf::Bound::compute;
  if (o.kind == perf::OpKind::gemm) return compute ? "gemm_math" : "gemm_memory";
  if (o.kind == perf::OpKind::attention) return compute ? "attention_math" : "attention_memory";
  return compute ? "" : "elementwise";
}

struct Phase {
  std::string name;
  perf::StepShape shape;
  model::ForwardBatch fb;  // one step of the phase, for --profile-ops
  double measured = 0;     // seconds per step (forward, logits on the host)
  double sample = 0;       // host argmax seconds per step
  double throughput = 0;
  std::string unit;
  perf::Launch launch = perf::Launch::eager;
  bool persistent = false;  // its steps ran in the persistent decode kernel (--decode-kernel)
  perf::StepCost predicted, alternative, roofline;
  perf::StepCost sustained;  // predicted as a serving run's steps run: under the power cap
  std::vector<app::OpTime> ops;
  // The step's GPU time by events on its stream (< 0: not measured): as issued (host gaps
  // included), and queued behind a hold kernel (every launch queued before the GPU starts).
  double gpu_events = -1, gpu_queued = -1;
};

void bench(BenchModelFlags& f) {
  app::resolve_model(f.model);
  const bool gpu_wanted = f.model.device != "cpu";
  const int max_prefill = f.prefill_tokens.empty()
                              ? 2048
                              : *std::max_element(f.prefill_tokens.begin(), f.prefill_tokens.end());
  engine::BundleOptions opt = f.model;
  opt.prefill_chunk = std::max<int64_t>(opt.prefill_chunk, std::max(2048, max_prefill));
  if (opt.kv_tokens == 0) opt.kv_tokens = gpu_wanted ? 16 * (4096 + 64) + 64 * 320 : 4096;
  auto bundle = engine::ModelBundle::load(opt);
  const bool on_gpu = bundle->backend->device() == Device::cuda;
  if (f.prefill_tokens.empty()) f.prefill_tokens = on_gpu ? std::vector<int>{512, 2048} : std::vector<int>{128};
  if (f.decode_out == 0) f.decode_out = on_gpu ? 128 : 32;
  if (f.batches.empty()) f.batches = on_gpu ? std::vector<int>{1, 16, 64} : std::vector<int>{1, 4};
  const model::ModelConfig& cfg = bundle->config();

  // Predictions: on a GPU always (its database entry or measured profile), on the CPU only for a
  // --hardware given (the database holds accelerators, not this host).
  std::string hw_spec;
  std::optional<perf::Hardware> hwo;
  if (on_gpu || !f.hardware.empty()) hwo = resolve_hardware(f.hardware, bundle->backend->name(), &hw_spec);
  const perf::Hardware hw = hwo.value_or(perf::Hardware{});
  const bool fused = stacks_rows(*bundle->backend);
  const bool pinned = kHasForwardLogits<model::LlamaModel>;
  // The decode fusions the backend runs: BackendOptions::fuse (--fuse LIST, --no-fusion), read by
  // the CUDA backend's rules (Fusions::parse). The norm and silu prologues live in ridge's skinny
  // GEMM, so with --gemm cublas neither folds (CudaBackend::matmul_fused); the CPU backend
  // composes every fused call.
  // --quantization fp8: cuBLASLt's fp8 GEMM for every projection past 4 tokens (none of the
  // skinny GEMV's prologues and epilogues), fp8 weights and math; the fp8 GEMV below.
  const bool fp8_weights = f.model.quantization == "fp8";
  perf::Fusions fusions = perf::Fusions::none();
  if (on_gpu) {
    fusions = perf::Fusions::parse(f.model.backend.fuse);
    if (f.model.backend.gemm == "cublas" || fp8_weights) fusions.norm = fusions.silu = false;
    if (fp8_weights) fusions.swiglu_gemm = false;  // (the sm90 GEMM's epilogue: bf16 weights)
  }
  // persistent: the phase's steps ran in the persistent decode kernel (as the model counted them).
  auto options = [&](perf::Launch l, bool persistent) {
    perf::CostOptions o = perf::CostOptions::ridge(l, fused, pinned, fusions, persistent);
    // The rope_kv epilogue is the skinny GEMV's: none with --gemm cublas (matmul_rope_kv).
    if (f.model.backend.gemm == "cublas" || fp8_weights) o.kernels.rope_kv_epilogue_max_rows = 0;
    o.kernels.activation_quant = on_gpu && fp8_weights;  // (the CPU quantizes inside its matmul)
    if (on_gpu && fp8_weights) {
      // The fp8 GEMV (1-4 tokens) quantizes its own input, takes the norm as its prologue and
      // pairs gate and up rows (SwiGLU); RoPE and the KV store stay a kernel.
      constexpr int kGemvTokens = 4;  // kernels::kGemvFp8MaxTokens (a CUDA header)
      o.kernels.activation_quant_min_rows = kGemvTokens + 1;
      o.kernels.norm_prologue_max_rows = o.kernels.silu_prologue_max_rows = kGemvTokens;
    }
    o.precision = perf::Precision::of(cfg);
    if (on_gpu) o.precision = perf::Precision::named(fp8_weights ? "fp8" : "bf16");  // as held
    // The KV cache as allocated (--kv-dtype): an fp8 cache halves the attention's bytes.
    const DTypeInfo& kv = dtype_info(bundle->kv_pool->dtype());
    o.precision.kv_bytes = double(kv.block_bytes) / double(kv.block_elems);
    return o;
  };
  perf::CostOptions roof_opt;
  roof_opt.precision = options(perf::Launch::graph, false).precision;

  fmt::print("model     {} ({})\ndevice    {}\nhardware  {}{}\nkernels   {}, {}, fusions {}\n",
             bundle->weights->path(), cfg.describe(), bundle->backend->name(),
             hwo ? hw.describe() : "none (no predictions on the CPU without --hardware)",
             hw_spec.empty() ? "" : " [" + hw_spec + "]",
             fused ? "fused q|k|v and gate|up matmuls" : "separate q, k, v and gate, up matmuls",
             pinned ? "one packed plan upload, pinned logits" : "7 pageable plan uploads, pageable logits",
             fusions.describe());
  // The tuner's kernel for each weight shape at one token (the batch-1 decode step's GEMVs, and
  // with them the fused GEMVs' kernel, except SwiGLU's where the backend names another); every
  // token bucket's choice goes into the JSON.
  const std::vector<backend::MatmulChoice> choices = bundle->backend->matmul_choices();
  const std::string swiglu_kernel = bundle->backend->one_token_swiglu_kernel();
  {
    std::string one;
    for (const backend::MatmulChoice& c : choices)
      if (c.tokens == 1)
        one += fmt::format("{}{}x{} {}", one.empty() ? "" : ", ", c.n, c.k, c.kernel);
    if (!one.empty() && !swiglu_kernel.empty())
      one += fmt::format("; the SwiGLU GEMV in {}", swiglu_kernel);
    if (!one.empty()) fmt::print("gemm      one token (N x K): {}\n", one);
  }

  StepRunner runner(*bundle);
  runner.run(1, 16, 2, f.prefill_tokens.front());  // warm-up (workspace, plans, caches)
  std::vector<Phase> phases;
  auto finish = [&](Phase& p, bool graphed, bool persistent) {
    p.persistent = persistent;
    p.launch = f.launch == "auto" ? (graphed ? perf::Launch::graph : perf::Launch::eager)
                                  : perf::launch_named(f.launch);
    const perf::Launch other = p.launch == perf::Launch::graph ? perf::Launch::eager : perf::Launch::graph;
    if (!hwo) {
      fmt::print("{:<32} {:>9.3f} ms {:>10.1f} {:<9}{}\n", p.name, p.measured * 1e3, p.throughput, p.unit,
                 p.sample > 0 ? fmt::format("  (+{:.3f} ms host argmax)", p.sample * 1e3) : "");
      std::fflush(stdout);
      return;
    }
    p.predicted = perf::predict_step(cfg, hw, p.shape, options(p.launch, persistent));
    p.alternative = perf::predict_step(cfg, hw, p.shape, options(other, persistent));
    p.roofline = perf::predict_step(cfg, hw, p.shape, roof_opt);
    perf::CostOptions capped = options(p.launch, persistent);
    capped.power_cap = true;
    p.sustained = perf::predict_step(cfg, hw, p.shape, capped);
    fmt::print("{:<32} {:>9.3f} ms {:>10.1f} {:<9}  predicted {:>8.3f} ms ({:+4.0f}%) {}; {} {:.3f}, roofline {:.3f}{}\n",
               p.name, p.measured * 1e3, p.throughput, p.unit, p.predicted.time * 1e3,
               100 * error_of(p.predicted.time, p.measured), perf::launch_name(p.launch),
               perf::launch_name(other), p.alternative.time * 1e3, p.roofline.time * 1e3,
               p.sample > 0 ? fmt::format("  (+{:.3f} ms host argmax)", p.sample * 1e3) : "");
    std::fflush(stdout);
  };

  for (const int P : f.prefill_tokens) {
    Phase p;
    p.name = fmt::format("prefill {} tokens", P);
    p.shape = perf::StepShape::prefill(P);
    std::vector<double> ts;
    for (int r = 0; r < f.repeats; ++r) ts.push_back(runner.run(1, P, 0, P).prefill);
    p.measured = median(ts);
    p.throughput = P / p.measured;
    p.unit = "tok/s";
    p.fb = runner.step_batch(1, P, P);
    finish(p, false, false);
    phases.push_back(std::move(p));
  }
  auto decode_phase = [&](const std::string& name, int batch, int prompt, int steps) {
    Phase p;
    p.name = name;
    const int mid = prompt + steps / 2;  // context at the middle decode step
    p.shape = perf::StepShape::decode(batch, mid);
    std::vector<double> ts, ss;
    int64_t graphed = 0, kernel = 0;
    for (int r = 0; r < f.repeats; ++r) {
      const PhaseTimes t = runner.run(batch, prompt, steps, 8192);
      ts.push_back(t.decode / steps);
      ss.push_back(t.sample / steps);
      graphed += t.graph_steps;
      kernel += t.kernel_steps;
    }
    p.measured = median(ts);
    p.sample = median(ss);
    p.throughput = batch / p.measured;
    p.unit = "out tok/s";
    p.fb = runner.step_batch(batch, 1, mid + 1);
    finish(p, graphed > 0, 2 * kernel > int64_t(steps) * f.repeats);
    phases.push_back(std::move(p));
  };
  for (int batch : f.batches)
    decode_phase(fmt::format("decode bs{} ({} in/{} out)", batch, f.decode_in, f.decode_out), batch,
                 f.decode_in, f.decode_out);
  if (on_gpu && !f.skip_long)
    decode_phase(fmt::format("decode bs{} at {} context", f.long_batch, f.long_context), f.long_batch,
                 f.long_context, 32);

  // The step's GPU time apart from the host: the same step (one step of each phase) on a stream of
  // its own, timed by events (a: as issued, host gaps included) and issued behind a 20 ms hold
  // kernel (b: every launch queued before the GPU reaches the first, so no host gaps); both right
  // after 20 ms of the hold kernel alone. Wall >> a: host work before the first launch or after
  // the last kernel; a >> b: the GPU waits for launches; b >> the ops alone summed: the ops run
  // slower inside the step (clocks, caches).
#ifdef RIDGE_HAVE_PERF_GPU
  if (on_gpu) {
    perf::gpu::StreamTimer timer;
    const backend::Stream ts{timer.stream()};
    std::vector<float> buf;
    fmt::print("\nstep GPU time (events on the step's stream, median of {}): wall = forward call, "
               "events = as issued, queued = behind a 20 ms hold kernel (no host gaps)\n",
               std::max(1, f.repeats));
    fmt::print("  {:<32} {:>10} {:>10} {:>10}\n", "phase", "wall ms", "events ms", "queued ms");
    for (auto& p : phases) {
      auto issue = [&] {
        (void)run_forward(*bundle->model, p.fb, bundle->kv_pool->layers(), buf, cfg.vocab, ts);
      };
      try {
        issue();  // warm-up on this stream (its workspace, a decode graph's capture)
        std::vector<double> ev, q;
        for (int r = 0; r < std::max(1, f.repeats); ++r) {
          // Both measurements follow the same 20 ms of a one-thread hold kernel, so that the
          // power limiter's running average (the H200 throttles under a sustained GEMM load)
          // is the same for both and their difference is the host's alone.
          (void)timer.queued([] {});
          ev.push_back(timer.eager(issue));
          q.push_back(timer.queued(issue));
        }
        p.gpu_events = median(ev);
        p.gpu_queued = median(q);
      } catch (const std::exception& e) {
        fmt::print("  {:<32} failed: {}\n", p.name, e.what());
        continue;
      }
      fmt::print("  {:<32} {:>10.3f} {:>10.3f} {:>10.3f}\n", p.name, p.measured * 1e3,
                 p.gpu_events * 1e3, p.gpu_queued * 1e3);
    }
  }
#endif

  // Calibration: predicted vs measured per phase.
  if (hwo) fmt::print("\ncalibration: the cost model (ridge as built, achievable efficiencies) vs the steps "
             "measured; hardware {}\n",
             hw.id);
  // With the hardware's power-cap figures, also what the step takes sustained (a serving run's
  // steps back to back, clocks held down by the cap; docs/PERF.md "The power cap"): the steps
  // measured here are single bursts, mostly before the cap acts.
  const bool cap = hwo && hw.capped_flops.has_value();
  if (hwo)
    fmt::print("  {:<32} {:>6} {:>12} {:>13} {:>7} {:>13}{}\n", "phase", "launch", "measured ms",
               "predicted ms", "error", "roofline ms", cap ? "  sustained ms (power cap)" : "");
  for (const auto& p : phases) {
    if (!hwo) break;
    const double e = error_of(p.predicted.time, p.measured);
    fmt::print("  {:<32} {:>6} {:>12.3f} {:>13.3f} {:>+6.0f}% {:>13.3f}{}{}\n", p.name,
               perf::launch_name(p.launch), p.measured * 1e3, p.predicted.time * 1e3, 100 * e,
               p.roofline.time * 1e3,
               cap ? fmt::format("  {:>10.3f}{}", p.sustained.time * 1e3,
                                 p.sustained.power_bound ? " (cap binds)" : "")
                   : std::string(),
               std::abs(e) > 0.25 ? "  (> ±25%)" : "");
  }

  // Per op: every op of each phase timed alone, next to its prediction.
  std::map<std::string, std::pair<double, double>> klass;  // class -> (roofline terms, measured)
  if (f.profile_ops) {
    app::OpProfileOptions po;
    po.calls = f.profile_calls;
    po.fused_projections = fused;
    po.fusions = fusions;
    if (hwo && hw.l2_bytes) po.l2_bytes = *hw.l2_bytes;
    for (auto& p : phases) {
      try {
        p.ops = app::profile_ops(*bundle, p.fb, po);
      } catch (const std::exception& e) {  // keep the step measurements and the other phases
        fmt::print("\n{}: --profile-ops failed: {}\n", p.name, e.what());
        continue;
      }
      // Each op is timed alone, so its prediction is the layer-by-layer plan's even where the
      // step ran in the persistent kernel.
      const perf::StepCost c =
          p.persistent ? perf::predict_step(cfg, hw, p.shape, options(p.launch, false)) : p.predicted;
      fmt::print("\n{} (per step; measured: each op alone, {} launches, {}):\n", p.name, po.calls,
                 on_gpu ? "replayed from a CUDA graph, and eager" : "wall time");
      fmt::print("  {:<14} {:>7} {:>12} {:>12} {:>7} {:>12} {:>8} {:>9}\n", "op", "kernels",
                 "predicted us", "measured us", "error", "eager us", "bound", "implied e");
      double sum_meas = 0, sum_pred = 0;
      for (const auto& t : p.ops) {
        const double meas = t.graph_s > 0 ? t.graph_s : t.eager_s;
        if (t.op == "host_io" && hwo) {
          fmt::print("  {:<14} {:>7} {:>12.1f} {:>12.1f} {:>+6.0f}% {:>12} {:>8} {:>9}\n", t.op, "-",
                     c.t_host * 1e6, t.eager_s * 1e6, 100 * error_of(c.t_host, t.eager_s), "-", "host", "-");
          continue;
        }
        const perf::OpCost* oc = nullptr;
        for (const auto& o : c.ops)
          if (o.name == t.op) oc = &o;
        if (!oc) {  // no prediction (none asked for, or an op the model does not have)
          fmt::print("  {:<14} {:>7} {:>12} {:>12.1f} {:>7} {:>12.1f}\n", t.op, "-", "-", meas * 1e6, "-",
                     t.eager_s * 1e6);
          continue;
        }
        sum_meas += meas, sum_pred += oc->time;
        // Implied efficiency: the roofline term over the measured time less the per-kernel
        // overhead; only where the op's own work dominates (not the overhead of a tiny kernel).
        std::string implied = "-";
        const double work = meas - oc->t_overhead;
        const std::string cls = efficiency_class(*oc);
        if (!cls.empty() && work > 2.0 * oc->t_overhead && work > 0) {
          const double roof = oc->bound == perf::Bound::compute ? oc->t_math / oc->wave_efficiency : oc->t_mem;
          implied = fmt::format("{:.2f}", roof / work);
          klass[cls].first += roof;
          klass[cls].second += work;
        }
        fmt::print("  {:<14} {:>7} {:>12.1f} {:>12.1f} {:>+6.0f}% {:>12.1f} {:>8} {:>9}\n", t.op,
                   oc->kernels, oc->time * 1e6, meas * 1e6, 100 * error_of(oc->time, meas),
                   t.eager_s * 1e6, perf::bound_name(oc->bound), implied);
      }
      if (hwo)
        fmt::print("  {:<14} {:>7} {:>12.1f} {:>12.1f} {:>+6.0f}%   (the step's GPU time; step measured {:.1f} us)\n",
                 "sum of ops", c.kernels, sum_pred * 1e6, sum_meas * 1e6,
                 100 * error_of(sum_pred, sum_meas), p.measured * 1e6);
      std::fflush(stdout);
    }
    if (!klass.empty()) {
      fmt::print("\nimplied efficiencies (time-weighted over the ops each bounds; hardware {} uses):\n", hw.id);
      for (const auto& [cls, v] : klass) {
        const auto& E = hw.efficiency;
        const double used = cls == "gemm_math" ? E.gemm_math : cls == "gemm_memory" ? E.gemm_memory
                            : cls == "attention_math" ? E.attention_math
                            : cls == "attention_memory" ? E.attention_memory : E.elementwise;
        fmt::print("  {:<18} {:>6.2f}   (model {:.2f})\n", cls, v.first / v.second, used);
      }
    }
  }

  if (!f.calibrated_profile.empty() && !(hwo && !klass.empty())) {
    fmt::print("\n--calibrated-profile: nothing written (it needs --profile-ops, per-op times and a "
               "hardware to predict for)\n");
  } else if (!f.calibrated_profile.empty()) {
    std::vector<perf::Measurement> ms;
    const std::string how = fmt::format("ridge bench model --profile-ops on {}, {}", bundle->backend->name(), now_utc());
    if (hw.measured) {
      // Carry the measured ceilings of the profile the predictions used.
      auto src = [&](const std::string& k) {
        auto it = hw.sources.find(k);
        return it != hw.sources.end() ? it->second : how;
      };
      ms.push_back({"memory_bandwidth", hw.memory_bw, "B/s", src("memory_bandwidth")});
      for (const auto& [fmt_name, v] : hw.dense_flops)
        if (hw.sources.count("dense_flops." + fmt_name) && hw.sources.at("dense_flops." + fmt_name).find("measured") != std::string::npos)
          ms.push_back({"dense_flops." + fmt_name, v, "FLOP/s", src("dense_flops." + fmt_name)});
      ms.push_back({"kernel_overhead", hw.kernel_overhead_s, "s", src("kernel_overhead")});
      ms.push_back({"layer_sync", hw.layer_sync_s, "s", src("layer_sync")});
      ms.push_back({"launch_overhead", hw.launch_overhead_s, "s", src("launch_overhead")});
      if (hw.gemm_launch_overhead_s) ms.push_back({"gemm_launch_overhead", *hw.gemm_launch_overhead_s, "s", src("gemm_launch_overhead")});
      ms.push_back({"host_copy_latency", hw.host_copy_latency_s, "s", src("host_copy_latency")});
      ms.push_back({"host_copy_bandwidth", hw.host_copy_bw, "B/s", src("host_copy_bandwidth")});
      ms.push_back({"pinned_copy_bandwidth", hw.pinned_copy_bw, "B/s", src("pinned_copy_bandwidth")});
      if (hw.l2_bytes) ms.push_back({"l2", *hw.l2_bytes, "B", src("l2")});
      if (hw.sms) ms.push_back({"sms", double(*hw.sms), "count", src("sms")});
    }
    for (const auto& [cls, v] : klass)
      ms.push_back({"efficiency." + cls, std::clamp(v.first / v.second, 0.01, 1.5), "fraction",
                    fmt::format("{}: time-weighted implied efficiency of the ops bound by it (roofline "
                                "term / measured time less kernel overhead), against {}",
                                how, hw.id)});
    const std::string base = hw.measured && !hw.base.empty() ? hw.base : hw.id;
    const auto prof = perf::make_profile(hw.id + "-calibrated", base,
                                         hw.name + " (efficiencies from ridge bench model)", ms);
    perf::write_profile(f.calibrated_profile, prof);
    const perf::Hardware check = perf::HardwareDb::load_default().resolve(f.calibrated_profile);
    fmt::print("wrote {} ({})\n", f.calibrated_profile, check.describe());
  }

  if (!f.json_out.empty()) {
    const std::string cmd = ridge::app::command_line();
    nlohmann::json jphases = nlohmann::json::array(), figures;
    for (const auto& p : phases) {
      nlohmann::json ops = nlohmann::json::array();
      for (const auto& t : p.ops) {
        nlohmann::json j = {{"op", t.op}, {"backend_calls", t.backend_calls},
                            {"measured_graph_s", t.graph_s}, {"measured_eager_s", t.eager_s}};
        if (!hwo) {
        } else if (t.op == "host_io") {
          j["predicted_s"] = p.predicted.t_host;
        } else {
          for (const auto& o : p.predicted.ops)
            if (o.name == t.op) {
              j["predicted_s"] = o.time;
              j["kernels"] = o.kernels;
              j["bound"] = perf::bound_name(o.bound);
              const double meas = t.graph_s > 0 ? t.graph_s : t.eager_s;
              j["error"] = error_of(o.time, meas);
            }
        }
        ops.push_back(j);
      }
      const int64_t batch = int64_t(p.shape.seqs.size());
      nlohmann::json jp = {{"phase", p.name},
                           {"batch", batch},
                           {"new_tokens", p.shape.seqs.front().new_tokens},
                           {"context", p.shape.seqs.front().context},
                           {"seconds", p.measured},
                           {"host_sample_seconds", p.sample},
                           {"throughput", p.throughput},
                           {"unit", p.unit},
                           {"launch", perf::launch_name(p.launch)},
                           {"ops", ops}};
      if (p.gpu_events >= 0) jp["gpu_events_seconds"] = p.gpu_events;
      if (p.gpu_queued >= 0) jp["gpu_queued_seconds"] = p.gpu_queued;
      if (hwo) {
        jp["predicted_seconds"] = p.predicted.time;
        jp["error"] = error_of(p.predicted.time, p.measured);
        jp["predicted"] = perf::to_json(p.predicted);
        jp["predicted_other_launch_seconds"] = p.alternative.time;
        jp["roofline_seconds"] = p.roofline.time;
        if (hw.capped_flops) {
          jp["sustained_seconds"] = p.sustained.time;
          jp["sustained_power_bound"] = p.sustained.power_bound;
        }
      }
      jphases.push_back(jp);
      if (p.name.rfind("prefill", 0) == 0)
        figures[fmt::format("prefill_{}_tok_s", p.shape.seqs.front().new_tokens)] = p.throughput;
      else if (p.name.find("context") != std::string::npos)
        figures[fmt::format("decode_bs{}_ctx{}_tok_s", batch, f.long_context)] = p.throughput;
      else
        figures[fmt::format("decode_bs{}_tok_s", batch)] = p.throughput;
    }
    nlohmann::json eff;
    for (const auto& [cls, v] : klass) eff[cls] = v.first / v.second;
    nlohmann::json jchoices = nlohmann::json::array();
    for (const backend::MatmulChoice& c : choices)
      jchoices.push_back({{"tokens", c.tokens}, {"n", c.n}, {"k", c.k}, {"kernel", c.kernel}});
    nlohmann::json j = {{"command", cmd},
                        {"model", bundle->weights->path()},
                        {"model_config", cfg.describe()},
                        {"device", bundle->backend->name()},
                        {"hardware_predicted", hwo ? hw.id : std::string()},
                        {"hardware_spec", hw_spec},
                        {"fused_projections", fused},
                        {"fuse", fusions.describe()},
                        {"pinned_staging", pinned},
                        {"date", now_utc()},
                        {"weight_bytes", bundle->weights->bytes()},
                        {"weight_bytes_held", bundle->model->weight_bytes()},
                        {"kv_dtype", std::string(dtype_name(bundle->kv_pool->dtype()))},
                        {"phases", jphases},
                        {"implied_efficiency", eff},
                        {"gemm_choices", jchoices},
                        {"swiglu_one_token_kernel", swiglu_kernel},
                        {"figures", figures}};
    std::ofstream(f.json_out) << j.dump(2) << "\n";
  }
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<BenchModelFlags>();
  app::add_model_options(sub, f->model);
  sub.add_option("--prefill-tokens", f->prefill_tokens,
                 "prefill lengths (default: 512,2048 GPU, 128 CPU)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--decode-in", f->decode_in, "prompt tokens before decoding")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--decode-out", f->decode_out, "decode steps (0: 128 GPU, 32 CPU)")
      ->check(CLI::Range(0, 1 << 20));
  sub.add_option("--batches", f->batches, "decode batch sizes (default: 1,16,64 GPU, 1,4 CPU)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16));
  sub.add_option("--long-batch", f->long_batch, "batch of the long-context decode")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub.add_option("--long-context", f->long_context, "context of the long-context decode")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub.add_flag("--skip-long", f->skip_long, "skip the long-context decode");
  sub.add_option("--repeats", f->repeats, "timed runs per phase (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub.add_option("--hardware,--hardware-file", f->hardware,
                 "predict for this device: a data/hardware.json id or alias, or a profile file from "
                 "`ridge bench ceilings` (default: data/profiles/<gpu>-ridge.json when committed, "
                 "else the GPU's datasheet entry)");
  sub.add_option("--launch", f->launch,
                 "launch mode of the predictions: auto (as each step ran: graph replay or eager), graph, eager")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "graph", "eager"}));
  sub.add_flag("--profile-ops", f->profile_ops,
               "also time every op of each phase alone (Backend calls at the step's shapes) next to "
               "its prediction, and print the implied efficiency of each op class");
  sub.add_option("--profile-calls", f->profile_calls, "launches per op timing")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--calibrated-profile", f->calibrated_profile,
                 "write a hardware profile with the implied efficiencies (needs --profile-ops)");
  sub.add_option("--json-out", f->json_out, "write the figures, predictions and per-op times as JSON");
  sub.callback([f, &sub] {
    bench(*f);
  });
}

const app::BenchRegistrar reg("model", "Prefill and decode step times of a model, with the cost model's predictions", &setup);

}  // namespace
