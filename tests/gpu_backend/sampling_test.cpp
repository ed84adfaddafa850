// Backend::sample on the GPU (kernels/cuda/sampling) against engine::Sampler, the CPU reference:
//   - greedy: the CPU's token exactly (lowest id among equal logits, -0.0 equal to +0.0), its raw
//     logprob and the raw top-n (ids exactly, logprobs vs the CPU's double log-softmax within
//     fp32 tolerance), for vocabularies staged in shared memory and not, aligned and misaligned
//     rows;
//   - penalties (repetition / presence / frequency), logit biases and banned tokens: the CPU's
//     adjusted argmax exactly;
//   - top-k / top-p / min-p: every drawn token lies in the CPU's allowed set, and over many draws
//     the frequencies match the CPU-computed probabilities (Pearson chi-square, alpha = 1e-6);
//   - the same (seed, step) gives the same token in any batch; outputs outside [R] untouched.
// GpuBackendLarge cases (big vocabularies, distributions, timings) are left out of the sanitizer
// runs.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>
#include <set>
#include <span>

#include <fmt/format.h>

#include "harness.h"
#include "kernels/sampling_reference.h"
#include "ridge/engine/device_sampler.h"
#include "ridge/core/error.h"

namespace ridge::backend::gpu_test {
namespace {

using engine::SamplingParams;
using sampling_test::allowed_set;

SampleRow to_row(const SamplingParams& sp, uint64_t step) { return engine::to_sample_row(sp, step); }

// The rows of one call as the engine builds them.
struct Rows {
  std::vector<SampleRow> rows;
  std::vector<int32_t> pen_ids, pen_counts;
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  std::vector<uint32_t> masks;
  int32_t top_n = 0;
  // sp.logit_bias and `banned` become the row's bias list (mask_vocab > 0: `banned` becomes its
  // ban mask over that vocabulary).
  void add(const SamplingParams& sp, uint64_t step, const std::vector<int32_t>& prompt = {},
           const std::vector<int32_t>& output = {}, const std::vector<int32_t>& banned = {},
           int64_t mask_vocab = 0) {
    SampleRow r = to_row(sp, step);
    std::tie(r.penalty_begin, r.penalty_end) =
        sampling_test::append_penalties(prompt, output, pen_ids, pen_counts);
    std::tie(r.bias_begin, r.bias_end) = sampling_test::append_biases(
        sp, mask_vocab ? std::vector<int32_t>{} : banned, bias_ids, bias_values);
    if (mask_vocab) {
      const size_t words = size_t((mask_vocab + 31) / 32);
      r.ban_mask = int32_t(masks.size() / words);
      masks.resize(masks.size() + words, 0u);
      for (int32_t t : banned)
        if (t >= 0 && t < mask_vocab)
          masks[size_t(r.ban_mask) * words + size_t(t / 32)] |= 1u << (t % 32);
    }
    rows.push_back(r);
    top_n = std::max(top_n, sp.top_logprobs);
  }
};

struct Outputs {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> top_ids;
  std::vector<float> top_lp;
};

constexpr int64_t kGuard = 16;            // output slots past the end that must stay untouched
constexpr uint32_t kPoison = 0x7fc0dead;  // a NaN / an unlikely id

// Logits on the device (uploaded once; sampled many times).
class DeviceLogits {
 public:
  // host: R rows of V values; ld / offset: row stride and floats before row 0 on the device.
  DeviceLogits(const std::vector<float>& host, int64_t R, int64_t V, int64_t ld = 0,
               int64_t offset = 0)
      : R_(R), V_(V), m_(device_f32(R, V, ld, offset)) {
    for (int64_t r = 0; r < R; ++r)
      cuda().upload({}, m_.view.row(r), host.data() + r * V, size_t(V) * 4);
    cuda().synchronize({});
  }

