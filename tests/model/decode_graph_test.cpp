// The decode-graph path of LlamaModel::forward (padding to a bucket of sequences and block-table
// width, capture once, replay, re-capture when buffers move) checked on the CPU: a backend that
// delegates every op to the CPU reference and "captures" by keeping the body to re-run it on each
// replay. Logits of the real rows must equal those of the same steps run op by op on a plain
// CPU backend, bit for bit (the CPU ops compute each row independently of the batch size within
// one matmul path: T <= 4 or T > 4; the steps below keep the eager and the padded batch in the
// same path).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/core/log.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/llama.h"
#include "ridge/model/weights.h"
#include "cpu_delegate.h"

namespace ridge::model {
namespace {

using backend::Backend;
using backend::Stream;

class ReplayGraph final : public backend::Graph {
 public:
  ReplayGraph(std::function<void(const Stream&)> body, int* replays)
      : body_(std::move(body)), replays_(replays) {}
  void replay(const Stream& s) override {
    ++*replays_;
    body_(s);
  }

 private:
  std::function<void(const Stream&)> body_;
  int* replays_;
};

// Every op on the CPU reference; capture() returns a graph that re-runs the body.
class ReplayBackend final : public CpuDelegate {
 public:
  std::string name() const override { return "cpu-replay"; }
  void attention(const Stream& s, const Tensor& q, const backend::KvLayer& kv,
                 const backend::AttentionMeta& meta, float scale, Tensor& out) override {
    EXPECT_EQ(meta.fixed_splits, capturing_ ? -1 : 0);
    cpu_.attention(s, q, kv, meta, scale, out);
  }
  std::unique_ptr<backend::Graph> capture(const Stream& s,
                                          const std::function<void(const Stream&)>& body) override {
    (void)s;
    ++captures;
    // The body's arguments are fixed at capture (as in a CUDA graph): keep a copy of it.
    capturing_ = true;
    auto g = std::make_unique<ReplayGraph>(
        [this, body](const Stream& st) {
          capturing_ = true;
          body(st);
          capturing_ = false;
        },
        &replays);
    capturing_ = false;
    return g;
  }

  int captures = 0;
  int replays = 0;

 private:
  bool capturing_ = false;
};

std::string model_path() {
  return std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

TEST(DecodeGraph, PaddedReplayEqualsEagerSteps) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not installed";
  log::set_level(log::Level::warn);
  auto weights = ModelWeights::load(model_path());
  const ModelConfig& c = weights->config();
  backend::CpuBackend cpu(2);
  ReplayBackend replay;
  LlamaModel eager(*weights, cpu), graphed(*weights, replay);
  constexpr int64_t kBlock = 16, kBlocks = 80;
  kv::KvPool pool_a(cpu, c, kBlocks, kBlock, DType::f32);
  kv::KvPool pool_b(replay, c, kBlocks, kBlock, DType::f32);
  // Block tables of up to 16 entries: contexts past 8 blocks move the graph to the 16-wide bucket.
  eager.reserve(8, 8, 16);
  graphed.reserve(8, 8, 16);

  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab) - 1);
  // Six sequences with disjoint, shuffled blocks and prompts of different lengths.
  std::vector<int32_t> blocks(kBlocks);
  for (int32_t i = 0; i < kBlocks; ++i) blocks[size_t(i)] = i;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<Seq> seqs(6);
  const int prompt_lens[6] = {5, 17, 30, 9, 40, 100};
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int i = 0; i < prompt_lens[s]; ++i) seqs[s].tokens.push_back(tok(rng));
    seqs[s].table.assign(blocks.begin() + long(s) * 10, blocks.begin() + long(s) * 10 + 10);
  }
  const size_t V = size_t(c.vocab);
  auto run_both = [&](const std::vector<size_t>& which, int new_tokens) {
    ForwardBatch b;
    for (size_t s : which) {
      const Seq& q = seqs[s];
      const int32_t ctx = int32_t(q.tokens.size());
      std::vector<int32_t> fresh(q.tokens.end() - new_tokens, q.tokens.end());
      const int32_t used = (ctx + kBlock - 1) / kBlock;
      std::vector<int32_t> table(q.table.begin(), q.table.begin() + used);
      b.add_sequence(fresh, ctx, table, kBlock, true);
    }
    std::vector<float> la(which.size() * V), lb(which.size() * V);
    eager.forward({}, b, pool_a.layers(), la.data());
    graphed.forward({}, b, pool_b.layers(), lb.data());
    return std::make_pair(la, lb);
  };
  // Prefill every prompt (eager on both).
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto [la, lb] = run_both({s}, int(seqs[s].tokens.size()));
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << "prefill of sequence " << s;
  }
  EXPECT_EQ(graphed.stats().graph_steps, 0);
  // Decode steps with 1, 3 (bucket 4) and 6 (bucket 8) sequences; sequence 5 crosses 128 tokens
  // (8 blocks) during the run, which moves the block-table bucket from 8 to 16.
  const std::vector<std::vector<size_t>> steps = {{0}, {0, 2, 4}, {0, 1, 2, 3, 4, 5}, {5}, {1, 3, 5}};
  for (int round = 0; round < 12; ++round) {
    for (const auto& which : steps) {
      for (size_t s : which) seqs[s].tokens.push_back(tok(rng));
      auto [la, lb] = run_both(which, 1);
      ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4))
          << "decode round " << round << " with " << which.size() << " sequences";
    }
  }
  EXPECT_EQ(graphed.stats().graph_steps, 12 * int64_t(steps.size()));
  EXPECT_EQ(eager.stats().graph_steps, 0);  // the CPU backend has no graphs
  // Buckets (1, 8), (4, 8), (8, 8) and, past 128 tokens, the 16-wide ones: captured once each.
  EXPECT_GE(replay.captures, 4);
  EXPECT_LE(replay.captures, 7);
  EXPECT_EQ(replay.replays, 12 * int(steps.size()));
  EXPECT_GT(seqs[5].tokens.size(), size_t(8 * kBlock));

  // A step larger than any before moves the buffers: graphs are captured anew and still agree.
  const int before = replay.captures;
  seqs.push_back({});
  for (int i = 0; i < 120; ++i) seqs.back().tokens.push_back(tok(rng));
  seqs.back().table.assign(blocks.begin() + 60, blocks.begin() + 70);
  {
    auto [la, lb] = run_both({6}, 120);
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << "prefill of 120 tokens";
  }
  // Bucket (1, 8) was captured before the move: it is captured again, once, then replayed.
  for (size_t s : {size_t(0), size_t(6)}) {
    seqs[s].tokens.push_back(tok(rng));
    auto [la, lb] = run_both({s}, 1);
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << "decode after the move";
  }
  EXPECT_EQ(replay.captures, before + 1);
}

}  // namespace
}  // namespace ridge::model
