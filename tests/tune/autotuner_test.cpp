#include "ridge/tune/autotuner.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "tune/tune_test_util.h"

namespace ridge::tune {
namespace {

namespace fs = std::filesystem;
using namespace testing;
using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

std::vector<Candidate> candidates(std::initializer_list<const char*> names) {
  std::vector<Candidate> out;
  for (const char* n : names) out.push_back({n, ""});
  return out;
}

// A fake GPU: fixed seconds per candidate name; counts the calls.
struct FakeTimer {
  std::map<std::string, double> seconds;
  int calls = 0;
  MeasureFn fn() {
    return [this](const Candidate& c) {
      calls++;
      return seconds.at(c.name);
    };
  }
};

TEST(Autotuner, PicksTheFastestAndTheSecondStartTunesNothing) {
  TempRoot t;
  const auto cands = candidates({"cublaslt.0", "ridge.sm90.128x128", "ridge.skinny.64"});
  const std::vector<std::string> problems = {gemm_problem_key(1, 4096, 4096, "bf16"),
                                             gemm_problem_key(16, 4096, 4096, "bf16"),
                                             gemm_problem_key(512, 14336, 4096, "bf16")};
  FakeTimer timer{{{"cublaslt.0", 3e-6}, {"ridge.sm90.128x128", 5e-6}, {"ridge.skinny.64", 2e-6}}};
  {
    BuildCache cache(config_at(t.path()), h200());
    Autotuner tuner(&cache);
    for (const auto& p : problems) {
      const TuneResult r = tuner.pick("gemm", p, cands, timer.fn());
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r.winner, "ridge.skinny.64");
      EXPECT_EQ(r.index, 2u);
      EXPECT_FALSE(r.hit);
      EXPECT_TRUE(r.measured);
      EXPECT_DOUBLE_EQ(r.seconds, 2e-6);
      ASSERT_EQ(r.timings.size(), 3u);
      EXPECT_EQ(r.timings[1].name, "cublaslt.0");  // fastest first
      EXPECT_EQ(r.timings[2].name, "ridge.sm90.128x128");
    }
    EXPECT_EQ(timer.calls, 9);
    EXPECT_EQ(tuner.stats().misses, 3u);
    EXPECT_EQ(tuner.stats().hits, 0u);
    EXPECT_EQ(tuner.summary(), "tuning: 0 hits, 3 misses (9 candidates measured, 0 skipped)");
    // The stored value names the winner and keeps the runner-ups' timings.
    const auto v = nlohmann::json::parse(*cache.get("gemm", problems[0]));
    EXPECT_EQ(v["winner"], "ridge.skinny.64");
    EXPECT_DOUBLE_EQ(v["seconds"].get<double>(), 2e-6);
    EXPECT_DOUBLE_EQ(v["timings"]["ridge.sm90.128x128"].get<double>(), 5e-6);
  }
  // Second start: a new cache and tuner on the same root measure nothing.
  timer.calls = 0;
  BuildCache cache(config_at(t.path()), h200());
  Autotuner tuner(&cache);
  for (const auto& p : problems) {
    const TuneResult r = tuner.pick("gemm", p, cands, timer.fn());
    EXPECT_TRUE(r.hit);
    EXPECT_FALSE(r.measured);
    EXPECT_EQ(r.winner, "ridge.skinny.64");
    EXPECT_EQ(r.index, 2u);
    EXPECT_DOUBLE_EQ(r.seconds, 2e-6);
    EXPECT_TRUE(r.timings.empty());
  }
  EXPECT_EQ(timer.calls, 0);
  EXPECT_EQ(tuner.summary(), "tuning: 3 hits, 0 misses (0 candidates measured, 0 skipped)");
  EXPECT_EQ(cache.stats().hits, 3u);
  EXPECT_EQ(cache.stats().writes, 0u);
  // Another GPU (or kernel version) tunes again.
  BuildCache other_cache(config_at(t.path()), h200("2"));
  Autotuner other(&other_cache);
  EXPECT_FALSE(other.pick("gemm", problems[0], cands, timer.fn()).hit);
  EXPECT_EQ(timer.calls, 3);
}

TEST(Autotuner, CachedWinnerNoLongerOfferedIsAMissAndRetunes) {
  TempRoot t;
  BuildCache cache(config_at(t.path()), h200());
  Autotuner tuner(&cache);
  FakeTimer timer{{{"a", 2.0}, {"b", 1.0}, {"c", 3.0}, {"d", 0.5}}};
  EXPECT_EQ(tuner.pick("gemm", "p", candidates({"a", "b", "c"}), timer.fn()).winner, "b");
  const TuneResult r = tuner.pick("gemm", "p", candidates({"a", "c", "d"}), timer.fn());
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.winner, "d");
  EXPECT_EQ(timer.calls, 6);
  EXPECT_EQ(tuner.stats().misses, 2u);
  EXPECT_EQ(tuner.stats().hits, 0u);
  // The new choice replaced the record.
  EXPECT_TRUE(tuner.pick("gemm", "p", candidates({"a", "c", "d"}), timer.fn()).hit);
  EXPECT_EQ(timer.calls, 6);
}

