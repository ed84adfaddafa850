// perf/simulator: a workload run step by step through a serving configuration, each step's time
// from the cost model (predict_step). Deterministic for a seed (own RNG transforms, no
// platform-dependent std distributions).
//
// Configurations:
//   aggregated   `gpus` replicas, each with chunked prefill: a step holds every running decode
//                first, then prefill chunks up to `token_budget` tokens, at most `max_batch`
//                sequences (vLLM/Sarathi style).
//   disagg_gpus  `prefill_gpus` run prefill only, `decode_gpus` decode only; the KV of a prompt
//                crosses `kv_link` (nvlink or pcie, per direction, one transfer at a time per
//                prefill GPU) before its decode starts. The prefill side may be another device
//                (prefill_hw, e.g. Rubin CPX).
//   disagg_sms   each of `gpus` GPUs split into a prefill and a decode partition by SMs
//                (prefill_fraction); the KV stays in the GPU's memory (handed over by block id).
// TTFT = first token (end of the prompt's prefill) - arrival. TPOT = (last - first token) /
// (output tokens - 1), so a KV transfer shows in TPOT. A request meets the SLOs when TTFT <=
// slo.ttft, TPOT <= slo.tpot and its stall between the first token and the decode batch that
// continues it (KV transfer + decode queue) <= slo.ttft: no token waits longer than the TTFT
// budget (without this an overloaded decode side would hide its queue in a long output's mean
// TPOT). Goodput = such requests per second of makespan; max_goodput is the highest offered rate
// at which >= `attainment` of the requests meet them (DistServe's definition).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ridge/perf/cost_model.h"

namespace ridge::perf {

struct LengthDist {
  enum class Kind { fixed, uniform, normal, exponential, lognormal };
  Kind kind = Kind::fixed;
  // fixed: a; uniform: [a, b]; normal: mean a, sd b; exponential: mean a; lognormal: mean a,
  // sigma b of the log, capped at 8 a (as `ridge bench serve --length-dist lognormal` draws)
  double a = 1, b = 0;
  // "1024", "uniform:512:2048", "normal:1024:256", "exp:1024", "lognormal:256:0.9"; throws
  // naming the form. Every number must be finite, > 0 and at most kMaxTokens.
  static LengthDist parse(std::string_view text);
  static constexpr double kMaxTokens = 1e7;
  // Throws naming `what` ("isl", "osl") unless a and b are finite, a in (0, kMaxTokens] and b in
  // [0, kMaxTokens] (uniform: a <= b).
  void validate(std::string_view what) const;
  static LengthDist fixed(int64_t n) { return {Kind::fixed, double(n), 0}; }
  int64_t sample(std::mt19937_64& rng) const;  // >= 1
  double mean() const;
  std::string describe() const;
};

struct Workload {
  enum class Arrival { poisson, constant, burst };
  Arrival arrival = Arrival::poisson;
  double rate = 1.0;          // requests per second, all replicas together (burst: all at t = 0)
  LengthDist isl = LengthDist::fixed(1024), osl = LengthDist::fixed(128);
  double prefix_share = 0.0;  // fraction of each prompt that all requests share (prefix-cached)
  // How many requests: `requests` when > 0, else rate x duration_s (at least 50), so that an
  // overloaded configuration shows its growing queue instead of draining a short burst.
  int64_t requests = 0;
  double duration_s = 60;
  uint64_t seed = 1;
  static constexpr int64_t kMaxRequests = 10'000'000;  // what one simulation may hold
  int64_t count() const;
  // Throws naming the field unless the rate and duration are finite and > 0, requests in
  // [0, kMaxRequests] (0: rate x duration, which must not exceed it either), prefix share in
  // [0, 1) and both length distributions valid. plan() runs it once, before any configuration.
  void validate() const;
};

struct Slo {
  double ttft_s = 1.0;
  double tpot_s = 0.05;
  double attainment = 0.9;  // share of requests that must meet both
  // Throws naming the field unless ttft_s and tpot_s are finite and > 0 and attainment in (0, 1].
  void validate() const;
};

struct ServingConfig {
  enum class Mode { aggregated, disagg_gpus, disagg_sms };
  Mode mode = Mode::aggregated;
  int gpus = 1;                 // aggregated and disagg_sms
  int prefill_gpus = 1, decode_gpus = 1;  // disagg_gpus
  double prefill_fraction = 0.5;          // disagg_sms
  int64_t token_budget = 2048;  // tokens per step (prefill chunk budget)
  int64_t max_batch = 256;      // sequences per step
  std::string kv_link = "nvlink";
  std::optional<Hardware> prefill_hw;  // disagg_gpus: a different prefill device
  double kv_memory_fraction = 0.9;     // of the memory the weights leave
  // KV capacity of a GPU in tokens, as `ridge serve --ctx-size` sets it (0: kv_memory_fraction of
  // the memory the weights leave). A GPU split by SMs shares it as it shares that memory.
  int64_t kv_tokens = 0;
  int total_gpus() const;
  std::string describe() const;
};

struct SimResult {
  std::string config;
  int64_t requests = 0;
  double makespan_s = 0;
  double ttft_mean = 0, ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double tpot_mean = 0, tpot_p50 = 0, tpot_p90 = 0, tpot_p99 = 0;
  double stall_p90 = 0;        // first token -> decode batch admission (KV transfer + queue)
  double output_tok_s = 0, input_tok_s = 0;
  double slo_attainment = 0;   // share of requests meeting both SLOs
  double goodput_rps = 0;      // such requests per second
  double energy_j = 0;         // NaN when a device has no TDP figure
  double j_per_token = 0;      // energy / (input + output tokens processed)
  double j_per_output_token = 0;
  double gpu_hours = 0;
  double usd_per_mtok = 0;     // per million output tokens; NaN without prices
  double kv_transfer_mean_s = 0;
  double prefill_busy = 0, decode_busy = 0;  // busy share of the prefill / decode side
  double hbm_idle = 0;         // 1 - bytes moved / (bandwidth x makespan), all devices
  double prefill_hbm_idle = 0; // the same over the prefill side's busy time only
  std::string binding;         // the resource that binds (most utilized)
};

SimResult simulate(const model::ModelConfig& cfg, const Hardware& hw, const Workload& w,
                   const ServingConfig& sc, const CostOptions& opt, const Slo& slo);

// Throws, with both sizes, when a KV cache of kv_tokens tokens (ServingConfig::kv_tokens) does not
// fit in hw's memory beside the weights at this precision.
void check_kv_cache_fits(const model::ModelConfig& cfg, const Hardware& hw, const Precision& p,
                         int64_t kv_tokens);

struct GoodputResult {
  double rate = 0;          // highest offered rate meeting the attainment (requests/s)
  double rate_per_gpu = 0;
  SimResult at;             // the simulation at that rate
};
GoodputResult max_goodput(const model::ModelConfig& cfg, const Hardware& hw, Workload w,
                          const ServingConfig& sc, const CostOptions& opt, const Slo& slo,
                          int iterations = 10);

}  // namespace ridge::perf
