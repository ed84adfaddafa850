// The GPU sampler's per-row algorithm (kernels/cuda/sampling/sample_row.cuh) run on the CPU: each
// CUDA thread is a fiber of simt::Block (forward, reverse and random schedules), so the kernel's
// logic - radix selects, tie handling, penalties, reductions, barriers - is checked against
// engine::Sampler without a GPU. Numerics (CUDA's expf/logf) and speed are the GPU harness's job
// (tests/gpu_backend/sampling_test.cpp).
#include "kernels/cuda_host_shim.h"
// The device code under test, compiled for the host.
#include "ridge/kernels/cuda/sampling/sample_row.cuh"

#include <map>
#include <tuple>
#include <memory>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "kernels/sampling_reference.h"

namespace ridge::kernels {
namespace {

using engine::SamplingParams;
using sampling_test::allowed_set;
using sampling_test::penalized;

// The emulator itself: the random schedule holds warps back at barriers, so a read that a missing
// barrier leaves unordered with a write sees the wrong value in some runs.
TEST(SimtEmulator, RandomScheduleExposesAMissingBarrier) {
  int x = 0;
  std::vector<int> seen(64);
  auto body = [&](bool second_barrier) {
    __syncthreads();
    if (threadIdx.x == 0) x = 1;
    if (second_barrier) __syncthreads();
    seen[threadIdx.x] = x;
  };
  int racy_runs = 0;
  for (uint32_t seed = 1; seed <= 16; ++seed)
    for (bool fixed : {false, true}) {
      x = 0;
      simt::Block block(64, simt::Order::random, seed);
      ASSERT_EQ(block.run(0, [&] { body(fixed); }), "");
      const bool all_saw_write = std::count(seen.begin(), seen.end(), 1) == 64;
      if (fixed) {
        EXPECT_TRUE(all_saw_write);
      }
      racy_runs += !all_saw_write;
    }
  EXPECT_GT(racy_runs, 0);
  // A barrier that some threads skip is a deadlock.
  simt::Block block(64, simt::Order::forward);
  EXPECT_NE(block.run(0,
                      [&] {
                        if (threadIdx.x < 32) __syncthreads();
                      }),
            "");
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Random123's kat_vectors, philox4x32 with 10 rounds: counter[4], key[2] -> out[4].
  struct Kat {
    uint32_t c[4], k[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 r = philox4x32_10(k.c[0], k.c[1], k.c[2], k.c[3], k.k[0], k.k[1]);
    EXPECT_EQ(r.x, k.out[0]);
    EXPECT_EQ(r.y, k.out[1]);
    EXPECT_EQ(r.z, k.out[2]);
    EXPECT_EQ(r.w, k.out[3]);
  }
}

SampleRowParams to_row(const SamplingParams& sp, uint64_t step) {
  SampleRowParams p;
  p.temperature = sp.temperature;
  p.top_k = sp.top_k;
  p.top_p = sp.top_p;
  p.min_p = sp.min_p;
  p.repetition_penalty = sp.repetition_penalty;
  p.presence_penalty = sp.presence_penalty;
  p.frequency_penalty = sp.frequency_penalty;
  p.top_logprobs = sp.top_logprobs;
  p.seed = sp.seed;
  p.step = step;
  return p;
}

// A batch as the host would build it.
struct Batch {
  int64_t V = 0;
  int64_t ld = 0;
  int64_t offset = 0;  // floats before row 0 (offset % 4 != 0: rows not 16-byte aligned)
  std::vector<float> storage;
  std::vector<SampleRowParams> params;
  std::vector<int32_t> pen_ids, pen_counts;
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  std::vector<uint32_t> masks;
  int32_t top_n = 0;

  Batch(int64_t vocab, int64_t row_stride, int64_t first)
      : V(vocab), ld(row_stride), offset(first) {}
  float* row(size_t r) { return storage.data() + offset + int64_t(r) * ld; }
  // Appends a row; prompt/output become its penalty list (distinct tokens, output counts).
  // sp.logit_bias and `banned` become its bias list (as_mask: `banned` becomes its ban mask).
  void add(const std::vector<float>& logits, const SamplingParams& sp, uint64_t step,
           const std::vector<int32_t>& prompt = {}, const std::vector<int32_t>& output = {},
           const std::vector<int32_t>& banned = {}, bool as_mask = false) {
    const size_t r = params.size();
    storage.resize(size_t(offset + int64_t(r + 1) * ld + 8), 0.0f);
    std::copy(logits.begin(), logits.end(), row(r));
    SampleRowParams p = to_row(sp, step);
    std::tie(p.penalty_begin, p.penalty_end) =
        sampling_test::append_penalties(prompt, output, pen_ids, pen_counts);
    std::tie(p.bias_begin, p.bias_end) = sampling_test::append_biases(
        sp, as_mask ? std::vector<int32_t>{} : banned, bias_ids, bias_values);
    if (as_mask) {
      const size_t words = size_t((V + 31) / 32);
      p.ban_mask = int32_t(masks.size() / words);
      masks.resize(masks.size() + words, 0u);
      for (int32_t t : banned)
        if (t >= 0 && t < V) masks[size_t(p.ban_mask) * words + size_t(t / 32)] |= 1u << (t % 32);
    }
    params.push_back(p);
    top_n = std::max(top_n, sp.top_logprobs);
  }
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> top_ids;
  std::vector<float> top_lp;
};

template <int kT>
Result run(Batch& b, bool staged, simt::Order order, uint32_t schedule_seed = 1) {
  const int64_t R = int64_t(b.params.size());
  const int64_t padded = (b.V + 3) / 4 * 4;
  Result res;
  res.tokens.assign(size_t(R), -7);
  res.logprobs.assign(size_t(R), NAN);
  res.top_ids.assign(size_t(R * b.top_n), -7);
  res.top_lp.assign(size_t(R * b.top_n), NAN);
  std::vector<float4> stage(size_t(padded / 4));
  std::vector<float4> workspace(staged ? 0 : size_t(R * padded / 4));
  // Ids past the end must be skipped by the kernel: pad the arrays so that reads stay in bounds.
  std::vector<int32_t> ids = b.pen_ids, counts = b.pen_counts;
  ids.push_back(0);
  counts.push_back(0);
  std::vector<int32_t> bias_ids = b.bias_ids;
  std::vector<float> bias_values = b.bias_values;
  bias_ids.push_back(0);
  bias_values.push_back(0.0f);
  SampleArgs a;
  a.logits = b.row(0);
  a.ld = b.ld;
  a.rows = R;
  a.vocab = b.V;
  a.params = b.params.data();
  a.penalty_ids = ids.data();
  a.penalty_counts = counts.data();
  a.bias_ids = bias_ids.data();
  a.bias_values = bias_values.data();
  a.ban_masks = b.masks.data();
  a.workspace = staged ? nullptr : reinterpret_cast<float*>(workspace.data());
  a.tokens = res.tokens.data();
  a.logprobs = res.logprobs.data();
  a.top_ids = res.top_ids.data();
  a.top_logprobs = res.top_lp.data();
  a.top_n = b.top_n;
  a.staged = staged;
  a.ws_ld = padded;
  static auto sh = std::make_unique<sampling_detail::Shared>();
  std::memset(sh.get(), 0xa5, sizeof(*sh));  // garbage, as fresh shared memory
  simt::Block block(kT, order, schedule_seed);
  for (int64_t r = 0; r < R; ++r) {
    const std::string err = block.run(int(r), [&] {
      sampling_detail::sample_row<kT>(
          a, int(r), staged ? reinterpret_cast<float*>(stage.data()) : nullptr, *sh);
    });
    EXPECT_EQ(err, "") << "row " << r;
    if (!err.empty()) break;
  }
  return res;
}

std::vector<float> normal_logits(int64_t V, std::mt19937& rng, float scale = 3.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(V));
  for (auto& x : v) x = d(rng);
  return v;
}

// Logits on a coarse grid: many exact ties, including at top-k / top-n boundaries; one -0.0.
std::vector<float> tied_logits(int64_t V, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-12, 12);
  std::vector<float> v(static_cast<size_t>(V));
  for (auto& x : v) x = 0.5f * float(d(rng));
  for (auto& x : v)
    if (x == 0.0f) {
      x = -0.0f;
      break;
    }
  return v;
}

const simt::Order kOrders[] = {simt::Order::forward, simt::Order::reverse, simt::Order::random};

void expect_logprob(float got, float ref, const char* what) {
  EXPECT_NEAR(got, ref, 2e-6 + 4 * 1.2e-7 * std::abs(ref)) << what;
}

// Greedy: the CPU Sampler's token (lowest id among equals), its raw logprob and raw top-n.
void check_greedy(int64_t V, int64_t ld, int64_t offset, bool staged, simt::Order order, bool ties,
                  uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b(V, ld, offset);
  std::vector<std::vector<float>> rows;
  std::vector<SamplingParams> sps;
  for (int r = 0; r < 3; ++r) {
    rows.push_back(ties ? tied_logits(V, rng) : normal_logits(V, rng));
    SamplingParams sp;
    sp.temperature = 0;
    sp.top_logprobs = r == 0 ? 20 : r == 1 ? 3 : 0;
    sps.push_back(sp);
    b.add(rows.back(), sp, 0);
  }
  const Result got = run<64>(b, staged, order, seed);
  for (size_t r = 0; r < rows.size(); ++r) {
    engine::Sampler cpu(sps[r]);
    std::vector<float> copy = rows[r];
    const engine::SampleResult ref = cpu.sample(copy, {}, {});
    SCOPED_TRACE(::testing::Message() << "V " << V << " row " << r << " staged " << staged
                                      << " offset " << offset << " seed " << seed);
    EXPECT_EQ(got.tokens[r], ref.token);
    expect_logprob(got.logprobs[r], ref.logprob, "chosen logprob");
    for (int j = 0; j < b.top_n; ++j) {
      const size_t at = r * size_t(b.top_n) + size_t(j);
      if (size_t(j) < ref.top.size()) {
        EXPECT_EQ(got.top_ids[at], ref.top[size_t(j)].token) << "top " << j;
        expect_logprob(got.top_lp[at], ref.top[size_t(j)].logprob, "top logprob");
      } else {
        EXPECT_EQ(got.top_ids[at], -1) << "unused top slot " << j;
        EXPECT_EQ(got.top_lp[at], -INFINITY) << "unused top slot " << j;
      }
    }
  }
}

TEST(SamplingEmulation, GreedyAndTopLogprobsMatchCpuSampler) {
  const uint32_t seed = std::random_device{}();
  int i = 0;
  for (int64_t V : {1, 2, 5, 37, 1000, 4099})
    for (bool ties : {false, true})
      for (bool staged : {true, false}) {
        const simt::Order order = kOrders[i % 3];
        // Aligned rows, and rows at an odd offset with an odd stride (no 16-byte loads).
        check_greedy(V, V, 0, staged, order, ties, seed + uint32_t(i++));
        check_greedy(V, V + 3, 1, staged, order, ties, seed + uint32_t(i++));
      }
}

TEST(SamplingEmulation, FullBlockOf512Threads) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int64_t V = 5003;
  Batch b(V, V, 0);
  std::vector<float> logits = tied_logits(V, rng);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.top_logprobs = 7;
  b.add(logits, greedy, 0);
  SamplingParams topk;
  topk.top_k = 40;
  topk.top_p = 0.8f;
  topk.seed = 5;
  b.add(logits, topk, 3);
  const Result got = run<512>(b, true, simt::Order::random, seed);
  engine::Sampler cpu(greedy);
  std::vector<float> copy = logits;
  const engine::SampleResult ref = cpu.sample(copy, {}, {});
  EXPECT_EQ(got.tokens[0], ref.token);
  for (int j = 0; j < 7; ++j) EXPECT_EQ(got.top_ids[size_t(j)], ref.top[size_t(j)].token);
  const auto allowed = allowed_set(logits, topk);
  EXPECT_TRUE(allowed.contains(got.tokens[1])) << got.tokens[1];
}

