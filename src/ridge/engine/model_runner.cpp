#include "ridge/engine/model_runner.h"

#include <cstdint>
#include <algorithm>

#include "ridge/core/error.h"

namespace ridge::engine {

ModelRunner::ModelRunner(model::LlamaModel& model, kv::KvPool& pool, int32_t max_num_batched_tokens,
                         int32_t max_num_seqs, int32_t max_prompt_rows)
    : model_(model), pool_(pool), vocab_(model.config().vocab) {
  const int64_t max_ctx =
      std::min<int64_t>(pool.num_tokens(), model.config().max_position) + pool.block_size();
  max_logits_rows_ =
      size_t(max_num_seqs) + size_t(std::clamp(max_prompt_rows, 0, max_num_batched_tokens));
  model_.reserve(max_num_batched_tokens, int64_t(max_logits_rows_), max_ctx / pool.block_size());
  batch_.tokens.reserve(size_t(max_num_batched_tokens));
  batch_.positions.reserve(size_t(max_num_batched_tokens));
  batch_.slots.reserve(size_t(max_num_batched_tokens));
  chunk_tokens_.reserve(size_t(max_num_batched_tokens));
}

void ModelRunner::build_batch(const SchedulerOutput& out) {
  RIDGE_CHECK(!out.empty(), "model runner: an empty step");
  const int32_t bs = int32_t(pool_.block_size());
  batch_.clear();
  prompt_rows_.clear();
  prompt_batch_rows_.clear();
  for (const ScheduledChunk& c : out.chunks) {
    Sequence& s = *c.seq;
    const int32_t start = s.num_computed, end = start + c.num_new_tokens;
    const int32_t base = batch_.num_tokens();
    chunk_tokens_.assign(s.tokens.begin() + start, s.tokens.begin() + end);
    batch_.add_sequence(chunk_tokens_, end, s.block_table, bs, c.wants_logits);
    // Position p's logits give the logprob of prompt token p + 1.
    const auto [lo, hi] = s.prompt_logprob_positions(start, c.num_new_tokens);
    for (int32_t p = lo; p < hi; ++p) {
      prompt_rows_.push_back({&s, p + 1});
      prompt_batch_rows_.push_back(base + (p - start));
    }
  }
  batch_.logits_rows.insert(batch_.logits_rows.end(), prompt_batch_rows_.begin(),
                            prompt_batch_rows_.end());
  const size_t rows = batch_.logits_rows.size();
  RIDGE_CHECK(rows <= max_logits_rows_, "model runner: {} logits rows, more than the {} reserved",
              rows, max_logits_rows_);
}

std::span<float> ModelRunner::execute(const SchedulerOutput& out) {
  build_batch(out);
  return model_.forward_logits({}, batch_, pool_.layers());
}

const Tensor& ModelRunner::execute_on_device(const SchedulerOutput& out) {
  build_batch(out);
  model_.enqueue({}, batch_, pool_.layers());
  return model_.device_logits();
}

}  // namespace ridge::engine
