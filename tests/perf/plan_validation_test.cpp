// The workload and SLO checks of `ridge plan` as a library: lengths, rates, durations, request
// counts, prefix shares and SLOs that are not finite or out of range are refused naming the field,
// and plan() reports them as they are instead of "no configuration can serve this workload".
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "perf/fixtures.h"

#include "ridge/core/error.h"
#include "ridge/perf/planner.h"
#include "ridge/perf/simulator.h"

namespace ridge::perf {
namespace {

using test::db;
using test::error_of;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();


void expect_has(const std::string& msg, const std::string& needle) {
  EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
}

TEST(PlanValidation, LengthsMustBeFiniteAndBounded) {
  for (const char* text : {"inf", "-inf", "nan", "1e30", "20000000", "0", "-5", "0.4",
                           "uniform:1:inf", "uniform:nan:10", "normal:1024:inf", "exp:1e300",
                           "lognormal:inf:0.9", "lognormal:256:nan", "12x", "abc"}) {
    SCOPED_TRACE(text);
    const std::string msg = error_of([&] { LengthDist::parse(text); });
    expect_has(msg, "length distribution");
  }
  const std::string msg = error_of([] { LengthDist::parse("inf"); });
  expect_has(msg, "finite");
  // The bound itself and ordinary forms still parse.
  EXPECT_EQ(LengthDist::parse("10000000").a, 1e7);
  EXPECT_NO_THROW(LengthDist::parse("uniform:512:2048"));
  EXPECT_NO_THROW(LengthDist::parse("lognormal:256:0.9"));
  // A distribution built in code is checked too.
  LengthDist d = LengthDist::fixed(1024);
  d.a = kInf;
  expect_has(error_of([&] { d.validate("isl"); }), "isl");
}

TEST(PlanValidation, WorkloadFieldsAreChecked) {
  auto check = [](auto mutate, const char* needle) {
    Workload w;
    mutate(w);
    SCOPED_TRACE(needle);
    expect_has(error_of([&] { w.validate(); }), needle);
  };
  check([](Workload& w) { w.rate = kInf; }, "rate");
  check([](Workload& w) { w.rate = kNaN; }, "rate");
  check([](Workload& w) { w.rate = -1; }, "rate");
  check([](Workload& w) { w.rate = 0; }, "rate");
  check([](Workload& w) { w.duration_s = kInf; }, "duration");
  check([](Workload& w) { w.duration_s = -1; }, "duration");
  check([](Workload& w) { w.duration_s = kNaN; }, "duration");
  check([](Workload& w) { w.requests = -5; }, "requests");
  check([](Workload& w) { w.requests = Workload::kMaxRequests + 1; }, "requests");
  check([](Workload& w) { w.prefix_share = kNaN; }, "prefix share");
  check([](Workload& w) { w.prefix_share = -0.1; }, "prefix share");
  check([](Workload& w) { w.prefix_share = 1; }, "prefix share");
  check([](Workload& w) { w.isl.a = kInf; }, "isl");
  check([](Workload& w) { w.osl.a = 1e30; }, "osl");
  // Finite but too many requests: no int64 overflow in rate x duration, a clear error instead.
  check([](Workload& w) { w.rate = 1e300, w.duration_s = 1e300; }, "duration");
  check([](Workload& w) { w.rate = 1e6, w.duration_s = 1e6; }, "requests");
  Workload ok;
  EXPECT_NO_THROW(ok.validate());
  EXPECT_EQ(ok.count(), 60);
  ok.requests = 7;
  EXPECT_EQ(ok.count(), 7);
  // count() alone (simulate() calls it) refuses what it cannot compute.
  Workload inf;
  inf.duration_s = kInf;
  expect_has(error_of([&] { inf.count(); }), "duration");
}

TEST(PlanValidation, SloFieldsAreChecked) {
  auto check = [](auto mutate, const char* needle) {
    Slo s;
    mutate(s);
    SCOPED_TRACE(needle);
    expect_has(error_of([&] { s.validate(); }), needle);
  };
  check([](Slo& s) { s.ttft_s = -1e-3; }, "TTFT");
  check([](Slo& s) { s.ttft_s = kInf; }, "TTFT");
  check([](Slo& s) { s.ttft_s = 0; }, "TTFT");
  check([](Slo& s) { s.tpot_s = kNaN; }, "TPOT");
  check([](Slo& s) { s.attainment = 0; }, "attainment");
  check([](Slo& s) { s.attainment = 1.5; }, "attainment");
  EXPECT_NO_THROW(Slo{}.validate());
}

PlanRequest small_request() {
  PlanRequest q;
  q.model = model::ModelConfig::named("llama-2-7b");
  q.model_name = "llama-2-7b";
  q.hw = db().get("h200");
  q.workload.isl = LengthDist::fixed(512), q.workload.osl = LengthDist::fixed(32);
  q.workload.requests = 20;
  q.gpus = 2, q.top = 1, q.search_iterations = 1;
  return q;
}

TEST(PlanValidation, PlanReportsTheWorkloadsOwnErrors) {
  // These used to read "no configuration can serve this workload": the workload's own error
  // was caught with the per-configuration ones.
  PlanRequest q = small_request();
  q.workload.duration_s = -1;
  std::string msg = error_of([&] { plan(q); });
  expect_has(msg, "duration");
  EXPECT_EQ(msg.find("no configuration"), std::string::npos) << msg;

  q = small_request();
  q.workload.prefix_share = kNaN;
  msg = error_of([&] { plan(q); });
  expect_has(msg, "prefix share");
  EXPECT_EQ(msg.find("no configuration"), std::string::npos) << msg;

  q = small_request();
  q.slo.ttft_s = -1;
  expect_has(error_of([&] { plan(q); }), "TTFT");

  q = small_request();
  q.workload.rate = kInf;
  expect_has(error_of([&] { plan(q); }), "rate");
}

TEST(PlanValidation, InfeasibleConfigurationsAreSkippedWithTheirReasons) {
  // A valid workload that no configuration holds (a 10M-token prompt's KV exceeds an H200)
  // still reads "no configuration", now with why.
  PlanRequest q = small_request();
  q.workload.isl = LengthDist::fixed(10'000'000);
  q.workload.requests = 2;
  const std::string msg = error_of([&] { plan(q); });
  expect_has(msg, "no configuration can serve this workload on h200");
  expect_has(msg, "KV tokens");
}

}  // namespace
}  // namespace ridge::perf
