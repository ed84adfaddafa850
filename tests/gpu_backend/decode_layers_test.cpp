// The persistent batch-1 decode kernel (Backend::decode_layers, kernels/cuda/decode) inside
// LlamaModel, against two independent paths over the same weights and tokens: the fp32 CPU
// reference backend, and the CUDA backend running the same steps layer by layer
// (BackendOptions::decode_kernel off). Random-weight checkpoints written here (MHA with head dim
// 128; GQA 3:1 with head dim 64, llama3 RoPE scaling and a hidden size that is not a multiple of
// the kernel's 256-wide residual units) and the default model (SmolLM2, 30 layers, GQA 9:3).
//
// Each case prefills a random prompt (not the kernel: T > 1), then decodes one token at a time
// with teacher forcing (every path gets the reference's greedy token), through decode graphs and
// then eagerly, over shuffled KV blocks so that positions cross pages. Checked per step:
//   - the kernel's logits are as close to the fp32 reference as the layer-by-layer CUDA path's
//     (within 1.5x its worst step, plus a small floor), and finite;
//   - the greedy tokens agree with the layer-by-layer path's wherever the reference's top-2
//     margin is not a near-tie;
//   - after the run, the K and V the kernel stored for the decoded positions, in every layer,
//     match the layer-by-layer path's (a wrong slot, head or rotation is an O(1) error).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "io/temp_dir.h"
#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/backend/factory.h"
#include "ridge/core/log.h"
#include "ridge/kv/kv_pool.h"
#include "ridge/model/llama.h"
#include "ridge/model/weights.h"

namespace ridge::backend::gpu_test {
namespace {

using io::testing::Bytes;
using io::testing::SafetensorsSpec;
using io::testing::TempDir;

struct Shape {
  const char* name;
  int64_t hidden, heads, kv_heads, head_dim, ffn, layers, vocab;
  bool llama3;
};

Bytes bf16_bytes(const std::vector<float>& v) {
  const std::vector<uint16_t> bits = to_bf16_bits(v);
  Bytes b(bits.size() * 2);
  std::memcpy(b.data(), bits.data(), b.size());
  return b;
}

// A Llama checkpoint folder of random bf16 weights (normal, scaled by 1/sqrt(fan-in); norm
// weights around 1).
void write_random_model(const TempDir& dir, const Shape& s) {
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"hidden_size", s.hidden},
                        {"intermediate_size", s.ffn},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"num_hidden_layers", s.layers},
                        {"vocab_size", s.vocab},
                        {"rms_norm_eps", 1e-5},
                        {"max_position_embeddings", 4096},
                        {"tie_word_embeddings", false},
                        {"torch_dtype", "bfloat16"}};
  if (s.llama3) {
    cfg["rope_theta"] = 500000.0;
    cfg["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 64}};
  }
  dir.write("config.json", cfg.dump(2));
  std::vector<SafetensorsSpec> t;
  auto matrix = [&](const std::string& name, int64_t n, int64_t k, float scale) {
    t.push_back({name, "BF16", {n, k}, bf16_bytes(random_bf16(size_t(n * k), scale))});
  };
  auto norm = [&](const std::string& name) {
    std::vector<float> v = random_bf16(size_t(s.hidden), 0.1f);
    for (float& x : v) x += 1.0f;
    t.push_back({name, "BF16", {s.hidden}, bf16_bytes(v)});
  };
  const int64_t Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
  const float in = 1.0f / std::sqrt(float(s.hidden));
  matrix("model.embed_tokens.weight", s.vocab, s.hidden, 1.0f);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    norm(p + "input_layernorm.weight");
    matrix(p + "self_attn.q_proj.weight", Q, s.hidden, in);
    matrix(p + "self_attn.k_proj.weight", KV, s.hidden, in);
    matrix(p + "self_attn.v_proj.weight", KV, s.hidden, in);
    matrix(p + "self_attn.o_proj.weight", s.hidden, Q, 1.0f / std::sqrt(float(Q)));
    norm(p + "post_attention_layernorm.weight");
    matrix(p + "mlp.gate_proj.weight", s.ffn, s.hidden, in);
    matrix(p + "mlp.up_proj.weight", s.ffn, s.hidden, in);
    matrix(p + "mlp.down_proj.weight", s.hidden, s.ffn, 1.0f / std::sqrt(float(s.ffn)));
  }
  norm("model.norm.weight");
  matrix("lm_head.weight", s.vocab, s.hidden, in);
  dir.write("model.safetensors", io::testing::safetensors_file(t));
}

