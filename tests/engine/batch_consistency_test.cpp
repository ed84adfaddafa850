// Prefix consistency: the same prompt run alone, split into prefill chunks, and inside a batch of
// other sequences (a mixed prefill + decode step, then lockstep decoding) gives the same greedy
// tokens. CPU: the default model, batch 8. GPU: RIDGE_TEST_DEVICE=cuda, RIDGE_TEST_MODEL=<path>,
// RIDGE_TEST_BATCH=64. Skips when the model is absent.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "ridge/engine/generator.h"
#include "ridge/engine/model_bundle.h"

namespace ridge::engine {
namespace {

std::string env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

class BatchConsistency : public ::testing::Test {
 protected:
  void SetUp() override {
    BundleOptions o;
    o.model_path = env("RIDGE_TEST_MODEL",
                       std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!std::filesystem::exists(o.model_path)) GTEST_SKIP() << "no model at " << o.model_path;
    o.device = env("RIDGE_TEST_DEVICE", "cpu");
    o.kv_tokens = 64 * 256;
    bundle_ = ModelBundle::load(o);
    batch_ = std::stoi(env("RIDGE_TEST_BATCH", "8"));
  }

  // Greedy tokens of `prompt` alone through the Generator, prefilled in chunks of `chunk`.
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int steps, int chunk) {
    Generator g(*bundle_->model, *bundle_->kv_pool, {});
    GenerateOptions opt;
    opt.max_tokens = steps;
    opt.ignore_eos = true;
    opt.sampling.temperature = 0;
    opt.prefill_chunk = chunk;
    std::vector<int32_t> out;
    g.generate(prompt, opt, [&](const GeneratedToken& t) {
      out.push_back(t.token);
      return true;
    });
    return out;
  }

  std::unique_ptr<ModelBundle> bundle_;
  int batch_ = 8;
};

TEST_F(BatchConsistency, AloneChunkedAndBatchedAgree) {
  const auto& cfg = bundle_->config();
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.vocab) - 1);
  auto random_prompt = [&](int n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = tok(rng);
    return p;
  };
  const int steps = 16;
  const std::vector<int32_t> target = random_prompt(45);
  const std::vector<int32_t> reference = alone(target, steps, 512);
  ASSERT_EQ(reference.size(), size_t(steps));
  EXPECT_EQ(alone(target, steps, 7), reference) << "chunked prefill (chunks of 7) differs";

  // Batch: the target at a random slot among batch_ sequences of other lengths; the first step
  // prefills all of them together, then every step decodes all of them.
  const int bs = int(bundle_->kv_pool->block_size());
  const int per_seq_blocks = (64 + steps + bs) / bs;
  ASSERT_LE(int64_t(batch_) * per_seq_blocks, bundle_->kv_pool->num_blocks());
  const int slot = int(rng() % uint32_t(batch_));
  std::vector<std::vector<int32_t>> prompts, tables(static_cast<size_t>(batch_));
  for (int s = 0; s < batch_; ++s) {
    prompts.push_back(s == slot ? target : random_prompt(1 + int(rng() % 60)));
    // Interleaved block ids, so that no sequence owns a contiguous range.
    for (int i = 0; i < per_seq_blocks; ++i) tables[size_t(s)].push_back(i * batch_ + s);
  }
  model::ForwardBatch fb;
  for (int s = 0; s < batch_; ++s)
    fb.add_sequence(prompts[size_t(s)], int32_t(prompts[size_t(s)].size()), tables[size_t(s)], bs, true);
  const int64_t V = cfg.vocab;
  std::vector<float> logits(static_cast<size_t>(batch_ * V));
  std::vector<int32_t> got;
  std::vector<int32_t> last(static_cast<size_t>(batch_));
  for (int step = 0; step < steps; ++step) {
    bundle_->model->forward({}, fb, bundle_->kv_pool->layers(), logits.data());
    for (int s = 0; s < batch_; ++s) {
      const float* row = logits.data() + s * V;
      last[size_t(s)] = int32_t(std::max_element(row, row + V) - row);
    }
    got.push_back(last[size_t(slot)]);
    fb.clear();
    for (int s = 0; s < batch_; ++s)
      fb.add_sequence({last[size_t(s)]}, int32_t(prompts[size_t(s)].size()) + step + 1,
                      tables[size_t(s)], bs, true);
  }
  EXPECT_EQ(got, reference) << "in a batch of " << batch_ << " at slot " << slot;
}

}  // namespace
}  // namespace ridge::engine
