// The load generator behind `ridge bench serve`: drives any OpenAI-compatible endpoint over
// HTTP/1.1 with streaming requests and measures what clients see.
//
// Arrivals: a fixed number of clients in a closed loop (concurrency), or Poisson arrivals at a
// rate (optionally capped by concurrency). Lengths: input and output lengths fixed, uniform in
// [len(1-r), len(1+r)], or lognormal with the given mean (ShareGPT-like long tails). Prompts:
// random token ids (completions; exact lengths) or words (chat), optionally behind one of a few
// shared prefixes (prefix-cache traffic). Output lengths are exact: ignore_eos with max_tokens.
//
// Reports TTFT, TPOT (per request: (e2e - ttft) / (tokens - 1)), inter-token latency (gaps
// between streamed events) and end-to-end latency as mean/p50/p90/p99, request and token
// throughput, and goodput: requests per second that met every SLO given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ridge::server {

struct LoadConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string api_key;
  std::string model;                   // "" -> the first of GET /v1/models
  std::string endpoint = "completions";  // completions | chat
  int64_t num_requests = 200;
  int64_t concurrency = 16;    // clients at once (0: no cap, with a request rate)
  double request_rate = 0;     // requests/s, Poisson arrivals (0: closed loop at `concurrency`)
  std::string length_dist = "fixed";  // fixed | uniform | lognormal
  int64_t input_len = 128;
  int64_t output_len = 64;
  double range_ratio = 0.5;    // uniform: [len(1-r), len(1+r)]
  double lognormal_sigma = 0.9;
  std::string prompt_kind = "random";  // random | shared-prefix
  int64_t prefix_len = 64;     // shared-prefix: tokens of the shared part
  int64_t num_prefixes = 4;
  int32_t token_low = 1000, token_high = 20000;  // random token ids are drawn from [low, high)
  uint64_t seed = 0;
  double temperature = 0;
  double slo_ttft_ms = 0, slo_tpot_ms = 0, slo_e2e_ms = 0;  // 0: no constraint
  double timeout_s = 600;      // per request
  bool keep_alive = true;
};

struct RequestRecord {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double start = 0;  // seconds since the run began
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
};

struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t count = 0;
};

// Whether a queue builds over a run: the least-squares slope of the completed requests' TTFT
// against their arrival times, and the median TTFT of the first and the last quarter of them by
// arrival. A load the server sustains has a slope near 0; an overload that a short phase still
// passes within its SLOs shows as TTFT growing with arrival time (the queue grows by the excess
// rate). Undefined (defined = false) with fewer than 8 requests or arrivals all at once.
struct TtftTrend {
  bool defined = false;
  double slope_ms_per_s = 0;
  double first_quarter_p50_ms = 0, last_quarter_p50_ms = 0;
};
TtftTrend ttft_trend(const std::vector<RequestRecord>& records);

struct LoadReport {
  LoadConfig config;
  std::vector<RequestRecord> records;
  double duration_s = 0;
  int64_t completed = 0, failed = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  double goodput = 0;  // requests/s meeting every SLO
  int64_t good = 0;
  LatencyStats ttft_ms, tpot_ms, itl_ms, e2e_ms;
  TtftTrend ttft_trend;
  std::vector<std::string> sample_errors;
  // Energy of the run, where the server reports its GPU's energy counter in /metrics
  // (ridge_gpu_energy_joules_total, read before and after; absent for other servers).
  std::optional<double> energy_j;

  nlohmann::ordered_json to_json() const;
  std::string table() const;
};

// Runs the load; throws ridge::Error when the server cannot be reached at all.
LoadReport run_load(const LoadConfig& config);

LatencyStats latency_stats(std::vector<double> values_ms);

}  // namespace ridge::server
