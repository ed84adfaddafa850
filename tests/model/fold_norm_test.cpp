// LlamaModel with RMSNorm weights folded into the matmuls after them (Backend::fold_norm_weight,
// MatmulFusion::norm_folded, the GPU's --fuse norm) computes the same logits as without: checked
// on the CPU with a backend that stacks q|k|v and gate|up into owned fp32 weights (as the CUDA
// backend does) and folds norms into them, against the plain CPU reference. The two differ only
// in fp32 association ((x/rms · w)·Wᵀ against (x/rms)·(W·diag(w))ᵀ), so the logits agree to
// about 1e-5 of their scale.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <list>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/backend/cpu/quant.h"
#include "ridge/core/log.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/llama.h"
#include "ridge/model/weights.h"
#include "cpu_delegate.h"

namespace ridge::model {
namespace {

// The CPU reference with stacked fp32 weights it owns, and norms folded into them.
class FoldingBackend final : public CpuDelegate {
 public:
  std::string name() const override { return "cpu-folding"; }
  Tensor upload_weight_rows(std::span<const Tensor> parts) override {  // matrices only
    return stack_rows(parts);
  }
  bool fold_norm_weight(Tensor& w, const Tensor& norm_weight) override {
    if (w.dtype != DType::f32) return false;  // only the stacked weights this backend owns
    const int64_t K = w.shape[1];
    std::vector<float> g(static_cast<size_t>(K));
    backend::cpu::dequantize_row(norm_weight.dtype, norm_weight.data, g.data(), K);
    auto* p = static_cast<float*>(w.data);
    for (int64_t r = 0; r < w.shape[0]; ++r)
      for (int64_t k = 0; k < K; ++k) p[r * K + k] *= g[size_t(k)];
    ++folds;
    return true;
  }
  void matmul_fused(const Stream& s, const Tensor& x, const Tensor& w,
                    const backend::MatmulFusion& f, Tensor& scratch, Tensor& out) override {
    if (f.norm_weight) {
      ++norm_calls;
      if (f.norm_folded) ++folded_calls;
    }
    Backend::matmul_fused(s, x, w, f, scratch, out);
  }

  int folds = 0, norm_calls = 0, folded_calls = 0;
};

std::string model_path() {
  return std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(FoldNorm, FoldedNormsGiveTheSameLogits) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "default model not installed";
  log::set_level(log::Level::warn);
  auto weights = ModelWeights::load(model_path());
  const ModelConfig& c = weights->config();
  backend::CpuBackend cpu(2);
  FoldingBackend folding;
  LlamaModel plain(*weights, cpu), folded(*weights, folding);
  // q|k|v and gate|up of every layer; the LM head is tied to the embedding: not folded.
  EXPECT_EQ(folding.folds, 2 * c.n_layers);
  constexpr int64_t kBlock = 16, kBlocks = 8;
  kv::KvPool pool_a(cpu, c, kBlocks, kBlock, DType::f32);
  kv::KvPool pool_b(folding, c, kBlocks, kBlock, DType::f32);

  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab) - 1);
  std::vector<int32_t> tokens(23);
  for (auto& t : tokens) t = tok(rng);
  const std::vector<int32_t> table = {3, 0, 5};
  const size_t V = size_t(c.vocab);
  auto compare = [&](const ForwardBatch& b, const char* what) {
    std::vector<float> la(V), lb(V);
    plain.forward({}, b, pool_a.layers(), la.data());
    folded.forward({}, b, pool_b.layers(), lb.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < V; ++i) {
      ASSERT_TRUE(std::isfinite(lb[i])) << what;
      num += (double(la[i]) - lb[i]) * (double(la[i]) - lb[i]);
      den += double(la[i]) * la[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4) << what;
  };
  ForwardBatch prefill;
  prefill.add_sequence(std::vector<int32_t>(tokens.begin(), tokens.end() - 1), 22, table, kBlock,
                       true);
  compare(prefill, "prefill of 22 tokens");
  ForwardBatch decode;
  decode.add_sequence({tokens.back()}, 23, table, kBlock, true);
  compare(decode, "decode step");
  // Both norms of every layer ran as folded (ones and the 1/rms scale); the final norm did not.
  EXPECT_EQ(folding.folded_calls, 2 * 2 * c.n_layers);
  EXPECT_EQ(folding.norm_calls, 2 * (2 * c.n_layers + 1));
}

}  // namespace
}  // namespace ridge::model
