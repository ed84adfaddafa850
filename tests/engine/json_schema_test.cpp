// Structured outputs: the schema compiler's refusals, the schema recognizer on instances and
// violations written out by hand (valid ones accepted byte by byte and complete only at their
// end), the depth limit without dead ends, its token walk against a brute force over the default
// model's vocabulary, and the engine generating under a schema. Generated outputs are validated
// by the Python `jsonschema` package in tests/server (the independent reference).
#include "ridge/engine/json_schema.h"

#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "ridge/engine/json_constraint.h"

namespace ridge::engine {
namespace {

using oj = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> schema(const char* text) {
  return JsonSchema::compile(oj::parse(text));
}

bool accepts(const std::shared_ptr<const JsonSchema>& s, const std::string& doc) {
  SchemaMachine m(s);
  return m.feed(doc) && m.complete();
}

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "nick": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"enum": ["a", "ab", 12, 1, true]}, "minItems": 1,
             "maxItems": 3},
    "pet": {"anyOf": [{"$ref": "#/$defs/pet"}, {"type": "null"}]}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false,
  "$defs": {"pet": {"type": "object", "properties": {"kind": {"const": "cat"},
                                                     "weight": {"type": "number"}},
                    "required": ["kind"]}}
})";

TEST(JsonSchema, AcceptsWhatTheSchemaAllowsAndNothingElse) {
  const auto s = schema(kPerson);
  for (const char* good :
       {R"({"name":"Ann","age":31,"tags":["a"]})",
        R"( { "name" : "A\"n\u00e9" , "age" : -0 , "nick" : null , "tags" : [ 12 , 1, true ] } )",
        R"({"name":"","age":7,"nick":"x","tags":["ab","a",1],"pet":{"kind":"cat","weight":4.5e0}})",
        R"({"name":"B","age":1,"tags":[true],"pet":null})",
        R"({"name":"B","age":1,"tags":[1],"pet":{"kind":"cat"}})"})
    EXPECT_TRUE(accepts(s, good)) << good;
  for (const char* bad :
       {R"({"age":31,"name":"Ann","tags":["a"]})",    // out of the schema's order
        R"({"name":"Ann","tags":["a"]})",             // a required key left out
        R"({"name":"Ann","age":31.5,"tags":["a"]})",  // not an integer
        R"({"name":"Ann","age":3e1,"tags":["a"]})",
        R"({"name":"Ann","age":31,"tags":[]})",                 // minItems
        R"({"name":"Ann","age":31,"tags":["a","a","a","a"]})",  // maxItems
        R"({"name":"Ann","age":31,"tags":["b"]})",              // not in the enum
        R"({"name":"Ann","age":31,"tags":[123]})", R"({"name":"Ann","age":31,"tags":[false]})",
        R"({"name":"Ann","age":31,"tags":["a"],"x":1})",  // no other keys
        R"({"name":"Ann","age":31,"tags":["a"],"pet":{"kind":"dog"}})",
        R"({"name":"Ann","age":31,"tags":["a"],"pet":{"weight":1}})",
        R"({"name":"Ann","age":31,"tags":["a"],"nick":1})",
        R"({"name":"Ann","age":31,"tags":["a"],})",
        R"({"name":"Ann","name":"Bob","age":31,"tags":["a"]})", R"(["name"])", R"("x")"})
    EXPECT_FALSE(accepts(s, bad)) << bad;
  // Complete only at the end, every prefix viable.
  const std::string doc = R"({"name":"Ann","age":31,"tags":[12,1],"pet":{"kind":"cat"}})";
  SchemaMachine m(s);
  for (size_t k = 0; k < doc.size(); ++k) {
    EXPECT_FALSE(m.complete()) << k;
    ASSERT_TRUE(m.feed(uint8_t(doc[k]))) << doc.substr(0, k + 1);
  }
  EXPECT_TRUE(m.complete());
}

