// The sweep's SLO rule and summary (ridge bench serve --rates), on made-up phase reports; the
// whole sweep against a server is tests/server/test_bench_sweep.py.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ridge/core/error.h"
#include "ridge/server/load_sweep.h"

namespace {

using ridge::server::LatencyStats;
using ridge::server::LoadReport;
using ridge::server::SweepConfig;
using ridge::server::SweepPoint;
using ridge::server::SweepReport;

LatencyStats p99(double v) {
  LatencyStats s;
  s.p99 = v;
  s.count = 100;
  return s;
}

LoadReport phase(double ttft_p99, double tpot_p99, int64_t failed = 0, int64_t good = 100) {
  LoadReport r;
  r.config.slo_ttft_ms = 500;
  r.config.slo_tpot_ms = 50;
  r.config.num_requests = 100;
  r.completed = 100 - failed;
  r.failed = failed;
  r.ttft_ms = p99(ttft_p99);
  r.tpot_ms = p99(tpot_p99);
  r.e2e_ms = p99(10000);
  r.good = good;
  return r;
}

TEST(SweepSlo, P99sWithinBoundsAndNoFailuresMeet) {
  EXPECT_EQ(ridge::server::slo_miss(phase(500, 50)), "");  // bounds are inclusive
  EXPECT_EQ(ridge::server::slo_miss(phase(120, 20)), "");
}

TEST(SweepSlo, EachShortfallIsNamed) {
  EXPECT_EQ(ridge::server::slo_miss(phase(812.34, 20)), "p99 TTFT 812.3 ms > 500 ms");
  EXPECT_EQ(ridge::server::slo_miss(phase(100, 51)), "p99 TPOT 51.0 ms > 50 ms");
  EXPECT_EQ(ridge::server::slo_miss(phase(600, 60, 2)),
            "2 failed; p99 TTFT 600.0 ms > 500 ms; p99 TPOT 60.0 ms > 50 ms");
  LoadReport none = phase(0, 0, 100);
  none.ttft_ms.count = none.tpot_ms.count = 0;
  EXPECT_EQ(ridge::server::slo_miss(none), "no request completed; 100 failed");
}

TEST(SweepSlo, ZeroBoundIsNoBound) {
  LoadReport r = phase(5000, 500);
  r.config.slo_ttft_ms = r.config.slo_tpot_ms = 0;
  EXPECT_EQ(ridge::server::slo_miss(r), "");
  r.config.slo_e2e_ms = 9000;
  EXPECT_EQ(ridge::server::slo_miss(r), "p99 E2E 10000.0 ms > 9000 ms");
}

TEST(SweepSlo, RequestsPerPoint) {
  SweepConfig c;
  c.load.num_requests = 77;
  EXPECT_EQ(ridge::server::sweep_requests(c, 3.0), 77);
  c.duration_s = 10;
  EXPECT_EQ(ridge::server::sweep_requests(c, 3.0), 30);
  EXPECT_EQ(ridge::server::sweep_requests(c, 2.55), 26);  // ceil
  EXPECT_EQ(ridge::server::sweep_requests(c, 0.01), 1);
}

TEST(SweepSummary, HighestMeetingRateAndMaxGoodput) {
  SweepReport rep;
  auto add = [&](double rate, LoadReport r) {
    SweepPoint p;
    p.rate = rate;
    p.report = r;
    p.slo_miss = ridge::server::slo_miss(r);
    rep.points.push_back(p);
  };
  add(1, phase(100, 20, 0, 99));
  add(2, phase(150, 25, 0, 98));
  add(4, phase(450, 48, 0, 97));
  add(8, phase(2000, 70, 0, 56));  // past the knee: p99s missed, goodput still highest
  add(16, phase(9000, 90, 0, 7));
  ridge::server::summarize(rep);
  EXPECT_EQ(rep.best_rate, 4);
  EXPECT_DOUBLE_EQ(rep.best_goodput, 4 * 0.97);  // rate x attainment
  EXPECT_EQ(rep.max_goodput_rate, 8);
  EXPECT_DOUBLE_EQ(rep.max_goodput, 8 * 0.56);

  const auto j = rep.to_json();
  EXPECT_EQ(j["mode"], "sweep");
  EXPECT_EQ(j["best_rate"], 4);
  ASSERT_EQ(j["points"].size(), 5u);
  EXPECT_EQ(j["points"][2]["meets_slo"], true);
  EXPECT_EQ(j["points"][3]["meets_slo"], false);
  EXPECT_EQ(j["points"][3]["slo_miss"], "p99 TTFT 2000.0 ms > 500 ms; p99 TPOT 70.0 ms > 50 ms");
  EXPECT_DOUBLE_EQ(j["points"][3]["slo_attainment"].get<double>(), 0.56);
  EXPECT_DOUBLE_EQ(j["points"][3]["goodput"].get<double>(), 8 * 0.56);
  EXPECT_TRUE(j["points"][0].contains("goodput_wall"));
  EXPECT_TRUE(j["points"][0].contains("ttft_ms"));
  EXPECT_FALSE(j["points"][0].contains("workload"));
  EXPECT_NE(rep.table().find("highest rate meeting the SLOs: 4 req/s"), std::string::npos);
}

TEST(SweepSummary, NoneMeetingIsNull) {
  SweepReport rep;
  SweepPoint p;
  p.rate = 3;
  p.report = phase(900, 20);
  p.slo_miss = ridge::server::slo_miss(p.report);
  rep.points.push_back(p);
  ridge::server::summarize(rep);
  EXPECT_EQ(rep.best_rate, 0);
  EXPECT_TRUE(rep.to_json()["best_rate"].is_null());
}

// The TTFT trend (ridge::server::ttft_trend): the least-squares slope of TTFT against arrival time
// over the completed requests, in arrival order whatever the records' order, with the medians of
// the first and last quarters; undefined for a handful of requests or arrivals all at once.
TEST(TtftTrend, SlopeAndQuartersOfAGrowingQueue) {
  using ridge::server::RequestRecord;
  std::vector<RequestRecord> recs;
  // 40 arrivals 0.25 s apart over 10 s, TTFT 50 ms + 20 ms per s of arrival (a queue growing),
  // listed last first, with two failed requests whose TTFT would break the line.
  for (int i = 39; i >= 0; --i) {
    RequestRecord r;
    r.ok = true;
    r.start = 0.25 * i;
    r.ttft = (50 + 20 * r.start) / 1e3;
    recs.push_back(r);
    if (i % 20 == 0) {
      RequestRecord bad;
      bad.start = r.start;
      bad.ttft = 9.0;
      recs.push_back(bad);
    }
  }
  ridge::server::TtftTrend t = ridge::server::ttft_trend(recs);
  ASSERT_TRUE(t.defined);
  EXPECT_NEAR(t.slope_ms_per_s, 20.0, 1e-9);
  // First quarter: arrivals 0 .. 2.25 s, median arrival 1.125 s -> 72.5 ms; last: 7.5 .. 9.75 s,
  // median 8.625 s -> 222.5 ms.
  EXPECT_NEAR(t.first_quarter_p50_ms, 72.5, 1e-9);
  EXPECT_NEAR(t.last_quarter_p50_ms, 222.5, 1e-9);
  // A sustained load: TTFT alternating 40 / 60 ms around a flat line has no slope.
  for (size_t i = 0; i < recs.size(); ++i) recs[i].ttft = (i % 2 ? 0.04 : 0.06);
  for (auto& r : recs) r.ok = true;
  t = ridge::server::ttft_trend(recs);
  ASSERT_TRUE(t.defined);
  EXPECT_LT(std::abs(t.slope_ms_per_s), 1.0);
  // Arrivals all at once (offline) and fewer than 8 requests: no trend.
  for (auto& r : recs) r.start = 0.5;
  EXPECT_FALSE(ridge::server::ttft_trend(recs).defined);
  recs.resize(7);
  for (size_t i = 0; i < recs.size(); ++i) recs[i].start = double(i);
  EXPECT_FALSE(ridge::server::ttft_trend(recs).defined);
  // The report carries it into the JSON and the sweep's table.
  LoadReport r = phase(100, 20);
  r.ttft_trend.defined = true;
  r.ttft_trend.slope_ms_per_s = 12.5;
  EXPECT_DOUBLE_EQ(r.to_json()["ttft_trend"]["slope_ms_per_s"].get<double>(), 12.5);
  SweepReport rep;
  SweepPoint p;
  p.rate = 5;
  p.report = r;
  rep.points.push_back(p);
  ridge::server::summarize(rep);
  EXPECT_NE(rep.table().find("+12.5"), std::string::npos) << rep.table();
  EXPECT_TRUE(phase(100, 20).to_json()["ttft_trend"].is_null());
}

// What run_sweep throws ("" when it returns): a refused configuration names what is wrong, which
// tells it from the connection error that any run against port 1 ends in.
std::string sweep_error(const SweepConfig& c) {
  try {
    ridge::server::run_sweep(c);
  } catch (const ridge::Error& e) {
    return e.what();
  }
  return "";
}

TEST(SweepRun, RefusesBadRatesBeforeConnecting) {
  SweepConfig c;
  c.load.port = 1;  // nothing listens: a bad configuration must fail before any request
  EXPECT_NE(sweep_error(c).find("at least one rate"), std::string::npos) << sweep_error(c);
  struct Case {
    double rate;
    const char* named;
  };
  for (const Case& k :
       {Case{-1, "sweep rate -1 "}, Case{0, "sweep rate 0 "}, Case{std::nan(""), "sweep rate nan "},
        Case{std::numeric_limits<double>::infinity(), "sweep rate inf "}}) {
    c.rates = {2, k.rate};
    const std::string what = sweep_error(c);
    EXPECT_NE(what.find(k.named), std::string::npos) << k.rate << ": " << what;
    EXPECT_NE(what.find("must be a positive number"), std::string::npos) << what;
  }
}

}  // namespace