// Penalties, greedy: the penalized argmax equals the CPU Sampler's for random histories.
TEST(SamplingEmulation, PenaltiesMatchCpuSampler) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  for (bool staged : {true, false}) {
    const int64_t V = 301;
    Batch b(V, V, 0);
    std::vector<std::vector<float>> rows;
    std::vector<SamplingParams> sps;
    std::vector<std::vector<int32_t>> prompts, outputs;
    for (int r = 0; r < 24; ++r) {
      // Few distinct high logits so that penalties often change the winner.
      std::vector<float> l = normal_logits(V, rng, 1.0f);
      std::uniform_int_distribution<int32_t> tok(0, 12);
      for (int j = 0; j < 12; ++j) l[size_t(tok(rng))] = 4.0f + 0.25f * float(j % 3);
      SamplingParams sp;
      sp.temperature = 0;
      sp.repetition_penalty = r % 3 == 0 ? 1.0f : 0.5f + 2.0f * u(rng);
      sp.presence_penalty = r % 4 == 1 ? 0.0f : -2.0f + 4.0f * u(rng);
      sp.frequency_penalty = r % 5 == 2 ? 0.0f : -2.0f + 4.0f * u(rng);
      std::vector<int32_t> prompt, output;
      for (int j = 0; j < 10; ++j) prompt.push_back(tok(rng));
      for (int j = 0; j < 15; ++j) output.push_back(tok(rng));
      if (r == 5) output.push_back(int32_t(V) + 3);  // outside the vocabulary: skipped
      rows.push_back(l);
      sps.push_back(sp);
      prompts.push_back(prompt);
      outputs.push_back(output);
      b.add(l, sp, 0, prompt, output);
    }
    const Result got = run<64>(b, staged, kOrders[seed % 3], seed);
    for (size_t r = 0; r < rows.size(); ++r) {
      engine::Sampler cpu(sps[r]);
      std::vector<float> copy = rows[r];
      const engine::SampleResult ref = cpu.sample(copy, prompts[r], outputs[r]);
      EXPECT_EQ(got.tokens[r], ref.token) << "row " << r << " seed " << seed;
      expect_logprob(got.logprobs[r], ref.logprob, "raw logprob of the penalized choice");
    }
  }
}

