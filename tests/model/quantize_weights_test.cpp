// LlamaModel with LoadOptions::quantize (--quantization fp8): which weights the model hands to
// Backend::quantize_weight, what the model computes with them, and the error where the backend
// cannot.
//
// The CUDA backend's fp8 kernels are checked against host references in
// tests/gpu_backend/fp8_test.cpp. Here a CPU backend emulates its numerics in fp32: a quantized
// weight becomes its E4M3 values (row scale × code, the same amax / 448 rule) and every matmul
// with one quantizes its activations per token the same way. Against the plain CPU reference
// the logits then differ by E4M3's rounding alone (3 mantissa bits, on every projection of
// every layer), which the test bounds loosely (it is E4M3's noise, not a reference's); what the
// model decides (which matrices, every matmul with them) the counts check exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cpu_delegate.h"
#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/backend/cpu/quant.h"
#include "ridge/core/error.h"
#include "ridge/core/half.h"
#include "ridge/core/log.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/llama.h"
#include "ridge/model/weights.h"

namespace ridge::model {
namespace {

// One row quantized per the CUDA backend's rule, written back as the values the codes stand for.
void fp8_round_row(float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  for (int64_t i = 0; i < n; ++i) v[i] = fp8e4m3_to_f32(f32_to_fp8e4m3(v[i] / s)) * s;
}

class Fp8EmulatingBackend final : public CpuDelegate {
 public:
  // stack: q|k|v and gate|up stacked into owned f32 matrices (as the CUDA backend stacks them),
  // else kept as the file's separate views.
  explicit Fp8EmulatingBackend(bool stack) : stack_(stack) {}
  std::string name() const override { return "cpu-fp8-emulation"; }
  Tensor upload_weight_rows(std::span<const Tensor> parts) override {
    if (!stack_) return {};
    Tensor t = stack_rows(parts);
    if (t.data) ++stacked;
    return t;
  }
  bool quantize_weight(Tensor& w, DType dtype) override {
    if (dtype != DType::fp8_e4m3 || w.ndim != 2) return false;
    const int64_t N = w.shape[0], K = w.shape[1];
    std::vector<float>& q = owned_.emplace_back(size_t(N * K));
    for (int64_t r = 0; r < N; ++r) {
      float* row = &q[size_t(r * K)];
      backend::cpu::dequantize_row(w.dtype, w.row(r), row, K);
      for (int64_t k = 0; k < K; ++k) row[k] = bf16_to_f32(f32_to_bf16(row[k]));  // as held
      fp8_round_row(row, K);
    }
    quantized_from.insert(w.data);
    w = Tensor(q.data(), DType::f32, {N, K});
    quantized.insert(w.data);
    return true;
  }
  void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* b,
              Tensor& out) override {
    if (!quantized.count(w.data)) return cpu_.matmul(s, x, w, b, out);
    ++fp8_matmuls;
    Tensor xq = rounded(x);
    cpu_.matmul(s, xq, w, b, out);
  }
  void matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) override {
    if (!quantized.count(w.data)) return cpu_.matmul_add(s, x, w, out);
    ++fp8_matmuls;
    Tensor xq = rounded(x);
    cpu_.matmul_add(s, xq, w, out);
  }

  std::set<const void*> quantized, quantized_from;
  int fp8_matmuls = 0, stacked = 0;

 private:
  // x (f32 activations on the CPU) rounded per token to E4M3 values.
  Tensor rounded(const Tensor& x) {
    const int64_t T = x.shape[0], K = x.shape[1];
    act_.resize(size_t(T * K));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(x.row<float>(t), K, &act_[size_t(t * K)]);
      fp8_round_row(&act_[size_t(t * K)], K);
    }
    return Tensor(act_.data(), DType::f32, {T, K});
  }
  bool stack_;
  std::vector<float> act_;
};

