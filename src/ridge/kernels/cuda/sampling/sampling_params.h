// Plain data of the GPU sampler (kernels/cuda/sampling). No CUDA headers here: the host-side
// emulation test (tests/kernels) includes this file and sample_row.cuh without a CUDA toolkit.
#pragma once

#include <cstdint>

namespace ridge::kernels {

constexpr int kSampleMaxTopLogprobs = 20;
// The fixed-point probability mass (2^45 per unit) of up to 2^18 tokens fits in 64 bits.
constexpr int64_t kSampleMaxVocab = int64_t(1) << 18;

// One row's parameters, engine::SamplingParams in the kernel's terms.
struct SampleRowParams {
  float temperature = 1.0f;  // <= 0 (or so small that 1/t overflows): greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_logprobs = 0;   // 0..kSampleMaxTopLogprobs, and <= SampleArgs::top_n
  uint64_t seed = 0;          // RNG key
  uint64_t step = 0;          // RNG counter: which generated token of the sequence this is
  int32_t penalty_begin = 0;  // the row's entries of SampleArgs::penalty_ids / penalty_counts
  int32_t penalty_end = 0;
  int32_t bias_begin = 0;  // the row's entries of SampleArgs::bias_ids / bias_values
  int32_t bias_end = 0;
  // >= 0: the row's banned tokens are the set bits of SampleArgs::ban_masks words
  // [ban_mask * W, (ban_mask + 1) * W), W = ceil(vocab / 32) (bit t % 32 of word t / 32); -1: none.
  int32_t ban_mask = -1;
};

// Arguments of kernels::sample (sampling.h). All pointers are device pointers.
struct SampleArgs {
  const float* logits = nullptr;  // f32 [rows, vocab], row stride ld (elements); never modified
  int64_t ld = 0;
  int64_t rows = 0;
  int64_t vocab = 0;
  const SampleRowParams* params = nullptr;  // [rows]
  // Per row, its distinct seen tokens (each once; ids outside [0, vocab) are skipped) and how often
  // each occurs in the output (0: prompt only). Repetition penalty: every entry; presence and
  // frequency: entries with count > 0.
  const int32_t* penalty_ids = nullptr;
  const int32_t* penalty_counts = nullptr;
  // Per row, distinct tokens and what is added to their logits before the penalties (-inf bans the
  // token; ids outside [0, vocab) are skipped).
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  const uint32_t* ban_masks = nullptr;  // SampleRowParams::ban_mask
  // Scratch for biased or penalized copies of rows that do not fit in shared memory: [rows, ws_ld]
  // floats (sample_workspace_bytes); may be null when that is 0.
  float* workspace = nullptr;
  int32_t* tokens = nullptr;      // [rows]
  float* logprobs = nullptr;      // [rows]: raw log-softmax of the chosen token
  int32_t* top_ids = nullptr;     // [rows, top_n], best first; unused slots -1
  float* top_logprobs = nullptr;  // [rows, top_n]; unused slots -inf
  int32_t top_n = 0;
  // Set by kernels::sample: the row is copied into shared memory; the workspace row stride.
  bool staged = false;
  int64_t ws_ld = 0;
};

}  // namespace ridge::kernels