TEST(JsonSchema, RecursionThroughDefinitions) {
  const auto s = schema(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
      "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}})");
  EXPECT_TRUE(accepts(s, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(s, R"({"v":1,"kids":[{"kids":[]}]})"));
  // Nesting stops at kMaxDepth containers.
  std::string deep = R"({"v":0)";
  for (int d = 0; d < 10; ++d) deep += R"(,"kids":[{"v":0)";
  for (int d = 0; d < 10; ++d) deep += "}]";
  deep += "}";
  EXPECT_FALSE(accepts(s, deep));
}

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingIt) {
  struct Case {
    const char* schema;
    const char* says;
  };
  for (
      const Case& c : {
          Case{R"({"type":"string","pattern":"a+"})", "'pattern'"},
          Case{R"({"type":"integer","minimum":3})", "'minimum'"},
          Case{
              R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})",
              "additionalProperties"},
          Case{R"({"anyOf":[{"type":"number"},{"type":"integer"}]})", "overlap"},
          Case{R"({"type":["number","integer"]})", "overlap"},
          Case{R"({"type":"array"})", "'items'"},
          Case{R"({"properties":{}})", "'type'"},
          Case{R"({"$ref":"#/$defs/nope"})", "names no definition"},
          Case{R"({"$ref":"http://x/y"})", "#/$defs/NAME"},
          Case{R"({"type":"object","properties":{"a\"b":{"type":"null"}}})", "escaping"},
          Case{R"({"type":"object","properties":{"a":{"type":"null"}},"required":["b"]})", "'b'"},
          Case{R"({"type":"blob"})", "unknown type"},
          Case{R"({"type":"array","items":{"type":"null"},"minItems":3,"maxItems":2})",
               "minItems > maxItems"},
          Case{R"(true)", "must be an object"},
          Case{
              R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}})",
              "cycle"},
          Case{R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", "cycle"},
          Case{
              R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}},"required":["c"]}}})",
              "no finite instance"},
          Case{R"({"type":"string","$ref":"#/$defs/a","$defs":{"a":{"type":"null"}}})",
               "beside 'type'"},
          Case{R"({"type":"string","anyOf":[{"type":"null"}]})", "beside 'type'"},
          Case{R"({"type":"string","enum":[1,2]})", "no value satisfies"},
          Case{R"({"const":"a","enum":["b"]})", "no value satisfies"},
          Case{R"({"anyOf":[{"type":"null"}],"oneOf":[{"type":"null"}]})", "anyOf beside oneOf"},
      }) {
    try {
      schema(c.schema);
      ADD_FAILURE() << "accepted " << c.schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos)
          << c.schema << " -> " << e.what();
    }
  }
}

TEST(JsonSchema, LimitsAndCombinations) {
  // Nesting of the schema itself, and instances that need more containers than the machine has.
  std::string deep = R"({"type":"null"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_THROW(schema(deep.c_str()), Error);
  std::string tall = R"({"type":"null"})";
  for (int i = 0; i < 17; ++i)
    tall = R"({"type":"object","properties":{"a":)" + tall + R"(},"required":["a"]})";
  try {
    schema(tall.c_str());
    ADD_FAILURE() << "accepted an instance depth of 17";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("17 nested containers"), std::string::npos) << e.what();
  }
  // A type filters an enum; const and enum intersect.
  const auto typed = schema(R"({"type":"string","enum":["a",1,"b"]})");
  EXPECT_TRUE(accepts(typed, R"("a")"));
  EXPECT_FALSE(accepts(typed, "1"));
  const auto both = schema(R"({"const":"b","enum":["a","b"]})");
  EXPECT_TRUE(accepts(both, R"("b")"));
  EXPECT_FALSE(accepts(both, R"("a")"));
  // 64 properties, all required.
  std::string props, req, inst = "{";
  for (int i = 0; i < 64; ++i) {
    props += (i ? "," : "") + fmt::format(R"("p{}":{{"type":"integer"}})", i);
    req += (i ? "," : "") + fmt::format(R"("p{}")", i);
    inst += (i ? "," : "") + fmt::format(R"("p{}":{})", i, i);
  }
  const auto wide =
      schema(fmt::format(R"({{"type":"object","properties":{{{}}},"required":[{}]}})", props, req)
                 .c_str());
  EXPECT_TRUE(accepts(wide, inst + "}"));
  EXPECT_FALSE(accepts(wide, inst + R"(,"p0":1})"));
}

