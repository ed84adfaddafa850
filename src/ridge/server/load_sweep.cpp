#include "ridge/server/load_sweep.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::server {

using ojson = nlohmann::ordered_json;

namespace {

std::string slo_text(const LoadConfig& c) {
  std::string t;
  auto add = [&](const char* name, double v) {
    if (v > 0) t += fmt::format("{}p99 {} <= {:g} ms", t.empty() ? "" : ", ", name, v);
  };
  add("TTFT", c.slo_ttft_ms);
  add("TPOT", c.slo_tpot_ms);
  add("E2E", c.slo_e2e_ms);
  return t.empty() ? std::string("none") : t;
}

}  // namespace

std::string slo_miss(const LoadReport& r) {
  const LoadConfig& c = r.config;
  std::string why;
  auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
  if (r.completed == 0) add("no request completed");
  if (r.failed > 0) add(fmt::format("{} failed", r.failed));
  auto bound = [&](const char* name, const LatencyStats& s, double limit) {
    if (limit > 0 && s.count > 0 && s.p99 > limit)
      add(fmt::format("p99 {} {:.1f} ms > {:g} ms", name, s.p99, limit));
  };
  bound("TTFT", r.ttft_ms, c.slo_ttft_ms);
  bound("TPOT", r.tpot_ms, c.slo_tpot_ms);
  bound("E2E", r.e2e_ms, c.slo_e2e_ms);
  return why;
}

double SweepPoint::arrival_rate() const {
  double last = 0;
  for (const auto& r : report.records) last = std::max(last, r.start);
  return last > 0 ? double(report.records.size()) / last : 0.0;
}

int64_t sweep_requests(const SweepConfig& c, double rate) {
  if (c.duration_s > 0) return std::max<int64_t>(1, int64_t(std::ceil(rate * c.duration_s - 1e-9)));
  return c.load.num_requests;
}

void summarize(SweepReport& r) {
  r.best_rate = r.best_goodput = r.max_goodput = r.max_goodput_rate = 0;
  for (const auto& p : r.points) {
    if (p.meets_slo() && p.rate >= r.best_rate) {
      r.best_rate = p.rate;
      r.best_goodput = p.goodput();
    }
    if (p.goodput() > r.max_goodput) {
      r.max_goodput = p.goodput();
      r.max_goodput_rate = p.rate;
    }
  }
}

SweepReport run_sweep(const SweepConfig& config,
                      const std::function<void(const SweepPoint&)>& on_point) {
  SweepReport rep;
  rep.config = config;
  auto& rates = rep.config.rates;
  if (rates.empty()) fail("a sweep needs at least one rate");
  for (double r : rates)
    if (!(r > 0) || !std::isfinite(r)) fail("sweep rate {} must be a positive number", r);
  if (config.duration_s < 0) fail("sweep duration {} must not be negative", config.duration_s);
  std::sort(rates.begin(), rates.end());
  rates.erase(std::unique(rates.begin(), rates.end()), rates.end());

  int64_t misses = 0;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (config.max_misses > 0 && misses >= config.max_misses) {
      rep.skipped.push_back(rates[i]);
      continue;
    }
    LoadConfig c = config.load;
    c.request_rate = rates[i];
    c.num_requests = sweep_requests(config, rates[i]);
    // A seed per point: prompts never repeat across points, so the prefix cache cannot serve
    // one point's prompts from an earlier one's.
    c.seed = config.load.seed + uint64_t(i + 1) * 0x9E3779B97F4A7C15ull;
    SweepPoint p;
    p.rate = rates[i];
    p.report = run_load(c);
    p.slo_miss = slo_miss(p.report);
    misses += !p.meets_slo();
    if (on_point) on_point(p);
    rep.points.push_back(std::move(p));
  }
  summarize(rep);
  return rep;
}

