#include "ridge/engine/device_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ridge/core/error.h"

namespace ridge::engine {

backend::SampleRow to_sample_row(const SamplingParams& p, uint64_t step) {
  backend::SampleRow s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repetition_penalty = p.repetition_penalty;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.top_logprobs = p.top_logprobs;
  s.seed = p.seed;
  s.step = step;
  return s;
}

bool uses_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

void PenaltyHistory::clear() {
  started_ = false;
  output_seen_ = 0;
  tokens_.clear();
  counts_.clear();
  slot_.clear();
}

void PenaltyHistory::add(int32_t token, int32_t count) {
  auto [it, inserted] = slot_.try_emplace(token, uint32_t(tokens_.size()));
  if (inserted) {
    tokens_.push_back(token);
    counts_.push_back(count);
  } else {
    counts_[it->second] += count;
  }
}

void PenaltyHistory::update(std::span<const int32_t> prompt, std::span<const int32_t> output,
                            int64_t vocab, bool with_prompt) {
  if (!started_) {
    started_ = true;
    if (with_prompt)
      for (int32_t t : prompt)
        if (t >= 0 && t < vocab) add(t, 0);
  }
  RIDGE_CHECK(output.size() >= output_seen_,
              "penalty history: the output shrank from {} to {} tokens", output_seen_,
              output.size());
  for (size_t i = output_seen_; i < output.size(); ++i)
    if (output[i] >= 0 && output[i] < vocab) add(output[i], 1);
  output_seen_ = output.size();
}

void DeviceSampler::add_biases(const SamplingParams& p, std::span<const int32_t> banned,
                               backend::SampleRow& s) {
  s.bias_begin = int32_t(bias_tokens_.size());
  std::span<const TokenBias> bias = p.logit_bias;
  std::vector<TokenBias> sorted;
  auto by_token = [](const TokenBias& a, const TokenBias& b) { return a.token < b.token; };
  if (!std::is_sorted(bias.begin(), bias.end(), by_token)) {
    sorted.assign(bias.begin(), bias.end());
    std::sort(sorted.begin(), sorted.end(), by_token);
    bias = sorted;
  }
  auto push = [&](int32_t t, float v) {
    if (t < 0 || t >= vocab_) return;
    bias_tokens_.push_back(t);
    bias_values_.push_back(v);
  };
  // Many bans (JSON mode's) as a bit mask: 4 bytes per 32 tokens instead of 8 per token.
  const int64_t words = (vocab_ + 31) / 32;
  if (int64_t(banned.size()) > words / 2) {
    s.ban_mask = int32_t(ban_masks_.size() / size_t(words));
    ban_masks_.resize(ban_masks_.size() + size_t(words), 0u);
    uint32_t* mask = ban_masks_.data() + size_t(s.ban_mask) * size_t(words);
    for (int32_t t : banned)
      if (t >= 0 && t < vocab_) mask[t >> 5] |= 1u << (t & 31);
    for (const TokenBias& b : bias) push(b.token, b.bias);
  } else {
    // Both ascending: one merge; a banned token's bias becomes -inf (each token once a row).
    size_t i = 0, j = 0;
    while (i < bias.size() || j < banned.size()) {
      if (j == banned.size() || (i < bias.size() && bias[i].token < banned[j])) {
        push(bias[i].token, bias[i].bias);
        ++i;
        continue;
      }
      if (i < bias.size() && bias[i].token == banned[j]) ++i;
      if (j + 1 < banned.size() && banned[j + 1] == banned[j]) {  // a repeat: once
        ++j;
        continue;
      }
      push(banned[j++], -INFINITY);
    }
  }
  s.bias_end = int32_t(bias_tokens_.size());
}

bool DeviceSampler::sample(const backend::Stream& stream, const Tensor& logits,
                           std::span<const DeviceSampleRow> rows, std::vector<SampleResult>& out) {
  if (!launch(stream, logits, rows)) return false;
  finish(stream, rows, out);
  return true;
}

bool DeviceSampler::launch(const backend::Stream& stream, const Tensor& logits,
                           std::span<const DeviceSampleRow> rows) {
  if (!available_) return false;
  const int64_t R = int64_t(rows.size());
  top_n_ = 0;
  if (R == 0) return true;  // a step of prefill chunks only may have no logits at all
  RIDGE_CHECK(logits.ndim == 2 && logits.shape[0] >= R,
              "device sampler: {} rows to sample from logits {}", R, logits.describe());
  vocab_ = logits.shape[1];
  rows_.clear();
  penalty_tokens_.clear();
  penalty_counts_.clear();
  bias_tokens_.clear();
  bias_values_.clear();
  ban_masks_.clear();
  int32_t top_n = 0;
  for (const DeviceSampleRow& r : rows) {
    const SamplingParams& p = *r.params;
    backend::SampleRow s = to_sample_row(p, r.step);
    s.penalty_begin = s.penalty_end = int32_t(penalty_tokens_.size());
    if (r.history && uses_penalties(p)) {
      const auto t = r.history->tokens();
      const auto c = r.history->counts();
      penalty_tokens_.insert(penalty_tokens_.end(), t.begin(), t.end());
      penalty_counts_.insert(penalty_counts_.end(), c.begin(), c.end());
      s.penalty_end = int32_t(penalty_tokens_.size());
    }
    add_biases(p, r.banned, s);
    rows_.push_back(s);
    top_n = std::max(top_n, p.top_logprobs);
  }
  // One device block for all outputs, downloaded in one copy: [tokens R][logprobs R][top ids
  // R x N][top logprobs R x N], 4 bytes each.
  const size_t words = size_t(2 * R + 2 * R * top_n);
  if (device_.size() < words * 4) device_ = backend_.allocate(words * 4 * 2);
  auto* base = static_cast<uint32_t*>(device_.data());
  const Device dev = backend_.device();
  Tensor tokens(base, DType::i32, {R}, dev);
  Tensor logprobs(base + R, DType::f32, {R}, dev);
  Tensor top_ids, top_logprobs;
  if (top_n > 0) {
    top_ids = Tensor(base + 2 * R, DType::i32, {R, top_n}, dev);
    top_logprobs = Tensor(base + 2 * R + R * top_n, DType::f32, {R, top_n}, dev);
  }
  const Tensor step_logits = logits.slice_rows(0, R);
  backend::SamplingBatch batch{rows_,        penalty_tokens_, penalty_counts_,
                               bias_tokens_, bias_values_,    ban_masks_};
  if (!backend_.sample(stream, step_logits, batch, tokens, logprobs, top_ids, top_logprobs)) {
    available_ = false;
    return false;
  }
  top_n_ = top_n;
  return true;
}

void DeviceSampler::finish(const backend::Stream& stream, std::span<const DeviceSampleRow> rows,
                           std::vector<SampleResult>& out) {
  const int64_t R = int64_t(rows.size());
  const int64_t V = vocab_;
  const int32_t top_n = top_n_;
  out.resize(size_t(R));
  if (R == 0) return;
  // The download waits for the stream (a pageable destination): it comes here, not in launch().
  const size_t words = size_t(2 * R + 2 * R * top_n);
  host_.resize(words);
  backend_.download(stream, host_.data(), device_.data(), words * 4);
  backend_.synchronize(stream);
  const uint32_t* h = host_.data();
  for (int64_t r = 0; r < R; ++r) {
    SampleResult& res = out[size_t(r)];
    std::memcpy(&res.token, h + r, 4);
    std::memcpy(&res.logprob, h + R + r, 4);
    res.top.clear();
    const int32_t want = std::min<int64_t>(rows[size_t(r)].params->top_logprobs, V);
    for (int32_t j = 0; j < want; ++j) {
      TokenLogprob t;
      std::memcpy(&t.token, h + 2 * R + r * top_n + j, 4);
      std::memcpy(&t.logprob, h + 2 * R + R * top_n + r * top_n + j, 4);
      res.top.push_back(t);
    }
  }
}

}  // namespace ridge::engine
