// Sampler: turns one row of fp32 logits into a token. Order (as vLLM and HF apply them):
// repetition penalty (prompt + output tokens; positive logits divided, negative multiplied),
// presence and frequency penalties (output tokens, OpenAI semantics), temperature (0 = greedy),
// top-k, top-p, min-p, then a draw from the seeded generator. Reported logprobs are the model's
// raw log-softmax, before any penalty or temperature (vLLM's default "raw" logprobs).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ridge::engine {

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
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // logits: one row [vocab] (modified in place by penalties); prompt: the prompt's tokens; output:
  // tokens generated so far.
  SampleResult sample(std::span<float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> output);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> index_;
};

// Log-softmax of one logits row (fp32 result, log-sum-exp in double).
void log_softmax(std::span<const float> logits, std::vector<float>& out);

}  // namespace ridge::engine