  Outputs sample(const Rows& b) {
    const int64_t R = int64_t(b.rows.size()), N = b.top_n;
    EXPECT_EQ(R, R_);
    auto poisoned = [](int64_t n) {
      Buffer buf = cuda().allocate(size_t(n) * 4);
      std::vector<uint32_t> p(size_t(n), kPoison);
      cuda().upload({}, buf.data(), p.data(), p.size() * 4);
      return buf;
    };
    Buffer tok = poisoned(R + kGuard), lp = poisoned(R + kGuard);
    Buffer tid = poisoned(R * N + kGuard), tlp = poisoned(R * N + kGuard);
    Tensor tokens(tok.data(), DType::i32, {R}, Device::cuda);
    Tensor logprobs(lp.data(), DType::f32, {R}, Device::cuda);
    Tensor top_ids, top_lp;
    if (N > 0) {
      top_ids = Tensor(tid.data(), DType::i32, {R, N}, Device::cuda);
      top_lp = Tensor(tlp.data(), DType::f32, {R, N}, Device::cuda);
    }
    SamplingBatch batch{b.rows, b.pen_ids, b.pen_counts, b.bias_ids, b.bias_values, b.masks};
    const bool ran = cuda().sample({}, m_.view, batch, tokens, logprobs, top_ids, top_lp);
    EXPECT_TRUE(ran);
    Outputs o;
    std::vector<uint32_t> t(size_t(R + kGuard)), l(size_t(R + kGuard));
    std::vector<uint32_t> ti(size_t(R * N + kGuard)), tl(size_t(R * N + kGuard));
    cuda().download({}, t.data(), tok.data(), t.size() * 4);
    cuda().download({}, l.data(), lp.data(), l.size() * 4);
    cuda().download({}, ti.data(), tid.data(), ti.size() * 4);
    cuda().download({}, tl.data(), tlp.data(), tl.size() * 4);
    cuda().synchronize({});
    for (int64_t i = 0; i < kGuard; ++i) {
      EXPECT_EQ(t[size_t(R + i)], kPoison) << "tokens written past row " << R;
      EXPECT_EQ(l[size_t(R + i)], kPoison) << "logprobs written past row " << R;
      EXPECT_EQ(ti[size_t(R * N + i)], kPoison) << "top_ids written past the end";
      EXPECT_EQ(tl[size_t(R * N + i)], kPoison) << "top_logprobs written past the end";
    }
    o.tokens.resize(size_t(R));
    o.logprobs.resize(size_t(R));
    o.top_ids.resize(size_t(R * N));
    o.top_lp.resize(size_t(R * N));
    std::memcpy(o.tokens.data(), t.data(), size_t(R) * 4);
    std::memcpy(o.logprobs.data(), l.data(), size_t(R) * 4);
    std::memcpy(o.top_ids.data(), ti.data(), size_t(R * N) * 4);
    std::memcpy(o.top_lp.data(), tl.data(), size_t(R * N) * 4);
    return o;
  }

  const Tensor& view() const { return m_.view; }
  int64_t rows() const { return R_; }

