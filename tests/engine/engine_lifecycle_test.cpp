// Engine lifecycle on the default model (CPU): submit validation names the field at fault,
// cancellation returns blocks within a step, stop tokens, shutdown with and without drain, and
// the destructor joining with requests still in flight.
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "engine_test_util.h"

namespace ridge::engine {
namespace {

using testing::Collected;
using testing::Collector;
using testing::cpu_bundle;
using testing::greedy_request;
using testing::random_prompt;

class EngineLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    bundle_ = cpu_bundle(2048);
    if (!bundle_) GTEST_SKIP() << "no model at " << testing::default_model_path();
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    vocab_ = bundle_->config().vocab;
    config_.max_num_seqs = 4;
    config_.max_num_batched_tokens = 64;
  }
  Request request(const std::string& id, int len, int32_t max_tokens) {
    return greedy_request(id, random_prompt(rng_, vocab_, len), max_tokens);
  }
  ModelBundle* bundle_ = nullptr;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  int64_t vocab_ = 0;
  EngineConfig config_;
};

// Expects submit to throw RequestRejected of `kind` whose message holds every piece in `parts`.
void expect_rejected(Engine& e, Request r, RequestRejected::Kind kind,
                     const std::vector<std::string>& parts) {
  try {
    e.submit(std::move(r), [](RequestOutput&&) {});
    ADD_FAILURE() << "accepted";
  } catch (const RequestRejected& ex) {
    EXPECT_EQ(int(ex.kind), int(kind)) << ex.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(ex.what()).find(p), std::string::npos)
          << "'" << ex.what() << "' does not name " << p;
  }
}

TEST_F(EngineLifecycle, SubmitValidationNamesTheField) {
  SCOPED_TRACE(seed_);
  Engine e(*bundle_, config_);
  const int64_t limit = e.max_model_len();
  EXPECT_EQ(limit, std::min<int64_t>(2048, bundle_->config().max_position));
  using K = RequestRejected::Kind;

  Request r = request("x", 5, 4);
  r.prompt.clear();
  expect_rejected(e, r, K::invalid, {"prompt", "empty"});

  r = request("x", 9, 4);
  const size_t at = std::uniform_int_distribution<size_t>(0, 8)(rng_);
  r.prompt[at] = int32_t(vocab_) + std::uniform_int_distribution<int32_t>(0, 1000)(rng_);
  expect_rejected(e, r, K::invalid,
                  {std::to_string(r.prompt[at]), "position " + std::to_string(at),
                   "vocabulary of " + std::to_string(vocab_)});
  r.prompt[at] = -1;
  expect_rejected(e, r, K::invalid, {"-1", "vocabulary"});

  r = request("x", 5, 0);
  expect_rejected(e, r, K::invalid, {"max_tokens 0"});

  // Too long: names the prompt length, max_tokens and the limit.
  const int len = int(std::uniform_int_distribution<int64_t>(limit / 2, limit - 1)(rng_));
  const int32_t max_tokens = int32_t(limit - len + 1 + int64_t(rng_() % 50));
  r = request("x", len, max_tokens);
  expect_rejected(e, r, K::invalid,
                  {"prompt (" + std::to_string(len) + " tokens)",
                   "max_tokens (" + std::to_string(max_tokens) + ")",
                   "max_model_len " + std::to_string(limit)});
  r = request("x", int(limit) + 1, 1);
  expect_rejected(e, r, K::invalid, {std::to_string(limit + 1), std::to_string(limit)});

  r = request("x", 5, 4);
  r.sampling.temperature = -0.5f;
  expect_rejected(e, r, K::invalid, {"temperature"});
  r = request("x", 5, 4);
  r.sampling.top_p = 0;
  expect_rejected(e, r, K::invalid, {"top_p"});
  r = request("x", 5, 4);
  r.sampling.top_logprobs = 21;
  expect_rejected(e, r, K::invalid, {"top_logprobs"});
  r = request("x", 5, 4);
  r.stop_token_ids = {1, int32_t(vocab_)};
  expect_rejected(e, r, K::invalid, {"stop_token_ids", std::to_string(vocab_)});
  r = request("", 5, 4);
  expect_rejected(e, r, K::invalid, {"request id"});
  r = request("x", 5, 4);
  r.min_tokens = 5;
  expect_rejected(e, r, K::invalid, {"min_tokens 5", "max_tokens = 4"});
  r.min_tokens = -1;
  expect_rejected(e, r, K::invalid, {"min_tokens -1"});
  r = request("x", 5, 4);
  r.sampling.logit_bias = {{2, 1.0f}, {int32_t(vocab_), 1.0f}};
  expect_rejected(e, r, K::invalid, {"logit_bias", std::to_string(vocab_)});
  r.sampling.logit_bias = {{2, 1.0f}, {2, -1.0f}};
  expect_rejected(e, r, K::invalid, {"logit_bias", "twice"});
  r = request("x", 5, 4);
  r.prompt_logprobs = 21;
  expect_rejected(e, r, K::invalid, {"prompt_logprobs 21"});

  // A live id cannot be reused; once finished it can.
  Collector col;
  e.submit(request("dup", 5, 3), col.callback());
  expect_rejected(e, request("dup", 5, 3), K::invalid, {"'dup'", "in use"});
  ASSERT_TRUE(col.wait_finished({"dup"}));
  e.submit(request("dup", 5, 1), [](RequestOutput&&) {});
  e.shutdown(true);
  expect_rejected(e, request("late", 5, 1), K::shutting_down, {"shutting down"});
}

