#include "ridge/model/config.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "io/test_writers.h"
#include "ridge/core/error.h"
#include "ridge/io/gguf.h"
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

// The message of the ridge::Error that fn throws.
template <typename Fn>
std::string config_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no ridge::Error thrown>";
}

#define EXPECT_MESSAGE_HAS(message, part) \
  EXPECT_NE(std::string(message).find(part), std::string::npos) << "message: " << (message)

json small_llama() {
  return {{"model_type", "llama"},    {"num_hidden_layers", 2},   {"hidden_size", 64},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 128},
          {"vocab_size", 300}};
}

TEST(ModelConfig, WrongTypesNameTheKey) {
  json j = small_llama();
  j["model_type"] = 5;
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "config.json: 'model_type' must be a string, got 5");
  j = small_llama();
  j["rope_scaling"] = {{"rope_type", json::array({1})}, {"factor", 2.0}};
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "config.json: 'rope_type' must be a string, got array");
  j = small_llama();
  j["rope_scaling"] = {{"type", 3}, {"factor", 2.0}};
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "config.json: 'type' must be a string, got 3");
  // A container is named by its type, never printed: this one is too deep to print recursively.
  json deep = json::array();
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  j = small_llama();
  j["num_hidden_layers"] = std::move(deep);
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "config.json: 'num_hidden_layers' must be an integer, got array");
  j = small_llama();
  j["tie_word_embeddings"] = {{"a", 1}};
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "config.json: 'tie_word_embeddings' must be a boolean, got object");
  j = small_llama();
  j["rope_scaling"] = "linear";
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "rope scaling must be an object, got \"linear\"");
}

TEST(ModelConfig, IntegersMustBeIntegral) {
  json j = small_llama();
  j["num_key_value_heads"] = 1.9;  // was read as 1
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "'num_key_value_heads' must be an integer, got 1.9");
  j = small_llama();
  j["max_position_embeddings"] = 1e300;  // was an out-of-range conversion
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "'max_position_embeddings' must be an integer, got 1e+300");
  j = small_llama();
  j["head_dim"] = "16";
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "'head_dim' must be an integer, got \"16\"");
  j = small_llama();
  j["num_hidden_layers"] = 18446744073709551615ull;
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }), "'num_hidden_layers'");
  j = small_llama();
  j["rope_scaling"] = {
      {"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 8192.5}};
  EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_hf(j); }),
                     "'original_max_position_embeddings' must be an integer, got 8192.5");
  // Integral floats, as some converters write them, are read.
  j = small_llama();
  j["max_position_embeddings"] = 4096.0;
  j["num_key_value_heads"] = 4.0;
  const ModelConfig c = ModelConfig::from_hf(j);
  EXPECT_EQ(c.max_position, 4096);
  EXPECT_EQ(c.n_kv_heads, 4);
}

TEST(ModelConfig, RopeScalingIsValidated) {
  auto with_scaling = [](json rs) {
    json j = small_llama();
    j["rope_scaling"] = std::move(rs);
    return config_error([&] { ModelConfig::from_hf(j); });
  };
  EXPECT_MESSAGE_HAS(with_scaling({{"rope_type", "linear"}, {"factor", 0.0}}),
                     "rope scaling factor 0 must be positive and finite");
  EXPECT_MESSAGE_HAS(with_scaling({{"rope_type", "linear"}, {"factor", -2.0}}),
                     "rope scaling factor -2 must be positive and finite");
  EXPECT_MESSAGE_HAS(with_scaling({{"rope_type", "llama3"}, {"factor", 1e308 * 10}}),
                     "rope scaling factor inf must be positive and finite");
  EXPECT_MESSAGE_HAS(with_scaling({{"rope_type", "llama3"},
                                   {"factor", 8.0},
                                   {"low_freq_factor", 4.0},
                                   {"high_freq_factor", 4.0}}),
                     "0 < low_freq_factor < high_freq_factor (finite), got low_freq_factor 4 and "
                     "high_freq_factor 4");
  EXPECT_MESSAGE_HAS(
      with_scaling({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 0.0}}),
      "got low_freq_factor 0 and high_freq_factor 4");
  // original_max_position_embeddings 0 divided by zero in the llama3 frequencies.
  EXPECT_MESSAGE_HAS(
      with_scaling(
          {{"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 0}}),
      "llama3 rope scaling original_max_position_embeddings = 0 is outside 1..");
  // Llama 3.1's own values pass.
  EXPECT_EQ(with_scaling({{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}}),
            "<no ridge::Error thrown>");
}

// A GGUF image with the model keys from_gguf needs and the given rope scaling factor.
std::vector<std::byte> gguf_with_linear_rope(float factor) {
  using namespace ridge::io::testing;
  GgufBuilder b;
  b.kv("general.architecture", kString, encode_string("llama"))
      .kv("llama.block_count", kU32, encode<uint32_t>(2))
      .kv("llama.embedding_length", kU32, encode<uint32_t>(64))
      .kv("llama.attention.head_count", kU32, encode<uint32_t>(4))
      .kv("llama.feed_forward_length", kU32, encode<uint32_t>(128))
      .kv("llama.vocab_size", kU32, encode<uint32_t>(300))
      .kv("llama.rope.scaling.type", kString, encode_string("linear"))
      .kv("llama.rope.scaling.factor", kF32, encode<float>(factor));
  return b.build();
}

TEST(ModelConfig, GgufRopeScalingIsValidated) {
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    const auto img = gguf_with_linear_rope(bad);
    const io::GgufFile g = io::GgufFile::parse(img.data(), img.size(), "m.gguf");
    EXPECT_MESSAGE_HAS(config_error([&] { ModelConfig::from_gguf(g); }), "rope scaling factor");
  }
  const auto img = gguf_with_linear_rope(2.0f);
  const io::GgufFile g = io::GgufFile::parse(img.data(), img.size(), "m.gguf");
  const ModelConfig c = ModelConfig::from_gguf(g);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::linear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
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