 private:
  int64_t R_, V_;
  DeviceMatrix m_;
};

std::vector<float> normal_logits(int64_t V, float scale = 3.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(V));
  for (auto& x : v) x = d(rng());
  return v;
}

// A coarse grid: many exact ties (at argmax, top-n, top-k and top-p boundaries), one -0.0.
std::vector<float> tied_logits(int64_t V) {
  std::uniform_int_distribution<int> d(-12, 12);
  std::vector<float> v(static_cast<size_t>(V));
  for (auto& x : v) x = 0.5f * float(d(rng()));
  for (auto& x : v)
    if (x == 0.0f) {
      x = -0.0f;
      break;
    }
  return v;
}

void expect_logprob(float got, float ref, const std::string& what) {
  // fp32: a few ulps of the value plus the error of a float log-sum-exp of the row.
  EXPECT_NEAR(got, ref, 2e-6 + 4 * 1.1920929e-7 * std::abs(ref)) << what;
}

// Greedy rows (normal and tied logits, various top_logprobs) against the CPU Sampler.
void check_greedy(int64_t V, int64_t R, int64_t ld, int64_t offset) {
  std::vector<float> host;
  std::vector<SamplingParams> sps;
  Rows b;
  for (int64_t r = 0; r < R; ++r) {
    const std::vector<float> l = r % 2 ? tied_logits(V) : normal_logits(V);
    host.insert(host.end(), l.begin(), l.end());
    SamplingParams sp;
    sp.temperature = 0;
    const int32_t tops[] = {20, 0, 5, 1, 20, 3};
    sp.top_logprobs = tops[r % 6];
    sps.push_back(sp);
    b.add(sp, 0);
  }
  DeviceLogits d(host, R, V, ld, offset);
  const Outputs o = d.sample(b);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> row(host.begin() + r * V, host.begin() + (r + 1) * V);
    engine::Sampler cpu(sps[size_t(r)]);
    const engine::SampleResult ref = cpu.sample(row, {}, {});
    const std::string what = fmt::format("V={} row {} ld={} offset={}", V, r, ld, offset);
    EXPECT_EQ(o.tokens[size_t(r)], ref.token) << what;
    expect_logprob(o.logprobs[size_t(r)], ref.logprob, what);
    for (int32_t j = 0; j < b.top_n; ++j) {
      const size_t at = size_t(r * b.top_n + j);
      if (size_t(j) < ref.top.size()) {
        EXPECT_EQ(o.top_ids[at], ref.top[size_t(j)].token) << what << " top " << j;
        expect_logprob(o.top_lp[at], ref.top[size_t(j)].logprob, what + " top logprob");
      } else {
        EXPECT_EQ(o.top_ids[at], -1) << what << " unused slot " << j;
        EXPECT_EQ(o.top_lp[at], -INFINITY) << what << " unused slot " << j;
      }
    }
  }
}

TEST_F(GpuBackend, SampleGreedyMatchesCpuSampler) {
  for (int64_t V : {1, 7, 1000, 32003}) {
    check_greedy(V, 6, 0, 0);
    check_greedy(V, 6, V + 3, 1);  // misaligned rows: no 16-byte loads
  }
  check_greedy(60000, 6, 0, 0);  // past shared memory: read from global memory
}

TEST_F(GpuBackendLarge, SampleGreedyMatchesCpuSamplerLargeVocab) {
  for (int64_t V : {128256, 151936, 262144}) {
    check_greedy(V, 12, 0, 0);
    check_greedy(V, 6, V + 1, 3);
  }
  check_greedy(32000, 256, 0, 0);  // more rows than SMs
}

