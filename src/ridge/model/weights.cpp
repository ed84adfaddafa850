#include "ridge/model/weights.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/io/gguf.h"
#include "ridge/io/safetensors.h"

namespace ridge::model {

namespace fs = std::filesystem;

ModelWeights::ModelWeights() = default;
ModelWeights::~ModelWeights() = default;

std::unique_ptr<ModelWeights> ModelWeights::load(const std::string& path) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->path_ = path;
  std::error_code ec;
  RIDGE_CHECK(fs::exists(path, ec), "model '{}' does not exist", path);
  if (fs::is_regular_file(path, ec) && path.size() >= 5 && path.ends_with(".gguf")) {
    w->load_gguf(path);
  } else if (fs::is_directory(path, ec) || path.ends_with(".safetensors")) {
    w->load_safetensors(path);
  } else {
    // Sniff the magic: a GGUF file need not end in .gguf. (Not a FIFO or a device: opening one
    // would wait for a writer, and it cannot be mapped.)
    RIDGE_CHECK(fs::is_regular_file(path, ec), "model '{}' is not a regular file or a folder",
                path);
    char magic[4] = {};
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const size_t got = std::fread(magic, 1, 4, f);
      std::fclose(f);
      if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
        w->load_gguf(path);
        w->check_shapes();
        return w;
      }
    }
    fail("model '{}' is neither a GGUF file nor a Hugging Face folder / .safetensors file", path);
  }
  w->check_shapes();
  return w;
}

namespace {

// A tensor named `prefix` + N + "." belongs to layer N: refused when N is not a layer of the config
// (`count_name`: where the file states the layer count).
void check_layer_of(const std::string& path, std::string_view name, std::string_view prefix,
                    int64_t n_layers, std::string_view count_name) {
  if (!name.starts_with(prefix)) return;
  const char* first = name.data() + prefix.size();
  const char* end = name.data() + name.size();
  int64_t layer = -1;
  const auto [ptr, ec] = std::from_chars(first, end, layer);
  if (ec != std::errc() || ptr == first || ptr == end || *ptr != '.') return;
  if (layer >= n_layers)
    fail("{}: tensor {} belongs to layer {}, but {} is {}: the metadata and the tensors disagree",
         path, name, layer, count_name, n_layers);
}

}  // namespace

HostBuffer unpermute_gguf_rows(const Tensor& w, int64_t n_heads, std::string_view name) {
  const int64_t rows = w.shape[0];
  RIDGE_CHECK(rows % n_heads == 0 && (rows / n_heads) % 2 == 0,
              "cannot un-permute the {} rows of {} over {} heads (its head count in the file's "
              "metadata): the rows must be whole heads of even size",
              rows, name.empty() ? std::string_view("a tensor") : name, n_heads);
  const int64_t hd = rows / n_heads, half = hd / 2;
  const size_t row = w.ndim == 1 ? ridge::row_bytes(w.dtype, 1) : w.row_bytes();
  HostBuffer out(row * size_t(rows));
  const auto* src = static_cast<const char*>(w.data);
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t hf = h * hd + t * half + j, gg = h * hd + 2 * j + t;
        std::memcpy(out.as<char>() + hf * row, src + gg * row, row);
      }
  return out;
}

void ModelWeights::load_gguf(const std::string& path) {
  format_ = "gguf";
  gguf_ = std::make_unique<io::GgufFile>(io::GgufFile::open(path));
  config_ = ModelConfig::from_gguf(*gguf_);
  const auto& g = *gguf_;
  auto get = [&](const std::string& name) { return g.tensor(name).view(); };
  auto opt = [&](const std::string& name) {
    const io::TensorData* t = g.find_tensor(name);
    return t ? t->view() : Tensor{};
  };
  // llama.cpp's converter permutes Q/K rows for the `llama` architecture only (qwen2 uses the
  // NEOX rope layout, which is Hugging Face's).
  const bool permuted = config_.architecture == "llama";
  auto unpermute = [&](const std::string& name, bool required, int64_t heads) {
    Tensor t = required ? get(name) : opt(name);
    if (!permuted || !t.data) return t;
    owned_.push_back(unpermute_gguf_rows(t, heads, name));
    t.data = owned_.back().data();
    return t;
  };
  // Every layer tensor belongs to a layer of the config: a file whose block_count leaves some of
  // its layers out would otherwise run as a smaller, different model.
  for (const io::TensorData& t : g.tensors())
    check_layer_of(path, t.name, "blk.", config_.n_layers,
                   fmt::format("the file's {}.block_count", config_.architecture));
  token_embd = get("token_embd.weight");
  output_norm = get("output_norm.weight");
  output = config_.tied_embeddings ? token_embd : get("output.weight");
  rope_freqs = opt("rope_freqs.weight");
  layers.resize(size_t(config_.n_layers));
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LayerWeights& l = layers[size_t(i)];
    l.attn_norm = get(p + "attn_norm.weight");
    l.wq = unpermute(p + "attn_q.weight", true, config_.n_heads);
    l.wk = unpermute(p + "attn_k.weight", true, config_.n_kv_heads);
    l.wv = get(p + "attn_v.weight");
    l.bq = unpermute(p + "attn_q.bias", false, config_.n_heads);
    l.bk = unpermute(p + "attn_k.bias", false, config_.n_kv_heads);
    l.bv = opt(p + "attn_v.bias");
    l.wo = get(p + "attn_output.weight");
    l.ffn_norm = get(p + "ffn_norm.weight");
    l.w_gate = get(p + "ffn_gate.weight");
    l.w_up = get(p + "ffn_up.weight");
    l.w_down = get(p + "ffn_down.weight");
  }
}

