// Rate sweeps for `ridge bench serve --rates`: one Poisson phase per rate against the same
// server, in ascending order; goodput against rate, and the highest rate whose phase met the SLOs.
//
// A phase meets the SLOs when every request completed and the p99 of TTFT, TPOT and end-to-end
// latency are within the bounds given (a bound of 0 is no bound). A point's goodput is the
// offered rate times its SLO attainment (the share of its requests that met every bound one by
// one): requests/s served well, free of the phase's ramp-up and drain (a short phase of long
// outputs spends much of its wall time draining, so good requests / wall time would read low at
// every rate). The curve shows how much of the offered load is still served well past the rate
// where the p99s give out.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/server/load_generator.h"

namespace ridge::server {

struct SweepConfig {
  LoadConfig load;            // request_rate, num_requests and seed are set per point
  std::vector<double> rates;  // requests/s (sorted ascending before the run)
  double duration_s = 0;      // > 0: each point sends ceil(rate x duration) requests;
                              // 0: load.num_requests each
  int64_t max_misses = 0;     // stop after this many points missed the SLOs (0: run every rate)
};

struct SweepPoint {
  double rate = 0;
  LoadReport report;
  std::string slo_miss;  // empty when the phase met the SLOs; else what fell short
  bool meets_slo() const { return slo_miss.empty(); }
  // Share of the requests sent that met every SLO.
  double attainment() const {
    return report.config.num_requests > 0 ? double(report.good) / double(report.config.num_requests)
                                          : 0.0;
  }
  double goodput() const { return rate * attainment(); }  // requests/s
  // Arrivals per second as drawn (Poisson: near the rate for many requests).
  double arrival_rate() const;
};

struct SweepReport {
  SweepConfig config;
  std::vector<SweepPoint> points;
  std::vector<double> skipped;  // rates not run (stopped after max_misses misses)
  double best_rate = 0;         // highest rate whose phase met the SLOs (0: none did)
  double best_goodput = 0;      // that point's goodput (SweepPoint::goodput)
  double max_goodput = 0;       // the highest goodput of any point
  double max_goodput_rate = 0;  // and its rate

  nlohmann::ordered_json to_json() const;
  std::string table() const;
};

// Empty when the phase met the SLOs of its config (see the top of this file); otherwise the
// reasons, e.g. "p99 TTFT 812.3 ms > 500 ms; 2 failed".
std::string slo_miss(const LoadReport& report);

// Requests a point at `rate` sends.
int64_t sweep_requests(const SweepConfig& config, double rate);

// Fills best_rate, best_goodput, max_goodput and max_goodput_rate from the points.
void summarize(SweepReport& report);

// Runs the sweep; on_point (if given) sees each point as it finishes. Throws ridge::Error on a bad
// configuration or when the server cannot be reached.
SweepReport run_sweep(const SweepConfig& config,
                      const std::function<void(const SweepPoint&)>& on_point = {});

}  // namespace ridge::server
