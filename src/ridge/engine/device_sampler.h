// DeviceSampler: a step's sampling on the backend's device (Backend::sample) with engine::Sampler's
// rules, so that only tokens, logprobs and the requested top logprobs come back to the host
// instead of the logits rows. engine::Sampler stays the reference and the fallback: a backend
// without a device sampler (the CPU backend, or a vocabulary past the GPU kernel's limit) makes
// sample() return false, and the caller samples the host logits as before.
//
// Penalties need each sequence's history. It stays on the host: PenaltyHistory keeps a sequence's
// distinct tokens (prompt and output) with their output counts and is updated incrementally as
// tokens are generated (O(new tokens) per step); each step uploads the lists of the rows that use
// penalties (8 bytes per distinct token, in the same copy as the row parameters). Rows without
// penalties send nothing.
//
// Random draws use the device's counter-based generator keyed by (seed, step = tokens generated so
// far): reproducible for a given seed on a given GPU whatever the batch, but not the tokens
// engine::Sampler's mt19937 draws for that seed. Greedy decoding gives the same tokens as the CPU.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/engine/sampler.h"

namespace ridge::engine {

// True when the parameters use a penalty (only then is a PenaltyHistory needed).
bool uses_penalties(const SamplingParams& p);

class PenaltyHistory {
 public:
  // Brings the lists up to date with prompt + output: the prompt is read at the first call (only
  // when with_prompt, i.e. with a repetition penalty), the output from where the last call
  // stopped (it only grows). Tokens outside [0, vocab) are left out, as the CPU Sampler does.
  void update(std::span<const int32_t> prompt, std::span<const int32_t> output, int64_t vocab,
              bool with_prompt);
  // Distinct tokens, each once, and how often each occurs in the output (0: prompt only).
  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const int32_t> counts() const { return counts_; }
  void clear();

 private:
  void add(int32_t token, int32_t count);

  bool started_ = false;
  size_t output_seen_ = 0;
  std::vector<int32_t> tokens_, counts_;
  std::unordered_map<int32_t, uint32_t> slot_;
};

// The backend's row for a sequence's parameters at generated-token index `step` (no penalty range).
backend::SampleRow to_sample_row(const SamplingParams& params, uint64_t step);

// One row of a step: the sequence's parameters, how many tokens it has generated, its penalty
// history (null, or ignored, when the parameters use no penalty) and the tokens it must not draw
// now (Sampler::sample's `banned`, ascending).
struct DeviceSampleRow {
  const SamplingParams* params = nullptr;
  uint64_t step = 0;
  const PenaltyHistory* history = nullptr;
  std::span<const int32_t> banned;
};

class DeviceSampler {
 public:
  explicit DeviceSampler(backend::Backend& backend) : backend_(backend) {}

  // Samples row i of `logits` (device f32 [>= rows.size(), V]; the first rows.size() rows) for
  // rows[i] into out[i]. Returns false, doing nothing, when the backend cannot (then available()
  // stays false: sample on the host from now on). Synchronizes `stream`.
  bool sample(const backend::Stream& stream, const Tensor& logits,
              std::span<const DeviceSampleRow> rows, std::vector<SampleResult>& out);
  // sample() in two halves, so that the host can do other work while the device runs: launch()
  // queues the sampling on `stream` behind whatever is queued there (the step's forward) and
  // returns without waiting (false, doing nothing, when the backend cannot: as sample());
  // finish() downloads the results, waits for the stream and fills out[i] for rows[i]. `rows`
  // (and what it points to) must be the same in both calls.
  bool launch(const backend::Stream& stream, const Tensor& logits,
              std::span<const DeviceSampleRow> rows);
  void finish(const backend::Stream& stream, std::span<const DeviceSampleRow> rows,
              std::vector<SampleResult>& out);
  // False once the backend declined.
  bool available() const { return available_; }

 private:
  // Row s's logit biases and banned tokens: a bias list, with many bans as a mask instead.
  void add_biases(const SamplingParams& p, std::span<const int32_t> banned, backend::SampleRow& s);
  backend::Backend& backend_;
  bool available_ = true;
  std::vector<backend::SampleRow> rows_;
  std::vector<int32_t> penalty_tokens_, penalty_counts_;
  std::vector<int32_t> bias_tokens_;
  std::vector<float> bias_values_;
  std::vector<uint32_t> ban_masks_;
  backend::Buffer device_;  // tokens [R], logprobs [R], top ids [R, N], top logprobs [R, N]
  int32_t top_n_ = 0;       // of the launched step
  int64_t vocab_ = 0;
  std::vector<uint32_t> host_;
};

}  // namespace ridge::engine