TEST_F(EngineLifecycle, ConfigErrorsNameBothNumbers) {
  EngineConfig c = config_;
  c.max_model_len = 4096;  // the pool holds 2048
  try {
    Engine e(*bundle_, c);
    FAIL() << "accepted";
  } catch (const Error& ex) {
    EXPECT_NE(std::string(ex.what()).find("4096"), std::string::npos) << ex.what();
    EXPECT_NE(std::string(ex.what()).find("2048"), std::string::npos) << ex.what();
  }
  c = config_;
  c.max_num_batched_tokens = 2;
  EXPECT_THROW(Engine(*bundle_, c), Error);
}

TEST_F(EngineLifecycle, FullQueueRefuses) {
  EngineConfig c = config_;
  c.max_queue = 0;
  Engine e(*bundle_, c);
  expect_rejected(e, request("q", 5, 2), RequestRejected::Kind::queue_full, {"max_queue 0"});
}

// Cancelling mid-generation: the final output says "abort" and by then the metrics show its
// blocks returned. With outputs handed out at the end of each step (the CPU's default) at most
// the step in flight adds a token; with them deferred to the next step's forward (a GPU's
// default, forced here with defer_outputs = 1) one computed token may not have reached the caller
// yet as well, so the final output adds at most two.
TEST_F(EngineLifecycle, CancelReturnsBlocksWithinAStep) {
  SCOPED_TRACE(seed_);
  for (int defer : {-1, 1})
    for (bool caching : {false, true}) {
      SCOPED_TRACE(fmt::format("defer_outputs {}, prefix caching {}", defer, caching));
      EngineConfig c = config_;
      c.enable_prefix_caching = caching;
      c.defer_outputs = defer;
      Engine e(*bundle_, c);
      Collector col;
      e.submit(request("c", 40, 500), col.callback());
      ASSERT_TRUE(col.wait_tokens("c", 3));
      EXPECT_GT(e.metrics().kv_blocks_used, 0);
      const size_t before = col.get("c").tokens.size();
      e.cancel("c");
      ASSERT_TRUE(col.wait_finished({"c"}, 30));
      const Collected got = col.get("c");
      EXPECT_EQ(got.finish_reason, "abort");
      EXPECT_LE(got.tokens.size(), before + (defer == 1 ? 2 : 1));
      const EngineMetrics m = e.metrics();
      EXPECT_EQ(m.kv_blocks_used, 0);
      EXPECT_EQ(m.running, 0);
      // Cached: the full blocks of what was computed (the last sampled token never was).
      const int64_t computed = 40 + int64_t(got.tokens.size()) - 1;
      EXPECT_EQ(m.kv_blocks_cached, caching ? computed / bundle_->kv_pool->block_size() : 0);
      e.cancel("c");        // finished: ignored
      e.cancel("unknown");  // never seen: ignored
    }
}

