// Sampler: turns one row of fp32 logits into a token. Order (as vLLM applies them): logit_bias
// (added; OpenAI semantics) and banned tokens (-inf: a request's stop tokens before its min_tokens,
// engine.h), repetition penalty (prompt + output tokens; positive logits divided, negative
// multiplied), presence and frequency penalties (output tokens, OpenAI semantics), temperature (0 =
// greedy), top-k, top-p, min-p, then a draw from the seeded generator. Reported logprobs are the
// model's raw log-softmax, before any penalty or temperature (vLLM's default "raw" logprobs).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ridge::engine {

// One entry of SamplingParams::logit_bias: `bias` is added to the token's logit before sampling.
struct TokenBias {
  int32_t token = 0;
  float bias = 0.0f;
  bool operator==(const TokenBias&) const = default;
};

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  int32_t top_logprobs = 0;  // how many alternatives to report (0..20)
  // Added to the logits before penalties (OpenAI's logit_bias): distinct tokens, each bias finite
  // in [-100, 100], at most kMaxLogitBias entries. Ids are checked against the vocabulary where
  // it is known (Engine::submit); the sampler skips ids outside [0, vocab).
  std::vector<TokenBias> logit_bias;
  static constexpr size_t kMaxLogitBias = 1024;

  // Throws ridge::Error naming the parameter that is out of range.
  void validate() const;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0;                 // raw logprob of the chosen token
  std::vector<TokenLogprob> top;     // top_logprobs alternatives, best first
  int32_t rank = 0;                  // raw_logprobs: 1 + the tokens with a larger logit
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // logits: one row [vocab] (modified in place by biases and penalties); prompt: the prompt's
  // tokens; output: tokens generated so far; banned: tokens that must not be drawn (their logits
  // become -inf before the penalties; ids outside [0, vocab) are skipped). When every token is
  // banned the result is token 0's row as greedy would pick it: callers never ban everything.
  SampleResult sample(std::span<float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> output, std::span<const int32_t> banned = {});

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> index_;
};

// The raw logprob of `token` in one logits row, its rank (1 + the tokens with a larger logit) and
// the row's `top` best tokens (ties: lowest id first), as Sampler::sample reports them (for
// prompt logprobs).
SampleResult raw_logprobs(std::span<const float> logits, int32_t token, int32_t top);

// Log-softmax of one logits row (fp32 result, log-sum-exp in double).
void log_softmax(std::span<const float> logits, std::vector<float>& out);

}  // namespace ridge::engine