// Random logit biases (ids outside the vocabulary included) and banned tokens, alone and with
// penalties on the same tokens: the CPU Sampler's greedy token and raw logprob.
TEST(SamplingEmulation, BiasesAndBansMatchCpuSampler) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  for (bool staged : {true, false}) {
    const int64_t V = 301;
    Batch b(V, V, 0);
    std::vector<std::vector<float>> rows;
    std::vector<SamplingParams> sps;
    std::vector<std::vector<int32_t>> prompts, outputs, bans;
    std::uniform_int_distribution<int32_t> tok(0, 12);
    for (int r = 0; r < 24; ++r) {
      std::vector<float> l = normal_logits(V, rng, 1.0f);
      for (int j = 0; j < 12; ++j) l[size_t(tok(rng))] = 4.0f + 0.25f * float(j % 3);
      SamplingParams sp;
      sp.temperature = 0;
      if (r % 2 == 0) {
        sp.repetition_penalty = 0.5f + 2.0f * u(rng);
        sp.presence_penalty = -2.0f + 4.0f * u(rng);
      }
      std::set<int32_t> ids;
      while (ids.size() < size_t(r % 7)) ids.insert(tok(rng));
      for (int32_t t : ids) sp.logit_bias.push_back({t, -6.0f + 12.0f * u(rng)});
      if (r == 3) sp.logit_bias.push_back({int32_t(V) + 5, 50.0f});  // outside: skipped
      std::vector<int32_t> banned;
      if (r % 3 != 0) {
        // The raw argmax (so that a ban changes the winner), and one of the biased ids.
        banned.push_back(int32_t(std::max_element(l.begin(), l.end()) - l.begin()));
        if (!ids.empty()) banned.push_back(*ids.begin());
        if (r == 4) banned.push_back(-3);  // outside: skipped
      }
      // Rows 2 mod 4 ban most of the vocabulary through a mask, as JSON mode does.
      const bool as_mask = r % 4 == 2;
      if (as_mask)
        for (int32_t t = 0; t < int32_t(V); ++t)
          if (u(rng) < 0.7f) banned.push_back(t);
      std::sort(banned.begin(), banned.end());
      banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
      std::vector<int32_t> prompt, output;
      for (int j = 0; j < 6; ++j) prompt.push_back(tok(rng));
      for (int j = 0; j < 8; ++j) output.push_back(tok(rng));
      rows.push_back(l);
      sps.push_back(sp);
      prompts.push_back(prompt);
      outputs.push_back(output);
      bans.push_back(banned);
      b.add(l, sp, 0, prompt, output, banned, as_mask);
    }
    const Result got = run<64>(b, staged, kOrders[seed % 3], seed);
    for (size_t r = 0; r < rows.size(); ++r) {
      engine::Sampler cpu(sps[r]);
      std::vector<float> copy = rows[r];
      const engine::SampleResult ref = cpu.sample(copy, prompts[r], outputs[r], bans[r]);
      EXPECT_EQ(got.tokens[r], ref.token) << "row " << r << " seed " << seed;
      for (int32_t t : bans[r]) EXPECT_NE(got.tokens[r], t) << "banned, row " << r;
      expect_logprob(got.logprobs[r], ref.logprob, "raw logprob of the adjusted choice");
    }
  }
}

