// The engine's and the Generator's device-sampling path on the CPU: the default model over a
// backend whose sample() is the GPU kernel emulated on fibers (emulated_sampling.h). Greedy
// requests (with penalties and top logprobs) give the tokens of host sampling on the plain CPU
// backend; a seeded random request gives the same tokens run twice.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "kernels/emulated_sampling.h"
#include "ridge/engine/generator.h"
#include "ridge/engine/json_constraint.h"

namespace ridge::engine {
namespace {

using testing::Collected;
using testing::Collector;

constexpr int64_t kKvTokens = 1024;

// A second copy of the default model whose backend samples on the (emulated) device.
ModelBundle* emulated_bundle() {
  static std::unique_ptr<ModelBundle> b;
  if (!b) {
    if (!std::filesystem::exists(testing::default_model_path())) return nullptr;
    log::set_level(log::Level::warn);
    BundleOptions o;
    o.model_path = testing::default_model_path();
    o.device = "cpu";
    o.kv_tokens = kKvTokens;
    b = ModelBundle::load(o);
    b->model.reset();  // built on the plain backend; the KV pool stays (host memory)
    b->backend = kernels::emulation::make_sampling_backend(std::move(b->backend));
    b->model = std::make_unique<model::LlamaModel>(*b->weights, *b->backend);
  }
  return b.get();
}

std::map<std::string, Collected> run(ModelBundle& b, const std::vector<Request>& requests) {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.defer_outputs = 1;  // the GPU's path: each step's tokens handed out during the next step
  Collector col;
  std::vector<std::string> ids;
  {
    Engine engine(b, c);
    for (const Request& r : requests) {
      engine.submit(r, col.callback());
      ids.push_back(r.id);
    }
    EXPECT_TRUE(col.wait_finished(ids));
  }
  std::map<std::string, Collected> out;
  for (const auto& id : ids) out[id] = col.get(id);
  return out;
}

class EngineDeviceSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = emulated_bundle();
    host_ = testing::cpu_bundle(kKvTokens);
    if (!device_ || !host_) GTEST_SKIP() << "no model at " << testing::default_model_path();
    rng_.seed(std::random_device{}());
  }
  ModelBundle* device_ = nullptr;
  ModelBundle* host_ = nullptr;
  std::mt19937 rng_;
};

TEST_F(EngineDeviceSampling, GreedyEqualsHostSampling) {
  const int64_t V = host_->config().vocab;
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    Request r = testing::greedy_request("g" + std::to_string(i),
                                        testing::random_prompt(rng_, V, 5 + 9 * i), 6);
    r.sampling.top_logprobs = i;
    if (i >= 2) {
      r.sampling.repetition_penalty = 1.3f;
      r.sampling.frequency_penalty = 0.4f;
      r.sampling.presence_penalty = 0.2f;
    }
    reqs.push_back(r);
  }
  const int64_t calls = kernels::emulation::sample_calls();
  auto dev = run(*device_, reqs);
  EXPECT_GT(kernels::emulation::sample_calls(), calls) << "the device path did not run";
  auto host = run(*host_, reqs);
  for (const Request& r : reqs) {
    const Collected& d = dev[r.id];
    const Collected& h = host[r.id];
    EXPECT_EQ(d.ids(), h.ids()) << r.id;
    ASSERT_EQ(d.tokens.size(), h.tokens.size());
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      EXPECT_NEAR(d.tokens[i].logprob, h.tokens[i].logprob, 1e-4) << r.id << " token " << i;
      ASSERT_EQ(d.tokens[i].top.size(), h.tokens[i].top.size());
      for (size_t j = 0; j < d.tokens[i].top.size(); ++j)
        EXPECT_EQ(d.tokens[i].top[j].token, h.tokens[i].top[j].token);
    }
  }
}

