#include "ridge/tune/autotuner.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/core/log.h"

namespace ridge::tune {

namespace {

using nlohmann::json;

size_t index_of(std::span<const Candidate> candidates, std::string_view name) {
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].name == name) return i;
  return TuneResult::npos;
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

Autotuner::Autotuner(BuildCache* cache, int rounds) : cache_(cache), rounds_(rounds) {
  RIDGE_CHECK(rounds >= 1, "Autotuner: rounds = {} (at least 1)", rounds);
}

TuneResult Autotuner::pick(std::string_view kind, std::string_view problem_key,
                           std::span<const Candidate> candidates, const MeasureFn& measure) {
  TuneResult result;
  if (candidates.empty()) {
    log::warn("tuning {} {}: no candidates", kind, problem_key);
    return result;
  }
  {
    std::set<std::string_view> names;
    for (const auto& c : candidates)
      RIDGE_CHECK(names.insert(c.name).second, "tuning {} {}: candidate name '{}' given twice",
                  kind, problem_key, c.name);
  }
  if (candidates.size() == 1) {
    result.winner = candidates[0].name;
    result.index = 0;
    return result;
  }

  if (cache_) {
    if (std::optional<std::string> value = cache_->get(kind, problem_key)) {
      const json j = json::parse(*value, nullptr, /*allow_exceptions=*/false);
      const auto w = j.is_object() ? j.find("winner") : j.end();
      if (w != j.end() && w->is_string()) {
        const std::string name = w->get<std::string>();
        const size_t i = index_of(candidates, name);
        if (i != TuneResult::npos) {
          hits_++;
          result.winner = name;
          result.index = i;
          result.hit = true;
          if (auto s = j.find("seconds"); s != j.end() && s->is_number())
            result.seconds = s->get<double>();
          log::debug("tuning {} {}: {} (cached)", kind, problem_key, name);
          return result;
        }
        log::info("tuning {} {}: the cached choice '{}' is no longer a candidate; tuning again",
                  kind, problem_key, name);
      } else {
        log::warn("tuning {} {}: the cached value is not a tuning result; tuning again", kind,
                  problem_key);
      }
    }
  }

  misses_++;
  result.measured = true;
  const size_t n = candidates.size();
  std::vector<std::vector<double>> samples(n);
  std::vector<bool> failed(n, false);
  for (int round = 0; round < rounds_; ++round) {
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (j + static_cast<size_t>(round)) % n;
      if (failed[i]) continue;
      const Candidate& c = candidates[i];
      double t = 0;
      try {
        measurements_++;
        t = measure(c);
      } catch (const std::exception& e) {
        log::warn("tuning {} {}: candidate {} skipped: {}", kind, problem_key, c.name, e.what());
        skipped_++;
        failed[i] = true;
        continue;
      } catch (...) {
        log::warn("tuning {} {}: candidate {} skipped: unknown exception", kind, problem_key,
                  c.name);
        skipped_++;
        failed[i] = true;
        continue;
      }
      if (!std::isfinite(t) || t < 0) {
        log::warn("tuning {} {}: candidate {} skipped: measured {} s", kind, problem_key, c.name,
                  t);
        skipped_++;
        failed[i] = true;
        continue;
      }
      samples[i].push_back(t);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (failed[i] || samples[i].empty()) continue;
    std::vector<double>& v = samples[i];
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    result.timings.push_back({candidates[i].name, v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h])});
  }
  if (result.timings.empty()) {
    log::warn("tuning {} {}: none of {} could run", kind, problem_key,
              plural(candidates.size(), "candidate", "candidates"));
    return result;
  }
  // Fastest first; equal times keep the candidates' order (the caller's preference).
  std::stable_sort(result.timings.begin(), result.timings.end(),
                   [](const Timing& a, const Timing& b) { return a.seconds < b.seconds; });
  result.winner = result.timings.front().name;
  result.index = index_of(candidates, result.winner);
  result.seconds = result.timings.front().seconds;
  if (result.timings.size() > 1)
    log::debug("tuning {} {}: {} {:.2f} us, runner-up {} {:.2f} us", kind, problem_key,
               result.winner, result.seconds * 1e6, result.timings[1].name,
               result.timings[1].seconds * 1e6);

  if (cache_) {
    json timings = json::object();
    for (const auto& t : result.timings) timings[t.name] = t.seconds;
    json value = {{"winner", result.winner}, {"seconds", result.seconds}, {"timings", timings}};
    std::string text;
    try {
      text = value.dump();
    } catch (const json::exception& e) {  // a candidate name that is not UTF-8
      log::warn("tuning {} {}: result not stored: {}", kind, problem_key, e.what());
      return result;
    }
    cache_->put(kind, problem_key, text);
  }
  return result;
}

TunerStats Autotuner::stats() const {
  TunerStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.measurements = measurements_.load();
  s.skipped = skipped_.load();
  return s;
}

std::string Autotuner::summary() const {
  const TunerStats s = stats();
  return fmt::format("tuning: {}, {} ({} measured, {} skipped)", plural(s.hits, "hit", "hits"),
                     plural(s.misses, "miss", "misses"),
                     plural(s.measurements, "candidate", "candidates"), s.skipped);
}

std::string gemm_problem_key(int64_t m, int64_t n, int64_t k, std::string_view dtype) {
  return fmt::format("m{}.n{}.k{}.{}", m, n, k, dtype);
}

int64_t m_bucket(int64_t m) {
  int64_t b = 1;
  while (b < m && b < (int64_t(1) << 62)) b <<= 1;
  return b;
}

TimingStats time_samples(const std::function<double()>& sample, const TimingOptions& o) {
  RIDGE_CHECK(o.warmup >= 0 && o.repetitions >= 1,
              "timing: warmup must be >= 0 and repetitions >= 1 (got {} and {})", o.warmup,
              o.repetitions);
  auto take = [&] {
    const double t = sample();
    if (!std::isfinite(t) || t < 0) fail("timing: a sample measured {} s", t);
    return t;
  };
  for (int i = 0; i < o.warmup; ++i) take();
  std::vector<double> s;
  s.reserve(size_t(o.repetitions));
  double total = 0;
  while (int(s.size()) < o.repetitions) {
    s.push_back(take());
    total += s.back();
    if (total >= o.budget_seconds) break;
  }
  std::sort(s.begin(), s.end());
  TimingStats out;
  out.samples = int(s.size());
  out.min = s.front();
  out.max = s.back();
  const size_t h = s.size() / 2;
  out.median = s.size() % 2 ? s[h] : 0.5 * (s[h - 1] + s[h]);
  return out;
}

}  // namespace ridge::tune