// Draws with biases and bans lie in the CPU Sampler's set for the adjusted logits, never on a
// banned token.
TEST(SamplingEmulation, DrawsWithBiasesAndBansStayInTheCpuSamplersSet) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int64_t V = 200;
  int checked = 0;
  for (bool staged : {true, false})
    for (int c = 0; c < 6; ++c) {
      const std::vector<float> logits = normal_logits(V, rng, 2.0f);
      SamplingParams sp;
      sp.temperature = c % 2 ? 0.8f : 1.3f;
      sp.top_k = c % 3 == 0 ? 8 : 0;
      sp.top_p = c % 3 == 1 ? 0.8f : 1.0f;
      sp.seed = rng();
      std::uniform_int_distribution<int32_t> tok(0, int32_t(V) - 1);
      for (int32_t t : {tok(rng), tok(rng)}) sp.logit_bias.push_back({t, 8.0f});
      if (sp.logit_bias[0].token == sp.logit_bias[1].token) sp.logit_bias.pop_back();
      const std::vector<int32_t> banned = {
          int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()),
          sp.logit_bias[0].token};
      const auto adjusted = sampling_test::penalized(logits, sp, {}, {}, banned);
      SamplingParams plain = sp;
      plain.logit_bias.clear();
      const auto allowed = allowed_set(adjusted, plain);
      if (allowed.margin < 1e-4) continue;
      Batch b(V, V, 0);
      for (uint64_t step = 0; step < 16; ++step)
        b.add(logits, sp, step * 31 + 2, {}, {}, banned, step % 2 == 1);
      const Result got = run<64>(b, staged, kOrders[checked % 3], seed);
      for (size_t r = 0; r < b.params.size(); ++r) {
        EXPECT_TRUE(allowed.contains(got.tokens[r]))
            << "drew " << got.tokens[r] << " seed " << seed;
        for (int32_t t : banned) EXPECT_NE(got.tokens[r], t) << "banned, seed " << seed;
      }
      ++checked;
    }
  EXPECT_GT(checked, 6);
}

