// Unit tests of the server's pieces that need no socket: stop-string matching across pieces,
// JSON text escaping, request validation, the stub engine's contract.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "ridge/io/gguf.h"
#include "ridge/server/json_text.h"
#include "ridge/server/openai_api.h"
#include "ridge/server/stop_matcher.h"
#include "ridge/server/stub_engine.h"

namespace rs = ridge::server;
using nlohmann::json;

TEST(StopMatcher, MatchesAcrossPiecesAndNeverEmitsTheStop) {
  rs::StopMatcher m({"STOP"});
  std::string out;
  for (const char* p : {"hello S", "T", "OP world"}) out += m.push(p);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(out, "hello ");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStartAStop) {
  rs::StopMatcher m({"abc", "xyz"});
  EXPECT_EQ(m.push("hello a"), "hello ");  // "a" may start "abc"
  EXPECT_EQ(m.push("b"), "");              // "ab" still may
  EXPECT_EQ(m.push("d"), "abd");           // no longer
  EXPECT_EQ(m.push("x"), "");
  EXPECT_EQ(m.flush(), "x");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  rs::StopMatcher m({"world", "lo w"});
  EXPECT_EQ(m.push("hello world"), "hel");
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcher, RandomSplitsEqualTheWholeText) {
  const std::string text = "The café — naïve STOP? no: ST then STOP! 日本語STOP end";
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    rs::StopMatcher m({"STOP!", "語ST"});
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
      size_t n = 1 + rng() % 5;
      // keep whole UTF-8 characters together, as the incremental decoder does
      size_t j = std::min(text.size(), i + n);
      while (j < text.size() && (uint8_t(text[j]) & 0xC0) == 0x80) ++j;
      out += m.push(std::string_view(text).substr(i, j - i));
      i = j;
    }
    out += m.flush();
    EXPECT_EQ(out, "The café — naïve STOP? no: ST then ");
  }
}