std::string model_path() {
  return std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Random prompts' prefills (all but their last token), each then the decode step after it,
// through both models (each with its own KV pool). For each step kind, the median over the prompts
// of the relative error of the quantized model's logits against the reference's (every logit
// checked finite): one prompt whose activations happen to have an outlier channel can be far off
// under per-token scales (0.87 seen once in CI), which says little about the wiring; a median over
// five does not move for one. after_quantized(what) runs after each of the quantized model's
// forwards.
std::vector<std::pair<std::string, double>> compare_logits(
    const ModelConfig& c, LlamaModel& reference, backend::Backend& reference_be,
    LlamaModel& quantized, backend::Backend& quantized_be, int64_t prompt_len,
    const std::function<void(const char*)>& after_quantized = {}, int prompts = 5) {
  constexpr int64_t kBlock = 16, kBlocks = 8;
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("prompt seed " + std::to_string(seed));
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab) - 1);
  const std::vector<int32_t> table = {2, 6, 0};
  const size_t V = size_t(c.vocab);
  std::vector<double> errors[2];
  for (int p = 0; p < prompts; ++p) {
    kv::KvPool pool_a(reference_be, c, kBlocks, kBlock, DType::f32);
    kv::KvPool pool_b(quantized_be, c, kBlocks, kBlock, DType::f32);
    std::vector<int32_t> tokens(size_t(prompt_len) + 1);
    for (auto& t : tokens) t = tok(rng);
    for (int step = 0; step < 2; ++step) {
      const char* what = step == 0 ? "prefill" : "decode step";
      ForwardBatch b;
      if (step == 0)
        b.add_sequence(std::vector<int32_t>(tokens.begin(), tokens.end() - 1), prompt_len, table,
                       kBlock, true);
      else
        b.add_sequence({tokens.back()}, prompt_len + 1, table, kBlock, true);
      std::vector<float> la(V), lb(V);
      reference.forward({}, b, pool_a.layers(), la.data());
      quantized.forward({}, b, pool_b.layers(), lb.data());
      if (after_quantized) after_quantized(what);
      double num = 0, den = 0;
      for (size_t i = 0; i < V; ++i) {
        EXPECT_TRUE(std::isfinite(lb[i])) << what << " logit " << i;
        num += (double(la[i]) - lb[i]) * (double(la[i]) - lb[i]);
        den += double(la[i]) * la[i];
      }
      errors[step].push_back(std::sqrt(num / den));
    }
  }
  std::vector<std::pair<std::string, double>> out;
  for (int step = 0; step < 2; ++step) {
    std::vector<double>& e = errors[step];
    std::nth_element(e.begin(), e.begin() + e.size() / 2, e.end());
    out.emplace_back(step == 0 ? "prefill" : "decode step", e[e.size() / 2]);
  }
  return out;
}

// Each operand of each product is off by ~2.5 % RMS (E4M3 rounds to 1/16 relative at worst), on
// every projection of 30 layers; a token whose activations have one outlier channel gets a coarse
// per-token scale for all the others. Over 20 random prompts the logits were 2-25 % off (median
// 5 %), once in CI 87 %. The bound on the median of five sits above the worst single prompt of
// those 20 (a median over it needs three prompts that far off) and catches what breaks every
// projection (a scale dropped or applied twice puts the logits off by 100 % or more); one wrong
// matrix among 210 may stay under it, which is why both tests count the fp8 matmuls exactly.
constexpr double kFp8LogitsBound = 0.3;

void check_fp8_model(bool stack) {
  SCOPED_TRACE(stack ? "q|k|v and gate|up stacked" : "separate matrices");
  log::set_level(log::Level::warn);
  auto weights = ModelWeights::load(model_path());
  const ModelConfig& c = weights->config();
  backend::CpuBackend cpu(2);
  Fp8EmulatingBackend fp8(stack);
  LoadOptions load;
  load.quantize = DType::fp8_e4m3;
  LlamaModel plain(*weights, cpu), quantized(*weights, fp8, load);
  // 7 matrices a layer (4 where q|k|v and gate|up are stacked), nothing else: the embedding, the
  // tied LM head and the norms stay as stored.
  const int per_layer = stack ? 4 : 7;
  EXPECT_EQ(fp8.stacked, stack ? 2 * c.n_layers : 0);
  EXPECT_EQ(fp8.quantized.size(), size_t(per_layer * c.n_layers));
  EXPECT_FALSE(fp8.quantized_from.count(weights->token_embd.data));
  EXPECT_FALSE(fp8.quantized_from.count(weights->output.data));
  for (const LayerWeights& l : weights->layers) {
    for (const Tensor* t : {&l.wo, &l.w_down}) EXPECT_TRUE(fp8.quantized_from.count(t->data));
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.w_gate, &l.w_up})
      EXPECT_EQ(fp8.quantized_from.count(t->data), stack ? 0u : 1u);
  }
  // The held bytes count the emulation's f32 values: more than the file's Q4_1, as the GPU's
  // fp8 copy is less than its bf16 one. Only that it changed is the model's business.
  EXPECT_NE(quantized.weight_bytes(), plain.weight_bytes());

  int before = 0;
  const auto errors = compare_logits(c, plain, cpu, quantized, fp8, 16, [&](const char* what) {
    EXPECT_EQ(fp8.fp8_matmuls - before, per_layer * c.n_layers) << what;
    before = fp8.fp8_matmuls;
  });
  for (const auto& [what, rel] : errors) {
    EXPECT_LT(rel, kFp8LogitsBound) << what;
    EXPECT_GT(rel, 1e-4) << what;  // the emulation ran
    ::testing::Test::RecordProperty(what + (stack ? " stacked" : ""), std::to_string(rel));
  }
}