// Sampling: the token always lies in the CPU Sampler's allowed set.
TEST(SamplingEmulation, DrawsStayInTheCpuSamplersSet) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  struct Case {
    int32_t top_k;
    float top_p, min_p, temperature;
  };
  const Case cases[] = {
      {1, 1.0f, 0.0f, 1.0f},   {3, 1.0f, 0.0f, 1.0f},   {10, 1.0f, 0.0f, 0.7f},
      {0, 0.3f, 0.0f, 1.0f},   {0, 0.9f, 0.0f, 1.5f},   {0, 1.0f, 0.3f, 1.0f},
      {0, 1.0f, 0.05f, 2.0f},  {20, 0.5f, 0.0f, 1.0f},  {5, 0.95f, 0.1f, 0.8f},
      {200, 0.7f, 0.0f, 1.0f}, {0, 0.99f, 0.01f, 1.0f}, {7, 1.0f, 0.0f, 1e-3f},
  };
  int checked = 0;
  for (bool ties : {false, true})
    for (bool staged : {true, false})
      for (const Case& c : cases) {
        const int64_t V = 250;
        const std::vector<float> logits = ties ? tied_logits(V, rng) : normal_logits(V, rng, 2.0f);
        SamplingParams sp;
        sp.top_k = c.top_k;
        sp.top_p = c.top_p;
        sp.min_p = c.min_p;
        sp.temperature = c.temperature;
        sp.seed = rng();
        const auto allowed = allowed_set(logits, sp);
        if (allowed.margin < 1e-4) continue;  // a knife edge: float and double may differ
        Batch b(V, V, 0);
        for (uint64_t step = 0; step < 8; ++step) b.add(logits, sp, step * 977 + 1);
        const Result got = run<64>(b, staged, kOrders[checked % 3], seed);
        for (size_t r = 0; r < b.params.size(); ++r)
          EXPECT_TRUE(allowed.contains(got.tokens[r]))
              << "drew " << got.tokens[r] << ": top_k " << c.top_k << " top_p " << c.top_p
              << " min_p " << c.min_p << " T " << c.temperature << " ties " << ties << " seed "
              << seed;
        ++checked;
      }
  EXPECT_GT(checked, 30);
}