// An output callback that throws ends its own request ("abort", blocks returned) between steps,
// whether outputs go out at the end of a step or during the next one, and leaves the others
// alone: a request beside it gets all its tokens, equal to what it gets alone.
TEST_F(EngineLifecycle, ThrowingCallbackEndsOnlyItsRequest) {
  SCOPED_TRACE(seed_);
  const Request steady = request("steady", 12, 24);
  Collector alone;
  {
    Engine e(*bundle_, config_);
    e.submit(steady, alone.callback());
    ASSERT_TRUE(alone.wait_finished({"steady"}));
  }
  for (int defer : {0, 1}) {
    SCOPED_TRACE(fmt::format("defer_outputs {}", defer));
    EngineConfig c = config_;
    c.defer_outputs = defer;
    Engine e(*bundle_, c);
    Collector col;
    std::atomic<int> calls{0}, after_throw{0};
    std::atomic<bool> finished{false};
    std::string reason;
    std::mutex reason_mu;
    e.submit(request("thrower", 20, 400), [&](RequestOutput&& o) {
      const int n = ++calls;
      if (o.finished) {
        std::lock_guard lock(reason_mu);
        reason = o.finish_reason;
        finished = true;
        return;
      }
      if (n > 3) ++after_throw;
      if (n == 3) throw std::runtime_error("client went away");
    });
    e.submit(steady, col.callback());
    ASSERT_TRUE(col.wait_finished({"steady"}));
    for (int i = 0; i < 3000 && !finished; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(finished) << "the throwing request never got its final output";
    {
      std::lock_guard lock(reason_mu);
      EXPECT_EQ(reason, "abort");
    }
    EXPECT_EQ(after_throw.load(), 0) << "outputs kept coming after the callback threw";
    EXPECT_EQ(col.get("steady").tokens.size(), alone.get("steady").tokens.size());
    for (size_t i = 0; i < alone.get("steady").tokens.size(); ++i)
      EXPECT_EQ(col.get("steady").tokens[i].token, alone.get("steady").tokens[i].token) << i;
    const EngineMetrics m = e.metrics();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.running, 0);
  }
}

// A waiting request (max_num_seqs = 1 keeps it out of the running set) can be cancelled too.
TEST_F(EngineLifecycle, CancelWhileWaiting) {
  EngineConfig c = config_;
  c.max_num_seqs = 1;
  Engine e(*bundle_, c);
  Collector col;
  e.submit(request("first", 10, 200), col.callback());
  e.submit(request("second", 10, 5), col.callback());
  ASSERT_TRUE(col.wait_tokens("first", 1));
  e.cancel("second");
  ASSERT_TRUE(col.wait_finished({"second"}, 30));
  EXPECT_EQ(col.get("second").finish_reason, "abort");
  EXPECT_TRUE(col.get("second").tokens.empty());
  EXPECT_FALSE(col.get("first").finished);
  e.cancel("first");
  ASSERT_TRUE(col.wait_finished({"first"}, 30));
}

// A stop token ends the request with "stop" and is its last token; ignore_eos does not turn off
// the request's own stop_token_ids.
TEST_F(EngineLifecycle, StopTokenFinishesWithStop) {
  SCOPED_TRACE(seed_);
  Engine e(*bundle_, config_);
  Collector col;
  Request r = request("free", 20, 5);
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"free"}));
  const auto free_run = col.get("free").ids();
  ASSERT_EQ(free_run.size(), 5u);
  const size_t k = std::uniform_int_distribution<size_t>(1, 4)(rng_);
  r.id = "stopped";
  r.stop_token_ids = {free_run[k]};
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"stopped"}));
  const Collected got = col.get("stopped");
  EXPECT_EQ(got.finish_reason, "stop");
  const size_t first =
      size_t(std::find(free_run.begin(), free_run.end(), free_run[k]) - free_run.begin());
  EXPECT_EQ(got.ids(), std::vector<int32_t>(free_run.begin(), free_run.begin() + long(first) + 1));
}