void check_penalties(int64_t V, int64_t R) {
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> host;
  std::vector<SamplingParams> sps;
  std::vector<std::vector<int32_t>> prompts, outputs, bans;
  Rows b;
  for (int64_t r = 0; r < R; ++r) {
    // A dozen near-equal leaders among the first 64 ids, so that the penalties (and biases and
    // bans) decide.
    std::vector<float> l = normal_logits(V, 1.0f);
    std::uniform_int_distribution<int32_t> lead(0, 63), any(0, int32_t(V - 1));
    for (int j = 0; j < 12; ++j) l[size_t(lead(rng()))] = 4.0f + 0.25f * float(j % 3);
    SamplingParams sp;
    sp.temperature = 0;
    sp.top_logprobs = r % 3 == 0 ? 4 : 0;
    sp.repetition_penalty = r % 3 == 0 ? 1.0f : 0.5f + 2.0f * u(rng());
    sp.presence_penalty = r % 4 == 1 ? 0.0f : -2.0f + 4.0f * u(rng());
    sp.frequency_penalty = r % 5 == 2 ? 0.0f : -2.0f + 4.0f * u(rng());
    std::vector<int32_t> prompt, output;
    for (int j = 0; j < 40; ++j) prompt.push_back(j % 2 ? lead(rng()) : any(rng()));
    for (int j = 0; j < 30; ++j) output.push_back(j % 2 ? lead(rng()) : any(rng()));
    // Biases on odd rows (some on penalized tokens, one id past the vocabulary), bans of the raw
    // argmax on rows 3 mod 4; rows 5 mod 6 have biases and no penalties (a copy all the same).
    std::vector<int32_t> banned;
    if (r % 2 == 1) {
      std::set<int32_t> ids = {prompt[0], output[1]};
      while (ids.size() < 6) ids.insert(lead(rng()));
      for (int32_t t : ids) sp.logit_bias.push_back({t, -5.0f + 10.0f * u(rng())});
      sp.logit_bias.push_back({int32_t(V) + 1, 20.0f});
    }
    if (r % 4 == 3) banned = {int32_t(std::max_element(l.begin(), l.end()) - l.begin()), -1};
    // Rows 6 mod 8: most of the vocabulary banned through a mask (JSON mode's form).
    const bool as_mask = r % 8 == 6;
    if (as_mask)
      for (int32_t t = 0; t < int32_t(V); ++t)
        if (u(rng()) < 0.7f) banned.push_back(t);
    if (r % 6 == 5) sp.repetition_penalty = 1.0f, sp.presence_penalty = sp.frequency_penalty = 0;
    host.insert(host.end(), l.begin(), l.end());
    sps.push_back(sp);
    prompts.push_back(prompt);
    outputs.push_back(output);
    bans.push_back(banned);
    b.add(sp, uint64_t(output.size()), prompt, output, banned, as_mask ? V : 0);
  }
  DeviceLogits d(host, R, V);
  const Outputs o = d.sample(b);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> row(host.begin() + r * V, host.begin() + (r + 1) * V);
    engine::Sampler cpu(sps[size_t(r)]);
    const engine::SampleResult ref =
        cpu.sample(row, prompts[size_t(r)], outputs[size_t(r)], bans[size_t(r)]);
    const std::string what = fmt::format("penalties and biases V={} row {}", V, r);
    EXPECT_EQ(o.tokens[size_t(r)], ref.token) << what;
    expect_logprob(o.logprobs[size_t(r)], ref.logprob, what);
    for (size_t j = 0; j < ref.top.size(); ++j)  // raw: before penalties
      EXPECT_EQ(o.top_ids[size_t(r * b.top_n) + j], ref.top[j].token) << what;
  }
}

TEST_F(GpuBackend, SamplePenaltiesMatchCpuSampler) {
  check_penalties(1000, 24);  // staged in shared memory
  check_penalties(60000, 8);  // penalized copy in the workspace
}

struct Filter {
  int32_t top_k;
  float top_p, min_p, temperature;
};
const Filter kFilters[] = {
    {1, 1.0f, 0.0f, 1.0f},    {3, 1.0f, 0.0f, 1.0f},   {50, 1.0f, 0.0f, 0.7f},
    {0, 0.3f, 0.0f, 1.0f},    {0, 0.9f, 0.0f, 1.5f},   {0, 1.0f, 0.3f, 1.0f},
    {0, 1.0f, 0.05f, 2.0f},   {20, 0.5f, 0.0f, 1.0f},  {40, 0.95f, 0.1f, 0.8f},
    {1000, 0.7f, 0.0f, 1.0f}, {0, 0.99f, 0.01f, 1.0f}, {7, 1.0f, 0.0f, 1e-3f},
    {1500, 1.0f, 0.0f, 1.0f}, {0, 1.0f, 0.0f, 1.0f},
};

SamplingParams with(const Filter& f) {
  SamplingParams sp;
  sp.top_k = f.top_k;
  sp.top_p = f.top_p;
  sp.min_p = f.min_p;
  sp.temperature = f.temperature;
  sp.seed = rng()();
  return sp;
}

