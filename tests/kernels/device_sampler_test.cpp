// engine::PenaltyHistory and engine::DeviceSampler on the CPU: the device sampler runs over a
// backend whose sample() is the GPU kernel emulated on fibers (emulated_sampling.h), so the host
// side (row parameters, penalty lists, the packed output block and its conversion to
// SampleResult) is checked against engine::Sampler without a GPU.
#include "ridge/engine/device_sampler.h"

#include <random>
#include <set>

#include <gtest/gtest.h>

#include "kernels/emulated_sampling.h"
#include "kernels/sampling_reference.h"
#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/core/error.h"

namespace ridge::engine {
namespace {

std::vector<std::pair<int32_t, int32_t>> entries(const PenaltyHistory& h) {
  std::vector<std::pair<int32_t, int32_t>> v;
  for (size_t i = 0; i < h.tokens().size(); ++i) v.emplace_back(h.tokens()[i], h.counts()[i]);
  std::sort(v.begin(), v.end());
  return v;
}

TEST(PenaltyHistory, KeepsDistinctTokensWithOutputCounts) {
  PenaltyHistory h;
  const std::vector<int32_t> prompt = {5, 3, 5, 99, -1};
  std::vector<int32_t> output = {3, 7};
  h.update(prompt, output, 50, true);
  using E = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(entries(h), (E{{3, 1}, {5, 0}, {7, 1}}));  // 99 and -1 are outside the vocabulary
  output.push_back(7);
  output.push_back(11);
  h.update(prompt, output, 50, true);  // only the new output tokens are read
  EXPECT_EQ(entries(h), (E{{3, 1}, {5, 0}, {7, 2}, {11, 1}}));
  output.pop_back();
  EXPECT_THROW(h.update(prompt, output, 50, true), Error);

  PenaltyHistory no_prompt;  // presence / frequency only: the prompt does not matter
  no_prompt.update(prompt, std::vector<int32_t>{4, 4}, 50, false);
  EXPECT_EQ(entries(no_prompt), (E{{4, 2}}));
  no_prompt.clear();
  EXPECT_TRUE(no_prompt.tokens().empty());
}

TEST(DeviceSampler, DeclinesWithoutADeviceSampler) {
  backend::CpuBackend cpu(1);
  DeviceSampler s(cpu);
  std::vector<float> logits(10, 0.0f);
  const Tensor t(logits.data(), DType::f32, {1, 10});
  SamplingParams sp;
  const DeviceSampleRow row{&sp, 0, nullptr, {}};
  std::vector<SampleResult> out;
  EXPECT_FALSE(s.sample({}, t, {&row, 1}, out));
  EXPECT_FALSE(s.available());
}

// Rows of a larger logits tensor (as a padded decode bucket): greedy rows with penalties and top
// logprobs equal the CPU Sampler; random rows stay in its set.
TEST(DeviceSampler, MatchesCpuSamplerThroughTheBackend) {
  std::mt19937 rng(std::random_device{}());
  auto be = kernels::emulation::make_sampling_backend(std::make_unique<backend::CpuBackend>(1));
  DeviceSampler ds(*be);
  const int64_t V = 700, R = 9, padded_rows = 12;
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(size_t(padded_rows * V));
  for (auto& x : logits) x = d(rng);
  std::uniform_int_distribution<int32_t> tok(0, 40);
  std::vector<SamplingParams> params(R);
  std::vector<std::vector<int32_t>> prompts(R), outputs(R);
  std::vector<PenaltyHistory> histories(R);
  std::vector<DeviceSampleRow> rows;
  for (int64_t r = 0; r < R; ++r) {
    SamplingParams& sp = params[size_t(r)];
    sp.temperature = r % 3 == 2 ? 0.8f : 0.0f;
    sp.top_p = r % 3 == 2 ? 0.9f : 1.0f;
    sp.top_logprobs = int32_t(r % 4) * 5;  // 0, 5, 10, 15
    sp.repetition_penalty = r % 2 ? 1.3f : 1.0f;
    sp.frequency_penalty = r % 4 == 1 ? 0.7f : 0.0f;
    sp.seed = rng();
    for (int j = 0; j < 20; ++j) prompts[size_t(r)].push_back(tok(rng));
    for (int j = 0; j < 9; ++j) outputs[size_t(r)].push_back(tok(rng));
    histories[size_t(r)].update(prompts[size_t(r)], outputs[size_t(r)], V,
                                sp.repetition_penalty != 1.0f);
    for (int j = 0; j < 8; ++j) logits[size_t(r * V + tok(rng))] = 6.0f;  // penalties decide
    rows.push_back({&sp, uint64_t(outputs[size_t(r)].size()), &histories[size_t(r)], {}});
  }
  const Tensor t(logits.data(), DType::f32, {padded_rows, V});
  std::vector<SampleResult> out;
  const int64_t calls = kernels::emulation::sample_calls();
  ASSERT_TRUE(ds.sample({}, t, rows, out));
  EXPECT_EQ(kernels::emulation::sample_calls(), calls + 1);
  ASSERT_EQ(out.size(), size_t(R));
  for (int64_t r = 0; r < R; ++r) {
    const SamplingParams& sp = params[size_t(r)];
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    SCOPED_TRACE(::testing::Message() << "row " << r);
    if (sp.temperature == 0.0f) {
      Sampler cpu(sp);
      const SampleResult ref = cpu.sample(row, prompts[size_t(r)], outputs[size_t(r)]);
      EXPECT_EQ(out[size_t(r)].token, ref.token);
      EXPECT_NEAR(out[size_t(r)].logprob, ref.logprob, 1e-5);
      ASSERT_EQ(out[size_t(r)].top.size(), ref.top.size());
      for (size_t j = 0; j < ref.top.size(); ++j) {
        EXPECT_EQ(out[size_t(r)].top[j].token, ref.top[j].token);
        EXPECT_NEAR(out[size_t(r)].top[j].logprob, ref.top[j].logprob, 1e-5);
      }
    } else {
      const std::vector<float> pen =
          sampling_test::penalized(row, sp, prompts[size_t(r)], outputs[size_t(r)]);
      const auto allowed = sampling_test::allowed_set(pen, sp);
      if (allowed.margin > 1e-5) {
        EXPECT_TRUE(allowed.contains(out[size_t(r)].token));
      }
      EXPECT_EQ(out[size_t(r)].top.size(), size_t(sp.top_logprobs));
    }
  }
}

}  // namespace
}  // namespace ridge::engine
