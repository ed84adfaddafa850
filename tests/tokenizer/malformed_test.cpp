// Malformed vocabularies: every one is a ridge::Error that names the file and the field at fault.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>

#include <gtest/gtest.h>

#include "ridge/core/error.h"
#include "tokenizer/tokenizer_test_util.h"

namespace ridge::tokenizer {
namespace {

using nlohmann::json;
using test::GgufBuilder;
using test::TempDir;

// Loads `j` and expects an error whose message contains every one of `needles`.
void expect_json_error(const json& j, std::initializer_list<std::string> needles) {
  TempDir dir;
  const std::string path = dir.write("tokenizer.json", j.dump());
  try {
    Tokenizer::from_hf(path);
    ADD_FAILURE() << "loaded without error; expected one naming " << *needles.begin();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer.json"), std::string::npos) << what;
    for (const auto& needle : needles) EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

json valid() {
  return test::byte_level_json({{"a", "b"}});
}

TEST(MalformedJson, MissingKeys) {
  json j = valid();
  j.erase("model");
  expect_json_error(j, {"model"});
  j = valid();
  j["model"].erase("vocab");
  expect_json_error(j, {"model", "vocab"});
  j = valid();
  j.erase("decoder");
  expect_json_error(j, {"decoder"});
  j = valid();
  j["added_tokens"][0].erase("content");
  expect_json_error(j, {"added_tokens[0]", "content"});
}

TEST(MalformedJson, MergesNamingUnknownTokens) {
  json j = valid();
  j["model"]["merges"].push_back("a zzz");
  expect_json_error(j, {"model.merges[1]", "zzz"});
  j = valid();
  j["model"]["merges"].push_back(json::array({"b", "a"}));  // "ba" is not in the vocabulary
  expect_json_error(j, {"model.merges[1]", "ba"});
  j = valid();
  j["model"]["merges"].push_back("abc");
  expect_json_error(j, {"model.merges[1]"});
  j = valid();
  j["model"]["merges"].push_back(7);
  expect_json_error(j, {"model.merges[1]"});
}

TEST(MalformedJson, IdsOutOfRange) {
  json j = valid();
  j["model"]["vocab"]["a"] = -3;
  expect_json_error(j, {"model.vocab[\"a\"]", "-3"});
  j = valid();
  j["model"]["vocab"]["a"] = 1LL << 40;
  expect_json_error(j, {"model.vocab[\"a\"]"});
  j = valid();
  j["model"]["vocab"]["a"] = "one";
  expect_json_error(j, {"model.vocab[\"a\"]", "integer"});
  j = valid();
  j["added_tokens"][0]["id"] = -1;
  expect_json_error(j, {"added_tokens[0].id"});
  j = valid();
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<x>": {"id": "<x>", "ids": [999999], "tokens": ["<x>"]}}})");
  expect_json_error(j, {"999999"});
}

TEST(MalformedJson, UnsupportedComponentsAreNamed) {
  json j = valid();
  j["model"]["type"] = "WordPiece";
  expect_json_error(j, {"model.type", "WordPiece"});
  j = valid();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_json_error(j, {"normalizer.type", "Lowercase"});
  j = valid();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Whitespace"}}})}};
  expect_json_error(j, {"pre_tokenizer.pretokenizers[0].type", "Whitespace"});
  j = valid();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_json_error(j, {"decoder.type", "WordPiece"});
  j = valid();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_json_error(j, {"post_processor.type", "RobertaProcessing"});
  j = valid();
  j["model"]["dropout"] = 0.1;
  expect_json_error(j, {"model.dropout"});
  j = valid();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_json_error(j, {"model.continuing_subword_prefix"});
  j = valid();
  j["added_tokens"][0]["single_word"] = true;
  expect_json_error(j, {"added_tokens[0].single_word"});
  j = valid();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_json_error(j, {"pre_tokenizer.pattern", "(unclosed"});
  j = valid();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_json_error(j, {"pre_tokenizer.behavior", "Sideways"});
}

TEST(MalformedJson, FileProblems) {
  TempDir dir;
  EXPECT_THROW(Tokenizer::from_hf((dir.path() / "missing.json").string()), Error);
  const std::string bad = dir.write("tokenizer.json", "{\"model\": ");
  try {
    Tokenizer::from_hf(bad);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON at line 1"), std::string::npos) << e.what();
  }
  dir.write("tokenizer_config.json", R"({"bos_token": "<not-a-token>"})");
  dir.write("tokenizer.json", valid().dump());
  try {
    Tokenizer::from_hf(dir.path().string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bos_token"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
}

// Nested JSON arrays, `depth` deep around `inner`.
std::string nested_arrays(size_t depth, const std::string& inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(MalformedJson, DeepNestingIsRefusedWhileParsing) {
  TempDir dir;
  // 200000 levels: parsing, dumping or destroying such a value recursively overflows the stack.
  const std::string deep =
      R"({"model": {"type": "BPE", "vocab": {"a": )" + nested_arrays(200000) + "}}}";
  try {
    Tokenizer::from_hf(dir.write("tokenizer.json", deep));
    ADD_FAILURE() << "loaded a tokenizer.json nested 200000 deep";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer.json: JSON nested deeper than 64 levels"), std::string::npos)
        << what;
  }
  // 64 levels in all parse (and are then refused by the loader for what they hold); 65 do not.
  json j = valid();
  const std::string text = j.dump();
  const std::string at64 =
      text.substr(0, text.size() - 1) + R"(, "extra": )" + nested_arrays(63) + "}";
  const std::string at65 =
      text.substr(0, text.size() - 1) + R"(, "extra": )" + nested_arrays(64) + "}";
  EXPECT_NO_THROW(Tokenizer::from_hf(dir.write("tokenizer.json", at64)));
  try {
    Tokenizer::from_hf(dir.write("tokenizer.json", at65));
    ADD_FAILURE() << "loaded a tokenizer.json nested 65 deep";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64"), std::string::npos) << e.what();
  }
  // tokenizer_config.json is read with the same limit, and named.
  dir.write("tokenizer.json", text);
  dir.write("tokenizer_config.json", R"({"bos_token": )" + nested_arrays(100000) + "}");
  try {
    Tokenizer::from_hf(dir.path().string());
    ADD_FAILURE() << "loaded a tokenizer_config.json nested 100000 deep";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: JSON nested deeper than 64"),
              std::string::npos)
        << e.what();
  }
}

TEST(MalformedJson, ErrorsDescribeContainersByTheirType) {
  json j = valid();
  json big = json::array();
  for (int i = 0; i < 1000; ++i) big.push_back(json::array({i, i + 1}));
  j["model"]["vocab"]["a"] = big;
  expect_json_error(j, {"model.vocab[\"a\"]", "expected an integer, found array"});
  j = valid();
  j["model"]["vocab"]["a"] = std::string(1000, 'x');
  TempDir dir;
  try {
    Tokenizer::from_hf(dir.write("tokenizer.json", j.dump()));
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("found \"xxxx"), std::string::npos) << what;
    EXPECT_NE(what.find("..."), std::string::npos) << what;
    EXPECT_LT(what.size(), 300u) << what;  // the 1000-character string is cut
  }
}

// `depth` Sequences of the given kind around `leaf`.
json nested_sequence(const std::string& list_key, const json& leaf, int depth) {
  json node = leaf;
  for (int i = 0; i < depth; ++i) node = {{"type", "Sequence"}, {list_key, json::array({node})}};
  return node;
}

TEST(MalformedJson, NestedSequencesAreBounded) {
  struct Kind {
    const char* field;
    const char* list;
    json leaf;
  };
  const Kind kinds[] = {
      {"normalizer", "normalizers", {{"type", "NFC"}}},
      {"pre_tokenizer", "pretokenizers", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", "decoders", {{"type", "ByteLevel"}}},
      {"post_processor", "processors", {{"type", "ByteLevel"}}},
  };
  for (const Kind& k : kinds) {
    SCOPED_TRACE(k.field);
    // Ten levels load, and work as the one step they hold.
    json j = valid();
    j[k.field] = nested_sequence(k.list, k.leaf, 10);
    TempDir dir;
    const Tokenizer tok = test::load_json(dir, j);
    EXPECT_EQ(tok.decode(tok.encode("ab")), "ab");
    // Every Sequence is two JSON levels: 40 of them pass the 64-level limit and are refused
    // before any parser recursion (15000 used to take 1.7 GB in field-path strings).
    j[k.field] = nested_sequence(k.list, k.leaf, 40);
    expect_json_error(j, {"nested deeper than 64 levels"});
  }
}

TEST(MalformedJson, HugeIdsAreRefusedBeforeAllocating) {
  for (int64_t id : {int64_t(20000000), int64_t(2000000000), int64_t(INT32_MAX)}) {
    json j = valid();
    j["model"]["vocab"]["zz"] = id;
    expect_json_error(j, {"model.vocab[\"zz\"]", std::to_string(id), "past the vocabulary"});
    j = valid();
    j["added_tokens"][0]["id"] = id;
    expect_json_error(j,
                      {"added token '<|endoftext|>'", std::to_string(id), "past the vocabulary"});
  }
  // A hole of unused ids, as some vocabularies have, is fine.
  json j = valid();
  const int64_t n = static_cast<int64_t>(j["model"]["vocab"].size());
  j["model"]["vocab"]["zz"] = n + 1000;
  j["added_tokens"].push_back({{"id", n + 2000}, {"content", "<extra>"}, {"special", true}});
  TempDir dir;
  const Tokenizer tok = test::load_json(dir, j);
  EXPECT_EQ(tok.encode("<extra>"), std::vector<TokenId>{static_cast<TokenId>(n + 2000)});
}

// Runs `load` with a time limit: the load must fail with an error naming `needle` without
// blocking on the FIFO at `fifo`. A blocked reader is released by opening the FIFO for writing.
void expect_refused_without_blocking(const std::filesystem::path& fifo,
                                     const std::function<void()>& load, const std::string& needle) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      load();
    } catch (const Error& e) {
      return e.what();
    }
    return "<loaded>";
  });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "the load blocked on the FIFO " << fifo;
    // Still blocked: a writer that opens and closes lets the reader's open and read finish.
    for (int i = 0;
         i < 100 && result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready;
         ++i) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  const std::string what = result.get();
  EXPECT_NE(what.find(needle), std::string::npos) << what;
  EXPECT_NE(what.find("not a regular file"), std::string::npos) << what;
}

TEST(MalformedJson, NonRegularFilesAreRefusedWithoutBlocking) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    dir.write("tokenizer.json", valid().dump());
    const auto fifo = dir.path() / name;
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    expect_refused_without_blocking(
        fifo, [&] { Tokenizer::from_hf(dir.path().string()); }, fifo.string());
  }
  // A folder in place of the file is refused the same way.
  TempDir dir;
  std::filesystem::create_directory(dir.path() / "tokenizer.json");
  try {
    Tokenizer::from_hf(dir.path().string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

// ---- GGUF ----

GgufBuilder gpt2_gguf() {
  GgufBuilder b;
  b.string("general.architecture", "llama")
      .string("tokenizer.ggml.model", "gpt2")
      .string("tokenizer.ggml.pre", "default")
      .strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|im_end|>"})
      .i32s("tokenizer.ggml.token_type", {1, 1, 1, 3})
      .strings("tokenizer.ggml.merges", {"a b"})
      .u32("tokenizer.ggml.eos_token_id", 3);
  return b;
}

void expect_gguf_error(GgufBuilder& builder, std::initializer_list<std::string> needles) {
  try {
    const auto gguf = builder.parse("bad.gguf");
    Tokenizer::from_gguf(gguf);
    ADD_FAILURE() << "loaded without error; expected one naming " << *needles.begin();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.gguf"), std::string::npos) << what;
    for (const auto& needle : needles) EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(MalformedGguf, ValidBaseLoads) {
  auto b = gpt2_gguf();
  const auto gguf = b.parse();
  const Tokenizer tok = Tokenizer::from_gguf(gguf);
  EXPECT_EQ(tok.encode("ab<|im_end|>"), (std::vector<TokenId>{2, 3}));
  EXPECT_EQ(tok.stop_ids(), std::vector<TokenId>{3});
  EXPECT_TRUE(tok.is_special(3));
}

TEST(MalformedGguf, MissingKeys) {
  GgufBuilder no_model;
  no_model.strings("tokenizer.ggml.tokens", {"a"});
  expect_gguf_error(no_model, {"tokenizer.ggml.model"});
  GgufBuilder no_tokens;
  no_tokens.string("tokenizer.ggml.model", "gpt2");
  expect_gguf_error(no_tokens, {"tokenizer.ggml.tokens"});
  GgufBuilder no_merges;
  no_merges.string("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.tokens", {"a"});
  expect_gguf_error(no_merges, {"tokenizer.ggml.merges"});
  GgufBuilder no_scores;
  no_scores.string("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "a"});
  expect_gguf_error(no_scores, {"tokenizer.ggml.scores"});
}

TEST(MalformedGguf, MergesNamingUnknownTokens) {
  auto b = gpt2_gguf();
  b.strings("tokenizer.ggml.merges", {"a zz"});
  expect_gguf_error(b, {"tokenizer.ggml.merges[0]", "zz"});
  auto c = gpt2_gguf();
  c.strings("tokenizer.ggml.merges", {"b a"});
  expect_gguf_error(c, {"tokenizer.ggml.merges[0]", "ba"});
  auto d = gpt2_gguf();
  d.strings("tokenizer.ggml.merges", {"ab"});
  expect_gguf_error(d, {"tokenizer.ggml.merges[0]"});
}

TEST(MalformedGguf, IdsAndSizesOutOfRange) {
  auto b = gpt2_gguf();
  b.u32("tokenizer.ggml.bos_token_id", 4);
  expect_gguf_error(b, {"tokenizer.ggml.bos_token_id", "4"});
  auto c = gpt2_gguf();
  c.i32s("tokenizer.ggml.token_type", {1, 1});
  expect_gguf_error(c, {"tokenizer.ggml.token_type", "2"});
  auto d = gpt2_gguf();
  d.i32s("tokenizer.ggml.token_type", {1, 1, 9, 3});
  expect_gguf_error(d, {"tokenizer.ggml.token_type[2]", "9"});
  GgufBuilder e;
  e.string("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "a", "b"})
      .f32s("tokenizer.ggml.scores", {0.0f, -1.0f});
  expect_gguf_error(e, {"tokenizer.ggml.scores", "2"});
  auto f = gpt2_gguf();
  f.boolean("tokenizer.ggml.add_bos_token", true);  // but no bos id
  expect_gguf_error(f, {"tokenizer.ggml.add_bos_token", "bos_token_id"});
}

TEST(MalformedGguf, OverlongTokenOfAScoredVocabularyIsRefused) {
  // Merges rebuilt from scores look at every cut of every token: a 4 MB token took ~25 minutes.
  GgufBuilder b;
  b.string("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "a", std::string(16 * 1024 + 1, 'a')})
      .f32s("tokenizer.ggml.scores", {0.0f, -1.0f, -2.0f});
  expect_gguf_error(b, {"tokenizer.ggml.tokens[2]", "16385 bytes", "at most 16384 bytes"});

  // At the limit it loads, and the merges rebuilt from the scores are used.
  GgufBuilder ok;
  ok.string("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "a", "aa", std::string(16 * 1024, 'a')})
      .f32s("tokenizer.ggml.scores", {0.0f, -1.0f, -1.5f, -2.0f})
      .boolean("tokenizer.ggml.add_space_prefix", false)
      .boolean("tokenizer.ggml.add_bos_token", false);
  const auto gguf = ok.parse("ok.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(gguf);
  EXPECT_EQ(tok.encode("aaa"), (std::vector<TokenId>{2, 1}));
}

TEST(MalformedGguf, UnknownNamesAndBadText) {
  auto b = gpt2_gguf();
  b.string("tokenizer.ggml.pre", "mystery-pre");
  expect_gguf_error(b, {"tokenizer.ggml.pre", "mystery-pre"});
  auto c = gpt2_gguf();
  c.string("tokenizer.ggml.model", "bert");
  expect_gguf_error(c, {"tokenizer.ggml.model", "bert"});
  auto d = gpt2_gguf();
  d.strings("tokenizer.ggml.tokens", {"a", "b", "ab", "\xFF"});
  expect_gguf_error(d, {"tokenizer.ggml.tokens[3]", "UTF-8"});
}

}  // namespace
}  // namespace ridge::tokenizer