// Filters on normal and tied logits: R draws (different steps), each in the CPU's set.
void check_sets(int64_t V, int64_t R, std::span<const Filter> filters, int min_checked) {
  int checked = 0;
  for (bool ties : {false, true})
    for (const Filter& f : filters) {
      // A knife edge (a top-p / min-p decision within 1e-5 of flipping, where float and double
      // may disagree) is drawn again, as in the distribution test; only a case that stays on the
      // edge after 20 draws is left out (and counted against min_checked).
      std::vector<float> l = ties ? tied_logits(V) : normal_logits(V, 2.0f);
      const SamplingParams sp = with(f);
      auto allowed = allowed_set(l, sp);
      for (int tries = 0; tries < 20 && allowed.margin < 1e-5; ++tries) {
        l = ties ? tied_logits(V) : normal_logits(V, 2.0f);
        allowed = allowed_set(l, sp);
      }
      if (allowed.margin < 1e-5) continue;
      std::vector<float> host;
      Rows b;
      for (int64_t r = 0; r < R; ++r) {
        host.insert(host.end(), l.begin(), l.end());
        b.add(sp, uint64_t(r * 7919 + 11));
      }
      DeviceLogits d(host, R, V);
      const Outputs o = d.sample(b);
      for (int64_t r = 0; r < R; ++r)
        ASSERT_TRUE(allowed.contains(o.tokens[size_t(r)]))
            << "drew " << o.tokens[size_t(r)] << " outside the CPU's set of "
            << allowed.tokens.size() << ": V " << V << " top_k " << f.top_k << " top_p " << f.top_p
            << " min_p " << f.min_p << " T " << f.temperature << " ties " << ties;
      ++checked;
    }
  EXPECT_GE(checked, min_checked);
}

// A few filters (every code path: top-k, top-p alone and after top-k, min-p, a split tie group
// on the tied logits, a tiny temperature) for the sanitizer runs; all of them in the large case.
TEST_F(GpuBackend, SampleDrawsStayInCpuSet) {
  const Filter some[] = {{3, 1.0f, 0.0f, 1.0f},
                         {0, 0.9f, 0.0f, 1.5f},
                         {0, 1.0f, 0.3f, 1.0f},
                         {40, 0.95f, 0.1f, 0.8f},
                         {7, 1.0f, 0.0f, 1e-3f}};
  check_sets(3000, 32, some, 6);
}

TEST_F(GpuBackendLarge, SampleDrawsStayInCpuSetLargeVocab) {
  for (int64_t V : {3000, 32000, 128256}) check_sets(V, 64, kFilters, 20);
}

// Draw frequencies against the CPU's probabilities: one device copy of R equal rows, sampled L
// times with fresh steps.
void check_distribution(int64_t V, const std::vector<float>& l, const SamplingParams& sp, int64_t R,
                        int launches, const std::string& what) {
  const auto allowed = allowed_set(l, sp);
  if (allowed.margin <= 1e-5) {
    // Still on a knife edge after the caller's redraws (top-p 0.95 over 32k tokens cuts where
    // single tokens weigh ~3e-5): no sound expectation for this draw; said, not failed.
    std::printf("RESULT sample       %-58s knife edge (margin %.2e), not checked\n", what.c_str(),
                double(allowed.margin));
    return;
  }
  std::vector<float> host;
  for (int64_t r = 0; r < R; ++r) host.insert(host.end(), l.begin(), l.end());
  DeviceLogits d(host, R, V);
  std::vector<int64_t> counts(allowed.tokens.size());
  std::map<int32_t, size_t> slot;
  for (size_t i = 0; i < allowed.tokens.size(); ++i) slot[allowed.tokens[i]] = i;
  for (int k = 0; k < launches; ++k) {
    Rows b;
    for (int64_t r = 0; r < R; ++r) b.add(sp, uint64_t(k) * uint64_t(R) + uint64_t(r));
    const Outputs o = d.sample(b);
    for (int32_t t : o.tokens) {
      auto it = slot.find(t);
      ASSERT_NE(it, slot.end()) << what << ": drew " << t << " outside the CPU's set";
      counts[it->second]++;
    }
  }
  const int64_t n = R * launches;
  const auto chi = sampling_test::chi_square(counts, allowed.prob, n);
  std::printf("RESULT sample       %-58s chi2 %.1f / %d dof (bound %.1f)%s\n", what.c_str(),
              chi.stat, chi.dof, chi.bound, chi.ok ? "" : "  FAIL");
  EXPECT_TRUE(chi.ok) << what << ": chi-square " << chi.stat << " over " << chi.dof
                      << " dof, bound " << chi.bound << " (alpha 1e-6), " << n << " draws, "
                      << allowed.tokens.size() << " allowed tokens";
}

