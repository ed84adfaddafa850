// ModelRunner: turns a step's scheduled chunks into one ForwardBatch (prefill chunks and decode
// tokens flattened together, each sequence with its own block table), runs the model on it and
// returns the logits rows of the chunks that end at their sequence's last token. The workspace is
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
  ModelRunner(model::LlamaModel& model, kv::KvPool& pool, int32_t max_num_batched_tokens,
              int32_t max_num_seqs);

  // Runs the step. Returns host f32 logits [out.num_logits(), vocab], rows in chunk order; valid
  // until the next call.
  std::span<float> execute(const SchedulerOutput& out);
  // Runs the step and leaves the logits on the backend's device: f32 [>= out.num_logits(),
  // vocab], the first out.num_logits() rows in chunk order (a padded decode graph may add rows);
  // valid until the next call. For device sampling (DeviceSampler). The step is only queued
  // (LlamaModel::enqueue): the stream is synchronized by whoever reads its results (the device
  // sampler downloads its tokens and waits) before the next call.
  const Tensor& execute_on_device(const SchedulerOutput& out);
  int64_t vocab() const { return vocab_; }
  const model::ForwardBatch& last_batch() const { return batch_; }

 private:
  void build_batch(const SchedulerOutput& out);

  model::LlamaModel& model_;
  kv::KvPool& pool_;
  int64_t vocab_;
  model::ForwardBatch batch_;
  std::vector<int32_t> chunk_tokens_;
  size_t max_logits_rows_ = 0;
};

}  // namespace ridge::engine
