// Generator: one sequence at a time over a model and its KV pool (ridge run, ridge chat and the
// model benchmark). The KV of the previous call is kept: a new prompt that extends it (a chat's
// next turn) only prefills the new tokens. Prompts are prefilled in chunks of prefill_chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ridge/engine/device_sampler.h"
#include "ridge/engine/sampler.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/llama.h"

namespace ridge::engine {

struct GenerateOptions {
  int32_t max_tokens = 256;
  SamplingParams sampling;
  bool ignore_eos = false;
  int32_t prefill_chunk = 512;
  // Sample on the backend's device when it can (see EngineConfig::device_sampling).
  bool device_sampling = true;
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

struct GenerateStats {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose KV was reused
  int32_t generated = 0;
  int32_t prefill_steps = 0;  // forward steps that prefilled the prompt (of prefill_chunk at most)
  double prefill_seconds = 0;
  double decode_seconds = 0;  // first token excluded
  std::string finish_reason;  // "stop" | "length" | "cancelled"
};

class Generator {
 public:
  Generator(model::LlamaModel& model, kv::KvPool& pool, std::vector<int32_t> stop_ids);

  // Max tokens a sequence can hold (the smaller of the KV pool and the model's positions).
  int32_t context_limit() const;
  // on_token returns false to stop early (finish_reason "cancelled").
  GenerateStats generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                         const std::function<bool(const GeneratedToken&)>& on_token);
  // Forget the cached KV.
  void reset() { cached_.clear(); }

 private:
  // logits: host [vocab] for the last token's logits, or null to leave them on the device.
  void run_step(const std::vector<int32_t>& tokens, int32_t context_len, float* logits);

  model::LlamaModel& model_;
  kv::KvPool& pool_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> cached_;  // tokens whose KV is in the pool (positions 0..n-1)
  std::vector<int32_t> block_table_;
  model::ForwardBatch batch_;
  DeviceSampler device_sampler_;
};

}  // namespace ridge::engine
