#include "ridge/model/config.h"

#include <gtest/gtest.h>

#include "ridge/core/error.h"
#include "ridge/model/forward_batch.h"
#include "ridge/model/llama.h"
#include "ridge/model/weights.h"

namespace ridge::model {
namespace {

using nlohmann::json;

TEST(ModelConfig, NamedShapesHavePublishedParameterCounts) {
  // Meta's published totals: Llama-2-7B 6,738,415,616; Llama-3-8B 8,030,261,248;
  // Llama-3-70B 70,553,706,496. SmolLM2-135M: 134,515,008 (HF model card's safetensors total).
  EXPECT_EQ(ModelConfig::named("llama-2-7b").param_count(), 6738415616);
  EXPECT_EQ(ModelConfig::named("llama-3-8b").param_count(), 8030261248);
  EXPECT_EQ(ModelConfig::named("llama-3-70b").param_count(), 70553706496);
  EXPECT_EQ(ModelConfig::named("smollm2-135m").param_count(), 134515008);
  EXPECT_THROW(ModelConfig::named("gpt-5"), Error);
}

TEST(ModelConfig, FromHfTransformers4Style) {
  json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
            {"num_hidden_layers", 2}, {"hidden_size", 64}, {"num_attention_heads", 4},
            {"num_key_value_heads", 2}, {"intermediate_size", 128}, {"vocab_size", 300},
            {"max_position_embeddings", 512}, {"rope_theta", 500000.0}, {"rms_norm_eps", 1e-5},
            {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}},
            {"tie_word_embeddings", true}};
  ModelConfig c = ModelConfig::from_hf(j);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::llama3);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
}

TEST(ModelConfig, FromHfTransformers5RopeParameters) {
  json j = {{"model_type", "qwen2"}, {"num_hidden_layers", 2}, {"hidden_size", 64},
            {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"intermediate_size", 128},
            {"vocab_size", 300}, {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}};
  ModelConfig c = ModelConfig::from_hf(j);
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::none);
}

TEST(ModelConfig, ClearErrors) {
  json j = {{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"}};
  try {
    ModelConfig::from_hf(j);
    FAIL() << "accepted an unsupported architecture";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPTNeoXForCausalLM"), std::string::npos) << e.what();
  }
  json k = {{"model_type", "llama"}, {"num_hidden_layers", 2}, {"hidden_size", 64},
            {"num_attention_heads", 5}, {"num_key_value_heads", 2}, {"intermediate_size", 128},
            {"vocab_size", 300}};
  EXPECT_THROW(ModelConfig::from_hf(k), Error);  // 5 heads over 2 KV heads
  k["num_attention_heads"] = "four";
  try {
    ModelConfig::from_hf(k);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
}

// llama.cpp's converter permutes HF rows with w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2):
// GGUF row (h, j, t) = HF row (h, t, j). Apply that here and check the loader undoes it.
TEST(Weights, UnpermuteUndoesTheGgufPermutation) {
  const int64_t heads = 3, hd = 8, in = 5;
  std::vector<float> hf(heads * hd * in);
  for (size_t i = 0; i < hf.size(); ++i) hf[i] = float(i) * 0.5f + 1;
  std::vector<float> gguf(hf.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t j = 0; j < hd / 2; ++j)
        for (int64_t c = 0; c < in; ++c)
          gguf[((h * hd) + j * 2 + t) * in + c] = hf[((h * hd) + t * (hd / 2) + j) * in + c];
  Tensor g(gguf.data(), DType::f32, {heads * hd, in});
  HostBuffer back = unpermute_gguf_rows(g, heads);
  for (size_t i = 0; i < hf.size(); ++i) EXPECT_EQ(back.as<float>()[i], hf[i]) << i;
}

// HF's default RoPE inverse frequencies: 1 / base^(2i/d); llama3 scaling leaves high
// frequencies alone and divides low ones by the factor.
TEST(Rope, InverseFrequencies) {
  ModelConfig c = ModelConfig::named("llama-2-7b");
  auto f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 128), 1e-6 * f[0]);
  ModelConfig l3 = ModelConfig::named("llama-3-8b");
  auto g = rope_inv_freq(l3);
  const double base = 500000.0;
  for (int i = 0; i < 64; ++i) {
    const double inv = std::pow(base, -2.0 * i / 128), wavelen = 2 * M_PI / inv;
    if (wavelen < 8192.0 / 4) {
      EXPECT_NEAR(g[i], inv, 1e-6 * inv) << i;  // high frequency
    }
    if (wavelen > 8192.0 / 1) {
      EXPECT_NEAR(g[i], inv / 8, 1e-6 * inv) << i;  // low frequency
    }
  }
}

TEST(ForwardBatch, PlansSlotsAndValidates) {
  ForwardBatch b;
  b.add_sequence({5, 6, 7}, 3, {4}, 16, true);          // prefill at blocks [4]
  b.add_sequence({9}, 18, {2, 7}, 16, true);            // decode at position 17 -> block 7 slot 1
  EXPECT_EQ(b.slots, (std::vector<int32_t>{64, 65, 66, 7 * 16 + 1}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 17}));
  EXPECT_EQ(b.cu_seqlens, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.max_blocks_per_seq, 2);
  EXPECT_EQ(b.block_tables, (std::vector<int32_t>{4, 0, 2, 7}));
  EXPECT_EQ(b.logits_rows, (std::vector<int32_t>{2, 3}));
  b.validate(8 * 16, 16);
  EXPECT_THROW(b.validate(7 * 16, 16), Error);  // slot 113 outside a 112-slot pool
  EXPECT_THROW(b.add_sequence({1, 2}, 1, {0}, 16, false), Error);
}

}  // namespace
}  // namespace ridge::model
