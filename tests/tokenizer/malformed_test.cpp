// Malformed vocabularies: every one is a ridge::Error that names the file and the field at fault.
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
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
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