TEST_F(GpuBackendLarge, SampleDistributionMatchesCpuProbabilities) {
  struct Case {
    int64_t V;
    float scale;
    Filter f;
  };
  const Case cases[] = {
      {1000, 1.5f, {0, 1.0f, 0.0f, 1.0f}},     // the whole vocabulary
      {1000, 2.0f, {20, 1.0f, 0.0f, 1.0f}},    // top-k
      {1000, 2.0f, {0, 0.8f, 0.0f, 1.0f}},     // top-p
      {1000, 2.0f, {0, 1.0f, 0.1f, 1.3f}},     // min-p
      {1000, 2.0f, {50, 0.9f, 0.02f, 0.9f}},   // all three
      {32000, 3.0f, {0, 0.95f, 0.0f, 1.0f}},   // staged
      {60000, 3.0f, {100, 1.0f, 0.0f, 1.5f}},  // global memory
      {60000, 2.5f, {0, 0.9f, 0.0f, 0.8f}},    // global memory, top-p
  };
  for (const Case& c : cases) {
    const SamplingParams sp = with(c.f);
    // Fresh logits until no top-p / min-p decision is within 1e-5 of flipping (a knife edge,
    // where float and double may legitimately disagree; rare).
    std::vector<float> l = normal_logits(c.V, c.scale);
    for (int tries = 0; tries < 20 && allowed_set(l, sp).margin <= 1e-5; ++tries)
      l = normal_logits(c.V, c.scale);
    const int64_t R = c.V <= 1000 ? 16384 : 2048;
    const int launches = c.V <= 1000 ? 8 : 32;
    check_distribution(c.V, l, sp, R, launches,
                       fmt::format("V={} top_k={} top_p={} min_p={} T={}", c.V, c.f.top_k,
                                   c.f.top_p, c.f.min_p, c.f.temperature));
  }
  // Equal logits split by top-k: the CPU admits the lowest ids, uniformly.
  std::vector<float> l(4096, -3.0f);
  for (int i : {4000, 17, 2500, 900, 33, 1200}) l[size_t(i)] = 2.0f;
  SamplingParams sp;
  sp.top_k = 4;
  sp.seed = 77;
  check_distribution(4096, l, sp, 8192, 4, "V=4096 six equal leaders, top_k=4");
}

// The same (seed, step) gives the same token, whatever else is in the batch; new steps and seeds
// give new draws.
TEST_F(GpuBackend, SampleSameSeedSameTokenInAnyBatch) {
  const int64_t V = 5000;
  const std::vector<float> l = normal_logits(V, 1.0f);
  SamplingParams sp;
  sp.seed = 0x0123456789abcdefull;
  sp.top_p = 0.97f;
  const int64_t R = 24;
  std::vector<float> alone_host;
  Rows alone;
  for (int64_t r = 0; r < R; ++r) {
    alone_host.insert(alone_host.end(), l.begin(), l.end());
    alone.add(sp, uint64_t(r));
  }
  DeviceLogits a(alone_host, R, V);
  const Outputs first = a.sample(alone);
  const Outputs again = a.sample(alone);
  EXPECT_EQ(first.tokens, again.tokens);
  EXPECT_GT(std::set<int32_t>(first.tokens.begin(), first.tokens.end()).size(), 4u);

  // Interleaved with other requests' rows (other seeds, greedy, penalties).
  std::vector<float> mixed_host;
  Rows mixed;
  for (int64_t r = 0; r < R; ++r) {
    const std::vector<float> other = normal_logits(V);
    SamplingParams o;
    o.seed = rng()();
    o.temperature = r % 3 == 0 ? 0.0f : 1.0f;
    o.repetition_penalty = 1.3f;
    mixed_host.insert(mixed_host.end(), other.begin(), other.end());
    mixed.add(o, 5, {1, 2, 3}, {4, 4});
    mixed_host.insert(mixed_host.end(), l.begin(), l.end());
    mixed.add(sp, uint64_t(r));
  }
  DeviceLogits m(mixed_host, 2 * R, V);
  const Outputs mo = m.sample(mixed);
  for (int64_t r = 0; r < R; ++r)
    EXPECT_EQ(mo.tokens[size_t(2 * r + 1)], first.tokens[size_t(r)]) << "step " << r;

  Rows reseeded;
  SamplingParams sp2 = sp;
  sp2.seed = sp.seed + 1;
  for (int64_t r = 0; r < R; ++r) reseeded.add(sp2, uint64_t(r));
  EXPECT_NE(a.sample(reseeded).tokens, first.tokens);
}