TEST(Autotuner, UnusableCachedValueRetunes) {
  TempRoot t;
  BuildCache cache(config_at(t.path()), h200());
  Autotuner tuner(&cache);
  FakeTimer timer{{{"a", 2.0}, {"b", 1.0}}};
  for (const char* junk : {"not json", "[1]", "{\"winner\": 3}", "{}"}) {
    cache.put("gemm", "p", junk);
    CaptureStderr();
    const TuneResult r = tuner.pick("gemm", "p", candidates({"a", "b"}), timer.fn());
    const std::string err = GetCapturedStderr();
    EXPECT_FALSE(r.hit) << junk;
    EXPECT_EQ(r.winner, "b");
    EXPECT_NE(err.find("not a tuning result"), std::string::npos) << err;
  }
  EXPECT_EQ(tuner.stats().misses, 4u);
}

TEST(Autotuner, FailingCandidatesAreSkippedWithAWarning) {
  TempRoot t;
  BuildCache cache(config_at(t.path()), h200());
  Autotuner tuner(&cache);
  MeasureFn measure = [](const Candidate& c) -> double {
    if (c.name == "throws") throw Error("launch failed: too many resources requested");
    if (c.name == "nan") return std::nan("");
    if (c.name == "inf") return INFINITY;
    if (c.name == "negative") return -1;
    if (c.name == "int") throw 42;
    return c.name == "slow" ? 2.0 : 1.0;
  };
  CaptureStderr();
  const TuneResult r = tuner.pick(
      "gemm", "p", candidates({"throws", "nan", "slow", "inf", "negative", "int", "ok"}), measure);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(r.winner, "ok");
  EXPECT_EQ(r.index, 6u);
  EXPECT_EQ(r.timings.size(), 2u);
  EXPECT_EQ(tuner.stats().skipped, 5u);
  for (const char* s :
       {"candidate throws skipped: launch failed", "candidate nan skipped", "candidate inf skipped",
        "candidate negative skipped", "candidate int skipped: unknown exception"})
    EXPECT_NE(err.find(s), std::string::npos) << s << " in\n" << err;

  // None can run: not ok, a warning, nothing stored.
  CaptureStderr();
  const TuneResult none = tuner.pick("gemm", "q", candidates({"throws", "nan"}), measure);
  const std::string err2 = GetCapturedStderr();
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(none.winner, "");
  EXPECT_NE(err2.find("none of 2 candidates could run"), std::string::npos) << err2;
  EXPECT_EQ(cache.get("gemm", "q"), std::nullopt);
  CaptureStderr();
  EXPECT_FALSE(tuner.pick("gemm", "q", {}, measure).ok());
  EXPECT_NE(GetCapturedStderr().find("no candidates"), std::string::npos);
}

TEST(Autotuner, SingleCandidateIsNotMeasuredAndDuplicatesAreRefused) {
  Autotuner tuner(nullptr);
  FakeTimer timer{{{"only", 1.0}}};
  const TuneResult r = tuner.pick("gemm", "p", candidates({"only"}), timer.fn());
  EXPECT_EQ(r.winner, "only");
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.measured);
  EXPECT_EQ(timer.calls, 0);
  EXPECT_EQ(tuner.stats().hits + tuner.stats().misses, 0u);
  EXPECT_THROW(tuner.pick("gemm", "p", candidates({"a", "b", "a"}), timer.fn()), Error);
}

TEST(Autotuner, WithoutACacheEveryPickMeasuresAndTiesKeepOrder) {
  Autotuner tuner(nullptr);
  FakeTimer timer{{{"a", 1.0}, {"b", 1.0}, {"c", 1.0}}};
  EXPECT_EQ(tuner.pick("gemm", "p", candidates({"b", "a", "c"}), timer.fn()).winner, "b");
  EXPECT_EQ(tuner.pick("gemm", "p", candidates({"c", "a", "b"}), timer.fn()).winner, "c");
  EXPECT_EQ(timer.calls, 6);
  EXPECT_EQ(tuner.stats().misses, 2u);
}