double rel_err(const float* got, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// One path: a model on a backend with its own KV pool.
struct Path {
  std::unique_ptr<Backend> owned;
  Backend* be = nullptr;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<kv::KvPool> pool;
  std::vector<float> logits;
};

std::unique_ptr<Path> make_path(const model::ModelWeights& w, const char* device, bool kernel,
                                int64_t blocks, int64_t block_size) {
  auto p = std::make_unique<Path>();
  BackendOptions o;
  o.decode_kernel = kernel;
  o.tune = false;  // the by-shape rule: no start-up timing in a test
  p->owned = make_backend(device, o);
  p->be = p->owned.get();
  p->model = std::make_unique<model::LlamaModel>(w, *p->be);
  const DType kv = std::string_view(device) == "cpu" ? DType::f32 : DType::bf16;
  p->pool = std::make_unique<kv::KvPool>(*p->be, w.config(), blocks, block_size, kv);
  p->model->reserve(512, 4, 64);
  return p;
}

void run_case(const model::ModelWeights& w, const std::string& name, int prompt_len, int steps) {
  SCOPED_TRACE(name);
  const model::ModelConfig& c = w.config();
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (prompt_len + steps + kBlock - 1) / kBlock + 3;
  auto ref = make_path(w, "cpu", false, blocks, kBlock);
  auto ops = make_path(w, "cuda", false, blocks, kBlock);
  auto ker = make_path(w, "cuda", true, blocks, kBlock);

  std::mt19937& r = rng();
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), r);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab) - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(prompt_len));
  for (auto& t : tokens) t = tok(r);

  const size_t V = size_t(c.vocab);
  auto step = [&](Path& p, const std::vector<int32_t>& fresh) {
    const int32_t ctx = int32_t(tokens.size());
    const int32_t used = (ctx + int32_t(kBlock) - 1) / int32_t(kBlock);
    model::ForwardBatch b;
    b.add_sequence(fresh, ctx, std::vector<int32_t>(table.begin(), table.begin() + used),
                   int32_t(kBlock), true);
    p.logits.resize(V);
    p.model->forward({}, b, p.pool->layers(), p.logits.data());
  };
  for (Path* p : {ref.get(), ops.get(), ker.get()}) step(*p, tokens);
  ASSERT_EQ(ker->model->stats().decode_kernel_passes, 0) << "a prompt ran through the kernel";

  std::vector<double> err_ops, err_ker;
  int near_ties = 0;
  for (int i = 0; i < steps; ++i) {
    // A fresh random token feeds every path. (The reference's greedy token did before; a random
    // model's greedy chain soon settles on a token whose argmax is itself, so every step repeated
    // the first one's top-two gap and one narrow gap made all of them near-ties: "5 near-ties of
    // 5", run 35 c6.)
    const int32_t next = tok(r);
    tokens.push_back(next);
    if (i == steps / 2) {  // the second half eagerly: the kernel outside a graph too
      ker->model->set_graphs_enabled(false);
      ops->model->set_graphs_enabled(false);
    }
    for (Path* p : {ref.get(), ops.get(), ker.get()}) step(*p, {next});
    err_ops.push_back(rel_err(ops->logits.data(), ref->logits.data(), V));
    err_ker.push_back(rel_err(ker->logits.data(), ref->logits.data(), V));
    ASSERT_TRUE(std::isfinite(err_ker.back())) << "step " << i << ": non-finite logits";
    // Greedy agreement with the layer-by-layer path, except at a near-tie of the reference: a
    // gap between its top two logits under 3 x the layer-by-layer path's largest logit error at
    // this step. Past that the layer-by-layer argmax is the reference's (its error is under half
    // the gap), so the kernel's can differ only where its own error at the top exceeds 1.5 x
    // the layer-by-layer path's: what the logits bound below allows, checked where it decides.
    std::vector<float> sorted = ref->logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const auto argmax = [](const std::vector<float>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    float ops_err = 0.0f;
    for (size_t k = 0; k < V; ++k)
      ops_err = std::max(ops_err, std::abs(ops->logits[k] - ref->logits[k]));
    if (sorted[0] - sorted[1] < 3.0f * ops_err) {
      ++near_ties;
    } else {
      EXPECT_EQ(argmax(ker->logits), argmax(ops->logits)) << "step " << i;
    }
  }
  // The greedy check above ran on most steps (13-16 of 40 were near-ties under the 5 %-of-the-
  // top-logit margin used before, runs 5-9; with fresh random tokens at most 11 of 40, 5 of 24
  // and 7 of 32 over ten repeats, run 35 c9).
  EXPECT_LT(near_ties, steps / 2) << "near-ties: the greedy agreement was checked too rarely";
  // Every eager decode step, and each decode graph's capture, went through the kernel; the
  // layer-by-layer path never did.
  EXPECT_GE(ker->model->stats().decode_kernel_passes, 1 + (steps - steps / 2));
  EXPECT_GE(ker->model->stats().graph_steps, steps / 2);
  EXPECT_EQ(ops->model->stats().decode_kernel_passes, 0);
  // Every decode step ran in the kernel, eager or replayed (what ridge bench model reads to pick
  // the cost model's plan); the prefill did not.
  EXPECT_EQ(ker->model->stats().decode_kernel_steps, steps);
  EXPECT_EQ(ops->model->stats().decode_kernel_steps, 0);
  const double worst_ops = *std::max_element(err_ops.begin(), err_ops.end());
  for (int i = 0; i < steps; ++i)
    EXPECT_LE(err_ker[size_t(i)], 1.5 * worst_ops + 2e-3)
        << "step " << i << ": kernel " << err_ker[size_t(i)] << " vs layer-by-layer "
        << err_ops[size_t(i)] << " (relative logits error against fp32)";
  fmt::print(
      "{}: relative logits error vs fp32, kernel max {:.4f} mean {:.4f}; layer by layer max "
      "{:.4f} mean {:.4f}; {} near-ties of {}\n",
      name, *std::max_element(err_ker.begin(), err_ker.end()),
      std::accumulate(err_ker.begin(), err_ker.end(), 0.0) / steps, worst_ops,
      std::accumulate(err_ops.begin(), err_ops.end(), 0.0) / steps, near_ties, steps);

  // The K and V rows the decode steps stored, every layer: kernel against layer by layer.
  const int64_t row = c.n_kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<float> got, want;
      for (Path* p : {ker.get(), ops.get()}) {
        const Tensor& t = kv ? p->pool->layers()[size_t(l)].v : p->pool->layers()[size_t(l)].k;
        std::vector<uint16_t> bits(size_t(t.numel()));
        p->be->download({}, bits.data(), t.data, bits.size() * 2);
        p->be->synchronize({});
        std::vector<float>& out = p == ker.get() ? got : want;
        for (int pos = prompt_len; pos < prompt_len + steps; ++pos) {
          const int64_t slot = int64_t(table[size_t(pos / kBlock)]) * kBlock + pos % kBlock;
          for (int64_t e = 0; e < row; ++e)
            out.push_back(bf16_to_f32(bits[size_t(slot * row + e)]));
        }
      }
      EXPECT_LE(rel_err(got.data(), want.data(), got.size()), 2e-2)
          << (kv ? "V" : "K") << " of layer " << l;
    }
  }
}