TEST_F(GpuBackend, SampleChecksItsArguments) {
  const std::vector<float> l = normal_logits(100);
  DeviceLogits d(l, 1, 100);
  Rows b;
  SamplingParams sp;
  b.add(sp, 0);
  Buffer tb = cuda().allocate(64), lb = cuda().allocate(64);
  Tensor tokens(tb.data(), DType::i32, {1}, Device::cuda);
  Tensor logprobs(lb.data(), DType::f32, {1}, Device::cuda);
  Tensor none;
  SamplingBatch batch{b.rows, b.pen_ids, b.pen_counts, {}, {}, {}};
  // Outputs of the wrong type, rows that do not match, a penalty range past the lists.
  Tensor wrong(lb.data(), DType::f32, {1}, Device::cuda);
  EXPECT_THROW(cuda().sample({}, d.view(), batch, wrong, logprobs, none, none), Error);
  Rows two = b;
  two.add(sp, 1);
  SamplingBatch batch2{two.rows, two.pen_ids, two.pen_counts, {}, {}, {}};
  EXPECT_THROW(cuda().sample({}, d.view(), batch2, tokens, logprobs, none, none), Error);
  Rows bad = b;
  bad.rows[0].penalty_end = 3;
  SamplingBatch batch3{bad.rows, bad.pen_ids, bad.pen_counts, {}, {}, {}};
  EXPECT_THROW(cuda().sample({}, d.view(), batch3, tokens, logprobs, none, none), Error);
  Rows wants_top = b;
  wants_top.rows[0].top_logprobs = 3;
  SamplingBatch batch4{wants_top.rows, wants_top.pen_ids, wants_top.pen_counts, {}, {}, {}};
  EXPECT_THROW(cuda().sample({}, d.view(), batch4, tokens, logprobs, none, none), Error);
  // A bias range past the lists, lists of different lengths, a NaN or +inf bias.
  Rows biased = b;
  biased.rows[0].bias_end = 2;
  biased.bias_ids = {3};
  biased.bias_values = {1.0f};
  SamplingBatch batch5{biased.rows,     biased.pen_ids,     biased.pen_counts,
                       biased.bias_ids, biased.bias_values, {}};
  EXPECT_THROW(cuda().sample({}, d.view(), batch5, tokens, logprobs, none, none), Error);
  biased.rows[0].bias_end = 1;
  biased.bias_values = {1.0f, 2.0f};
  SamplingBatch batch6{biased.rows,     biased.pen_ids,     biased.pen_counts,
                       biased.bias_ids, biased.bias_values, {}};
  EXPECT_THROW(cuda().sample({}, d.view(), batch6, tokens, logprobs, none, none), Error);
  Rows masked = b;
  masked.rows[0].ban_mask = 0;  // no mask words given
  SamplingBatch batch8{masked.rows, masked.pen_ids, masked.pen_counts, {}, {}, {}};
  EXPECT_THROW(cuda().sample({}, d.view(), batch8, tokens, logprobs, none, none), Error);
  for (float v : {NAN, INFINITY}) {
    biased.bias_values = {v};
    SamplingBatch batch7{biased.rows,     biased.pen_ids,     biased.pen_counts,
                         biased.bias_ids, biased.bias_values, {}};
    EXPECT_THROW(cuda().sample({}, d.view(), batch7, tokens, logprobs, none, none), Error) << v;
  }
  // The CPU backend has no device sampler.
  std::vector<float> host = l;
  std::vector<int32_t> t(1);
  std::vector<float> lp(1);
  Tensor host_logits(host.data(), DType::f32, {1, 100});
  Tensor ht(t.data(), DType::i32, {1}), hl(lp.data(), DType::f32, {1});
  EXPECT_FALSE(cpu().sample({}, host_logits, batch, ht, hl, none, none));
}

