// Scheduler tests over a fake model: the "KV" of a token is the hash of the whole prefix that ends
// at it, written to the token's slot when its chunk runs and checked for every position a chunk
// attends to; the "model" samples a token from the hash of the context. So a sequence's output
// depends only on its tokens, never on the schedule, and any KV mix-up (a shared block
// overwritten, a stale cached block, a wrong block table) changes what a later step reads.
#include "ridge/engine/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "ridge/core/error.h"

namespace ridge::engine {
namespace {

constexpr int32_t kStop = 0;
constexpr int32_t kGenVocab = 40;  // generated tokens in [0, 40): stops with p = 1/40 per token

uint64_t mix(uint64_t h, int32_t token) {
  h ^= uint64_t(uint32_t(token)) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

// prefix_hash[p] = hash of tokens[0..p].
std::vector<uint64_t> prefix_hashes(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h(tokens.size());
  uint64_t acc = 1;
  for (size_t i = 0; i < tokens.size(); ++i) h[i] = acc = mix(acc, tokens[i]);
  return h;
}

int32_t fake_next_token(uint64_t context_hash) {
  return int32_t((context_hash >> 23) % kGenVocab);
}

// What the sequence must produce whatever the schedule.
std::pair<std::vector<int32_t>, std::string> expected_output(std::vector<int32_t> tokens,
                                                             int32_t max_tokens, bool stops) {
  std::vector<int32_t> out;
  uint64_t acc = 1;
  for (int32_t t : tokens) acc = mix(acc, t);
  while (true) {
    const int32_t t = fake_next_token(acc);
    out.push_back(t);
    acc = mix(acc, t);
    if (stops && t == kStop) return {out, "stop"};
    if (int32_t(out.size()) == max_tokens) return {out, "length"};
  }
}

std::unique_ptr<Sequence> make_seq(int64_t id, std::vector<int32_t> prompt, int32_t max_tokens,
                                   bool stops) {
  Request r;
  r.id = "r" + std::to_string(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return std::make_unique<Sequence>(id, std::move(r),
                                    stops ? std::vector<int32_t>{kStop} : std::vector<int32_t>{});
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t n) {
  std::uniform_int_distribution<int32_t> d(1, 999);  // prompts never hold the stop token
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

// Runs steps with the fake model and checks the scheduler's invariants after each.
class Harness {
 public:
  Harness(int32_t num_blocks, int32_t block_size, SchedulerConfig config)
      : pool(num_blocks),
        cache(pool, block_size),
        sched(config, cache),
        bs_(block_size),
        slots_(size_t(num_blocks) * size_t(block_size), 0) {}

  // prompt_logprobs >= 0: the sequence owes the logprobs of its prompt (Request::prompt_logprobs).
  Sequence* add(std::vector<int32_t> prompt, int32_t max_tokens, int32_t prompt_logprobs = -1) {
    auto s = make_seq(next_id_++, std::move(prompt), max_tokens, stops);
    s->request.prompt_logprobs = prompt_logprobs;
    Sequence* p = s.get();
    expected_[p->seq_id] = expected_output(std::vector<int32_t>(p->tokens), max_tokens, stops);
    sched.add(std::move(s));
    return p;
  }

  SchedulerOutput step() {
    std::set<int64_t> decoding_before;
    for (Sequence* s : sched.running())
      if (s->num_uncomputed() == 1) decoding_before.insert(s->seq_id);
    SchedulerOutput out = sched.schedule();
    check_plan(out, decoding_before);
    // First admissions (a sequence owing prompt logprobs may be admitted without a chunk when
    // the step's prompt rows are used up); running() is in seq_id order.
    for (Sequence* s : sched.running())
      if (admitted_.insert(s->seq_id).second) admission_order.push_back(s->seq_id);
    std::vector<int32_t> sampled;
    for (const ScheduledChunk& c : out.chunks) {
      Sequence& s = *c.seq;
      // Prompt logprobs of this chunk's positions, as the engine records them.
      const auto [lo, hi] = s.prompt_logprob_positions(s.num_computed, c.num_new_tokens);
      for (int32_t p = lo; p < hi; ++p) prompt_reported_[s.seq_id].push_back(p + 1);
      if (lo < hi) s.prompt_logprobs_next = hi + 1;
      const auto h = prefix_hashes(s.tokens);
      const int32_t end = s.num_computed + c.num_new_tokens;
      for (int32_t p = s.num_computed; p < end; ++p) slots_[size_t(slot(s, p))] = h[size_t(p)];
      // Attention reads every position up to the chunk's end through the block table.
      for (int32_t p = 0; p < end; ++p)
        EXPECT_EQ(slots_[size_t(slot(s, p))], h[size_t(p)])
            << "sequence " << s.seq_id << " reads wrong KV at position " << p;
      if (c.wants_logits) sampled.push_back(fake_next_token(h[size_t(end - 1)]));
    }
    sched.update(out, sampled);
    for (auto& s : sched.take_finished()) {
      EXPECT_TRUE(s->block_table.empty());
      const auto& [tokens, reason] = expected_[s->seq_id];
      EXPECT_EQ(std::vector<int32_t>(s->output().begin(), s->output().end()), tokens)
          << "sequence " << s->seq_id;
      EXPECT_EQ(s->finish_reason, reason);
      if (s->request.prompt_logprobs >= 0) {  // every prompt token after the first, once, in order
        std::vector<int32_t> want(size_t(s->num_prompt_tokens() - 1));
        std::iota(want.begin(), want.end(), 1);
        EXPECT_EQ(prompt_reported_[s->seq_id], want) << "sequence " << s->seq_id;
        EXPECT_EQ(s->num_cached_prompt, 0) << "prefix hits where prompt logprobs are owed";
      }
      finished_.push_back(std::move(s));
    }
    check_counts();
    return out;
  }

  void check_plan(const SchedulerOutput& out, const std::set<int64_t>& decoding_before) {
    const SchedulerConfig& cfg = sched.config();
    int32_t total = 0, prompt_rows = 0;
    std::set<int64_t> in_step;
    for (size_t i = 0; i < out.chunks.size(); ++i) {
      const ScheduledChunk& c = out.chunks[i];
      total += c.num_new_tokens;
      const auto [lo, hi] = c.seq->prompt_logprob_positions(c.seq->num_computed, c.num_new_tokens);
      prompt_rows += hi - lo;
      EXPECT_TRUE(in_step.insert(c.seq->seq_id).second) << "a sequence twice in one step";
      EXPECT_EQ(c.seq->status, SequenceStatus::running);
      EXPECT_GE(c.num_new_tokens, 1);
      EXPECT_LE(c.num_new_tokens, c.seq->num_uncomputed());
      EXPECT_EQ(c.wants_logits, c.num_new_tokens == c.seq->num_uncomputed());
      EXPECT_GE(int64_t(c.seq->block_table.size()) * bs_, c.seq->num_computed + c.num_new_tokens);
      if (int32_t(i) < out.num_decodes) {  // decodes come first
        EXPECT_EQ(c.num_new_tokens, 1);
        EXPECT_TRUE(decoding_before.contains(c.seq->seq_id));
      } else {
        EXPECT_FALSE(decoding_before.contains(c.seq->seq_id)) << "a decode after a prefill";
      }
      // Admission makes room for every token: a prefill chunk never lacks blocks.
      EXPECT_GE(int64_t(c.seq->block_table.size()) * bs_, c.seq->num_tokens());
    }
    EXPECT_EQ(total, out.num_tokens);
    EXPECT_LE(prompt_rows, cfg.max_prompt_logprob_rows);
    EXPECT_LE(out.num_tokens, cfg.max_num_batched_tokens);
    EXPECT_LE(sched.num_running(), cfg.max_num_seqs);
    // Every running decode that survived the step's preemptions is in the step.
    for (Sequence* s : sched.running()) {
      if (decoding_before.contains(s->seq_id)) {
        EXPECT_TRUE(in_step.contains(s->seq_id));
      }
    }
    // Budget left over means nobody runnable was left out, but for sequences owing prompt
    // logprobs in a step whose prompt rows are all used.
    if (out.num_tokens < cfg.max_num_batched_tokens) {
      for (Sequence* s : sched.running())
        EXPECT_TRUE(in_step.contains(s->seq_id) ||
                    (s->owes_prompt_logprobs() && prompt_rows == cfg.max_prompt_logprob_rows))
            << "sequence " << s->seq_id << " left out";
    }
    if (out.num_preempted) ++steps_with_preemption;
  }

  // Each block's reference count = running sequences holding it + 1 if the cache knows it;
  // waiting sequences hold nothing.
  void check_counts() {
    std::map<int32_t, int32_t> holders;
    for (Sequence* s : sched.running()) {
      std::set<int32_t> mine(s->block_table.begin(), s->block_table.end());
      ASSERT_EQ(mine.size(), s->block_table.size()) << "a block twice in one table";
      for (int32_t b : mine) ++holders[b];
    }
    for (Sequence* s : sched.waiting()) {
      ASSERT_TRUE(s->block_table.empty());
      ASSERT_EQ(s->num_computed, 0);
    }
    for (int32_t b = 0; b < pool.num_blocks(); ++b) {
      const int32_t want = (holders.contains(b) ? holders[b] : 0) + (cache.is_cached(b) ? 1 : 0);
      ASSERT_EQ(pool.ref_count(b), want) << "block " << b;
    }
  }

  int32_t slot(const Sequence& s, int32_t pos) const {
    return s.block_table[size_t(pos / bs_)] * bs_ + pos % bs_;
  }

  bool all_blocks_back() {
    cache.clear();
    return pool.num_free() == pool.num_blocks() && cache.num_cached() == 0;
  }

  kv::BlockPool pool;
  kv::PrefixCache cache;
  Scheduler sched;
  int64_t steps_with_preemption = 0;
  bool stops = true;  // false: only max_tokens ends a sequence (exact step counts in tests)
  std::vector<std::unique_ptr<Sequence>> finished_;
  std::vector<int64_t> admission_order;  // seq ids in the order of their first step

 private:
  int32_t bs_;
  int64_t next_id_ = 0;
  std::vector<uint64_t> slots_;
  std::set<int64_t> admitted_;
  std::map<int64_t, std::vector<int32_t>> prompt_reported_;  // prompt tokens given logprobs
  std::map<int64_t, std::pair<std::vector<int32_t>, std::string>> expected_;
};

TEST(Scheduler, DecodesFirstThenPrefillChunksWithinTheBudget) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const int32_t budget = 64;
  Harness h(64, 16, {8, budget, false});
  h.stops = false;
  // Four short requests: prefilled in the first step, decoding afterwards.
  for (int i = 0; i < 4; ++i)
    h.add(random_prompt(rng, std::uniform_int_distribution<int32_t>(2, 12)(rng)), 1000);
  SchedulerOutput first = h.step();
  EXPECT_EQ(first.num_decodes, 0);
  EXPECT_EQ(first.chunks.size(), 4u);
  // A long prompt now arrives: decodes take 4 tokens, the prompt's chunk the other 60.
  const int32_t long_len = std::uniform_int_distribution<int32_t>(150, 250)(rng);
  Sequence* big = h.add(random_prompt(rng, long_len), 4);
  SchedulerOutput s = h.step();
  ASSERT_EQ(s.chunks.size(), 5u);
  EXPECT_EQ(s.num_decodes, 4);
  EXPECT_EQ(s.chunks[4].seq, big);
  EXPECT_EQ(s.chunks[4].num_new_tokens, budget - 4);
  EXPECT_FALSE(s.chunks[4].wants_logits);
  EXPECT_EQ(s.num_tokens, budget);
}

TEST(Scheduler, ChunkedPrefillSplitsALongPrompt) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const int32_t budget = std::uniform_int_distribution<int32_t>(16, 48)(rng);
  const int32_t len = std::uniform_int_distribution<int32_t>(3 * budget, 5 * budget)(rng);
  Harness h(64, 16, {4, budget, true});
  Sequence* s = h.add(random_prompt(rng, len), 3);
  int32_t done = 0, steps = 0;
  while (s->num_output_tokens() == 0) {
    SchedulerOutput out = h.step();
    ASSERT_EQ(out.chunks.size(), 1u);
    const int32_t n = out.chunks[0].num_new_tokens;
    EXPECT_EQ(n, std::min(budget, len - done));
    EXPECT_EQ(out.chunks[0].wants_logits, done + n == len);
    done += n;
    ++steps;
  }
  EXPECT_EQ(steps, (len + budget - 1) / budget);
}

// Two sequences fill the pool; the older one's next token needs a block: the newer one is
// preempted, and later recomputes its prompt and generated tokens; both finish correctly.
TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (bool caching : {false, true}) {
    Harness h(6, 16, {4, 256, caching});
    h.stops = false;
    Sequence* a = h.add(random_prompt(rng, 48), 40);  // 3 blocks, the 49th token needs a fourth
    Sequence* b = h.add(random_prompt(rng, 47), 40);  // 3 blocks
    h.step();                                         // both prefilled, the pool is full
    ASSERT_EQ(h.pool.num_free() + h.cache.num_evictable(), 0);
    SchedulerOutput out = h.step();
    EXPECT_EQ(out.num_preempted, 1);
    ASSERT_EQ(out.chunks.size(), 1u);
    EXPECT_EQ(out.chunks[0].seq, a);
    EXPECT_EQ(b->status, SequenceStatus::waiting);
    EXPECT_EQ(h.sched.waiting().front(), b);
    EXPECT_EQ(b->num_output_tokens(), 1);
    // b comes back once there is room for all its tokens; its first chunk then covers prompt and
    // generated token (or starts after prefix-cache hits of its own earlier blocks).
    int32_t guard = 0;
    while (b->status == SequenceStatus::waiting && ++guard < 200) {
      SchedulerOutput o = h.step();
      for (const ScheduledChunk& c : o.chunks) {
        if (c.seq == b) {  // (seen after the step ran)
          EXPECT_TRUE(c.wants_logits);
          EXPECT_EQ(b->num_computed, 48);
          EXPECT_EQ(b->num_output_tokens(), 2);
          if (!caching) {
            EXPECT_EQ(c.num_new_tokens, 48);
          }
        }
      }
    }
    while (h.sched.has_work() && ++guard < 400) h.step();
    EXPECT_FALSE(h.sched.has_work());
    EXPECT_EQ(h.finished_.size(), 2u);
    EXPECT_GE(h.sched.stats().preemptions, 1);
    EXPECT_TRUE(h.all_blocks_back());
  }
}

TEST(Scheduler, PrefixHitsSkipCachedBlocksButRecomputeTheLastToken) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  Harness h(32, 16, {4, 512, true});
  const auto stem = random_prompt(rng, 64);  // 4 full blocks
  h.add(stem, 1);
  while (h.sched.has_work()) h.step();
  // The same 64 tokens: 3 blocks hit, the 4th is recomputed for the last token's logits.
  Sequence* same = h.add(stem, 1);
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(same->num_cached_prompt, 48);
  EXPECT_EQ(out.chunks[0].num_new_tokens, 16);
  // A longer prompt sharing 40 tokens: 2 blocks hit.
  auto longer = stem;
  longer.resize(40);
  const auto tail = random_prompt(rng, 30);
  longer.insert(longer.end(), tail.begin(), tail.end());
  Sequence* other = h.add(longer, 1);
  out = h.step();
  EXPECT_EQ(other->num_cached_prompt, 32);
  EXPECT_EQ(out.chunks.back().num_new_tokens, 70 - 32);
  EXPECT_EQ(h.sched.stats().prefix_hit_tokens, 48 + 32);
  EXPECT_EQ(h.sched.stats().prefix_query_tokens, 64 + 64 + 70);
  while (h.sched.has_work()) h.step();
  EXPECT_TRUE(h.all_blocks_back());
}

TEST(Scheduler, AbortFreesBlocksAtOnce) {
  std::mt19937 rng(std::random_device{}());
  Harness h(16, 16, {4, 256, false});
  h.stops = false;
  Sequence* a = h.add(random_prompt(rng, 40), 100);
  Sequence* w = h.add(random_prompt(rng, 200), 10);  // waits: needs 13 blocks of the 13 left?
  h.step();
  ASSERT_EQ(a->status, SequenceStatus::running);
  EXPECT_EQ(h.pool.num_free(), 16 - 3 - (w->status == SequenceStatus::running ? 13 : 0));
  EXPECT_TRUE(h.sched.finish(a->seq_id, "abort"));
  EXPECT_FALSE(h.sched.finish(a->seq_id, "abort"));  // not live any more
  EXPECT_EQ(h.pool.num_free(), 16 - (w->status == SequenceStatus::running ? 13 : 0));
  auto done = h.sched.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->finish_reason, "abort");
  h.sched.finish_all("abort");
  EXPECT_EQ(h.sched.take_finished().size(), 1u);
  EXPECT_FALSE(h.sched.has_work());
  EXPECT_TRUE(h.all_blocks_back());
}