// Logit biases and min_tokens (banned stop tokens) on the device path: the host's greedy tokens.
TEST_F(EngineDeviceSampling, BiasesAndMinTokensEqualHostSampling) {
  const int64_t V = host_->config().vocab;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V) - 1);
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    Request r = testing::greedy_request("b" + std::to_string(i),
                                        testing::random_prompt(rng_, V, 6 + 7 * i), 6);
    for (int j = 0; j < 3 + 40 * i; ++j) r.sampling.logit_bias.push_back({tok(rng_), 0.0f});
    std::sort(r.sampling.logit_bias.begin(), r.sampling.logit_bias.end(),
              [](const TokenBias& a, const TokenBias& b) { return a.token < b.token; });
    r.sampling.logit_bias.erase(
        std::unique(r.sampling.logit_bias.begin(), r.sampling.logit_bias.end(),
                    [](const TokenBias& a, const TokenBias& b) { return a.token == b.token; }),
        r.sampling.logit_bias.end());
    // Rows with min_tokens: the other biases are <= 0, so that the favoured stop token wins
    // once it may (a logit spread under 100).
    const float hi = i % 2 == 1 ? 0.0f : 100.0f;
    for (TokenBias& b : r.sampling.logit_bias)
      b.bias = std::uniform_real_distribution<float>(-100.0f, hi)(rng_);
    if (i % 2 == 1) {
      // Stop tokens, one of them favoured by the bias, held back for 4 tokens.
      r.ignore_eos = false;
      r.stop_token_ids = {r.sampling.logit_bias[0].token, r.sampling.logit_bias[1].token};
      r.sampling.logit_bias[0].bias = 100.0f;
      r.min_tokens = 4;
    }
    if (i == 3) r.sampling.repetition_penalty = 1.3f;
    reqs.push_back(r);
  }
  const int64_t calls = kernels::emulation::sample_calls();
  auto dev = run(*device_, reqs);
  EXPECT_GT(kernels::emulation::sample_calls(), calls) << "the device path did not run";
  auto host = run(*host_, reqs);
  for (const Request& r : reqs) {
    EXPECT_EQ(dev[r.id].ids(), host[r.id].ids()) << r.id;
    EXPECT_EQ(dev[r.id].finish_reason, host[r.id].finish_reason) << r.id;
    if (r.min_tokens > 0) {
      // The favoured stop token comes right after min_tokens.
      ASSERT_EQ(host[r.id].ids().size(), size_t(r.min_tokens) + 1) << r.id;
      EXPECT_EQ(host[r.id].ids().back(), r.stop_token_ids[0]) << r.id;
    }
  }
}

// Prompt logprobs on the device path: the rows after the sampling rows are copied back from the
// (emulated) device; the same tokens and logprobs as the host path, beside other requests.
TEST_F(EngineDeviceSampling, PromptLogprobsEqualHostSampling) {
  const int64_t V = host_->config().vocab;
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) {
    Request r = testing::greedy_request("p" + std::to_string(i),
                                        testing::random_prompt(rng_, V, 10 + 30 * i), 3);
    r.prompt_logprobs = i == 1 ? -1 : 2 + i;
    reqs.push_back(r);
  }
  const int64_t calls = kernels::emulation::sample_calls();
  auto dev = run(*device_, reqs);
  EXPECT_GT(kernels::emulation::sample_calls(), calls) << "the device path did not run";
  auto host = run(*host_, reqs);
  for (const Request& r : reqs) {
    const Collected& d = dev[r.id];
    const Collected& h = host[r.id];
    EXPECT_EQ(d.ids(), h.ids()) << r.id;
    ASSERT_EQ(d.prompt_logprobs.size(), r.prompt_logprobs < 0 ? 0 : r.prompt.size() - 1) << r.id;
    ASSERT_EQ(d.prompt_logprobs.size(), h.prompt_logprobs.size()) << r.id;
    for (size_t j = 0; j < d.prompt_logprobs.size(); ++j) {
      EXPECT_EQ(d.prompt_logprobs[j].token, r.prompt[j + 1]) << r.id << " " << j;
      EXPECT_NEAR(d.prompt_logprobs[j].logprob, h.prompt_logprobs[j].logprob, 1e-4) << r.id;
      ASSERT_EQ(d.prompt_logprobs[j].top.size(), size_t(r.prompt_logprobs)) << r.id;
    }
  }
}