TEST(StopMatcher, NoStopsPassesThrough) {
  rs::StopMatcher m;
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(JsonText, EscapesAndRepairsUtf8) {
  std::string out;
  rs::append_json_string(out, "a\"b\\c\n\t\x01 é \xff z");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\t\\u0001 é \xEF\xBF\xBD z\"");
  EXPECT_TRUE(json::accept(out));
  EXPECT_EQ(rs::valid_utf8("\xe6\x97"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(rs::utf8_length("日本 é"), 4u);
  std::string n;
  rs::append_json_number(n, -0.25f);
  EXPECT_EQ(n, "-0.25");
}

TEST(Auth, ConstantTimeEqual) {
  EXPECT_TRUE(rs::constant_time_equal("secret", "secret"));
  EXPECT_FALSE(rs::constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(rs::constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(rs::constant_time_equal("", "x"));
  EXPECT_TRUE(rs::constant_time_equal("", ""));
}

TEST(ApiError, BodyIsOpenAIShaped) {
  rs::ApiError e(400, "bad temperature", "temperature");
  const json j = json::parse(e.body());
  EXPECT_EQ(j["error"]["message"], "bad temperature");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

namespace {
const ridge::tokenizer::Tokenizer* default_tokenizer() {
  static std::unique_ptr<ridge::tokenizer::Tokenizer> tok = [] {
    const std::string path = std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) return std::unique_ptr<ridge::tokenizer::Tokenizer>();
    auto g = ridge::io::GgufFile::open(path);
    return std::make_unique<ridge::tokenizer::Tokenizer>(ridge::tokenizer::Tokenizer::from_gguf(g));
  }();
  return tok.get();
}
}  // namespace

TEST(ParseGeneration, ValidatesAndNamesParameters) {
  const auto* tok = default_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not installed";
  ridge::tokenizer::ChatTemplate tmpl(tok->chat_template());
  rs::PromptContext ctx{tok, &tmpl, "", ""};
  auto parse = [&](rs::Api api, const char* body) { return rs::parse_generation(api, json::parse(body), ctx); };
  auto p = parse(rs::Api::chat, R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,
      "max_completion_tokens":5,"stop":"x","n":2,"seed":-3,"logprobs":true,"top_logprobs":4})");
  EXPECT_EQ(p.prompts.size(), 1u);
  EXPECT_GT(p.prompts[0].size(), 3u);
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p.n, 2);
  EXPECT_TRUE(p.seed_given);
  EXPECT_EQ(p.sampling.top_logprobs, 4);
  auto c = parse(rs::Api::completions, R"({"prompt":[[1,2],[3]],"logprobs":0})");
  EXPECT_EQ(c.prompts.size(), 2u);
  EXPECT_TRUE(c.logprobs);
  struct Case { const char* body; const char* param; };
  for (const Case& k : {Case{R"({"prompt":"a","temperature":3})", "temperature"},
                        Case{R"({"prompt":"a","max_tokens":"4"})", "max_tokens"},
                        Case{R"({"prompt":[1,"a"]})", "prompt"},
                        Case{R"({"prompt":"a","stop":[1]})", "stop[0]"},
                        Case{R"({"prompt":"a","logprobs":true})", "logprobs"},
                        Case{R"({"prompt":"a","echo":true})", "echo"},
                        Case{R"({})", "prompt"}}) {
    try {
      parse(rs::Api::completions, k.body);
      ADD_FAILURE() << k.body;
    } catch (const rs::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, k.param) << k.body << ": " << e.message;
    }
  }
  EXPECT_THROW(rs::parse_body("{\"a\":"), rs::ApiError);
  EXPECT_THROW(rs::parse_body("[]"), rs::ApiError);
}

TEST(StubEngine, KeepsTheEngineContract) {
  rs::StubEngineConfig cfg;
  cfg.cycle = {5, 6, 7};
  cfg.stop_ids = {2};
  cfg.vocab_size = 100;
  cfg.max_model_len = 64;
  cfg.max_queue = 2;
  cfg.max_num_seqs = 1;
  cfg.step_seconds = 0.001;
  rs::StubEngine e(cfg);
  using K = ridge::engine::RequestRejected::Kind;
  auto req = [](std::string id, int max_tokens, bool ignore_eos = true) {
    ridge::engine::Request r;
    r.id = std::move(id);
    r.prompt = {1, 2, 3};
    r.max_tokens = max_tokens;
    r.ignore_eos = ignore_eos;
    r.sampling.temperature = 0;
    return r;
  };
  auto expect_kind = [&](ridge::engine::Request r, K kind) {
    try {
      e.submit(std::move(r), [](ridge::engine::RequestOutput&&) {});
      ADD_FAILURE();
    } catch (const ridge::engine::RequestRejected& x) {
      EXPECT_EQ(x.kind, kind) << x.what();
    }
  };
  expect_kind(req("a", 62), K::invalid);  // 3 + 62 > 64
  auto bad = req("b", 4);
  bad.prompt = {100};
  expect_kind(bad, K::invalid);

  std::promise<std::vector<int32_t>> done;
  std::vector<int32_t> got;
  std::string reason;
  e.submit(req("c", 5), [&](ridge::engine::RequestOutput&& o) {
    for (auto& t : o.tokens) got.push_back(t.token);
    if (o.finished) {
      reason = o.finish_reason;
      done.set_value(got);
    }
  });
  auto toks = done.get_future().get();
  EXPECT_EQ(toks.size(), 5u);
  EXPECT_EQ(reason, "length");

  // cancellation: the final output says abort and the blocks return
  std::promise<std::string> aborted;
  std::atomic<int> n{0};
  e.submit(req("d", 60), [&](ridge::engine::RequestOutput&& o) {
    if (++n == 3) e.cancel("d");
    if (o.finished) aborted.set_value(o.finish_reason);
  });
  EXPECT_EQ(aborted.get_future().get(), "abort");
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
  EXPECT_EQ(e.metrics().running, 0);
  e.shutdown(true);
  expect_kind(req("e", 4), K::shutting_down);
}
