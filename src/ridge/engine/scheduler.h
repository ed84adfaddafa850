// Scheduler: decides what each engine step computes. It owns the sequences and their KV blocks
// (through the PrefixCache, which hands out blocks of the BlockPool); it knows nothing of the
// model. One step:
//   1. Decodes: every running sequence with one token left to compute, oldest first. A decode
//      whose token starts a new block takes one; when none is left, the newest running sequence
//      is preempted (blocks released, back to the front of the waiting queue) until one is, so
//      the oldest running sequence always advances.
//   2. Prefill chunks of running sequences not fully computed yet, oldest first, while the token
//      budget lasts (chunked prefill).
//   3. Admission, first come first served, unless a sequence was preempted in this step: the
//      head of the waiting queue is admitted when blocks for all its tokens are available
//      (prefix-cache hits need none) and max_num_seqs allows; its first chunk is scheduled with
//      what is left of the budget. A head that does not fit blocks everyone behind it, so no
//      request is overtaken forever.
// A sequence that owes prompt logprobs needs a logits row per prompt position: its chunks are
// shortened to the step's rows left (SchedulerConfig::max_prompt_logprob_rows), and it is admitted
// without prefix-cache hits (their positions would have no logits).
// Preemption picks the newest by arrival, and a preempted sequence is readmitted before any
// later arrival, so every request eventually becomes the oldest and finishes.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ridge/engine/sequence.h"
#include "ridge/kv/prefix_cache.h"

namespace ridge::engine {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;
  // Prompt-logprob logits rows a step may hold (Request::prompt_logprobs): chunks of sequences
  // that owe them are shortened to fit.
  int32_t max_prompt_logprob_rows = 128;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t num_new_tokens = 0;  // tokens [seq->num_computed, + num_new_tokens) are computed
  bool wants_logits = false;   // the chunk ends at the sequence's last token
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // decodes first, then prefill chunks
  int32_t num_tokens = 0;
  int32_t num_decodes = 0;
  int32_t num_preempted = 0;
  int32_t num_logits() const;
  bool empty() const { return chunks.empty(); }
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;  // tokens looked up in the prefix cache at admission
  int64_t prefix_hit_tokens = 0;    // of which found
  int64_t prompt_tokens = 0;        // prompt tokens of first admissions
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kv::PrefixCache& cache);
  ~Scheduler();

  // Queues a new sequence at the back of the waiting queue.
  void add(std::unique_ptr<Sequence> seq);
  SchedulerOutput schedule();
  // After the step ran: each chunk's tokens are computed; sampled holds one token per chunk that
  // wanted logits, in chunk order. Sequences that stop here move to the finished list.
  void update(const SchedulerOutput& out, std::span<const int32_t> sampled);
  // Finishes a live sequence now (reason "abort" or "error"), releasing its blocks; it moves to
  // the finished list. Returns false when seq_id is not live.
  bool finish(int64_t seq_id, const std::string& reason, const std::string& error = {});
  void finish_all(const std::string& reason, const std::string& error = {});
  // Sequences finished since the last call, in the order they finished.
  std::vector<std::unique_ptr<Sequence>> take_finished();

  int32_t num_waiting() const { return int32_t(waiting_.size()); }
  int32_t num_running() const { return int32_t(running_.size()); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerConfig& config() const { return config_; }
  kv::PrefixCache& cache() { return cache_; }
  // Running sequences, oldest first (for tests).
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }

 private:
  int32_t blocks_for(int32_t num_tokens) const;
  bool try_admit(Sequence* seq);
  void preempt(Sequence* seq);
  void release_blocks(Sequence* seq);
  void register_full_blocks(Sequence* seq);
  void retire(Sequence* seq, const std::string& reason, const std::string& error);
  // A chunk of up to n tokens of s from its num_computed, shortened so that its prompt-logprob
  // rows fit rows_left (which it then uses up); 0 when not one token fits.
  static int32_t fit_prompt_rows(const Sequence* s, int32_t n, int32_t& rows_left);

  SchedulerConfig config_;
  kv::PrefixCache& cache_;
  int32_t block_size_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> live_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // sorted by seq_id: oldest first
  std::vector<std::unique_ptr<Sequence>> finished_;
  SchedulerStats stats_;
};

}  // namespace ridge::engine
