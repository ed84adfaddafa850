#include "ridge/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "../kernels/sampling_reference.h"
#include "ridge/core/error.h"

namespace ridge::engine {
namespace {

std::vector<float> random_logits(int n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 r(seed);
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(r);
  return v;
}

std::vector<double> softmax(const std::vector<float>& l, double temperature = 1.0) {
  double mx = -1e300, sum = 0;
  for (float v : l) mx = std::max(mx, double(v));
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) sum += (p[i] = std::exp((l[i] - mx) / temperature));
  for (auto& x : p) x /= sum;
  return p;
}

TEST(Sampler, GreedyIsArgmaxAndLogprobIsRawLogSoftmax) {
  const uint32_t seed = std::random_device{}();
  auto logits = random_logits(1000, seed);
  const auto p = softmax(logits);
  const int best = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams sp;
  sp.temperature = 0;
  sp.top_logprobs = 5;
  Sampler s(sp);
  auto copy = logits;
  SampleResult r = s.sample(copy, {}, {});
  EXPECT_EQ(r.token, best);
  EXPECT_NEAR(r.logprob, std::log(p[best]), 1e-5);
  ASSERT_EQ(r.top.size(), 5u);
  EXPECT_EQ(r.top[0].token, best);
  for (size_t i = 1; i < r.top.size(); ++i) {
    EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
    EXPECT_NEAR(r.top[i].logprob, std::log(p[r.top[i].token]), 1e-5);
  }
}

// Draws follow softmax(logits / T): Pearson's chi-square at alpha = 1e-6 (cells expected below 5
// pooled; the GPU sampler's tests use the same helper).
TEST(Sampler, DrawsFollowTemperatureScaledSoftmax) {
  auto logits = random_logits(50, std::random_device{}(), 1.0f);
  for (float temp : {0.5f, 1.0f, 2.0f}) {
    const auto p = softmax(logits, temp);
    SamplingParams sp;
    sp.temperature = temp;
    sp.seed = 1234;
    Sampler s(sp);
    std::vector<int64_t> counts(logits.size());
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      auto copy = logits;
      counts[size_t(s.sample(copy, {}, {}).token)]++;
    }
    const sampling_test::ChiSquare c = sampling_test::chi_square(counts, p, n);
    EXPECT_TRUE(c.ok) << "temperature " << temp << ": chi-square " << c.stat << " over " << c.dof
                      << " degrees of freedom, bound " << c.bound;
    EXPECT_GE(c.dof, 5) << "temperature " << temp << ": too few cells for the test to mean much";
  }
}

TEST(Sampler, TopKTopPMinPNeverDrawOutsideTheirSets) {
  auto logits = random_logits(200, std::random_device{}());
  const auto p = softmax(logits);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  // top-k = 7
  std::set<int> topk(order.begin(), order.begin() + 7);
  // top-p = 0.6: the smallest prefix of sorted tokens reaching 0.6
  std::set<int> nucleus;
  double acc = 0;
  for (int t : order) {
    nucleus.insert(t);
    acc += p[t];
    if (acc >= 0.6) break;
  }
  // min-p = 0.2
  std::set<int> minp;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] >= 0.2 * p[order[0]]) minp.insert(int(i));
  struct Case {
    SamplingParams sp;
    const std::set<int>* allowed;
  };
  SamplingParams a, b, c;
  a.top_k = 7;
  b.top_p = 0.6f;
  c.min_p = 0.2f;
  for (auto [sp, allowed] : {Case{a, &topk}, Case{b, &nucleus}, Case{c, &minp}}) {
    sp.seed = 7;
    Sampler s(sp);
    std::set<int> seen;
    for (int i = 0; i < 3000; ++i) {
      auto copy = logits;
      int t = s.sample(copy, {}, {}).token;
      ASSERT_TRUE(allowed->count(t)) << "drew " << t;
      seen.insert(t);
    }
    EXPECT_EQ(seen.size(), allowed->size());  // every allowed token shows up in 3000 draws
  }
}

TEST(Sampler, SameSeedSameSequence) {
  auto logits = random_logits(500, 42, 1.0f);
  SamplingParams sp;
  sp.seed = 99;
  sp.top_p = 0.9f;
  Sampler s1(sp), s2(sp);
  sp.seed = 100;
  Sampler s3(sp);
  std::vector<int> a, b, c;
  for (int i = 0; i < 200; ++i) {
    auto l1 = logits, l2 = logits, l3 = logits;
    a.push_back(s1.sample(l1, {}, {}).token);
    b.push_back(s2.sample(l2, {}, {}).token);
    c.push_back(s3.sample(l3, {}, {}).token);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, PenaltiesFollowHfAndOpenAiDefinitions) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  SamplingParams sp;
  sp.temperature = 0;
  sp.repetition_penalty = 2.0f;
  {
    Sampler s(sp);
    auto l = logits;
    std::vector<int32_t> prompt = {0, 1, 1};
    s.sample(l, prompt, {});
    EXPECT_FLOAT_EQ(l[0], 1.0f);   // positive: divided
    EXPECT_FLOAT_EQ(l[1], -2.0f);  // negative: multiplied, once per distinct token
    EXPECT_FLOAT_EQ(l[3], 3.0f);
  }
  sp.repetition_penalty = 1.0f;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.25f;
  {
    Sampler s(sp);
    auto l = logits;
    std::vector<int32_t> output = {3, 3, 3, 2};
    std::vector<int32_t> prompt = {0};
    SampleResult r = s.sample(l, prompt, output);
    EXPECT_FLOAT_EQ(l[3], 3.0f - 0.5f - 0.75f);
    EXPECT_FLOAT_EQ(l[2], 0.5f - 0.5f - 0.25f);
    EXPECT_FLOAT_EQ(l[0], 2.0f);  // prompt tokens are not penalized by presence/frequency
    EXPECT_EQ(r.token, 0);        // 2.0 now beats 1.75
  }
}