// min_tokens: the stop tokens are not drawn before it. The request's first token then is the raw
// ranking's best that is not a stop token (the free run's top logprobs name it), and it runs on
// past the stop token that ended it without min_tokens.
TEST_F(EngineLifecycle, MinTokensHoldsBackStopTokens) {
  SCOPED_TRACE(seed_);
  Engine e(*bundle_, config_);
  Collector col;
  Request r = request("free", 20, 1);
  r.sampling.top_logprobs = 10;
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"free"}));
  const TokenOutput first = col.get("free").tokens.at(0);
  const std::vector<int32_t> model_stops = bundle_->tokenizer->stop_ids();
  auto is_stop = [&](int32_t t) {
    return t == first.token ||
           std::find(model_stops.begin(), model_stops.end(), t) != model_stops.end();
  };
  int32_t expected = -1;
  for (const TokenLogprob& alt : first.top)
    if (!is_stop(alt.token)) {
      expected = alt.token;
      break;
    }
  ASSERT_GE(expected, 0) << "the top 10 are all stop tokens";

  // Without min_tokens the free run's first token stops the request at once.
  r.id = "stopped";
  r.max_tokens = 6;
  r.ignore_eos = false;
  r.stop_token_ids = {first.token};
  e.submit(r, col.callback());
  const int32_t min_tokens = std::uniform_int_distribution<int32_t>(2, 6)(rng_);
  r.id = "held";
  r.min_tokens = min_tokens;
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"stopped", "held"}));
  EXPECT_EQ(col.get("stopped").ids(), std::vector<int32_t>{first.token});
  EXPECT_EQ(col.get("stopped").finish_reason, "stop");
  const Collected held = col.get("held");
  ASSERT_GE(held.tokens.size(), size_t(min_tokens)) << held.finish_reason;
  EXPECT_EQ(held.tokens[0].token, expected);
  for (int32_t i = 0; i < min_tokens; ++i)
    EXPECT_FALSE(is_stop(held.tokens[size_t(i)].token)) << "a stop token at " << i;
  // After min_tokens a stop token may end it as usual (then it is the last token).
  if (held.finish_reason == "stop")
    EXPECT_TRUE(is_stop(held.tokens.back().token));
  else
    EXPECT_EQ(held.tokens.size(), 6u);
}

// logit_bias: +100 on one token makes greedy decoding repeat it; the reported logprobs stay the
// raw ones (the free run's, for the first token).
TEST_F(EngineLifecycle, LogitBiasSteersGreedyDecoding) {
  SCOPED_TRACE(seed_);
  Engine e(*bundle_, config_);
  Collector col;
  Request r = request("free", 12, 1);
  r.sampling.top_logprobs = 20;
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"free"}));
  const TokenOutput free = col.get("free").tokens.at(0);
  // A token ranked 5th-20th by the raw logits, pushed to the top.
  const TokenLogprob pick =
      free.top.at(std::uniform_int_distribution<size_t>(4, free.top.size() - 1)(rng_));
  r.id = "biased";
  r.max_tokens = 4;
  r.sampling.top_logprobs = 0;
  r.sampling.logit_bias = {{pick.token, 100.0f}, {free.token, -100.0f}};
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"biased"}));
  const Collected got = col.get("biased");
  ASSERT_EQ(got.tokens.size(), 4u);
  for (const TokenOutput& t : got.tokens) EXPECT_EQ(t.token, pick.token);
  EXPECT_NEAR(got.tokens[0].logprob, pick.logprob, 1e-5);
}