// JSON mode on the device path: the constraint's banned lists (most of the vocabulary in some
// states) reach the kernel as -inf biases; greedy tokens equal host sampling's.
TEST_F(EngineDeviceSampling, JsonModeEqualsHostSampling) {
  const int64_t V = host_->config().vocab;
  std::vector<Request> reqs;
  for (int i = 0; i < 2; ++i) {
    Request r = testing::greedy_request("json" + std::to_string(i),
                                        testing::random_prompt(rng_, V, 8 + 5 * i), 24);
    r.ignore_eos = false;
    r.json_object = true;
    reqs.push_back(r);
  }
  const int64_t calls = kernels::emulation::sample_calls();
  auto dev = run(*device_, reqs);
  EXPECT_GT(kernels::emulation::sample_calls(), calls) << "the device path did not run";
  auto host = run(*host_, reqs);
  for (const Request& r : reqs) {
    EXPECT_EQ(dev[r.id].ids(), host[r.id].ids()) << r.id;
    JsonMachine m;
    std::vector<int32_t> out = host[r.id].ids();
    if (host[r.id].finish_reason == "stop") out.pop_back();
    EXPECT_TRUE(m.feed(host_->tokenizer->decode(out, true))) << r.id;
  }
}

// A seeded request draws the same tokens run again (the device generator is keyed by seed and
// step; among other requests the CPU matmul may round a row's logits differently, so only the
// sampler-level tests compare across batches).
TEST_F(EngineDeviceSampling, SeededDrawsRepeat) {
  const int64_t V = host_->config().vocab;
  Request r = testing::greedy_request("s", testing::random_prompt(rng_, V, 12), 8);
  r.sampling.temperature = 1.2f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = rng_();
  r.sampling.repetition_penalty = 1.1f;
  int64_t calls = kernels::emulation::sample_calls();
  const auto a = run(*device_, {r})["s"];
  EXPECT_GT(kernels::emulation::sample_calls(), calls) << "the device path did not run";
  calls = kernels::emulation::sample_calls();
  const auto b = run(*device_, {r})["s"];
  EXPECT_GT(kernels::emulation::sample_calls(), calls) << "the device path did not run again";
  EXPECT_EQ(a.ids(), b.ids());
  EXPECT_EQ(a.ids().size(), 8u);
  EXPECT_EQ(a.finish_reason, "length");
}

TEST_F(EngineDeviceSampling, GeneratorGreedyEqualsHostSampling) {
  const int64_t V = host_->config().vocab;
  const std::vector<int32_t> prompt = testing::random_prompt(rng_, V, 10);
  GenerateOptions opt;
  opt.max_tokens = 6;
  opt.ignore_eos = true;
  opt.sampling.temperature = 0;
  opt.sampling.top_logprobs = 3;
  opt.sampling.repetition_penalty = 1.2f;
  auto generate = [&](ModelBundle& b) {
    Generator g(*b.model, *b.kv_pool, {});
    std::vector<GeneratedToken> out;
    g.generate(prompt, opt, [&](const GeneratedToken& t) {
      out.push_back(t);
      return true;
    });
    return out;
  };
  const int64_t calls = kernels::emulation::sample_calls();
  const auto d = generate(*device_);
  EXPECT_EQ(kernels::emulation::sample_calls(), calls + 6);
  const auto h = generate(*host_);
  ASSERT_EQ(d.size(), h.size());
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].token, h[i].token) << i;
    EXPECT_NEAR(d[i].logprob, h[i].logprob, 1e-4) << i;
    ASSERT_EQ(d[i].top.size(), 3u);
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(d[i].top[j].token, h[i].top[j].token);
  }
}

}  // namespace
}  // namespace ridge::engine
