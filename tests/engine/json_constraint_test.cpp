// JSON mode: the byte recognizer against nlohmann::json's parser (an independent RFC 8259
// implementation) on random documents and random mutations of them; the allowed-token search
// against a token-by-token check of the whole vocabulary (the default model's tokenizer); and the
// engine generating under the constraint with the default model.
#include "ridge/engine/json_constraint.h"

#include <algorithm>
#include <random>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"

namespace ridge::engine {
namespace {

// A random JSON value: nested containers, strings with escapes and multi-byte UTF-8, every
// number form, literals, and whitespace (at most 3 bytes a gap) between tokens.
class DocGen {
 public:
  explicit DocGen(uint32_t seed) : rng_(seed) {}
  std::string object() {
    std::string s;
    ws(s);
    obj(s, 0);
    ws(s);
    return s;
  }
  std::string value() {
    std::string s;
    ws(s);
    val(s, 0);
    ws(s);
    return s;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  void ws(std::string& s) {
    static const char kWs[] = {' ', '\t', '\n', '\r'};
    for (int i = pick(4) == 0 ? pick(4) : 0; i > 0; --i) s += kWs[pick(4)];
  }
  void str(std::string& s) {
    s += '"';
    for (int i = pick(8); i > 0; --i) {
      switch (pick(8)) {
        case 0:
          s += "\\n";
          break;
        case 1:
          s += "\\\"";
          break;
        case 2:
          s += "\\u00e9";
          break;
        case 3:
          s += "\xc3\xa9";
          break;  // é
        case 4:
          s += "\xe6\x97\xa5";
          break;  // 日
        case 5:
          s += "\xf0\x9f\x99\x82";
          break;  // 🙂
        default:
          s += char('a' + pick(26));
          break;
      }
    }
    s += '"';
  }
  void num(std::string& s) {
    if (pick(3) == 0) s += '-';
    s += pick(4) == 0 ? std::string("0") : std::to_string(1 + pick(99999));
    if (pick(2)) s += "." + std::to_string(pick(1000));
    if (pick(3) == 0) {
      s += pick(2) ? 'e' : 'E';
      if (pick(2)) s += pick(2) ? '+' : '-';
      s += std::to_string(pick(300));
    }
  }
  void obj(std::string& s, int d) {
    s += '{';
    const int n = d > 4 ? 0 : pick(4);
    for (int i = 0; i < n; ++i) {
      if (i) s += ',';
      ws(s);
      str(s);
      ws(s);
      s += ':';
      ws(s);
      val(s, d + 1);
      ws(s);
    }
    if (n == 0) ws(s);
    s += '}';
  }
  void val(std::string& s, int d) {
    switch (pick(d > 4 ? 4 : 6)) {
      case 0:
        str(s);
        break;
      case 1:
        num(s);
        break;
      case 2:
        s += pick(3) == 0 ? "true" : pick(2) ? "false" : "null";
        break;
      case 3:
        str(s);
        break;
      case 4:
        obj(s, d);
        break;
      default: {
        s += '[';
        const int n = pick(4);
        for (int i = 0; i < n; ++i) {
          if (i) s += ',';
          ws(s);
          val(s, d + 1);
          ws(s);
        }
        if (n == 0) ws(s);
        s += ']';
      }
    }
  }
  std::mt19937 rng_;
};

// The recognizer's verdict on a whole document (object_only: it must be an object).
bool machine_accepts(const std::string& doc, bool object_only) {
  JsonMachine m(object_only);
  // A number at the top level ends only at the byte after it: a space stands for the end.
  return m.feed(doc) && (m.complete() || (!object_only && m.feed(uint8_t(' ')) && m.complete()));
}

bool reference_accepts(const std::string& doc, bool object_only) {
  if (!nlohmann::json::accept(doc)) return false;
  if (!object_only) return true;
  const size_t first = doc.find_first_not_of(" \t\n\r");
  return first != std::string::npos && doc[first] == '{';
}

TEST(JsonMachine, AcceptsValidDocumentsAndEveryPrefixStaysViable) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  DocGen gen(seed);
  for (int i = 0; i < 2000; ++i) {
    const bool object_only = i % 4 != 3;
    const std::string doc = object_only ? gen.object() : gen.value();
    ASSERT_TRUE(nlohmann::json::accept(doc)) << "generator bug: " << doc;
    JsonMachine m(object_only);
    for (size_t k = 0; k < doc.size(); ++k) {
      ASSERT_TRUE(m.feed(uint8_t(doc[k]))) << "byte " << k << " of " << doc;
      if (object_only && m.complete()) {  // complete exactly once the closing brace is read
        EXPECT_EQ(doc.find_first_not_of(" \t\n\r", k + 1), std::string::npos) << doc;
      }
    }
    EXPECT_TRUE(machine_accepts(doc, object_only)) << doc;
  }
}

// Random byte edits (insert, delete, replace a byte, anywhere: inside multi-byte characters too,
// with lead and continuation bytes of every UTF-8 range among the replacements): the verdict on
// the whole document is nlohmann's, whose lexer checks UTF-8 as RFC 3629 does.
TEST(JsonMachine, AgreesWithNlohmannOnMutatedDocuments) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  DocGen gen(seed);
  std::mt19937 rng(seed + 1);
  static const std::string kBytes =
      "{}[]:,\"\\ \t\n-+.0123456789eEtrufalsn/bx\x01"
      "\x80\x8f\x90\x9f\xa0\xbf\xc0\xc1\xc2\xdf\xe0\xe6\xed\xef\xf0\xf3\xf4\xf5\xff";
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool object_only = i % 3 != 0;
    std::string doc = object_only ? gen.object() : gen.value();
    for (int edits = 1 + int(rng() % 2); edits > 0; --edits) {
      const size_t at = rng() % (doc.size() + 1);
      const char c = kBytes[rng() % kBytes.size()];
      switch (rng() % 3) {
        case 0:
          doc.insert(doc.begin() + long(at), c);
          break;
        case 1:
          if (at < doc.size()) doc.erase(at, 1);
          break;
        default:
          if (at < doc.size()) doc[at] = c;
          break;
      }
    }
    // nlohmann refuses numbers past a double's range, which the grammar allows: exponents become
    // 0 first (in strings too, the same for both sides).
    // ('#' appears nowhere else in these documents.)
    doc = std::regex_replace(doc, std::regex("([eE][+-]?)[0-9]+"), "$1#");
    std::replace(doc.begin(), doc.end(), '#', '0');
    const bool want = reference_accepts(doc, object_only);
    ASSERT_EQ(machine_accepts(doc, object_only), want)
        << (object_only ? "object " : "value ")
        << nlohmann::json(doc).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    (want ? accepted : refused)++;
  }
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(JsonMachine, EdgeCases) {
  for (const char* bad :
       {"{\"a\":01}", "{\"a\":-}", "{\"a\":1.}", "{\"a\":1e}", "{\"a\":.5}", "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12g4\"}", "{\"a\":\"\x01\"}", "{\"a\":[1,]}", "{\"a\":1,}", "{,}", "{\"a\" 1}",
        "{'a':1}", "{\"a\":tru}", "{\"a\":nul}", "[1]", "\"s\"", "{\"a\":1}}", "{\"a\":+1}"})
    EXPECT_FALSE(machine_accepts(bad, true)) << bad;
  for (const char* good : {"{}", "{\"\":\"\"}", "{\"a\":[]}", "{\"a\":-0.0e+0}", "{\"a\":[[{}]]}",
                           "{\"\\u00e9\\n\":true}", " {\"a\" : null } \n"})
    EXPECT_TRUE(machine_accepts(good, true)) << good;
  // UTF-8 at the edges of RFC 3629's table: the least and greatest 2-, 3- and 4-byte characters
  // and those beside the surrogates; overlong forms, surrogates, past U+10FFFF, truncated
  // characters, stray continuation bytes and bytes that never occur.
  for (const char* good : {"\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
                           "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"})
    EXPECT_TRUE(machine_accepts(std::string("{\"") + good + "\":1}", true)) << good;
  for (const char* bad :
       {"\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf0\x8f\xbf\xbf",
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe6\x97", "\x80", "\xbf", "\xff", "\xc3\xa9\xa9"})
    EXPECT_FALSE(machine_accepts(std::string("{\"") + bad + "\":1}", true)) << bad;
  // Nesting stops at kMaxDepth; whitespace runs at kMaxWhitespace.
  JsonMachine m;
  ASSERT_TRUE(m.feed("{\"a\":"));
  for (int d = 1; d < JsonMachine::kMaxDepth; ++d) ASSERT_TRUE(m.feed(uint8_t('['))) << d;
  EXPECT_FALSE(JsonMachine(m).feed(uint8_t('[')));
  EXPECT_TRUE(JsonMachine(m).feed(uint8_t(']')));
  JsonMachine w;
  ASSERT_TRUE(w.feed(std::string(JsonMachine::kMaxWhitespace, ' ')));
  EXPECT_FALSE(w.whitespace_allowed());
  EXPECT_FALSE(JsonMachine(w).feed(uint8_t(' ')));
  EXPECT_TRUE(w.feed("{ }"));
  EXPECT_TRUE(w.complete());
  // After the value whitespace is unbounded for the machine (the constraint allows it only where
  // no end token may come), and one state: the constraint's cache sees it once.
  const JsonMachine done = w;
  EXPECT_TRUE(w.feed(std::string(300, '\n')));
  EXPECT_TRUE(w.whitespace_allowed());
  EXPECT_EQ(w, done);
  EXPECT_EQ(w.hash(), done.hash());
  EXPECT_FALSE(JsonMachine(w).feed(uint8_t('{')));
}

class JsonConstraintModel : public ::testing::Test {
 protected:
  void SetUp() override {
    bundle_ = testing::cpu_bundle(2048);
    if (!bundle_ || !bundle_->tokenizer)
      GTEST_SKIP() << "no model at " << testing::default_model_path();
  }
  ModelBundle* bundle_ = nullptr;
};

// The trie search's allowed set equals a check of every token's bytes on its own, in states
// taken from random documents (inside strings, numbers, literals, between tokens, complete).
TEST_F(JsonConstraintModel, AllowedTokensEqualABruteForceCheckOfTheVocabulary) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  const tokenizer::Tokenizer& tok = *bundle_->tokenizer;
  const int64_t V = bundle_->config().vocab;
  const std::vector<int32_t> ends = tok.stop_ids();
  auto trie = std::make_shared<const TokenTrie>(tok);
  DocGen gen(seed);
  std::mt19937 rng(seed);
  int checked = 0;
  for (int d = 0; d < 6; ++d) {
    const std::string doc = gen.object();
    for (int k = 0; k < 5; ++k) {
      size_t cut = k == 4 ? doc.size() : rng() % (doc.size() + 1);
      // At a character boundary: the tokenizer encodes text, not a character's first bytes.
      while (cut < doc.size() && (uint8_t(doc[cut]) & 0xC0) == 0x80) --cut;
      JsonConstraint c(trie, ends, V);
      JsonMachine m;
      ASSERT_TRUE(m.feed(doc.substr(0, cut)));
      // Drive the constraint to the same state token by token (the document's own tokens).
      for (int32_t t : tok.encode(doc.substr(0, cut), false, false)) c.advance(t);
      ASSERT_EQ(c.machine(), m) << "the constraint did not follow " << doc.substr(0, cut);
      const auto banned = c.banned();
      std::vector<int32_t> want;
      for (int32_t t = 0; t < int32_t(V); ++t) {
        const std::string& b = trie->bytes(t);
        const bool end = std::find(ends.begin(), ends.end(), t) != ends.end();
        // Once complete, only the end tokens (no trailing whitespace).
        bool ok = end ? m.complete() : !m.complete() && !b.empty() && JsonMachine(m).feed(b);
        if (!ok) want.push_back(t);
      }
      {
        std::vector<int32_t> got(banned.begin(), banned.end()), d1, d2;
        std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                            std::back_inserter(d1));
        std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                            std::back_inserter(d2));
        for (size_t q = 0; q < std::min<size_t>(d1.size(), 5); ++q)
          ADD_FAILURE() << "extra ban " << d1[q] << " '" << trie->bytes(d1[q]) << "'";
        for (size_t q = 0; q < std::min<size_t>(d2.size(), 5); ++q)
          ADD_FAILURE() << "missing ban " << d2[q] << " '" << trie->bytes(d2[q]) << "'";
      }
      ASSERT_EQ(std::vector<int32_t>(banned.begin(), banned.end()), want)
          << "after " << nlohmann::json(doc.substr(0, cut)).dump();
      ASSERT_LT(banned.size(), size_t(V)) << "every token banned";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 30);
}

// The default model under JSON mode: what it writes is always a viable prefix of one object, and
// a whole object (nlohmann parses it) when it stops; no drawn token was banned by a fresh
// constraint replaying the output (with min_tokens held as the engine held it); greedy and seeded
// draws. One request's min_tokens (120) outlasts its object: it pads with whitespace past the
// run limit instead of meeting a row with every token banned.
TEST_F(JsonConstraintModel, GeneratedTextIsAJsonObject) {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 128;
  testing::Collector col;
  std::vector<Request> reqs;
  const std::string prompt_text =
      "<|im_start|>user\nDescribe a cat as a JSON object with its name and age.<|im_end|>\n"
      "<|im_start|>assistant\n";
  const auto prompt = bundle_->tokenizer->encode(prompt_text, true, true);
  const std::vector<int32_t> stops = bundle_->tokenizer->stop_ids();
  {
    Engine e(*bundle_, c);
    for (int i = 0; i < 6; ++i) {
      Request r;
      r.id = "j" + std::to_string(i);
      r.prompt = prompt;
      r.max_tokens = 160;
      r.json_object = true;
      r.sampling.temperature = i == 0 || i == 5 ? 0.0f : 0.8f;
      r.sampling.seed = 1000 + uint64_t(i);
      r.min_tokens = i == 5 ? 120 : 0;
      e.submit(r, col.callback());
      reqs.push_back(r);
    }
    std::vector<std::string> ids;
    for (const Request& r : reqs) ids.push_back(r.id);
    ASSERT_TRUE(col.wait_finished(ids, 300));
  }
  int stopped = 0;
  for (const Request& r : reqs) {
    const testing::Collected got = col.get(r.id);
    std::vector<int32_t> out = got.ids();
    if (got.finish_reason == "stop") out.pop_back();  // the stop token
    const std::string text = bundle_->tokenizer->decode(out, true);
    JsonMachine m;
    EXPECT_TRUE(m.feed(text)) << r.id << ": " << text;
    JsonConstraint replay(std::make_shared<const TokenTrie>(*bundle_->tokenizer), stops,
                          bundle_->config().vocab);
    for (size_t k = 0; k < out.size(); ++k) {
      const auto b = replay.banned(int32_t(k) >= r.min_tokens);
      ASSERT_FALSE(std::binary_search(b.begin(), b.end(), out[k]))
          << r.id << " token " << k << " (" << out[k] << ") was banned";
      ASSERT_TRUE(replay.advance(out[k])) << r.id << " token " << k;
    }
    if (got.finish_reason == "stop") {
      ++stopped;
      EXPECT_GE(got.tokens.size(), size_t(r.min_tokens) + 1) << r.id;
      EXPECT_TRUE(m.complete()) << r.id << ": " << text;
      const auto j = nlohmann::json::parse(text, nullptr, false);
      EXPECT_TRUE(j.is_object()) << r.id << ": " << text;
    } else {
      EXPECT_EQ(got.finish_reason, "length") << r.id;
    }
  }
  EXPECT_GT(stopped, 0) << "no request finished its object within 160 tokens";
  // The min_tokens request: its object done, whitespace until token 120, then a stop token.
  const testing::Collected held = col.get("j5");
  EXPECT_EQ(held.finish_reason, "stop") << bundle_->tokenizer->decode(held.ids(), true);
  EXPECT_EQ(held.tokens.size(), 121u);
}

}  // namespace
}  // namespace ridge::engine