// Prompt logprobs: the logprob of prompt token j is what the model gives it after tokens 0..j-1.
// The reference: for each j, a request with the prompt's first j tokens whose logit_bias makes
// token j the greedy choice, which reports its raw logprob from an ordinary sampling row. The
// prompt runs in chunks of a small token budget, with fewer prompt rows a step than it needs,
// beside other requests, and with its prefix in the cache (which such a request must not use).
TEST_F(EngineLifecycle, PromptLogprobsMatchTeacherForcedSampling) {
  SCOPED_TRACE(seed_);
  EngineConfig c = config_;
  c.max_num_batched_tokens = 16;
  c.max_prompt_logprob_rows = 5;
  Engine e(*bundle_, c);
  Collector col;
  const int n = std::uniform_int_distribution<int>(20, 40)(rng_);
  Request r = request("warm", n, 1);  // puts the prompt's blocks in the prefix cache
  e.submit(r, col.callback());
  ASSERT_TRUE(col.wait_finished({"warm"}));
  r.id = "p";
  r.max_tokens = 3;
  r.prompt_logprobs = 4;
  e.submit(r, col.callback());
  e.submit(request("other", 30, 4), col.callback());
  std::vector<std::string> ids = {"p", "other"};
  for (int j = 1; j < n; ++j) {
    Request t = greedy_request("t" + std::to_string(j),
                               std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + j), 1);
    t.sampling.top_logprobs = 0;
    t.sampling.logit_bias = {{r.prompt[size_t(j)], 100.0f}};
    e.submit(t, col.callback());
    ids.push_back(t.id);
  }
  ASSERT_TRUE(col.wait_finished(ids));
  const Collected p = col.get("p");
  EXPECT_EQ(p.cached_tokens, 0);
  ASSERT_EQ(p.prompt_logprobs.size(), size_t(n - 1));
  for (int j = 1; j < n; ++j) {
    const TokenOutput& got = p.prompt_logprobs[size_t(j - 1)];
    EXPECT_EQ(got.token, r.prompt[size_t(j)]) << j;
    const TokenOutput want = col.get("t" + std::to_string(j)).tokens.at(0);
    ASSERT_EQ(want.token, r.prompt[size_t(j)]) << j;
    EXPECT_NEAR(got.logprob, want.logprob, 1e-3) << "prompt token " << j;
    ASSERT_EQ(got.top.size(), 4u);
    for (size_t k = 1; k < got.top.size(); ++k)
      EXPECT_GE(got.top[k - 1].logprob, got.top[k].logprob);
    EXPECT_GE(got.top[0].logprob, got.logprob - 1e-6f);
  }
  EXPECT_EQ(p.ids().size(), 3u);
}

TEST_F(EngineLifecycle, ShutdownWithoutDrainAbortsEverything) {
  EngineConfig c = config_;
  c.max_num_seqs = 2;  // the rest wait
  Engine e(*bundle_, c);
  Collector col;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back("s" + std::to_string(i));
    e.submit(request(ids.back(), 12, 400), col.callback());
  }
  ASSERT_TRUE(col.wait_tokens("s0", 1));
  e.shutdown(false);  // returns once the engine thread has stopped
  for (const auto& id : ids) {
    const Collected got = col.get(id);
    EXPECT_TRUE(got.finished) << id;
    EXPECT_EQ(got.finish_reason, "abort") << id;
  }
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.running + m.waiting, 0);
  e.shutdown(false);  // twice is fine
}

TEST_F(EngineLifecycle, ShutdownWithDrainFinishesEverything) {
  Engine e(*bundle_, config_);
  Collector col;
  for (int i = 0; i < 3; ++i) e.submit(request("d" + std::to_string(i), 8, 3), col.callback());
  e.shutdown(true);
  for (int i = 0; i < 3; ++i) {
    const Collected got = col.get("d" + std::to_string(i));
    EXPECT_TRUE(got.finished);
    EXPECT_EQ(got.finish_reason, "length");
    EXPECT_EQ(got.tokens.size(), 3u);
  }
}

// The destructor with requests in flight and other threads submitting: every accepted request
// gets exactly one final output, and nothing is called after the destructor returns.
TEST_F(EngineLifecycle, DestructorJoinsWithRequestsInFlight) {
  std::atomic<int> finals{0}, accepted{0};
  std::atomic<bool> destroyed{false};
  {
    Engine e(*bundle_, config_);
    std::vector<std::thread> clients;
    for (int t = 0; t < 3; ++t) {
      clients.emplace_back([&, t] {
        std::mt19937 rng(uint32_t(t) * 7919u + 1);
        for (int i = 0; i < 4; ++i) {
          try {
            e.submit(greedy_request("t" + std::to_string(t) + "_" + std::to_string(i),
                                    random_prompt(rng, vocab_, 6), 50),
                     [&](RequestOutput&& o) {
                       EXPECT_FALSE(destroyed.load());
                       if (o.finished) ++finals;
                     });
            ++accepted;
          } catch (const RequestRejected&) {
          }
        }
      });
    }
    for (auto& c : clients) c.join();
    while (e.metrics().steps < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  destroyed = true;
  EXPECT_EQ(finals.load(), accepted.load());
  EXPECT_EQ(accepted.load(), 12);
}

}  // namespace
}  // namespace ridge::engine