TEST(Scheduler, RejectsABudgetBelowMaxNumSeqs) {
  kv::BlockPool pool(4);
  kv::PrefixCache cache(pool, 16);
  try {
    Scheduler s({64, 32, true}, cache);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("max_num_batched_tokens (32)"), std::string::npos) << m;
    EXPECT_NE(m.find("max_num_seqs (64)"), std::string::npos) << m;
  }
}

// Many random request mixes over tiny pools: every request finishes with the output the fake
// model gives it alone, first admissions follow arrival order, and every block comes back.
TEST(Scheduler, RandomMixesOverTinyPoolsAllFinish) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  int64_t preempting_steps = 0, hits = 0;
  for (int mix_i = 0; mix_i < 40; ++mix_i) {
    const int32_t bs = 16;
    const int32_t max_prompt = std::uniform_int_distribution<int32_t>(8, 120)(rng);
    const int32_t max_gen = std::uniform_int_distribution<int32_t>(1, 60)(rng);
    const int32_t min_blocks = (max_prompt + max_gen + bs - 1) / bs;
    const int32_t blocks = min_blocks + std::uniform_int_distribution<int32_t>(0, 6)(rng);
    const int32_t max_seqs = std::uniform_int_distribution<int32_t>(1, 8)(rng);
    const int32_t budget = std::uniform_int_distribution<int32_t>(max_seqs, 96)(rng);
    const bool caching = std::bernoulli_distribution(0.6)(rng);
    const int32_t prompt_rows = std::uniform_int_distribution<int32_t>(1, 40)(rng);
    SCOPED_TRACE(::testing::Message()
                 << "mix " << mix_i << ": " << blocks << " blocks, seqs " << max_seqs << ", budget "
                 << budget << ", caching " << caching << ", prompt rows " << prompt_rows);
    Harness h(blocks, bs, {max_seqs, budget, caching, prompt_rows});
    std::vector<std::vector<int32_t>> stems;
    for (int i = 0; i < 3; ++i) stems.push_back(random_prompt(rng, max_prompt));
    const int n_requests = std::uniform_int_distribution<int>(10, 50)(rng);
    int added = 0;
    for (int64_t step = 0; added < n_requests || h.sched.has_work(); ++step) {
      ASSERT_LT(step, 100000) << "no progress: livelock";
      for (int k = std::uniform_int_distribution<int>(0, 3)(rng); k > 0 && added < n_requests;
           --k) {
        const int32_t len = std::uniform_int_distribution<int32_t>(1, max_prompt)(rng);
        std::vector<int32_t> prompt;
        if (std::bernoulli_distribution(0.5)(rng)) {  // shares a stem's start
          const auto& stem = stems[std::uniform_int_distribution<size_t>(0, 2)(rng)];
          prompt.assign(stem.begin(), stem.begin() + len);
          if (std::bernoulli_distribution(0.5)(rng)) prompt.back() = 1000;
        } else {
          prompt = random_prompt(rng, len);
        }
        const bool prompt_lp = std::bernoulli_distribution(0.25)(rng);
        h.add(prompt, std::uniform_int_distribution<int32_t>(1, max_gen)(rng), prompt_lp ? 0 : -1);
        ++added;
      }
      h.step();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
    }
    EXPECT_EQ(int(h.finished_.size()), n_requests);
    // First admissions follow arrival order: nobody is overtaken.
    EXPECT_TRUE(std::is_sorted(h.admission_order.begin(), h.admission_order.end()));
    EXPECT_EQ(int(h.admission_order.size()), n_requests);
    preempting_steps += h.steps_with_preemption;
    hits += h.sched.stats().prefix_hit_tokens;
    EXPECT_TRUE(h.all_blocks_back());
  }
  EXPECT_GT(preempting_steps, 0) << "tiny pools should force preemptions";
  EXPECT_GT(hits, 0) << "shared stems should hit the prefix cache";
}

}  // namespace
}  // namespace ridge::engine