// Top-k whose boundary splits a group of equal logits: the lowest ids of the group are admitted.
TEST(SamplingEmulation, TopKSplittingEqualLogitsAdmitsLowestIds) {
  const int64_t V = 64;
  std::vector<float> logits(size_t(V), -5.0f);
  logits[10] = 3.0f;
  for (int i : {40, 7, 55, 21, 33}) logits[size_t(i)] = 1.0f;  // five equal, top-3 takes 2 of them
  SamplingParams sp;
  sp.top_k = 3;
  sp.temperature = 50.0f;  // nearly uniform over the set
  Batch b(V, V, 0);
  for (uint64_t step = 0; step < 60; ++step) b.add(logits, sp, step);
  const Result got = run<32>(b, true, simt::Order::reverse);
  std::set<int32_t> seen(got.tokens.begin(), got.tokens.end());
  EXPECT_EQ(seen, (std::set<int32_t>{7, 10, 21}));
}

// Top-p whose cut falls inside a group of equal logits: the CPU admits the group's lowest ids.
TEST(SamplingEmulation, TopPSplittingEqualLogitsAdmitsLowestIds) {
  const int64_t V = 64;
  std::vector<float> logits(size_t(V), -5.0f);
  logits[30] = 3.0f;
  for (int i : {50, 12, 44, 3, 61}) logits[size_t(i)] = 1.0f;
  SamplingParams sp;
  sp.top_p = 0.71f;  // the top token and two of the five equal ones reach 0.71 of the mass
  const auto allowed = allowed_set(logits, sp);
  ASSERT_EQ(std::set<int32_t>(allowed.tokens.begin(), allowed.tokens.end()),
            (std::set<int32_t>{3, 12, 30}));
  ASSERT_GT(allowed.margin, 1e-3);
  sp.temperature = 1.0f;
  Batch b(V, V, 0);
  for (uint64_t step = 0; step < 80; ++step) b.add(logits, sp, step);
  const Result got = run<64>(b, false, simt::Order::random, 3);
  std::set<int32_t> seen(got.tokens.begin(), got.tokens.end());
  EXPECT_EQ(seen, (std::set<int32_t>{3, 12, 30}));
}

