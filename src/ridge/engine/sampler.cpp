#include "ridge/engine/sampler.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "ridge/core/error.h"

namespace ridge::engine {

void SamplingParams::validate() const {
  RIDGE_CHECK(std::isfinite(temperature) && temperature >= 0 && temperature <= 100,
              "temperature {} is outside [0, 100]", temperature);
  RIDGE_CHECK(top_k >= 0, "top_k {} must be >= 0 (0 turns it off)", top_k);
  RIDGE_CHECK(top_p > 0 && top_p <= 1, "top_p {} is outside (0, 1]", top_p);
  RIDGE_CHECK(min_p >= 0 && min_p <= 1, "min_p {} is outside [0, 1]", min_p);
  RIDGE_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0 && repetition_penalty <= 10,
              "repetition_penalty {} is outside (0, 10]", repetition_penalty);
  RIDGE_CHECK(presence_penalty >= -2 && presence_penalty <= 2,
              "presence_penalty {} is outside [-2, 2]", presence_penalty);
  RIDGE_CHECK(frequency_penalty >= -2 && frequency_penalty <= 2,
              "frequency_penalty {} is outside [-2, 2]", frequency_penalty);
  RIDGE_CHECK(top_logprobs >= 0 && top_logprobs <= 20, "top_logprobs {} is outside [0, 20]",
              top_logprobs);
  RIDGE_CHECK(logit_bias.size() <= kMaxLogitBias, "logit_bias has {} entries, at most {}",
              logit_bias.size(), kMaxLogitBias);
  std::vector<int32_t> ids;
  ids.reserve(logit_bias.size());
  for (const TokenBias& b : logit_bias) {
    RIDGE_CHECK(b.token >= 0, "logit_bias token id {} is negative", b.token);
    RIDGE_CHECK(std::isfinite(b.bias) && b.bias >= -100 && b.bias <= 100,
                "logit_bias of token {} is {}, outside [-100, 100]", b.token, b.bias);
    ids.push_back(b.token);
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  RIDGE_CHECK(dup == ids.end(), "logit_bias names token {} twice", dup == ids.end() ? 0 : *dup);
}

namespace {
// log(sum(exp(logits))), summed in double from the max.
double log_sum_exp(std::span<const float> logits) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  return double(mx) + std::log(sum);
}

// The k largest raw logits as logprobs, best first (ties: lowest id first). index: scratch.
void top_raw(std::span<const float> logits, double lse, int32_t k, std::vector<int32_t>& index,
             std::vector<TokenLogprob>& out) {
  k = std::min<int32_t>(k, int32_t(logits.size()));
  index.resize(logits.size());
  std::iota(index.begin(), index.end(), 0);
  std::partial_sort(index.begin(), index.begin() + k, index.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (int32_t i = 0; i < k; ++i)
    out.push_back({index[size_t(i)], float(double(logits[size_t(index[size_t(i)])]) - lse)});
}
}  // namespace

SampleResult raw_logprobs(std::span<const float> logits, int32_t token, int32_t top) {
  RIDGE_CHECK(token >= 0 && size_t(token) < logits.size(),
              "raw_logprobs: token {} outside a row of {}", token, logits.size());
  const double lse = log_sum_exp(logits);
  SampleResult r;
  r.token = token;
  r.logprob = float(double(logits[size_t(token)]) - lse);
  const float mine = logits[size_t(token)];
  r.rank =
      1 + int32_t(std::count_if(logits.begin(), logits.end(), [&](float v) { return v > mine; }));
  std::vector<int32_t> index;
  if (top > 0) top_raw(logits, lse, top, index, r.top);
  return r;
}

void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  const double lse = log_sum_exp(logits);
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = float(double(logits[i]) - lse);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  params_.validate();
}

namespace {
int32_t argmax(std::span<const float> v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());  // first of ties
}
}  // namespace

SampleResult Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, std::span<const int32_t> banned) {
  const int32_t V = int32_t(logits.size());
  RIDGE_CHECK(V > 0, "sampler: empty logits row");
  SampleResult res;

  // Raw log-softmax terms (before any processing).
  const double lse = log_sum_exp(logits);
  scratch_.assign(logits.begin(), logits.end());  // raw copy
  if (params_.top_logprobs > 0) top_raw(scratch_, lse, params_.top_logprobs, index_, res.top);

  // Biases and banned tokens, then penalties.
  for (const TokenBias& b : params_.logit_bias)
    if (b.token < V) logits[size_t(b.token)] += b.bias;
  for (int32_t t : banned)
    if (t >= 0 && t < V) logits[size_t(t)] = -INFINITY;
  if (params_.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= V) continue;
      float& l = logits[size_t(t)];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : output)
      if (t >= 0 && t < V) ++counts[t];
    for (auto [t, n] : counts)
      logits[size_t(t)] -= params_.presence_penalty + params_.frequency_penalty * float(n);
  }

  // Greedy, or a draw when there is anything to draw from (every token banned: greedy's token 0).
  int32_t chosen = argmax(logits);
  if (params_.temperature != 0.0f && logits[size_t(chosen)] > -INFINITY) {
    const float inv_t = 1.0f / params_.temperature;
    // Candidate set: all tokens, or the top-k by logit.
    index_.resize(size_t(V));
    std::iota(index_.begin(), index_.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    };
    int32_t n = V;
    const bool need_sorted = params_.top_p < 1.0f;
    if (params_.top_k > 0 && params_.top_k < V) {
      n = params_.top_k;
      std::partial_sort(index_.begin(), index_.begin() + n, index_.end(), by_logit);
    } else if (need_sorted) {
      std::sort(index_.begin(), index_.end(), by_logit);
    }
    float cmax = -INFINITY;
    for (int32_t i = 0; i < n; ++i) cmax = std::max(cmax, logits[size_t(index_[i])]);
    std::vector<double> p(static_cast<size_t>(n));
    double total = 0;
    for (int32_t i = 0; i < n; ++i) {
      p[size_t(i)] = std::exp(double(logits[size_t(index_[i])] - cmax) * inv_t);
      total += p[size_t(i)];
    }
    if (need_sorted) {  // keep the smallest prefix whose mass reaches top_p
      double acc = 0;
      int32_t keep = 0;
      while (keep < n) {
        acc += p[size_t(keep)];
        ++keep;
        if (acc >= params_.top_p * total) break;
      }
      n = keep;
      total = acc;
    }
    if (params_.min_p > 0.0f) {
      const double pmax = *std::max_element(p.begin(), p.begin() + n);
      double t2 = 0;
      for (int32_t i = 0; i < n; ++i) {
        if (p[size_t(i)] < params_.min_p * pmax) p[size_t(i)] = 0;
        t2 += p[size_t(i)];
      }
      total = t2;
    }
    std::uniform_real_distribution<double> uni(0.0, total);
    double r = uni(rng_);
    chosen = index_[size_t(n - 1)];
    for (int32_t i = 0; i < n; ++i) {
      if (p[size_t(i)] <= 0) continue;
      r -= p[size_t(i)];
      if (r < 0) {
        chosen = index_[size_t(i)];
        break;
      }
    }
    // The last candidate with nonzero mass if rounding left r >= 0.
    if (r >= 0)
      for (int32_t i = n - 1; i >= 0; --i)
        if (p[size_t(i)] > 0) {
          chosen = index_[size_t(i)];
          break;
        }
  }
  res.token = chosen;
  res.logprob = float(double(scratch_[size_t(chosen)]) - lse);
  return res;
}

}  // namespace ridge::engine