void ModelWeights::load_safetensors(const std::string& path) {
  format_ = "safetensors";
  st_ = std::make_unique<io::SafetensorsModel>(io::SafetensorsModel::open(path));
  config_ = ModelConfig::from_hf(st_->config());
  const auto& s = *st_;
  auto get = [&](const std::string& name) { return s.tensor(name).view(); };
  auto opt = [&](const std::string& name) {
    const io::TensorData* t = s.find_tensor(name);
    return t ? t->view() : Tensor{};
  };
  token_embd = get("model.embed_tokens.weight");
  output_norm = get("model.norm.weight");
  const io::TensorData* head = s.find_tensor("lm_head.weight");
  output = (config_.tied_embeddings || !head) ? token_embd : head->view();
  for (const io::TensorData* t : s.tensors())  // as for GGUF: no layers left out
    check_layer_of(path, t->name, "model.layers.", config_.n_layers,
                   "config.json's num_hidden_layers");
  layers.resize(size_t(config_.n_layers));
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerWeights& l = layers[size_t(i)];
    l.attn_norm = get(p + "input_layernorm.weight");
    l.wq = get(p + "self_attn.q_proj.weight");
    l.wk = get(p + "self_attn.k_proj.weight");
    l.wv = get(p + "self_attn.v_proj.weight");
    l.bq = opt(p + "self_attn.q_proj.bias");
    l.bk = opt(p + "self_attn.k_proj.bias");
    l.bv = opt(p + "self_attn.v_proj.bias");
    l.wo = get(p + "self_attn.o_proj.weight");
    l.ffn_norm = get(p + "post_attention_layernorm.weight");
    l.w_gate = get(p + "mlp.gate_proj.weight");
    l.w_up = get(p + "mlp.up_proj.weight");
    l.w_down = get(p + "mlp.down_proj.weight");
  }
}

void ModelWeights::check_shapes() const {
  const ModelConfig& c = config_;
  auto expect = [&](const Tensor& t, std::initializer_list<int64_t> shape, const std::string& name) {
    bool ok = t.data != nullptr && t.ndim == int(shape.size());
    int d = 0;
    for (int64_t s : shape) ok = ok && t.shape[d++] == s;
    if (!ok) {
      std::string want;
      for (int64_t s : shape) want += fmt::format("{}{}", want.empty() ? "" : ", ", s);
      fail("{}: tensor {} has shape {}, expected [{}] for {}", path_, name,
           t.data ? t.describe() : "(missing)", want, c.describe());
    }
  };
  expect(token_embd, {c.vocab, c.hidden}, "token embedding");
  expect(output_norm, {c.hidden}, "output norm");
  expect(output, {c.vocab, c.hidden}, "output (LM head)");
  if (rope_freqs.data) expect(rope_freqs, {c.head_dim / 2}, "rope_freqs");
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerWeights& l = layers[i];
    const std::string p = fmt::format("layer {} ", i);
    expect(l.attn_norm, {c.hidden}, p + "attention norm");
    expect(l.wq, {c.q_dim(), c.hidden}, p + "q projection");
    expect(l.wk, {c.kv_dim(), c.hidden}, p + "k projection");
    expect(l.wv, {c.kv_dim(), c.hidden}, p + "v projection");
    expect(l.wo, {c.hidden, c.q_dim()}, p + "output projection");
    expect(l.ffn_norm, {c.hidden}, p + "FFN norm");
    expect(l.w_gate, {c.ffn, c.hidden}, p + "gate projection");
    expect(l.w_up, {c.ffn, c.hidden}, p + "up projection");
    expect(l.w_down, {c.hidden, c.ffn}, p + "down projection");
    if (c.qkv_bias) {
      expect(l.bq, {c.q_dim()}, p + "q bias");
      expect(l.bk, {c.kv_dim()}, p + "k bias");
      expect(l.bv, {c.kv_dim()}, p + "v bias");
    }
  }
}

size_t ModelWeights::bytes() const {
  size_t total = token_embd.nbytes() + output_norm.nbytes();
  if (output.data != token_embd.data) total += output.nbytes();
  for (const auto& l : layers)
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.wo,
                            &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      if (t->data) total += t->nbytes();
  return total;
}

std::vector<std::pair<std::string, Tensor*>> ModelWeights::named_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out = {
      {"token_embd", &token_embd}, {"output_norm", &output_norm}, {"output", &output}};
  if (rope_freqs.data) out.emplace_back("rope_freqs", &rope_freqs);
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerWeights& l = layers[i];
    const std::pair<const char*, Tensor*> fields[] = {
        {"attn_norm", &l.attn_norm}, {"wq", &l.wq},     {"wk", &l.wk},         {"wv", &l.wv},
        {"bq", &l.bq},               {"bk", &l.bk},     {"bv", &l.bv},         {"wo", &l.wo},
        {"ffn_norm", &l.ffn_norm},   {"w_gate", &l.w_gate}, {"w_up", &l.w_up}, {"w_down", &l.w_down}};
    for (auto [name, t] : fields)
      if (t->data) out.emplace_back(fmt::format("layers.{}.{}", i, name), t);
  }
  return out;
}

}  // namespace ridge::model
