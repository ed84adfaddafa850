// ModelRunner: turns a step's scheduled chunks into one ForwardBatch (prefill chunks and decode
// tokens flattened together, each sequence with its own block table), runs the model on it and
// returns the logits rows of the chunks that end at their sequence's last token, followed by the
// rows of prompt positions whose logprobs are owed (Request::prompt_logprobs). The workspace is
// reserved once for the largest step, so steps allocate nothing on the device.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ridge/engine/scheduler.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/forward_batch.h"
#include "ridge/model/llama.h"

namespace ridge::engine {

class ModelRunner {
 public:
  // max_prompt_rows: prompt-logprob rows a step may add (SchedulerConfig::max_prompt_logprob_rows;
  // at most max_num_batched_tokens are reserved, all a step can have).
  ModelRunner(model::LlamaModel& model, kv::KvPool& pool, int32_t max_num_batched_tokens,
              int32_t max_num_seqs, int32_t max_prompt_rows = 0);

  // A prompt-logprob row of the last step: its logits give the logprob of prompt token `token`.
  struct PromptRow {
    Sequence* seq = nullptr;
    int32_t token = 0;  // index in seq->tokens, >= 1
  };

  // Runs the step. Returns host f32 logits [out.num_logits() + prompt_rows().size(), vocab]: the
  // sampling rows in chunk order, then the prompt rows; valid until the next call.
  std::span<float> execute(const SchedulerOutput& out);
  // Runs the step and leaves the logits on the backend's device: f32 [>= out.num_logits(),
  // vocab], the first out.num_logits() rows in chunk order, then the prompt rows (a padded decode
  // graph adds rows after those: a step of one-token chunks may run as a graph with a prompt row,
  // whose rows then still come in this order);
  // valid until the next call. For device sampling (DeviceSampler). The step is only queued
  // (LlamaModel::enqueue): the stream is synchronized by whoever reads its results (the device
  // sampler downloads its tokens and waits) before the next call.
  const Tensor& execute_on_device(const SchedulerOutput& out);
  int64_t vocab() const { return vocab_; }
  // The last step's prompt-logprob rows, in their order after the sampling rows.
  const std::vector<PromptRow>& prompt_rows() const { return prompt_rows_; }
  const model::ForwardBatch& last_batch() const { return batch_; }

 private:
  void build_batch(const SchedulerOutput& out);

  model::LlamaModel& model_;
  kv::KvPool& pool_;
  int64_t vocab_;
  model::ForwardBatch batch_;
  std::vector<int32_t> chunk_tokens_;
  std::vector<PromptRow> prompt_rows_;
  std::vector<int32_t> prompt_batch_rows_;
  size_t max_logits_rows_ = 0;
};

}  // namespace ridge::engine
