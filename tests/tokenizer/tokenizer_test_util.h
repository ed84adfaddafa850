// Helpers for the tokenizer tests: small vocabularies written as tokenizer.json files or GGUF
// images, built in the test so that every case states exactly what it feeds the loader.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ridge/io/gguf.h"
#include "ridge/tokenizer/tokenizer.h"

namespace ridge::tokenizer::test {

// A folder under the temp directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() /
        ("ridge_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// GPT-2's byte alphabet spelling of one byte (the inverse of what the tokenizer undoes).
inline std::string byte_char(uint8_t b) {
  auto printable = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
  };
  char32_t c = b;
  if (!printable(b)) {
    char32_t next = 0x100;
    for (int x = 0; x < b; ++x) {
      if (!printable(x)) ++next;
    }
    c = next;
  }
  std::string out;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
  return out;
}

// A byte-level BPE tokenizer.json: ids 0..255 are the byte alphabet, then the merged tokens in
// `merges` order, then <|endoftext|> and <|im_end|> as special added tokens.
inline nlohmann::json byte_level_json(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<uint8_t>(b))] = b;
  nlohmann::json merge_list = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(a + " " + b);
  }
  nlohmann::json added = nlohmann::json::array();
  for (const char* special : {"<|endoftext|>", "<|im_end|>"}) {
    added.push_back({{"id", next},
                     {"content", special},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"single_word", false}});
    vocab[special] = next++;
  }
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

// A SentencePiece-style tokenizer.json (Llama 2 shape with Metaspace): <unk> <s> </s>, the 256
// byte tokens, the given pieces and merges; BOS added by the template.
inline nlohmann::json sentencepiece_json(
    const std::vector<std::string>& pieces,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int next = 0;
  for (const char* t : {"<unk>", "<s>", "</s>"}) vocab[t] = next++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = next++;
  }
  for (const auto& p : pieces) {
    if (!vocab.contains(p)) vocab[p] = next++;
  }
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(nlohmann::json::array({a, b}));
  }
  nlohmann::json added = nlohmann::json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", id == 0   ? "<unk>"
                                 : id == 1 ? "<s>"
                                           : "</s>"},
                     {"special", true},
                     {"normalized", false}});
  }
  nlohmann::json j = nlohmann::json::parse(R"({
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
  })");
  j["added_tokens"] = added;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", merge_list},
                {"byte_fallback", true},
                {"fuse_unk", true}};
  return j;
}

inline Tokenizer load_json(const TempDir& dir, const nlohmann::json& j,
                           const std::string& name = "tokenizer.json") {
  return Tokenizer::from_hf(dir.write(name, j.dump()));
}

// GGUF v3 metadata images (no tensors), for GgufFile::parse. Setting a key again replaces it.
class GgufBuilder {
 public:
  GgufBuilder& string(const std::string& key, const std::string& value) {
    auto& v = entry(key, io::GgufType::string);
    str(v, value);
    return *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t value) {
    pod(entry(key, io::GgufType::u32), value);
    return *this;
  }
  GgufBuilder& boolean(const std::string& key, bool value) {
    pod(entry(key, io::GgufType::boolean), static_cast<uint8_t>(value));
    return *this;
  }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& values) {
    auto& v = array_entry(key, io::GgufType::string, values.size());
    for (const auto& s : values) str(v, s);
    return *this;
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& values) {
    auto& v = array_entry(key, io::GgufType::i32, values.size());
    for (int32_t x : values) pod(v, x);
    return *this;
  }
  GgufBuilder& f32s(const std::string& key, const std::vector<float>& values) {
    auto& v = array_entry(key, io::GgufType::f32, values.size());
    for (float x : values) pod(v, x);
    return *this;
  }
  // The image; it must outlive the GgufFile parsed from it (the builder keeps it).
  const std::vector<std::byte>& bytes() {
    image_.clear();
    append(image_, "GGUF", 4);
    pod(image_, uint32_t{3});
    pod(image_, uint64_t{0});
    pod(image_, static_cast<uint64_t>(entries_.size()));
    for (const auto& [key, value] : entries_) {
      str(image_, key);
      image_.insert(image_.end(), value.begin(), value.end());
    }
    while (image_.size() % 32 != 0) image_.push_back(std::byte{0});
    return image_;
  }
  io::GgufFile parse(const std::string& name = "test.gguf") {
    const auto& b = bytes();
    return io::GgufFile::parse(b.data(), b.size(), name);
  }

 private:
  using Bytes = std::vector<std::byte>;
  static void append(Bytes& out, const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  template <typename T>
  static void pod(Bytes& out, T v) {
    append(out, &v, sizeof(T));
  }
  static void str(Bytes& out, const std::string& s) {
    pod(out, static_cast<uint64_t>(s.size()));
    append(out, s.data(), s.size());
  }
  // The value bytes of `key` (type first), emptied; a new key goes last.
  Bytes& entry(const std::string& key, io::GgufType type) {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const auto& e) { return e.first == key; });
    if (it == entries_.end()) {
      entries_.emplace_back(key, Bytes{});
      it = entries_.end() - 1;
    }
    it->second.clear();
    pod(it->second, static_cast<uint32_t>(type));
    return it->second;
  }
  Bytes& array_entry(const std::string& key, io::GgufType type, size_t n) {
    Bytes& v = entry(key, io::GgufType::array);
    pod(v, static_cast<uint32_t>(type));
    pod(v, static_cast<uint64_t>(n));
    return v;
  }
  std::vector<std::pair<std::string, Bytes>> entries_;
  Bytes image_;
};

}  // namespace ridge::tokenizer::test