TEST(QuantizeWeights, Fp8ProjectionsOnlyAndLogitsWithinE4m3Rounding) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not installed";
  check_fp8_model(/*stack*/ false);
  check_fp8_model(/*stack*/ true);
}

// The CPU backend's own fp8 matmul (CpuBackend::quantize_weight, then codes times codes and both
// scales) against an fp64 product of the same operands quantized here by the rule written out
// (amax / 448 per weight row and per token, E4M3 codes by the host encoder): the same rounding
// decisions, so the results differ by the fp32 accumulation alone (bound 1e-5 relative per row,
// K = 1,040). Decode- and prefill-sized T, the residual add and a bias.
TEST(QuantizeWeights, CpuBackendFp8MatmulMatchesItsDefinition) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-3.0f, 2.0f);
  constexpr int64_t N = 96, K = 1040;
  // Rows of five decades, bf16-exact (what the backend rounds to before quantizing).
  auto ragged = [&](int64_t rows, int64_t cols) {
    std::vector<float> v(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      const float f = std::pow(10.0f, decade(rng));
      for (int64_t c = 0; c < cols; ++c)
        v[size_t(r * cols + c)] = bf16_to_f32(f32_to_bf16(nd(rng) * f));
    }
    return v;
  };
  auto quantize = [](const std::vector<float>& v, int64_t rows, int64_t cols,
                     std::vector<double>& values, std::vector<double>& scales) {
    values.assign(v.size(), 0.0);
    scales.assign(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0.0f;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(v[size_t(r * cols + c)]));
      const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
      scales[size_t(r)] = sc;
      for (int64_t c = 0; c < cols; ++c)
        values[size_t(r * cols + c)] = fp8e4m3_to_f32(f32_to_fp8e4m3(v[size_t(r * cols + c)] / sc));
    }
  };
  // f32 weights that are not bf16-exact: the backend rounds each to bf16 before it quantizes (as
  // the GPU holds them), so the rule is applied here to the rounded values.
  std::vector<float> w_raw = ragged(N, K), w(w_raw.size());
  for (size_t i = 0; i < w_raw.size(); ++i) {
    w_raw[i] *= 1.0f + 1.0f / 1024.0f;  // off the bf16 grid
    w[i] = bf16_to_f32(f32_to_bf16(w_raw[i]));
  }
  std::vector<double> wv, ws;
  quantize(w, N, K, wv, ws);
  backend::CpuBackend cpu(2);
  Tensor wt(w_raw.data(), DType::f32, {N, K});
  ASSERT_TRUE(cpu.quantize_weight(wt, DType::fp8_e4m3));
  ASSERT_EQ(wt.dtype, DType::fp8_e4m3);
  for (int64_t n = 0; n < N; ++n) ASSERT_EQ(double(wt.scales[n]), ws[size_t(n)]) << "row " << n;
  for (int64_t i = 0; i < N * K; ++i)
    ASSERT_EQ(double(fp8e4m3_to_f32(wt.ptr<uint8_t>()[i])), wv[size_t(i)]) << "element " << i;
  std::vector<float> bias(N);
  for (float& b : bias) b = nd(rng);
  const Tensor bias_t(bias.data(), DType::f32, {N});
  for (int64_t T : {int64_t(1), int64_t(3), int64_t(7), int64_t(33)}) {
    for (int mode = 0; mode < 3; ++mode) {  // plain, residual add, bias
      std::vector<float> x = ragged(T, K), out(size_t(T * N));
      for (float& o : out) o = nd(rng);
      const std::vector<float> residual = out;
      std::vector<double> xv, xs;
      quantize(x, T, K, xv, xs);
      Tensor xt(x.data(), DType::f32, {T, K}), ot(out.data(), DType::f32, {T, N});
      if (mode == 1)
        cpu.matmul_add({}, xt, wt, ot);
      else
        cpu.matmul({}, xt, wt, mode == 2 ? &bias_t : nullptr, ot);
      for (int64_t t = 0; t < T; ++t) {
        double num = 0, den = 0;
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += xv[size_t(t * K + k)] * wv[size_t(n * K + k)];
          double ref = acc * xs[size_t(t)] * ws[size_t(n)];
          if (mode == 1) ref += residual[size_t(t * N + n)];
          if (mode == 2) ref += bias[size_t(n)];
          const double g = out[size_t(t * N + n)];
          num += (g - ref) * (g - ref);
          den += ref * ref;
        }
        EXPECT_LT(std::sqrt(num / den), 1e-5) << "T=" << T << " mode " << mode << " row " << t;
      }
    }
  }
}