ojson SweepReport::to_json() const {
  const LoadConfig& c = config.load;
  ojson j;
  j["mode"] = "sweep";
  LoadReport shape;
  shape.config = c;
  const ojson base = shape.to_json();
  j["endpoint"] = base["endpoint"];
  ojson w = base["workload"];
  w.erase("mode");
  w.erase("num_requests");
  w.erase("request_rate");
  w["concurrency"] = c.concurrency;  // a cap on requests in flight (0: none)
  if (config.duration_s > 0) {
    w["duration_per_rate_s"] = config.duration_s;
  } else {
    w["requests_per_rate"] = c.num_requests;
  }
  w["max_misses"] = config.max_misses;
  j["workload"] = w;
  j["slo_ms"] = base["slo_ms"];
  j["slo_rule"] =
      "a rate meets the SLOs when every request completed and the p99 of TTFT, TPOT "
      "and E2E are within the bounds given (0: no bound)";
  j["goodput_rule"] =
      "goodput = rate x slo_attainment (the share of requests meeting every bound); "
      "goodput_wall = those requests / the phase's wall time, drain included";
  j["rates"] = config.rates;
  j["best_rate"] = best_rate > 0 ? ojson(best_rate) : ojson(nullptr);
  j["best_goodput"] = best_goodput;
  j["max_goodput"] = max_goodput;
  j["max_goodput_rate"] = max_goodput_rate;
  j["skipped_rates"] = skipped;
  ojson pts = ojson::array();
  for (const auto& p : points) {
    ojson q;
    q["rate"] = p.rate;
    q["meets_slo"] = p.meets_slo();
    q["slo_miss"] = p.slo_miss;
    q["num_requests"] = p.report.config.num_requests;
    q["seed"] = p.report.config.seed;
    q["arrival_rate"] = p.arrival_rate();
    q["slo_attainment"] = p.attainment();
    q["goodput"] = p.goodput();
    const ojson full = p.report.to_json();
    for (const auto& [k, v] : full.items()) {
      if (k == "endpoint" || k == "workload" || k == "slo_ms") continue;
      q[k == "goodput" ? std::string("goodput_wall") : k] = v;
    }
    pts.push_back(std::move(q));
  }
  j["points"] = std::move(pts);
  return j;
}

std::string SweepReport::table() const {
  const LoadConfig& c = config.load;
  std::string t;
  t += fmt::format("sweep         http://{}:{} ({}), Poisson arrivals{}, {}\n", c.host, c.port,
                   c.endpoint,
                   c.concurrency > 0 ? fmt::format(" (at most {} at once)", c.concurrency) : "",
                   config.duration_s > 0 ? fmt::format("{:g} s per rate", config.duration_s)
                                         : fmt::format("{} requests per rate", c.num_requests));
  t += fmt::format("lengths       input {} / output {} ({}), prompts {}\n", c.input_len,
                   c.output_len, c.length_dist, c.prompt_kind);
  t += fmt::format("SLOs          {} (and every request completed)\n", slo_text(c));
  t += fmt::format("{:>8}{:>7}{:>7}{:>9}{:>9}{:>8}{:>11}{:>10}{:>10}{:>10}{:>10}{:>10}{:>11}  {}\n",
                   "rate", "sent", "failed", "req/s", "goodput", "attain", "out tok/s", "TTFT p50",
                   "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99", "TTFT ms/s", "SLOs");
  for (const auto& p : points) {
    const LoadReport& r = p.report;
    const int64_t n = r.config.num_requests;
    const std::string trend =
        r.ttft_trend.defined ? fmt::format("{:+.1f}", r.ttft_trend.slope_ms_per_s) : "-";
    t += fmt::format(
        "{:>8.2f}{:>7}{:>7}{:>9.2f}{:>9.2f}{:>7.1f}%{:>11.1f}{:>10.1f}{:>10.1f}{:>10.2f}{:>10.2f}{:"
        ">10.2f}{:>11}  {}\n",
        p.rate, n, r.failed, r.request_throughput, p.goodput(), 100.0 * p.attainment(),
        r.output_throughput, r.ttft_ms.p50, r.ttft_ms.p99, r.tpot_ms.p50, r.tpot_ms.p99,
        r.itl_ms.p99, trend, p.meets_slo() ? std::string("met") : "missed: " + p.slo_miss);
  }
  t += "(goodput: rate x attainment, the share of requests meeting every SLO; req/s: completed / "
       "wall time, drain included; TTFT ms/s: the slope of TTFT against arrival time, which a "
       "growing queue keeps above 0 even where a short phase meets the SLOs)\n";
  if (best_rate > 0) {
    t += fmt::format("highest rate meeting the SLOs: {:g} req/s (goodput {:.2f} req/s)\n",
                     best_rate, best_goodput);
  } else {
    t += "highest rate meeting the SLOs: none of the rates run\n";
  }
  if (max_goodput > 0) {
    t +=
        fmt::format("highest goodput: {:.2f} req/s at {:g} req/s\n", max_goodput, max_goodput_rate);
  } else {
    t += "highest goodput: 0 (no request met every SLO)\n";
  }
  if (!skipped.empty()) {
    std::string s;
    for (double r : skipped) s += fmt::format("{}{:g}", s.empty() ? "" : ", ", r);
    t += fmt::format("skipped after {} missed: {}\n", config.max_misses, s);
  }
  return t;
}

}  // namespace ridge::server
