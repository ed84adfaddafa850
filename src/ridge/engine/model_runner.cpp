#include "ridge/engine/model_runner.h"

#include <cstdint>
#include <algorithm>

#include "ridge/core/error.h"

namespace ridge::engine {

ModelRunner::ModelRunner(model::LlamaModel& model, kv::KvPool& pool, int32_t max_num_batched_tokens,
                         int32_t max_num_seqs)
    : model_(model), pool_(pool), vocab_(model.config().vocab) {
  const int64_t max_ctx =
      std::min<int64_t>(pool.num_tokens(), model.config().max_position) + pool.block_size();
  model_.reserve(max_num_batched_tokens, max_num_seqs, max_ctx / pool.block_size());
  max_logits_rows_ = size_t(max_num_seqs);
  batch_.tokens.reserve(size_t(max_num_batched_tokens));
  batch_.positions.reserve(size_t(max_num_batched_tokens));
  batch_.slots.reserve(size_t(max_num_batched_tokens));
  chunk_tokens_.reserve(size_t(max_num_batched_tokens));
}

void ModelRunner::build_batch(const SchedulerOutput& out) {
  RIDGE_CHECK(!out.empty(), "model runner: an empty step");
  const int32_t bs = int32_t(pool_.block_size());
  batch_.clear();
  for (const ScheduledChunk& c : out.chunks) {
    const Sequence& s = *c.seq;
    const int32_t start = s.num_computed, end = start + c.num_new_tokens;
    chunk_tokens_.assign(s.tokens.begin() + start, s.tokens.begin() + end);
    batch_.add_sequence(chunk_tokens_, end, s.block_table, bs, c.wants_logits);
  }
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