// The CPU backend's own fp8 path (quantize_weight, fp8 matmuls), counted: every matmul whose
// weight the backend holds in fp8.
class Fp8CountingCpu final : public CpuDelegate {
 public:
  std::string name() const override { return "cpu-fp8-counted"; }
  bool quantize_weight(Tensor& w, DType dtype) override {
    const bool ok = cpu_.quantize_weight(w, dtype);
    if (ok) ++quantized;
    return ok;
  }
  void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* b,
              Tensor& out) override {
    if (w.dtype == DType::fp8_e4m3) ++fp8_matmuls;
    cpu_.matmul(s, x, w, b, out);
  }
  void matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) override {
    if (w.dtype == DType::fp8_e4m3) ++fp8_matmuls;
    cpu_.matmul_add(s, x, w, out);
  }
  int quantized = 0, fp8_matmuls = 0;
};

// The CPU backend runs a whole fp8 model: every projection through its fp8 matmul, the logits
// within E4M3's effect of the unquantized reference (as the emulation's above; its own rounding
// decisions differ from the emulation's after the first layer, since fp32 association moves a
// value across a code boundary now and then, so the two are compared to the reference, not to
// each other).
TEST(QuantizeWeights, CpuBackendRunsAnFp8Model) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not installed";
  log::set_level(log::Level::warn);
  auto weights = ModelWeights::load(model_path());
  const ModelConfig& c = weights->config();
  backend::CpuBackend plain_be(2);
  Fp8CountingCpu fp8_be;
  LoadOptions load;
  load.quantize = DType::fp8_e4m3;
  LlamaModel plain(*weights, plain_be), quantized(*weights, fp8_be, load);
  // The held bytes: the Q4_1 file's layers (4.5 bits a weight) become one byte and a scale a row.
  EXPECT_GT(quantized.weight_bytes(), plain.weight_bytes());
  // The 7 projections of every layer (the delegate stacks nothing), every one used by every
  // forward through the fp8 matmul.
  EXPECT_EQ(fp8_be.quantized, 7 * c.n_layers);
  int before = 0;
  const auto errors =
      compare_logits(c, plain, plain_be, quantized, fp8_be, 16, [&](const char* what) {
        EXPECT_EQ(fp8_be.fp8_matmuls - before, 7 * c.n_layers) << what;
        before = fp8_be.fp8_matmuls;
      });
  for (const auto& [what, rel] : errors) {
    EXPECT_LT(rel, kFp8LogitsBound) << what;
    EXPECT_GT(rel, 1e-4) << what;  // it did quantize
  }
}

// A backend that cannot hold a weight in fp8 fails the load, naming the layer and the weight.
class RefusingBackend final : public CpuDelegate {
 public:
  std::string name() const override { return "cpu-refusing"; }
  bool quantize_weight(Tensor&, DType) override { return false; }
};

TEST(QuantizeWeights, RefusalNamesTheLayerAndWeight) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not installed";
  log::set_level(log::Level::warn);
  auto weights = ModelWeights::load(model_path());
  RefusingBackend refusing;
  LoadOptions load;
  load.quantize = DType::fp8_e4m3;
  try {
    LlamaModel m(*weights, refusing, load);
    FAIL() << "a backend that refuses fp8 weights loaded the model";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--quantization fp8:"), std::string::npos) << what;
    EXPECT_NE(what.find("layer 0's q weight"), std::string::npos) << what;
    EXPECT_NE(what.find("multiples of 16"), std::string::npos) << what;
  }
  // The CPU backend's own refusals: shapes that are not multiples of 16, other dtypes.
  backend::CpuBackend cpu(1);
  std::vector<float> v(48 * 40, 0.5f);
  Tensor a(v.data(), DType::f32, {48, 40}), b(v.data(), DType::f32, {40, 48});
  EXPECT_FALSE(cpu.quantize_weight(a, DType::fp8_e4m3));
  EXPECT_FALSE(cpu.quantize_weight(b, DType::fp8_e4m3));
  std::vector<float> sq(48 * 48, 0.5f);
  Tensor c(sq.data(), DType::f32, {48, 48});
  EXPECT_FALSE(cpu.quantize_weight(c, DType::q8_0));  // a shape it takes, a dtype it does not
  EXPECT_EQ(c.dtype, DType::f32);
  EXPECT_EQ(a.data, v.data());
  EXPECT_EQ(a.scales, nullptr);
}

}  // namespace
}  // namespace ridge::model