// A GPU that slows down while it is measured (heating to its power cap): every call takes
// `drift` seconds longer than the one before. Measured once in list order, the first candidate
// looks faster than it is; rounds in rotated order cancel the drift.
TEST(Autotuner, InterleavedRoundsCancelADriftingClock) {
  std::map<std::string, double> base{{"a", 10.0}, {"b", 9.8}};  // b is truly faster
  int calls = 0;
  const MeasureFn drifting = [&](const Candidate& c) { return base.at(c.name) + 0.5 * calls++; };
  Autotuner once(nullptr);
  EXPECT_EQ(once.pick("gemm", "p", candidates({"a", "b"}), drifting).winner, "a");  // fooled
  calls = 0;
  Autotuner twice(nullptr, 2);
  const TuneResult r = twice.pick("gemm", "p", candidates({"a", "b"}), drifting);
  EXPECT_EQ(r.winner, "b");
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(twice.stats().measurements, 4u);
  // a: calls 0 and 3 (10.0, 11.5), b: calls 1 and 2 (10.3, 10.8): the mean of its two rounds.
  ASSERT_EQ(r.timings.size(), 2u);
  EXPECT_DOUBLE_EQ(r.timings[0].seconds, 10.55);
  EXPECT_DOUBLE_EQ(r.timings[1].seconds, 10.75);

  // Three rounds, three candidates: each is measured first, second and third once; the median.
  calls = 0;
  base = {{"a", 10.0}, {"b", 9.0}, {"c", 11.0}};
  Autotuner thrice(nullptr, 3);
  const TuneResult r3 = thrice.pick("gemm", "q", candidates({"a", "b", "c"}), drifting);
  EXPECT_EQ(r3.winner, "b");
  EXPECT_EQ(calls, 9);
  EXPECT_THROW(Autotuner(nullptr, 0), Error);
}

// A candidate that fails in a later round is skipped altogether (one warning, one skip), and is
// not measured again.
TEST(Autotuner, ACandidateFailingInALaterRoundIsSkipped) {
  Autotuner tuner(nullptr, 3);
  int flaky_calls = 0;
  const MeasureFn measure = [&](const Candidate& c) -> double {
    if (c.name == "flaky" && ++flaky_calls == 2) throw Error("launch failed");
    return c.name == "flaky" ? 0.5 : 1.0;
  };
  CaptureStderr();
  const TuneResult r = tuner.pick("gemm", "p", candidates({"ok", "flaky"}), measure);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(r.winner, "ok");
  EXPECT_EQ(r.timings.size(), 1u);
  EXPECT_EQ(flaky_calls, 2);
  EXPECT_EQ(tuner.stats().skipped, 1u);
  EXPECT_NE(err.find("candidate flaky skipped: launch failed"), std::string::npos) << err;
}

TEST(Autotuner, GemmKeysAndBuckets) {
  EXPECT_EQ(gemm_problem_key(16, 4096, 14336, "bf16"), "m16.n4096.k14336.bf16");
  EXPECT_EQ(m_bucket(0), 1);
  EXPECT_EQ(m_bucket(1), 1);
  EXPECT_EQ(m_bucket(2), 2);
  EXPECT_EQ(m_bucket(3), 4);
  EXPECT_EQ(m_bucket(17), 32);
  EXPECT_EQ(m_bucket(8192), 8192);
  EXPECT_EQ(m_bucket(8193), 16384);
}

TEST(TimeSamples, MedianAfterWarmup) {
  // Warm-up samples (huge) are dropped; the median ignores the outlier.
  std::vector<double> seq = {100, 100, 3, 1, 2, 50, 4};
  size_t i = 0;
  TimingOptions o;
  o.warmup = 2;
  o.repetitions = 5;
  o.budget_seconds = 1e9;
  TimingStats s = time_samples([&] { return seq.at(i++); }, o);
  EXPECT_EQ(i, 7u);
  EXPECT_EQ(s.samples, 5);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 50);
  // Even count: mean of the middle two.
  seq = {4, 1, 3, 2};
  i = 0;
  o.warmup = 0;
  o.repetitions = 4;
  EXPECT_DOUBLE_EQ(time_samples([&] { return seq.at(i++); }, o).median, 2.5);
}

TEST(TimeSamples, BudgetStopsEarlyAndBadSamplesThrow) {
  int calls = 0;
  TimingOptions o;
  o.warmup = 1;
  o.repetitions = 100;
  o.budget_seconds = 0.5;
  const TimingStats s = time_samples(
      [&] {
        calls++;
        return 0.2;
      },
      o);
  EXPECT_EQ(s.samples, 3);  // 0.2 + 0.2 + 0.2 passes the budget
  EXPECT_EQ(calls, 4);
  EXPECT_THROW(time_samples([] { return std::nan(""); }), Error);
  EXPECT_THROW(time_samples([] { return -1.0; }), Error);
  o.repetitions = 0;
  EXPECT_THROW(time_samples([] { return 1.0; }, o), Error);
  // A throwing sample in the tuner's measure becomes a skipped candidate.
  Autotuner tuner(nullptr);
  const TuneResult r = tuner.pick("gemm", "p", candidates({"bad", "good"}), [](const Candidate& c) {
    return time_samples([&] { return c.name == "bad" ? std::nan("") : 1e-6; }).median;
  });
  EXPECT_EQ(r.winner, "good");
}

}  // namespace
}  // namespace ridge::tune
