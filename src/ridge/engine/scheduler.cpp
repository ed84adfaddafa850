#include "ridge/engine/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "ridge/core/error.h"

namespace ridge::engine {

int32_t SchedulerOutput::num_logits() const {
  int32_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.wants_logits;
  return n;
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::PrefixCache& cache)
    : config_(config), cache_(cache), block_size_(cache.block_size()) {
  RIDGE_CHECK(config.max_num_seqs >= 1, "max_num_seqs {} must be >= 1", config.max_num_seqs);
  RIDGE_CHECK(config.max_num_batched_tokens >= config.max_num_seqs,
              "max_num_batched_tokens ({}) must be >= max_num_seqs ({}): every running sequence "
              "needs a token of each step",
              config.max_num_batched_tokens, config.max_num_seqs);
}

Scheduler::~Scheduler() {
  for (Sequence* s : running_) release_blocks(s);
}

int32_t Scheduler::blocks_for(int32_t num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  RIDGE_CHECK(seq && seq->num_tokens() > 0, "scheduler: a sequence without tokens");
  RIDGE_CHECK(!live_.contains(seq->seq_id), "scheduler: sequence {} added twice", seq->seq_id);
  seq->status = SequenceStatus::waiting;
  waiting_.push_back(seq.get());
  live_.emplace(seq->seq_id, std::move(seq));
}

void Scheduler::release_blocks(Sequence* seq) {
  // Tail first: the LRU order then evicts a prefix's tail before its head.
  for (auto it = seq->block_table.rbegin(); it != seq->block_table.rend(); ++it)
    cache_.release(*it);
  seq->block_table.clear();
  seq->block_hashes.clear();
  seq->num_computed = 0;
}

void Scheduler::register_full_blocks(Sequence* seq) {
  const size_t full = size_t(seq->num_computed / block_size_);
  while (seq->block_hashes.size() < full) {
    const size_t i = seq->block_hashes.size();
    const uint64_t parent = i == 0 ? kv::PrefixCache::kRootHash : seq->block_hashes[i - 1];
    const auto piece =
        std::span<const int32_t>(seq->tokens).subspan(i * size_t(block_size_), size_t(block_size_));
    const std::optional<uint64_t> h = cache_.insert(parent, piece, seq->block_table[i]);
    if (!h) break;  // a hash collision with other cached content: this chain registers no further
    seq->block_hashes.push_back(*h);
  }
}

bool Scheduler::try_admit(Sequence* seq) {
  const int32_t total = seq->num_tokens();
  kv::PrefixMatch hit;
  // Only whole blocks are reused, and never the block of the last token: it is recomputed so
  // that its logits exist. None when the prompt's logprobs are owed: every position needs logits.
  if (config_.enable_prefix_caching && !seq->owes_prompt_logprobs())
    hit = cache_.match(seq->tokens, (total - 1) / block_size_);
  const int32_t hits = int32_t(hit.blocks.size());
  const int32_t need = blocks_for(total) - hits;
  int32_t evictable_hits = 0;
  for (int32_t b : hit.blocks) evictable_hits += cache_.is_evictable(b);
  if (need > cache_.num_available() - evictable_hits) return false;

  for (int32_t b : hit.blocks) {
    cache_.acquire(b);
    seq->block_table.push_back(b);
  }
  for (int32_t i = 0; i < need; ++i) {
    auto b = cache_.allocate();
    RIDGE_CHECK(b.has_value(), "scheduler: the KV pool ran dry during an admission it allowed");
    seq->block_table.push_back(*b);
  }
  seq->block_hashes = std::move(hit.hashes);
  seq->num_computed = hits * block_size_;
  if (config_.enable_prefix_caching) {
    stats_.prefix_query_tokens += total;
    stats_.prefix_hit_tokens += seq->num_computed;
  }
  if (!seq->admitted_once) {
    seq->admitted_once = true;
    seq->num_cached_prompt = seq->num_computed;
    stats_.prompt_tokens += seq->num_prompt_tokens();
  }
  seq->status = SequenceStatus::running;
  return true;
}

void Scheduler::preempt(Sequence* seq) {
  release_blocks(seq);
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  seq->status = SequenceStatus::waiting;
  ++seq->num_preemptions;
  ++stats_.preemptions;
  waiting_.push_front(seq);
}

void Scheduler::retire(Sequence* seq, const std::string& reason, const std::string& error) {
  release_blocks(seq);
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end())
    running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end())
    waiting_.erase(it);
  seq->status = SequenceStatus::finished;
  seq->finish_reason = reason;
  seq->error = error;
  auto node = live_.extract(seq->seq_id);
  finished_.push_back(std::move(node.mapped()));
}

