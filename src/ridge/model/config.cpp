#include "ridge/model/config.h"

#include <fmt/format.h>
#include <cmath>
#include <cstdint>

#include "ridge/core/error.h"
#include "ridge/io/gguf.h"
#include "ridge/io/safetensors.h"

namespace ridge::model {

namespace {

using nlohmann::json;

std::string describe(const json& v) { return io::describe_json(v); }

// An integer, or a float with an integral value that a double holds exactly (4096.0).
int64_t as_int(const json& v, const char* key) {
  if (v.is_number_unsigned()) {
    RIDGE_CHECK(v.get<uint64_t>() <= uint64_t(INT64_MAX), "config.json: '{}' = {} is too large",
                key, describe(v));
    return int64_t(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    constexpr double kExact = 9007199254740992.0;  // 2^53
    RIDGE_CHECK(std::isfinite(d) && std::trunc(d) == d && std::fabs(d) <= kExact,
                "config.json: '{}' must be an integer, got {}", key, describe(v));
    return int64_t(d);
  }
  fail("config.json: '{}' must be an integer, got {}", key, describe(v));
}

int64_t json_int(const json& j, const char* key, const char* what) {
  auto it = j.find(key);
  RIDGE_CHECK(it != j.end(), "config.json: missing '{}' ({})", key, what);
  return as_int(*it, key);
}

template <typename T>
T json_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    RIDGE_CHECK(it->is_boolean(), "config.json: '{}' must be a boolean, got {}", key,
                describe(*it));
    return it->get<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return as_int(*it, key);
  } else {
    RIDGE_CHECK(it->is_number(), "config.json: '{}' must be a number, got {}", key, describe(*it));
    return it->get<T>();
  }
}

std::string json_string_or(const json& j, const char* key, std::string fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  RIDGE_CHECK(it->is_string(), "config.json: '{}' must be a string, got {}", key, describe(*it));
  return it->get<std::string>();
}

void read_rope_scaling(const json& rs, RopeScaling& out) {
  if (rs.is_null()) return;
  RIDGE_CHECK(rs.is_object(), "config.json: rope scaling must be an object, got {}", describe(rs));
  std::string type = json_string_or(rs, "rope_type", "");
  if (type.empty()) type = json_string_or(rs, "type", "default");
  if (type == "default") return;
  out.factor = json_or<double>(rs, "factor", 1.0);
  if (type == "llama3") {
    out.kind = RopeScaling::Kind::llama3;
    out.low_freq_factor = json_or<double>(rs, "low_freq_factor", 1.0);
    out.high_freq_factor = json_or<double>(rs, "high_freq_factor", 4.0);
    out.original_max_position = json_or<int64_t>(rs, "original_max_position_embeddings", 8192);
  } else if (type == "linear") {
    out.kind = RopeScaling::Kind::linear;
  } else {
    fail("config.json: unsupported rope scaling type '{}' (supported: default, linear, llama3)",
         type);
  }
}

std::string gguf_key(const std::string& arch, const char* suffix) {
  return fmt::format("{}.{}", arch, suffix);
}

}  // namespace

ModelConfig ModelConfig::from_hf(const json& j) {
  RIDGE_CHECK(j.is_object(), "config.json: the top level must be an object");
  ModelConfig c;
  std::string model_type = json_string_or(j, "model_type", "");
  std::string arch_name;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() &&
                                         (*it)[0].is_string())
    arch_name = (*it)[0].get<std::string>();
  if (model_type == "llama" || arch_name == "LlamaForCausalLM") {
    c.architecture = "llama";
  } else if (model_type == "mistral" || arch_name == "MistralForCausalLM") {
    c.architecture = "mistral";
  } else if (model_type == "qwen2" || arch_name == "Qwen2ForCausalLM") {
    c.architecture = "qwen2";
  } else {
    fail("unsupported architecture '{}' (model_type '{}'): ridge runs LlamaForCausalLM, "
         "MistralForCausalLM and Qwen2ForCausalLM",
         arch_name, model_type);
  }
  c.n_layers = json_int(j, "num_hidden_layers", "layers");
  c.hidden = json_int(j, "hidden_size", "hidden size");
  c.n_heads = json_int(j, "num_attention_heads", "attention heads");
  c.n_kv_heads = json_or<int64_t>(j, "num_key_value_heads", c.n_heads);
  c.head_dim = json_or<int64_t>(j, "head_dim", c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  c.ffn = json_int(j, "intermediate_size", "FFN size");
  c.vocab = json_int(j, "vocab_size", "vocabulary size");
  c.max_position = json_or<int64_t>(j, "max_position_embeddings", 2048);
  c.rms_norm_eps = json_or<double>(j, "rms_norm_eps", 1e-6);
  c.tied_embeddings = json_or<bool>(j, "tie_word_embeddings", false);
  c.qkv_bias = c.architecture == "qwen2" ? true : json_or<bool>(j, "attention_bias", false);
  // transformers < 5 writes rope_theta + rope_scaling; transformers 5 writes rope_parameters.
  c.rope_theta = json_or<double>(j, "rope_theta", 10000.0);
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) {
    c.rope_theta = json_or<double>(*it, "rope_theta", c.rope_theta);
    read_rope_scaling(*it, c.rope_scaling);
  }
  if (auto it = j.find("rope_scaling"); it != j.end()) read_rope_scaling(*it, c.rope_scaling);
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    const auto s = it->get<std::string>();
    c.weight_dtype = s == "float32" ? DType::f32 : s == "float16" ? DType::f16 : DType::bf16;
  }
  c.validate();
  return c;
}