// logit_bias is added before the penalties (vLLM's order), banned tokens become -inf, and the
// reported logprobs stay the raw ones.
TEST(Sampler, LogitBiasAndBannedTokensComeBeforePenalties) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  SamplingParams sp;
  sp.temperature = 0;
  sp.repetition_penalty = 2.0f;
  sp.logit_bias = {{1, 4.0f}, {3, -1.5f}, {7, 100.0f}};  // 7 is past this row: skipped
  Sampler s(sp);
  auto l = logits;
  const std::vector<int32_t> prompt = {1, 3};
  const std::vector<int32_t> banned = {0, -2, 9};
  const SampleResult r = s.sample(l, prompt, {}, banned);
  EXPECT_FLOAT_EQ(l[1], (-1.0f + 4.0f) / 2.0f);  // biased to 3, then positive: divided
  EXPECT_FLOAT_EQ(l[3], (3.0f - 1.5f) / 2.0f);
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_FLOAT_EQ(l[2], 0.5f);
  EXPECT_EQ(r.token, 1);  // 1.5 beats 0.75, 0.5 and 0; token 0 (2.0) would win but is banned
  // the raw logprob: of the logits as given (the file's double softmax, not the Sampler's code)
  EXPECT_NEAR(r.logprob, std::log(softmax(logits)[1]), 1e-5);
}

// Random draws never pick a banned token, and a large bias moves the mass as exp(bias) does.
TEST(Sampler, DrawsHonourBiasesAndBans) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  auto logits = random_logits(40, seed, 1.0f);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = seed;
  sp.logit_bias = {{5, 6.0f}, {11, -100.0f}};
  auto expected = logits;
  expected[5] += 6.0f;
  expected[11] += -100.0f;
  const std::vector<int32_t> banned = {
      int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()), 17};
  for (int32_t b : banned) expected[size_t(b)] = -1e30f;
  const auto p = softmax(expected);
  Sampler s(sp);
  const int kDraws = 20000;
  std::vector<int> counts(logits.size());
  for (int i = 0; i < kDraws; ++i) {
    auto copy = logits;
    ++counts[size_t(s.sample(copy, {}, {}, banned).token)];
  }
  for (int32_t b : banned) EXPECT_EQ(counts[size_t(b)], 0) << "banned token " << b << " drawn";
  EXPECT_EQ(counts[11], 0);
  // Token 5's share within 5 standard deviations of its biased probability.
  const double p5 = p[5], sd = std::sqrt(p5 * (1 - p5) / kDraws);
  EXPECT_NEAR(double(counts[5]) / kDraws, p5, 5 * sd + 1e-9);
}

// raw_logprobs (prompt logprobs): the token's raw log-softmax, its rank among the row's logits,
// and the row's top tokens as the Sampler reports them.
TEST(Sampler, RawLogprobsGiveRankAndTop) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  auto logits = random_logits(3000, seed);
  logits[17] = logits[18];  // a tie
  const std::vector<double> p = softmax(logits);  // in double: not the Sampler's arithmetic
  // The row's tokens by logit, highest first, the lower id first among equals.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  SamplingParams sp;
  sp.temperature = 0;
  sp.top_logprobs = 7;
  auto copy = logits;
  const SampleResult greedy = Sampler(sp).sample(copy, {}, {});
  std::mt19937 rng(seed);
  for (int32_t token : {17, 18, int32_t(rng() % 3000), greedy.token}) {
    const SampleResult r = raw_logprobs(logits, token, 7);
    EXPECT_EQ(r.token, token);
    EXPECT_NEAR(r.logprob, std::log(p[size_t(token)]), 1e-5);
    int32_t above = 0;
    for (float v : logits) above += v > logits[size_t(token)];
    EXPECT_EQ(r.rank, above + 1);
    ASSERT_EQ(r.top.size(), 7u);
    for (size_t k = 0; k < 7; ++k) {
      EXPECT_EQ(r.top[k].token, order[k]);
      EXPECT_NEAR(r.top[k].logprob, std::log(p[size_t(order[k])]), 1e-5);
      // and as the Sampler reports its top tokens
      EXPECT_EQ(r.top[k].token, greedy.top[k].token);
      EXPECT_FLOAT_EQ(r.top[k].logprob, greedy.top[k].logprob);
    }
  }
  EXPECT_EQ(raw_logprobs(logits, greedy.token, 0).rank, 1);
  EXPECT_THROW(raw_logprobs(logits, 3000, 1), Error);
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  SamplingParams sp;
  sp.top_p = 0;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = {};
  sp.temperature = -1;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = {};
  sp.top_logprobs = 21;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = {};
  sp.temperature = NAN;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = {};
  sp.logit_bias = {{3, 100.5f}};
  EXPECT_THROW(Sampler{sp}, Error);
  sp.logit_bias = {{3, NAN}};
  EXPECT_THROW(Sampler{sp}, Error);
  sp.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(Sampler{sp}, Error);
  sp.logit_bias = {{3, 1.0f}, {4, 2.0f}, {3, -1.0f}};
  EXPECT_THROW(Sampler{sp}, Error);
  sp.logit_bias.assign(SamplingParams::kMaxLogitBias + 1, {});
  for (size_t i = 0; i < sp.logit_bias.size(); ++i) sp.logit_bias[i].token = int32_t(i);
  EXPECT_THROW(Sampler{sp}, Error);
  sp.logit_bias.pop_back();
  EXPECT_NO_THROW(Sampler{sp});
}

}  // namespace
}  // namespace ridge::engine
