// Unit tests of the server's pieces (most need no socket): stop-string matching across pieces,
// JSON text escaping, request validation, the stub engine's contract; and, on loopback, the GPU
// power metrics with the load generator's energy per token.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "ridge/io/gguf.h"
#include "ridge/server/http_server.h"
#include "ridge/server/json_text.h"
#include "ridge/server/load_generator.h"
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
  EXPECT_FALSE(c.echo);
  auto e = parse(rs::Api::completions,
                 R"({"prompt":"a","echo":true,"logit_bias":{"9":-2.5,"3":100},"min_tokens":2})");
  EXPECT_TRUE(e.echo);
  EXPECT_EQ(e.min_tokens, 2);
  EXPECT_EQ(e.sampling.logit_bias,
            (std::vector<ridge::engine::TokenBias>{{3, 100.0f}, {9, -2.5f}}));  // sorted by id
  struct Case { const char* body; const char* param; };
  for (const Case& k :
       {Case{R"({"prompt":"a","temperature":3})", "temperature"},
        Case{R"({"prompt":"a","max_tokens":"4"})", "max_tokens"},
        Case{R"({"prompt":[1,"a"]})", "prompt"}, Case{R"({"prompt":"a","stop":[1]})", "stop[0]"},
        Case{R"({"prompt":"a","logprobs":true})", "logprobs"},
        Case{R"({"prompt":"a","echo":1})", "echo"},
        Case{R"({"prompt":"a","logit_bias":{"1":"x"}})", "logit_bias"},
        Case{R"({"prompt":"a","min_tokens":-2})", "min_tokens"},
        Case{R"({"prompt":"a","prompt_logprobs":21})", "prompt_logprobs"},
        Case{R"({"prompt":"a","prompt_logprobs":1,"stream":true})", "prompt_logprobs"},
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

// What every choice copies or scans is bounded: the prompts of a completions request (each
// becomes n choices), the stop strings' bytes (matched per output piece), the distinct
// stop_token_ids (deduplicated first). Past each bound: a 400 naming the parameter and the bound.
TEST(ParseGeneration, BoundsWhatEveryChoiceHolds) {
  const auto* tok = default_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not installed";
  ridge::tokenizer::ChatTemplate tmpl(tok->chat_template());
  rs::PromptContext ctx{tok, &tmpl, "", ""};
  using GP = rs::GenParams;
  auto parse = [&](const json& body) {
    return rs::parse_generation(rs::Api::completions, body, ctx);
  };
  auto refusal = [&](const json& body) -> rs::ApiError {
    try {
      parse(body);
    } catch (const rs::ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "accepted: " << body.dump().substr(0, 200);
    return rs::ApiError(0, "");
  };
  auto ids = [](size_t n, int32_t repeat = 1) {
    json a = json::array();
    for (size_t i = 0; i < n; ++i) a.push_back(int32_t(i) / repeat);
    return a;
  };
  auto names = [](const rs::ApiError& e, const std::string& param, const std::string& what) {
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_EQ(e.param, param) << e.message;
    EXPECT_NE(e.message.find(what), std::string::npos) << e.message;
  };

  // Prompts: at the bound parsed, one more refused naming `prompt` and both counts. The bound is
  // the server's max_queue (no more choices could be queued), kMaxPrompts where it has none (0).
  auto many_prompts = [](size_t n) {
    json prompts = json::array();
    for (size_t i = 0; i < n; ++i) prompts.push_back(json::array({int32_t(i % 7)}));
    return prompts;
  };
  EXPECT_EQ(parse({{"prompt", many_prompts(GP::kMaxPrompts)}}).prompts.size(), GP::kMaxPrompts);
  names(refusal({{"prompt", many_prompts(GP::kMaxPrompts + 1)}}), "prompt",
        fmt::format("{} prompts, at most {}", GP::kMaxPrompts + 1, GP::kMaxPrompts));
  ctx.max_queue = 8;
  EXPECT_EQ(parse({{"prompt", many_prompts(8)}}).prompts.size(), 8u);
  names(refusal({{"prompt", many_prompts(9)}}), "prompt",
        "9 prompts, at most 8 in one request (the server's --max-queue)");
  // A larger --max-queue admits more prompts than kMaxPrompts.
  ctx.max_queue = 100000;
  EXPECT_EQ(parse({{"prompt", many_prompts(5000)}}).prompts.size(), 5000u);
  ctx.max_queue = 0;
  // One prompt of many token ids is one prompt, not many.
  EXPECT_EQ(parse({{"prompt", ids(GP::kMaxPrompts + 1)}}).prompts.size(), 1u);

  // Stop strings: each at most kMaxStopBytes bytes (a lone string and one in an array), and at
  // most kMaxStops of them.
  const std::string longest(GP::kMaxStopBytes, 'x');
  EXPECT_EQ(parse({{"prompt", "a"}, {"stop", longest}}).stop, std::vector<std::string>{longest});
  for (const json& stop : {json(longest + "y"), json::array({"ok", longest + "y"})})
    names(refusal({{"prompt", "a"}, {"stop", stop}}), "stop",
          fmt::format("{} bytes, at most {}", GP::kMaxStopBytes + 1, GP::kMaxStopBytes));
  json many_stops = json::array();
  for (size_t i = 0; i <= GP::kMaxStops; ++i) many_stops.push_back(fmt::format("s{}", i));
  names(refusal({{"prompt", "a"}, {"stop", many_stops}}), "stop",
        fmt::format("{} strings, at most {}", GP::kMaxStops + 1, GP::kMaxStops));

  // stop_token_ids: sorted and deduplicated; at most kMaxStopTokenIds distinct.
  EXPECT_EQ(parse({{"prompt", "a"}, {"stop_token_ids", {9, 3, 9, 3, 5}}}).stop_token_ids,
            (std::vector<int32_t>{3, 5, 9}));
  // Many entries repeating few ids are fine once deduplicated.
  EXPECT_EQ(parse({{"prompt", "a"}, {"stop_token_ids", ids(4 * GP::kMaxStopTokenIds, 4)}})
                .stop_token_ids.size(),
            GP::kMaxStopTokenIds);
  names(refusal({{"prompt", "a"}, {"stop_token_ids", ids(GP::kMaxStopTokenIds + 1)}}),
        "stop_token_ids",
        fmt::format("{} distinct token ids, at most {}", GP::kMaxStopTokenIds + 1,
                    GP::kMaxStopTokenIds));
}

TEST(StopMatcher, SharedListDropsEmptyStrings) {
  auto stops = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"", "ab"});
  rs::StopMatcher m(stops), n(stops);
  EXPECT_EQ(m.push("xa"), "x");
  EXPECT_EQ(m.push("b!"), "");
  EXPECT_EQ(m.matched(), "ab");
  EXPECT_EQ(n.push("yy"), "yy");  // the empty string is no stop; the matchers are apart
  EXPECT_FALSE(n.stopped());
  rs::StopMatcher none(std::shared_ptr<const std::vector<std::string>>{});
  EXPECT_EQ(none.push("ab"), "ab");
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

// A prompt that needs more KV blocks than the whole pool is finished with an error once nothing
// else holds blocks (as the engine's scheduler does), instead of waiting for blocks that never
// come: that spun the stub's loop and held up every request behind it.
TEST(StubEngine, PromptLargerThanAllBlocksFailsAndOthersRun) {
  rs::StubEngineConfig cfg;
  cfg.cycle = {5, 6, 7};
  cfg.vocab_size = 100;
  cfg.max_model_len = 64;
  cfg.kv_blocks = 2;
  cfg.block_size = 4;  // 8 tokens in all
  rs::StubEngine e(cfg);
  struct Result {
    std::string reason, error;
    size_t tokens = 0;
  };
  auto run = [&](std::string id, size_t prompt_len) {
    auto done = std::make_shared<std::promise<Result>>();
    auto res = std::make_shared<Result>();
    ridge::engine::Request r;
    r.id = std::move(id);
    r.prompt.assign(prompt_len, 1);
    r.max_tokens = 2;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    e.submit(std::move(r), [done, res](ridge::engine::RequestOutput&& o) {
      res->tokens += o.tokens.size();
      if (o.finished) {
        res->reason = o.finish_reason;
        res->error = o.error;
        done->set_value(*res);
      }
    });
    return done->get_future();
  };
  auto big = run("big", 9);      // 9 + 1 tokens: 3 blocks of 4, the pool has 2
  auto small = run("small", 3);  // queued behind it
  ASSERT_EQ(big.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const Result b = big.get();
  EXPECT_EQ(b.reason, "error");
  EXPECT_EQ(b.tokens, 0u);
  EXPECT_NE(b.error.find("needs 3 KV blocks, more than the pool's 2"), std::string::npos)
      << b.error;
  ASSERT_EQ(small.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const Result s = small.get();
  EXPECT_EQ(s.reason, "length");
  EXPECT_EQ(s.tokens, 2u);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
  EXPECT_EQ(e.metrics().waiting, 0);
  e.shutdown(true);
}

// The GPU's power in /metrics and the load generator's energy per token: over a stub engine whose
// "GPU" draws a fixed 250 W on an energy counter that starts at 5,000 J, /metrics shows the power
// gauges and counts energy from the server's start; `ridge bench serve` (run_load) reads that
// counter around its run, so its energy is 250 W x the run's span within the scrapes' slack.
// Without a power source neither appears.
namespace {

std::string http_get(uint16_t port, const std::string& path) {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  net::io_context ioc;
  boost::beast::tcp_stream s(ioc);
  s.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(s, req);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  return res.body();
}

double metric(const std::string& text, const std::string& name) {
  for (size_t at = text.find(name + " "); at != std::string::npos; at = text.find(name + " ", at + 1))
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + name.size() + 1));
  return std::nan("");
}

}  // namespace

TEST(ServerPower, MetricsAndEnergyPerToken) {
  const auto* tok = default_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not installed";
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (bool with_power : {true, false}) {
    rs::StubEngineConfig sc;
    sc.cycle = tok->encode(" one two three four five six seven eight nine ten", false, false);
    sc.stop_ids = tok->stop_ids();
    sc.step_seconds = 0.002;
    if (with_power)
      sc.power = [t0] {
        ridge::backend::PowerReading p;
        p.power_w = 250;
        p.energy_j = 5000 + 250 * std::chrono::duration<double>(Clock::now() - t0).count();
        p.sm_clock_mhz = 1500;
        p.power_limit_w = 700;
        p.power_capped = true;
        return std::optional<ridge::backend::PowerReading>(p);
      };
    rs::StubEngine eng(sc);
    rs::ServerOptions opt;
    opt.port = 0;
    opt.served_model_names = {"stub"};
    rs::HttpServer server(opt, *tok, eng);
    server.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string before = http_get(server.port(), "/metrics");
    rs::LoadConfig lc;
    lc.port = server.port();
    lc.num_requests = 32, lc.concurrency = 8, lc.input_len = 16, lc.output_len = 24, lc.seed = 3;
    const auto t_run = Clock::now();
    const rs::LoadReport rep = rs::run_load(lc);
    const double span = std::chrono::duration<double>(Clock::now() - t_run).count();
    const std::string after = http_get(server.port(), "/metrics");
    EXPECT_EQ(rep.completed, 32);
    if (with_power) {
      EXPECT_DOUBLE_EQ(metric(after, "ridge_gpu_power_watts"), 250);
      EXPECT_DOUBLE_EQ(metric(after, "ridge_gpu_power_limit_watts"), 700);
      EXPECT_DOUBLE_EQ(metric(after, "ridge_gpu_power_capped"), 1);
      EXPECT_DOUBLE_EQ(metric(after, "ridge_gpu_sm_clock_mhz"), 1500);
      // Counted from the server's start (not the counter's 5,000 J), growing at 250 W.
      const double e0 = metric(before, "ridge_gpu_energy_joules_total");
      const double e1 = metric(after, "ridge_gpu_energy_joules_total");
      EXPECT_GE(e0, 0);
      EXPECT_LT(e0, 250 * 5.0);
      EXPECT_GT(e1, e0);
      ASSERT_TRUE(rep.energy_j.has_value());
      // The scrapes bracket the requests' span (rep.duration_s) and lie within this test's span.
      EXPECT_GE(*rep.energy_j, 250 * rep.duration_s * 0.999);
      EXPECT_LE(*rep.energy_j, 250 * span * 1.001);
      const auto j = rep.to_json();
      EXPECT_NEAR(j["joules_per_output_token"].get<double>(), *rep.energy_j / double(rep.output_tokens), 1e-12);
      EXPECT_NE(rep.table().find("mJ per output token"), std::string::npos);
    } else {
      EXPECT_EQ(after.find("ridge_gpu_"), std::string::npos);
      EXPECT_FALSE(rep.energy_j.has_value());
      EXPECT_FALSE(rep.to_json().contains("energy_j"));
    }
    server.request_stop(0);
    server.wait();
  }
}
