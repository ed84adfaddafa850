// Engine: continuous batching over one model. One engine thread owns the device and runs steps;
// submit() and cancel() are thread safe. Each step has a token budget (max_num_batched_tokens):
// running decodes first, then prefill chunks of waiting or partially prefilled sequences
// (chunked prefill). Admission needs free KV blocks for the whole prompt; when blocks run out the
// newest running sequence is preempted (its blocks freed, recomputed later). Full KV blocks are
// shared between sequences through the prefix cache (hash-chained, LRU-evicted when free).
//
// Outputs reach each request through its callback, called on the engine thread once per step in
// which the request produced something (keep it short: hand the output to another thread).
// The last output of a request has finished = true; after it the callback is never called again.
// A stop token is delivered as the last token of a request finished with "stop".
//
// The engine owns its bundle's model and KV pool while it lives: one Engine per ModelBundle, and
// no Generator on the same bundle meanwhile. Never destroy the engine from one of its callbacks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ridge/core/error.h"
#include "ridge/engine/model_bundle.h"
#include "ridge/engine/sampler.h"

namespace ridge::engine {

struct EngineConfig {
  int32_t max_num_seqs = 256;             // sequences running at once
  int32_t max_num_batched_tokens = 2048;  // tokens per step (decodes + prefill chunks)
  int32_t max_queue = 4096;               // waiting requests beyond which submit() refuses
  bool enable_prefix_caching = true;
  int64_t max_model_len = 0;  // 0: the model's context (capped by the KV pool)
  // Sample on the backend's device when it can (Backend::sample: only tokens and logprobs come
  // back); false: always on the host with engine::Sampler. Greedy tokens are the same either way;
  // seeded random draws differ (the device has its own generator, see device_sampler.h).
  bool device_sampling = true;
  // Hand a step's tokens to the callbacks while the device runs the next step (they then reach
  // callers one step later): -1 where the step runs asynchronously (a GPU with device sampling),
  // 1 always (tests of that path on the CPU), 0 never. RIDGE_OVERLAP_OUTPUTS=0 forces 0 (A/B).
  int defer_outputs = -1;
  // Logits rows a step may compute for prompt logprobs (Request::prompt_logprobs), beyond one per
  // sequence: the workspace holds this many more rows of the vocabulary. 0 refuses such requests.
  int32_t max_prompt_logprob_rows = 128;
};

class JsonSchema;

struct Request {
  std::string id;               // unique among live requests
  std::vector<int32_t> prompt;  // token ids
  SamplingParams sampling;
  int32_t max_tokens = 16;              // >= 1
  bool ignore_eos = false;              // turns off the model's stop tokens, not stop_token_ids
  std::vector<int32_t> stop_token_ids;  // in addition to the model's own stop tokens
  // The stop tokens (the model's unless ignore_eos, and stop_token_ids) are not drawn until this
  // many tokens have been generated (vLLM's min_tokens); 0 <= min_tokens <= max_tokens.
  int32_t min_tokens = 0;
  // >= 0: report the raw logprob of every prompt token after the first, each with this many
  // top alternatives (0..20; vLLM's prompt_logprobs). Such a request computes its whole prompt
  // (no prefix-cache hits). -1: none.
  int32_t prompt_logprobs = -1;
  // JSON mode (response_format json_object): only tokens that keep the output a prefix of one
  // JSON object may be drawn, and the stop tokens only once the object is complete
  // (json_constraint.h). Needs the model's tokenizer.
  bool json_object = false;
  // Structured outputs (response_format json_schema): as json_object, but the value must match
  // the schema (json_schema.h). Takes precedence over json_object.
  std::shared_ptr<const JsonSchema> json_schema;
};

struct TokenOutput {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
  int32_t rank = 0;  // prompt logprobs: 1 + the tokens more likely than this one; 0: not computed
};

struct RequestOutput {
  std::string id;
  std::vector<TokenOutput> tokens;  // tokens produced since the previous output
  // Request::prompt_logprobs: prompt tokens 1.. (token 0 has none), in the first output that
  // carries tokens.
  std::vector<TokenOutput> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;  // when finished: "stop" | "length" | "abort" | "error"
  std::string error;          // when finish_reason == "error"
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;      // prompt tokens served from the prefix cache
  int32_t completion_tokens = 0;  // generated so far
};

using OutputCallback = std::function<void(RequestOutput&&)>;

// Refusals of submit(): the request itself is wrong (400) or the engine is full (429/503).
struct RequestRejected : Error {
  enum class Kind { invalid, queue_full, shutting_down };
  Kind kind;
  RequestRejected(Kind k, const std::string& what) : Error(what), kind(k) {}
};

// Cumulative histogram in Prometheus' form: counts[i] observations <= bounds[i] (the last
// bucket, +Inf, is `count`).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size()) {}
  void observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i)
      if (v <= bounds[i]) ++counts[i];
    sum += v;
    ++count;
  }
};

struct EngineMetrics {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;       // referenced by a live sequence
  int64_t kv_blocks_cached = 0;     // free but holding a reusable prefix
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // of which found
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t requests_finished = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  // Seconds the engine thread spent, since start, in each part of its loop: scheduling a step,
  // the step on the device (host launches and the GPU until its tokens are back: the forward and,
  // with device sampling, the sampling kernels and the copy), sampling on the host or reading the
  // device's results, handing tokens out (detokenized streams, stop strings, callbacks into the
  // server; with device sampling, the previous step's while the device runs this one), and the
  // bookkeeping between steps (admission, cancellations, gauges, finished requests). Where
  // serving throughput goes, without a profiler.
  double seconds_schedule = 0, seconds_forward = 0, seconds_sample = 0, seconds_output = 0,
         seconds_between = 0;
  // The forward split by kind of step: decode steps (every chunk one decode token: the CUDA
  // graph path) and steps with at least one prefill chunk (op by op), with their tokens. What a
  // serving run spends on prompts against generation, without a profiler.
  int64_t steps_decode = 0, steps_prefill = 0;
  int64_t tokens_decode_steps = 0, tokens_prefill_steps = 0;
  double seconds_forward_decode = 0, seconds_forward_prefill = 0;
  // Latency (seconds) since start: time to first token, time per output token (per request,
  // the mean of its inter-token gaps), end-to-end.
  Histogram ttft, tpot, e2e;
};

class Engine {
 public:
  Engine(ModelBundle& bundle, const EngineConfig& config);
  ~Engine();  // stops the thread; unfinished requests get finish_reason "abort"
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates (prompt non-empty, ids in the vocabulary, prompt + max_tokens within
  // max_model_len, sampling parameters) and queues the request. Throws RequestRejected.
  void submit(Request request, OutputCallback on_output);
  // Cancels a live request: its blocks are freed within one step and its callback gets a final
  // output with finish_reason "abort". Unknown ids are ignored.
  void cancel(const std::string& id);
  // Stop accepting; drain = finish running and waiting requests first, else abort them.
  void shutdown(bool drain);

  EngineMetrics metrics() const;
  // The device's power and energy counter now (Backend::power_reading; thread safe); absent on the
  // CPU and without a driver that reports it.
  std::optional<backend::PowerReading> device_power() const;
  const EngineConfig& config() const;
  int64_t max_model_len() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::engine