// Time per call for decode-sized batches: a measurement, not a test (it asserts nothing), so it
// is disabled; scripts/device/gpu-e2e's harness step runs it with the others
// (--gtest_also_run_disabled_tests) and prints its PERF lines.
TEST_F(GpuBackendLarge, DISABLED_SamplePerf) {
  for (int64_t V : {32000, 128256})
    for (int64_t R : {1, 64, 256}) {
      std::vector<float> host;
      for (int64_t r = 0; r < R; ++r) {
        const std::vector<float> l = normal_logits(V, 2.0f);
        host.insert(host.end(), l.begin(), l.end());
      }
      DeviceLogits d(host, R, V);
      struct Mode {
        const char* name;
        SamplingParams sp;
      };
      std::vector<Mode> modes(5);
      modes[0].name = "greedy";
      modes[0].sp.temperature = 0;
      modes[1].name = "temperature";
      modes[2].name = "top_k=50,top_p=0.9";
      modes[2].sp.top_k = 50;
      modes[2].sp.top_p = 0.9f;
      modes[3].name = "top_p=0.9";
      modes[3].sp.top_p = 0.9f;
      modes[4].name = "greedy+penalties+logprobs";
      modes[4].sp.temperature = 0;
      modes[4].sp.repetition_penalty = 1.1f;
      modes[4].sp.frequency_penalty = 0.5f;
      modes[4].sp.top_logprobs = 5;
      for (const Mode& mode : modes) {
        Rows b;
        std::vector<int32_t> prompt, output;  // a 200-token prompt and 100 outputs when penalized
        if (mode.sp.repetition_penalty != 1.0f) {
          for (int i = 0; i < 200; ++i) prompt.push_back(int32_t(rng()() % uint32_t(V)));
          for (int i = 0; i < 100; ++i) output.push_back(int32_t(rng()() % uint32_t(V)));
        }
        for (int64_t r = 0; r < R; ++r) b.add(mode.sp, 100, prompt, output);
        Buffer tb = cuda().allocate(size_t(R) * 4), lb = cuda().allocate(size_t(R) * 4);
        Buffer tib = cuda().allocate(size_t(R) * 20 * 4), tlb = cuda().allocate(size_t(R) * 20 * 4);
        Tensor tokens(tb.data(), DType::i32, {R}, Device::cuda);
        Tensor logprobs(lb.data(), DType::f32, {R}, Device::cuda);
        Tensor top_ids(tib.data(), DType::i32, {R, 5}, Device::cuda);
        Tensor top_lp(tlb.data(), DType::f32, {R, 5}, Device::cuda);
        SamplingBatch batch{b.rows, b.pen_ids, b.pen_counts, {}, {}, {}};
        for (int i = 0; i < 3; ++i)
          cuda().sample({}, d.view(), batch, tokens, logprobs, top_ids, top_lp);
        cuda().synchronize({});
        const int iters = 50;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i)
          cuda().sample({}, d.view(), batch, tokens, logprobs, top_ids, top_lp);
        cuda().synchronize({});
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count() /
            iters;
        std::printf("PERF sample %-40s R=%-4lld V=%-7lld %8.1f us/call  %7.1f GB/s of logits\n",
                    mode.name, static_cast<long long>(R), static_cast<long long>(V), us,
                    double(R) * double(V) * 4.0 / us * 1e-3);
      }
    }
}

}  // namespace
}  // namespace ridge::backend::gpu_test