int32_t Scheduler::fit_prompt_rows(const Sequence* s, int32_t n, int32_t& rows_left) {
  auto [lo, hi] = s->prompt_logprob_positions(s->num_computed, n);
  if (hi - lo > rows_left) {
    n = lo - s->num_computed + rows_left;  // up to the last position whose row fits
    hi = lo + rows_left;
  }
  rows_left -= hi - lo;
  return n;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;
  int32_t prompt_rows = config_.max_prompt_logprob_rows;

  // 1. Decodes, oldest first; a new block may cost the newest running sequences their place.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->num_uncomputed() != 1) continue;
    bool lost_place = false;
    while (int32_t(s->block_table.size()) < blocks_for(s->num_tokens())) {
      if (auto b = cache_.allocate()) {
        s->block_table.push_back(*b);
        continue;
      }
      Sequence* victim = running_.back();
      if (victim == s && running_.size() == 1) {
        // Alone and still no block: it cannot fit the pool (submit's checks prevent this).
        retire(s, "error",
               fmt::format("the sequence needs {} KV blocks, more than the pool's {}",
                           blocks_for(s->num_tokens()), cache_.pool().num_blocks()));
        lost_place = true;
        break;
      }
      preempt(victim);
      ++out.num_preempted;
      if (victim == s) {
        lost_place = true;
        break;
      }
    }
    if (lost_place) break;  // s was the newest: nobody after it is left
    out.chunks.push_back({s, 1, true});
    --budget;
    ++out.num_decodes;
  }

  // 2. Prefill chunks of running sequences (admitted earlier, not fully computed).
  for (Sequence* s : running_) {
    if (budget == 0) break;
    const int32_t left = s->num_uncomputed();
    if (left <= 1) continue;
    const int32_t n = fit_prompt_rows(s, std::min(left, budget), prompt_rows);
    if (n == 0) continue;
    out.chunks.push_back({s, n, n == left});
    budget -= n;
  }

  // 3. Admission, first come first served. Not in a step that preempted: the pool is short.
  while (out.num_preempted == 0 && budget > 0 && !waiting_.empty() &&
         int32_t(running_.size()) < config_.max_num_seqs) {
    Sequence* s = waiting_.front();
    if (!try_admit(s)) {
      if (running_.empty()) {
        // Every block is free or evictable and it still does not fit: it never will.
        retire(s, "error",
               fmt::format("the sequence needs {} KV blocks, more than the pool's {}",
                           blocks_for(s->num_tokens()), cache_.pool().num_blocks()));
        continue;
      }
      break;
    }
    waiting_.pop_front();
    running_.insert(std::upper_bound(
                        running_.begin(), running_.end(), s,
                        [](const Sequence* a, const Sequence* b) { return a->seq_id < b->seq_id; }),
                    s);
    const int32_t left = s->num_uncomputed();
    const int32_t n = fit_prompt_rows(s, std::min(left, budget), prompt_rows);
    // Admitted, but no prompt row is left for its first position: its first chunk comes in the
    // next step, and nobody behind it starts before it.
    if (n == 0) break;
    out.chunks.push_back({s, n, n == left});
    budget -= n;
  }
  out.num_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::update(const SchedulerOutput& out, std::span<const int32_t> sampled) {
  size_t k = 0;
  for (const ScheduledChunk& c : out.chunks) {
    Sequence* s = c.seq;
    RIDGE_CHECK(s->status == SequenceStatus::running && c.num_new_tokens <= s->num_uncomputed(),
                "scheduler: sequence {} was changed between schedule and update", s->seq_id);
    s->num_computed += c.num_new_tokens;
    if (config_.enable_prefix_caching) register_full_blocks(s);
    if (!c.wants_logits) continue;
    RIDGE_CHECK(k < sampled.size(), "scheduler: {} sampled tokens for {} logits rows",
                sampled.size(), out.num_logits());
    const int32_t token = sampled[k++];
    s->tokens.push_back(token);
    if (s->is_stop_token(token)) {
      retire(s, "stop", {});
    } else if (s->num_output_tokens() >= s->request.max_tokens) {
      retire(s, "length", {});
    }
  }
  RIDGE_CHECK(k == sampled.size(), "scheduler: {} sampled tokens for {} logits rows",
              sampled.size(), k);
}

bool Scheduler::finish(int64_t seq_id, const std::string& reason, const std::string& error) {
  auto it = live_.find(seq_id);
  if (it == live_.end()) return false;
  retire(it->second.get(), reason, error);
  return true;
}

void Scheduler::finish_all(const std::string& reason, const std::string& error) {
  while (!running_.empty()) retire(running_.back(), reason, error);
  while (!waiting_.empty()) retire(waiting_.back(), reason, error);
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_finished() {
  std::vector<std::unique_ptr<Sequence>> r;
  r.swap(finished_);
  return r;
}

}  // namespace ridge::engine