class DecodeLayers : public GpuBackend {};

void run_random(const Shape& s, int prompt_len, int steps) {
  log::set_level(log::Level::warn);
  TempDir dir;
  write_random_model(dir, s);
  auto w = model::ModelWeights::load(dir.path().string());
  run_case(*w, s.name, prompt_len, steps);
}

TEST_F(DecodeLayers, RandomMhaHeadDim128) {
  run_random({"mha-hd128", 512, 4, 4, 128, 1376, 3, 320, false}, 37, 40);
}

TEST_F(DecodeLayers, RandomGqaHeadDim64Llama3Rope) {
  run_random({"gqa-hd64-llama3", 384, 6, 2, 64, 1040, 2, 300, true}, 250, 24);
}

// A context long enough that a head's attention units take more than the least positions and the
// merge reads many partials: 1,204-1,235 positions in 26 units of 48 (16-position rounding of
// the context over 32 units).
TEST_F(DecodeLayers, RandomGqaLongContext) {
  run_random({"gqa-hd64-long", 384, 6, 2, 64, 1040, 2, 300, true}, 1203, 32);
}

// Head dim 128 with many partials to merge: 673-704 positions in 22 units of 32, read four at a
// time (the last group of two), the first four with the (max, sum) pairs.
TEST_F(DecodeLayers, RandomMhaLongContext) {
  run_random({"mha-hd128-long", 512, 4, 4, 128, 1376, 2, 320, false}, 672, 32);
}

TEST_F(DecodeLayers, DefaultModel) {
  const std::string path =
      std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not installed";
  log::set_level(log::Level::warn);
  auto w = model::ModelWeights::load(path);
  run_case(*w, "smollm2", 21, 30);
}

}  // namespace
}  // namespace ridge::backend::gpu_test