// The nullable recursion (a linked list ending in null): at the depth limit the next link can only
// be null, so the machine never enters a value it could not finish.
TEST(JsonSchema, RecursionEndsAtTheDepthLimitWithoutDeadEnds) {
  const auto s = schema(R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{
      "v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},
      "required":["v","next"]}}})");
  auto chain = [](int links) {
    std::string d;
    for (int i = 0; i < links; ++i) d += R"({"v":1,"next":)";
    d += "null";
    for (int i = 0; i < links; ++i) d += "}";
    return d;
  };
  EXPECT_TRUE(accepts(s, chain(1)));
  EXPECT_TRUE(accepts(s, chain(SchemaMachine::kMaxDepth)));
  EXPECT_FALSE(accepts(s, chain(SchemaMachine::kMaxDepth + 1)));
  SchemaMachine m(s);
  std::string at_limit;
  for (int i = 0; i < SchemaMachine::kMaxDepth; ++i) at_limit += R"({"v":1,"next":)";
  ASSERT_TRUE(m.feed(at_limit));
  EXPECT_FALSE(SchemaMachine(m).feed(uint8_t('{')));
  EXPECT_TRUE(SchemaMachine(m).feed(uint8_t('n')));
  // Equal states compare and hash equal whatever the path (whitespace, values).
  SchemaMachine a(s), b(s);
  ASSERT_TRUE(a.feed(R"({"v":12,"next":{"v":3,)"));
  ASSERT_TRUE(b.feed(R"( { "v" : 7 , "next" : { "v":-4 ,)"));
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.hash(), b.hash());
}

class JsonSchemaModel : public ::testing::Test {
 protected:
  void SetUp() override {
    bundle_ = testing::cpu_bundle(2048);
    if (!bundle_ || !bundle_->tokenizer) GTEST_SKIP() << "no model";
  }
  ModelBundle* bundle_ = nullptr;
};

// The walk's allowed set equals a check of every token on its own, along an instance.
TEST_F(JsonSchemaModel, AllowedTokensEqualABruteForceCheckOfTheVocabulary) {
  const tokenizer::Tokenizer& tok = *bundle_->tokenizer;
  const int64_t V = bundle_->config().vocab;
  const auto ends = tok.stop_ids();
  auto trie = std::make_shared<const TokenTrie>(tok);
  const auto s = schema(kPerson);
  const std::string doc =
      R"({"name": "Al", "age": 4, "nick": null, "tags": ["ab", 12], "pet": {"kind": "cat", "weight": 2.5}})";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (int k = 0; k < 8; ++k) {
    const size_t cut = k == 7 ? doc.size() : rng() % doc.size();
    GrammarConstraint<SchemaMachine> c(trie, ends, V, SchemaMachine(s));
    SchemaMachine m(s);
    ASSERT_TRUE(m.feed(doc.substr(0, cut)));
    for (int32_t t : tok.encode(doc.substr(0, cut), false, false)) ASSERT_TRUE(c.advance(t));
    ASSERT_TRUE(c.machine() == m);
    const auto banned = c.banned();
    std::vector<int32_t> want;
    for (int32_t t = 0; t < int32_t(V); ++t) {
      const bool end = std::find(ends.begin(), ends.end(), t) != ends.end();
      const std::string& b = trie->bytes(t);
      const bool ok = end ? m.complete() : !m.complete() && !b.empty() && SchemaMachine(m).feed(b);
      if (!ok) want.push_back(t);
    }
    ASSERT_EQ(std::vector<int32_t>(banned.begin(), banned.end()), want)
        << "after " << doc.substr(0, cut);
  }
}

// The default model under a schema: a viable prefix always, a complete instance when it stops.
TEST_F(JsonSchemaModel, GeneratedTextFollowsTheSchema) {
  const auto s = schema(kPerson);
  const std::string prompt_text =
      "<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n";
  const auto prompt = bundle_->tokenizer->encode(prompt_text, true, true);
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 128;
  testing::Collector col;
  std::vector<std::string> ids;
  {
    Engine e(*bundle_, c);
    for (int i = 0; i < 4; ++i) {
      Request r;
      r.id = "s" + std::to_string(i);
      r.prompt = prompt;
      r.max_tokens = 200;
      r.json_schema = s;
      r.sampling.temperature = i == 0 ? 0.0f : 0.9f;
      r.sampling.seed = 77 + uint64_t(i);
      e.submit(r, col.callback());
      ids.push_back(r.id);
    }
    ASSERT_TRUE(col.wait_finished(ids, 300));
  }
  int stopped = 0;
  for (const auto& id : ids) {
    const testing::Collected got = col.get(id);
    std::vector<int32_t> out = got.ids();
    if (got.finish_reason == "stop") out.pop_back();
    const std::string text = bundle_->tokenizer->decode(out, true);
    SchemaMachine m(s);
    EXPECT_TRUE(m.feed(text)) << id << ": " << text;
    if (got.finish_reason == "stop") {
      ++stopped;
      EXPECT_TRUE(m.complete()) << id << ": " << text;
    }
  }
  EXPECT_GT(stopped, 0);
}

}  // namespace
}  // namespace ridge::engine