// Edge parameters: top_k >= V is off; a temperature whose inverse overflows is greedy; V = 1.
TEST(SamplingEmulation, EdgeParameters) {
  std::mt19937 rng(std::random_device{}());
  const int64_t V = 40;
  const std::vector<float> logits = normal_logits(V, rng, 1.0f);
  const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Batch b(V, V, 0);
  SamplingParams all;
  all.top_k = int32_t(V);
  all.temperature = 100.0f;
  for (uint64_t step = 0; step < 40; ++step) b.add(logits, all, step);
  SamplingParams tiny;
  tiny.temperature = 1e-39f;  // 1 / t overflows to inf
  b.add(logits, tiny, 0);
  const Result got = run<32>(b, true, simt::Order::forward);
  EXPECT_GT(std::set<int32_t>(got.tokens.begin(), got.tokens.begin() + 40).size(), 10u);
  EXPECT_EQ(got.tokens[40], best);

  Batch one(1, 1, 0);
  SamplingParams sp;
  sp.top_p = 0.5f;
  sp.top_k = 3;
  sp.min_p = 0.5f;
  sp.top_logprobs = 5;
  one.add({0.25f}, sp, 0);
  const Result r1 = run<32>(one, false, simt::Order::reverse);
  EXPECT_EQ(r1.tokens[0], 0);
  EXPECT_FLOAT_EQ(r1.logprobs[0], 0.0f);
  EXPECT_EQ(r1.top_ids[0], 0);
  EXPECT_EQ(r1.top_ids[1], -1);
}

// The same row, seed and step give the same token wherever the row sits in the batch.
TEST(SamplingEmulation, SameSeedSameTokenWhateverTheBatch) {
  std::mt19937 rng(std::random_device{}());
  const int64_t V = 500;
  const std::vector<float> logits = normal_logits(V, rng, 1.0f);
  SamplingParams sp;
  sp.seed = 1234567890123ull;
  sp.top_p = 0.95f;
  Batch alone(V, V, 0), mixed(V, V, 0);
  for (uint64_t step = 0; step < 6; ++step) alone.add(logits, sp, step);
  for (uint64_t step = 0; step < 6; ++step) {
    SamplingParams other;
    other.seed = rng();
    other.top_k = 5;
    mixed.add(normal_logits(V, rng), other, step);
    mixed.add(logits, sp, step);
  }
  const Result a = run<64>(alone, true, simt::Order::forward);
  const Result m = run<64>(mixed, false, simt::Order::random, 9);
  for (size_t s = 0; s < 6; ++s) EXPECT_EQ(a.tokens[s], m.tokens[2 * s + 1]) << "step " << s;
  // Different steps give different draws (a near-uniform row: 6 equal tokens would be a bug).
  EXPECT_GT(std::set<int32_t>(a.tokens.begin(), a.tokens.end()).size(), 1u);
}

// A small distribution check (the GPU harness runs the large ones).
TEST(SamplingEmulation, DrawFrequenciesFollowCpuProbabilities) {
  std::mt19937 rng(std::random_device{}());
  const int64_t V = 12;
  const std::vector<float> logits = normal_logits(V, rng, 1.0f);
  SamplingParams sp;
  sp.top_p = 0.9f;
  sp.seed = rng();
  const auto allowed = allowed_set(logits, sp);
  if (allowed.margin < 1e-4) GTEST_SKIP() << "knife-edge case";
  const int n = 1200;
  Batch b(V, V, 0);
  for (int step = 0; step < n; ++step) b.add(logits, sp, uint64_t(step));
  const Result got = run<32>(b, true, simt::Order::forward);
  std::vector<int64_t> counts(allowed.tokens.size());
  for (int32_t t : got.tokens) {
    ASSERT_TRUE(allowed.contains(t));
    for (size_t i = 0; i < allowed.tokens.size(); ++i) counts[i] += allowed.tokens[i] == t;
  }
  const auto chi = sampling_test::chi_square(counts, allowed.prob, n);
  EXPECT_TRUE(chi.ok) << "chi-square " << chi.stat << " over " << chi.dof << " dof, bound "
                      << chi.bound;
}

}  // namespace
}  // namespace ridge::kernels