ModelConfig ModelConfig::from_gguf(const io::GgufFile& g) {
  ModelConfig c;
  const std::string arch = g.get_string("general.architecture");
  if (arch != "llama" && arch != "mistral" && arch != "qwen2")
    fail("{}: unsupported architecture '{}' (general.architecture): ridge runs llama, mistral "
         "and qwen2",
         g.path(), arch);
  c.architecture = arch;
  c.n_layers = g.get_int(gguf_key(arch, "block_count"));
  c.hidden = g.get_int(gguf_key(arch, "embedding_length"));
  c.n_heads = g.get_int(gguf_key(arch, "attention.head_count"));
  c.n_kv_heads = g.try_int(gguf_key(arch, "attention.head_count_kv")).value_or(c.n_heads);
  c.head_dim = g.try_int(gguf_key(arch, "attention.key_length"))
                   .value_or(c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  c.ffn = g.get_int(gguf_key(arch, "feed_forward_length"));
  c.max_position = g.try_int(gguf_key(arch, "context_length")).value_or(2048);
  c.rope_theta = g.try_float(gguf_key(arch, "rope.freq_base")).value_or(10000.0);
  c.rms_norm_eps = g.try_float(gguf_key(arch, "attention.layer_norm_rms_epsilon")).value_or(1e-5);
  // RoPE over part of each head (partial rotary) is not implemented: refused rather than run as
  // full rotary.
  if (auto dims = g.try_int(gguf_key(arch, "rope.dimension_count")); dims && *dims != c.head_dim)
    fail(
        "{}: {}.rope.dimension_count is {}, the head dim {}: rotary embeddings over part of a "
        "head are not supported",
        g.path(), arch, *dims, c.head_dim);
  if (auto v = g.try_int(gguf_key(arch, "vocab_size"))) {
    c.vocab = *v;
  } else if (const auto* tok = g.find("tokenizer.ggml.tokens")) {
    c.vocab = int64_t(tok->as_array("tokenizer.ggml.tokens").size());
  } else if (const auto* emb = g.find_tensor("token_embd.weight")) {
    c.vocab = emb->shape.at(0);
  }
  if (auto type = g.try_string(gguf_key(arch, "rope.scaling.type"))) {
    if (*type == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::linear;
      c.rope_scaling.factor = g.try_float(gguf_key(arch, "rope.scaling.factor")).value_or(1.0);
    } else if (*type != "none") {
      fail("{}: unsupported rope scaling type '{}'", g.path(), *type);
    }
  }
  // llama3-style scaling is stored by GGUF converters as a precomputed rope_freqs tensor; the
  // weight loader reads it (see weights.cpp).
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  c.qkv_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (const auto* t = g.find_tensor("blk.0.attn_q.weight")) c.weight_dtype = t->dtype;
  c.validate();
  return c;
}

ModelConfig ModelConfig::named(std::string_view name) {
  ModelConfig c;
  c.weight_dtype = DType::bf16;
  if (name == "llama-2-7b") {
    c.architecture = "llama";
    c.n_layers = 32, c.hidden = 4096, c.n_heads = 32, c.n_kv_heads = 32, c.head_dim = 128;
    c.ffn = 11008, c.vocab = 32000, c.max_position = 4096, c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-5;
  } else if (name == "llama-3-8b") {
    c.architecture = "llama";
    c.n_layers = 32, c.hidden = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128;
    c.ffn = 14336, c.vocab = 128256, c.max_position = 131072, c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-5;
    c.rope_scaling = {RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 8192};
  } else if (name == "llama-3-70b") {
    c.architecture = "llama";
    c.n_layers = 80, c.hidden = 8192, c.n_heads = 64, c.n_kv_heads = 8, c.head_dim = 128;
    c.ffn = 28672, c.vocab = 128256, c.max_position = 131072, c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-5;
    c.rope_scaling = {RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 8192};
  } else if (name == "smollm2-135m") {
    c.architecture = "llama";
    c.n_layers = 30, c.hidden = 576, c.n_heads = 9, c.n_kv_heads = 3, c.head_dim = 64;
    c.ffn = 1536, c.vocab = 49152, c.max_position = 8192, c.rope_theta = 100000.0;
    c.rms_norm_eps = 1e-5, c.tied_embeddings = true;
  } else if (name == "mistral-7b") {
    c.architecture = "mistral";
    c.n_layers = 32, c.hidden = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128;
    c.ffn = 14336, c.vocab = 32768, c.max_position = 32768, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-5;
  } else if (name == "qwen2-7b") {
    c.architecture = "qwen2";
    c.n_layers = 28, c.hidden = 3584, c.n_heads = 28, c.n_kv_heads = 4, c.head_dim = 128;
    c.ffn = 18944, c.vocab = 152064, c.max_position = 32768, c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6, c.qkv_bias = true;
  } else {
    fail("unknown model shape '{}' (known: llama-2-7b, llama-3-8b, llama-3-70b, smollm2-135m, "
         "mistral-7b, qwen2-7b)",
         name);
  }
  c.validate();
  return c;
}

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name, int64_t max) {
    RIDGE_CHECK(v > 0 && v <= max, "model config: {} = {} is outside 1..{}", name, v, max);
  };
  positive(n_layers, "layers", 1024);
  positive(hidden, "hidden size", 1 << 17);
  positive(n_heads, "attention heads", 1024);
  positive(n_kv_heads, "KV heads", 1024);
  positive(head_dim, "head dim", 1024);
  positive(ffn, "FFN size", 1 << 20);
  positive(vocab, "vocabulary size", 1 << 24);
  positive(max_position, "max positions", int64_t(1) << 24);
  RIDGE_CHECK(n_heads % n_kv_heads == 0,
              "model config: {} attention heads are not a multiple of {} KV heads", n_heads,
              n_kv_heads);
  RIDGE_CHECK(head_dim % 2 == 0, "model config: head dim {} must be even for RoPE", head_dim);
  RIDGE_CHECK(rope_theta > 0 && std::isfinite(rope_theta),
              "model config: rope_theta {} must be positive and finite", rope_theta);
  RIDGE_CHECK(rms_norm_eps > 0 && rms_norm_eps < 1, "model config: rms_norm_eps {} is outside (0, 1)",
              rms_norm_eps);
  if (rope_scaling.kind != RopeScaling::Kind::none) {
    const RopeScaling& rs = rope_scaling;
    RIDGE_CHECK(rs.factor > 0 && std::isfinite(rs.factor),
                "model config: rope scaling factor {} must be positive and finite", rs.factor);
  }
  if (rope_scaling.kind == RopeScaling::Kind::llama3) {
    // The llama3 frequencies divide by low_freq_factor, high - low and the original context.
    const RopeScaling& rs = rope_scaling;
    RIDGE_CHECK(rs.low_freq_factor > 0 && std::isfinite(rs.high_freq_factor) &&
                    rs.low_freq_factor < rs.high_freq_factor,
                "model config: llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor "
                "(finite), got low_freq_factor {} and high_freq_factor {}",
                rs.low_freq_factor, rs.high_freq_factor);
    positive(rs.original_max_position, "llama3 rope scaling original_max_position_embeddings",
             int64_t(1) << 24);
  }
}

int64_t ModelConfig::param_count() const {
  const int64_t attn = hidden * q_dim() + 2 * hidden * kv_dim() + q_dim() * hidden +
                       (qkv_bias ? q_dim() + 2 * kv_dim() : 0);
  const int64_t mlp = 3 * hidden * ffn;
  const int64_t norms = 2 * hidden;
  const int64_t embed = vocab * hidden * (tied_embeddings ? 1 : 2);
  return n_layers * (attn + mlp + norms) + hidden + embed;
}

std::string ModelConfig::describe() const {
  return fmt::format(
      "{}: {} layers, hidden {}, heads {}/{} (head dim {}), FFN {}, vocab {}, rope_theta {}{}, "
      "{:.1f}M params",
      architecture, n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab, rope_theta,
      rope_scaling.kind == RopeScaling::Kind::llama3 ? " (llama3 scaling)" : "",
      double(param_count()) / 1e6);
}

}  // namespace ridge::model
