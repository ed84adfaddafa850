// Host references for the GPU sampler's tests (the emulation test here and tests/gpu_backend):
// the set of tokens engine::Sampler can draw from and their probabilities (the Sampler's own
// arithmetic, in its order), penalized logits as the Sampler computes them, and a chi-square test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "ridge/engine/sampler.h"

namespace ridge::sampling_test {

// The tokens engine::Sampler may draw for (penalized) logits and their probabilities (sum 1),
// computed the way Sampler::sample does. margin: how far the top-p and min-p decisions are from
// flipping (relative); a case with a tiny margin may legitimately differ between float and double
// arithmetic and is not a fair test of set membership.
struct AllowedSet {
  std::vector<int32_t> tokens;  // in the Sampler's candidate order
  std::vector<double> prob;
  double margin = 1.0;
  bool contains(int32_t t) const {
    return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
  }
  double p(int32_t t) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return prob[i];
    return 0.0;
  }
};

inline AllowedSet allowed_set(std::span<const float> logits, const engine::SamplingParams& sp) {
  const int32_t V = int32_t(logits.size());
  AllowedSet out;
  if (sp.temperature == 0.0f) {
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.tokens = {best};
    out.prob = {1.0};
    return out;
  }
  const float inv_t = 1.0f / sp.temperature;
  std::vector<int32_t> index(static_cast<size_t>(V));
  std::iota(index.begin(), index.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  int32_t n = V;
  const bool need_sorted = sp.top_p < 1.0f;
  if (sp.top_k > 0 && sp.top_k < V) {
    n = sp.top_k;
    std::partial_sort(index.begin(), index.begin() + n, index.end(), by_logit);
  } else if (need_sorted) {
    std::sort(index.begin(), index.end(), by_logit);
  }
  float cmax = -INFINITY;
  for (int32_t i = 0; i < n; ++i) cmax = std::max(cmax, logits[size_t(index[size_t(i)])]);
  std::vector<double> p(static_cast<size_t>(n));
  double total = 0;
  for (int32_t i = 0; i < n; ++i) {
    p[size_t(i)] = std::exp(double(logits[size_t(index[size_t(i)])] - cmax) * inv_t);
    total += p[size_t(i)];
  }
  if (need_sorted) {
    const double target = sp.top_p * total;
    double acc = 0;
    int32_t keep = 0;
    while (keep < n) {
      acc += p[size_t(keep)];
      ++keep;
      // How far this step's decision is from flipping (the nearest step decides the margin).
      out.margin = std::min(out.margin, std::abs(acc - target) / total);
      if (acc >= target) break;
    }
    n = keep;
    total = acc;
  }
  if (sp.min_p > 0.0f) {
    const double pmax = *std::max_element(p.begin(), p.begin() + n);
    for (int32_t i = 0; i < n; ++i) {
      out.margin = std::min(out.margin, std::abs(p[size_t(i)] - sp.min_p * pmax) / pmax);
      if (p[size_t(i)] < sp.min_p * pmax) p[size_t(i)] = 0;
    }
  }
  double kept = 0;
  for (int32_t i = 0; i < n; ++i) kept += p[size_t(i)];
  for (int32_t i = 0; i < n; ++i)
    if (p[size_t(i)] > 0) {
      out.tokens.push_back(index[size_t(i)]);
      out.prob.push_back(p[size_t(i)] / kept);
    }
  return out;
}

// Appends one row's penalty list as Backend::sample takes it (distinct tokens of prompt and
// output, each with its count in the output, ascending ids) and returns its [begin, end).
inline std::pair<int32_t, int32_t> append_penalties(const std::vector<int32_t>& prompt,
                                                    const std::vector<int32_t>& output,
                                                    std::vector<int32_t>& ids,
                                                    std::vector<int32_t>& counts) {
  const int32_t begin = int32_t(ids.size());
  std::map<int32_t, int32_t> c;
  for (int32_t t : prompt) c.emplace(t, 0);
  for (int32_t t : output) c[t]++;
  for (auto [t, n] : c) {
    ids.push_back(t);
    counts.push_back(n);
  }
  return {begin, int32_t(ids.size())};
}

// Appends one row's bias list as Backend::sample takes it: the parameters' logit_bias, then each
// banned token as -inf (replacing its bias where it has one). Returns its [begin, end).
inline std::pair<int32_t, int32_t> append_biases(const engine::SamplingParams& sp,
                                                 const std::vector<int32_t>& banned,
                                                 std::vector<int32_t>& ids,
                                                 std::vector<float>& values) {
  const int32_t begin = int32_t(ids.size());
  std::map<int32_t, float> b;
  for (const engine::TokenBias& e : sp.logit_bias) b[e.token] = e.bias;
  for (int32_t t : banned) b[t] = -INFINITY;
  for (auto [t, v] : b) {
    ids.push_back(t);
    values.push_back(v);
  }
  return {begin, int32_t(ids.size())};
}

// The logits after engine::Sampler's biases, bans and penalties (prompt, output as the Sampler
// takes them).
inline std::vector<float> penalized(std::vector<float> logits, const engine::SamplingParams& sp,
                                    std::span<const int32_t> prompt,
                                    std::span<const int32_t> output,
                                    std::span<const int32_t> banned = {}) {
  engine::SamplingParams g = sp;
  g.temperature = 0;
  g.top_logprobs = 0;
  engine::Sampler s(g);
  s.sample(logits, prompt, output, banned);
  return logits;
}

// Pearson's chi-square of observed counts against probabilities: cells with an expected count
// below 5 are pooled into one cell. Returns false when the statistic exceeds the (1 - alpha)
// quantile (Wilson-Hilferty approximation), alpha = 1e-6: a correct sampler fails one run in a
// million, a wrong distribution with this many draws fails nearly always.
struct ChiSquare {
  double stat = 0;
  int dof = 0;
  double bound = 0;
  bool ok = true;
};
inline ChiSquare chi_square(const std::vector<int64_t>& observed, const std::vector<double>& prob,
                            int64_t n) {
  ChiSquare c;
  std::vector<std::pair<double, double>> cells;  // (observed, expected)
  double pooled_o = 0, pooled_e = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    const double e = prob[i] * double(n);
    if (e < 5) {
      pooled_o += double(observed[i]);
      pooled_e += e;
    } else {
      cells.emplace_back(double(observed[i]), e);
    }
  }
  if (pooled_e >= 5 || cells.empty()) {
    cells.emplace_back(pooled_o, std::max(pooled_e, 1e-9));
  } else {  // too little expected mass for a cell of its own: joins the smallest cell
    auto smallest = std::min_element(cells.begin(), cells.end(),
                                     [](auto& a, auto& b) { return a.second < b.second; });
    smallest->first += pooled_o;
    smallest->second += pooled_e;
  }
  for (auto [o, e] : cells) c.stat += (o - e) * (o - e) / e;
  const int cells_n = int(cells.size());
  c.dof = std::max(1, cells_n - 1);
  const double k = c.dof, z = 4.753424;  // z for alpha = 1e-6
  const double h = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  c.bound = k * h * h * h;
  c.ok = c.stat <= c.bound;
  return c;
}

}  // namespace ridge::sampling_test
