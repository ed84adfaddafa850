// Autotuner: for one problem (e.g. a GEMM's M bucket, N, K and dtypes on this GPU) it times the
// named candidates (ridge's kernel variants and tile shapes, cuBLASLt's top heuristics) and picks
// the fastest, remembering the choice in a BuildCache so that the next start with the same model
// and GPU measures nothing.
//
// Generic and CUDA-free: a candidate is a name the caller understands; `measure` runs it and
// returns seconds (the CUDA backend times it on random data with CUDA events, tests inject fake
// timings). The cached value is JSON: {"winner": name, "seconds": best,
// "timings": {name: seconds, ...}} (every candidate that ran, runner-ups included).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ridge/tune/build_cache.h"

namespace ridge::tune {

struct Candidate {
  std::string name;  // stable across runs: it is what the cache stores ("ridge.sm90.128x256")
  std::string note;  // free text for logs (e.g. cuBLASLt's algorithm id and tile)
};

struct Timing {
  std::string name;
  double seconds = 0;
};

struct TuneResult {
  static constexpr size_t npos = size_t(-1);
  std::string winner;   // the chosen candidate's name ("" when none could run)
  size_t index = npos;  // its position in `candidates`
  bool hit = false;     // taken from the build cache, nothing measured
  bool measured = false;
  double seconds = std::numeric_limits<double>::quiet_NaN();  // the winner's time (cached on a hit)
  std::vector<Timing> timings;  // what was measured this time, fastest first (empty on a hit)

  bool ok() const { return index != npos; }
};

// measure(candidate) -> seconds for one run of it. May throw; a throw or a result that is not
// finite and >= 0 skips the candidate with a warning.
using MeasureFn = std::function<double(const Candidate&)>;

struct TunerStats {
  uint64_t hits = 0;          // problems answered by the build cache
  uint64_t misses = 0;        // problems measured (stale or unusable cache records included)
  uint64_t measurements = 0;  // calls of measure
  uint64_t skipped = 0;       // candidates that threw or returned a bad time
};

class Autotuner {
 public:
  // `cache` may be null: every pick measures and nothing is kept. The cache must outlive the
  // tuner. `rounds` (>= 1): each candidate is measured once per round, round r in the
  // candidates' order rotated by r, and keeps the median of its rounds (the mean of two): a GPU
  // whose clock drifts while it is measured (heating up to its power cap) then favours no
  // candidate for its place in the list. A candidate that fails in any round is skipped.
  explicit Autotuner(BuildCache* cache, int rounds = 1);

  // The fastest of `candidates` for (kind, problem_key). A cache hit whose winner is still among
  // the candidates is returned without measuring; otherwise (no record, unreadable value, winner
  // no longer offered) every candidate is measured, the fastest stored and returned. A single
  // candidate is returned as is (not measured, not stored, not counted). When none can run (no
  // candidates, or all skipped) the result is !ok(), with a warning, and nothing is stored.
  // Thread safe (picks of different problems may run at once; the caller serializes GPU use).
  TuneResult pick(std::string_view kind, std::string_view problem_key,
                  std::span<const Candidate> candidates, const MeasureFn& measure);

  TunerStats stats() const;
  // "tuning: 3 hits, 1 miss (6 candidates measured, 0 skipped)"
  std::string summary() const;

  BuildCache* cache() const { return cache_; }

 private:
  BuildCache* cache_;
  int rounds_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, measurements_{0}, skipped_{0};
};

// A GEMM problem's key text: "m<M>.n<N>.k<K>.<dtype>", e.g. "m16.n4096.k4096.bf16". `m` is
// usually an M bucket (see m_bucket), `dtype` anything that names the operand/output types.
std::string gemm_problem_key(int64_t m, int64_t n, int64_t k, std::string_view dtype);
// The M bucket a GEMM of m rows is tuned for: the next power of two (1, 2, 4, ..., up to 2^62).
int64_t m_bucket(int64_t m);

// Robust timing of one sample function (which runs the work and returns its seconds, e.g. from a
// pair of CUDA events): `warmup` samples are discarded, then `repetitions` are taken, stopping
// early once `budget_seconds` of samples have been taken (at least one is always taken).
struct TimingOptions {
  int warmup = 2;
  int repetitions = 9;
  double budget_seconds = 0.25;
};
struct TimingStats {
  double median = 0;  // what the tuner should compare
  double min = 0;
  double max = 0;
  int samples = 0;
};
// Throws ridge::Error when a sample is not finite or negative (the tuner then skips the
// candidate), or when options are invalid.
TimingStats time_samples(const std::function<double()>& sample, const TimingOptions& options = {});

}  // namespace ridge::tune
