#include "ridge/server/load_generator.h"

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string_view>

#include <sys/resource.h>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using net::awaitable;
using net::use_awaitable;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

LatencyStats latency_stats(std::vector<double> v) {
  LatencyStats s;
  s.count = int64_t(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  auto pct = [&](double p) {  // linear interpolation, as numpy's default
    const double idx = p / 100.0 * double(v.size() - 1);
    const size_t lo = size_t(std::floor(idx));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
  };
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  s.max = v.back();
  return s;
}

TtftTrend ttft_trend(const std::vector<RequestRecord>& records) {
  std::vector<std::pair<double, double>> pts;  // (arrival s, TTFT ms), completed requests
  for (const auto& r : records)
    if (r.ok) pts.emplace_back(r.start, r.ttft * 1e3);
  TtftTrend t;
  if (pts.size() < 8) return t;
  std::sort(pts.begin(), pts.end());
  const double n = double(pts.size());
  double mx = 0, my = 0;
  for (const auto& [x, y] : pts) mx += x, my += y;
  mx /= n, my /= n;
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my);
  // Arrivals within a millisecond of each other (offline: all at once) give no slope.
  if (sxx <= n * 1e-6) return t;
  t.defined = true;
  t.slope_ms_per_s = sxy / sxx;
  const size_t q = pts.size() / 4;
  auto median = [&](size_t lo, size_t hi) {
    std::vector<double> v;
    for (size_t i = lo; i < hi; ++i) v.push_back(pts[i].second);
    return latency_stats(std::move(v)).p50;
  };
  t.first_quarter_p50_ms = median(0, q);
  t.last_quarter_p50_ms = median(pts.size() - q, pts.size());
  return t;
}

namespace {

const char* kWords[] = {"the", "of", "and", "to", "in", "is", "you", "that", "it", "he",
                        "was", "for", "on", "are", "as", "with", "his", "they", "at", "be",
                        "this", "have", "from", "or", "one", "had", "by", "word", "but", "not",
                        "what", "all", "were", "we", "when", "your", "can", "said", "there", "use"};

struct Planned {
  json prompt;       // token ids, or text for chat
  int64_t prompt_len = 0;
  int64_t output_len = 0;
};

int64_t draw_len(std::mt19937_64& rng, const LoadConfig& c, int64_t mean) {
  if (c.length_dist == "uniform") {
    const int64_t lo = std::max<int64_t>(1, int64_t(std::floor(double(mean) * (1 - c.range_ratio))));
    const int64_t hi = std::max<int64_t>(lo, int64_t(std::ceil(double(mean) * (1 + c.range_ratio))));
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  if (c.length_dist == "lognormal") {
    const double s = c.lognormal_sigma;
    std::lognormal_distribution<double> d(std::log(double(mean)) - s * s / 2, s);
    return std::clamp<int64_t>(int64_t(std::llround(d(rng))), 1, mean * 8);
  }
  return mean;
}

std::vector<Planned> plan(const LoadConfig& c) {
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<int32_t> tok(c.token_low, c.token_high - 1);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::vector<std::vector<int32_t>> prefixes;
  if (c.prompt_kind == "shared-prefix")
    for (int64_t i = 0; i < std::max<int64_t>(1, c.num_prefixes); ++i) {
      std::vector<int32_t> p(size_t(c.prefix_len));
      for (auto& t : p) t = tok(rng);
      prefixes.push_back(std::move(p));
    }
  std::vector<Planned> out;
  for (int64_t i = 0; i < c.num_requests; ++i) {
    Planned p;
    int64_t len = draw_len(rng, c, c.input_len);
    p.output_len = draw_len(rng, c, c.output_len);
    std::vector<int32_t> ids;
    if (!prefixes.empty()) {
      ids = prefixes[size_t(i) % prefixes.size()];
      len = std::max<int64_t>(len, int64_t(ids.size()) + 1);
    }
    while (int64_t(ids.size()) < len) ids.push_back(tok(rng));
    p.prompt_len = len;
    if (c.endpoint == "chat") {
      // Words instead of ids: each of these is one token in common BPE vocabularies, so the
      // length is close to the target (the chat template adds its own tokens).
      std::string text;
      for (int32_t t : ids) {
        if (!text.empty()) text += ' ';
        text += kWords[size_t(t) % std::size(kWords)];
      }
      p.prompt = text;
    } else {
      p.prompt = ids;
    }
    (void)word;
    out.push_back(std::move(p));
  }
  return out;
}

struct Runner {
  const LoadConfig& c;
  net::io_context ioc{1};
  tcp::endpoint endpoint;
  std::vector<Planned> planned;
  std::vector<RequestRecord> records;
  std::vector<std::unique_ptr<beast::tcp_stream>> idle;
  Clock::time_point t0;
  int64_t next = 0;
  int64_t in_flight = 0;
  std::string model;

  explicit Runner(const LoadConfig& cfg) : c(cfg) {}

  double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  awaitable<std::unique_ptr<beast::tcp_stream>> acquire() {
    if (!idle.empty()) {
      auto s = std::move(idle.back());
      idle.pop_back();
      co_return s;
    }
    auto s = std::make_unique<beast::tcp_stream>(ioc);
    s->expires_after(std::chrono::seconds(30));
    co_await s->async_connect(endpoint, use_awaitable);
    beast::error_code ec;
    s->socket().set_option(tcp::no_delay(true), ec);
    co_return s;
  }

  std::string body_for(const Planned& p) const {
    json b;
    b["model"] = model;
    if (c.endpoint == "chat") {
      b["messages"] = json::array({{{"role", "user"}, {"content", p.prompt}}});
    } else {
      b["prompt"] = p.prompt;
    }
    b["max_tokens"] = p.output_len;
    b["temperature"] = c.temperature;
    b["ignore_eos"] = true;
    b["stream"] = true;
    b["stream_options"] = {{"include_usage", true}};
    return b.dump();
  }

  // One streamed request; fills records[i].
  awaitable<void> one(int64_t i) {
    RequestRecord& r = records[size_t(i)];
    const Planned& p = planned[size_t(i)];
    r.prompt_tokens = p.prompt_len;
    r.start = now();
    const auto start = Clock::now();
    std::unique_ptr<beast::tcp_stream> s;
    bool reusable = false;
    try {
      // A kept-alive connection the server closed meanwhile fails on first use: retry once fresh.
      for (int attempt = 0;; ++attempt) {
        const bool was_idle = !idle.empty();
        s = co_await acquire();
        http::request<http::string_body> req{http::verb::post,
                                             c.endpoint == "chat" ? "/v1/chat/completions"
                                                                  : "/v1/completions",
                                             11};
        req.set(http::field::host, endpoint.address().to_string());
        req.set(http::field::content_type, "application/json");
        if (!c.api_key.empty()) req.set(http::field::authorization, "Bearer " + c.api_key);
        req.keep_alive(c.keep_alive);
        req.body() = body_for(p);
        req.prepare_payload();
        s->expires_after(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(c.timeout_s)));
        beast::error_code ec;
        co_await http::async_write(*s, req, net::redirect_error(use_awaitable, ec));
        if (ec) {
          if (was_idle && attempt == 0) continue;
          throw beast::system_error(ec);
        }
        beast::flat_buffer buf;
        http::response_parser<http::string_body> parser;
        parser.body_limit(boost::none);
        std::string sse;
        bool done_seen = false;
        bool malformed = false;
        int64_t usage_tokens = -1, events = 0;
        double last = -1;
        auto on_event = [&](std::string_view ev) {
          const double t = std::chrono::duration<double>(Clock::now() - start).count();
          if (!ev.starts_with("data: ")) {
            malformed = true;
            return;
          }
          std::string_view payload = ev.substr(6);
          if (payload == "[DONE]") {
            done_seen = true;
            return;
          }
          if (done_seen) malformed = true;
          if (payload.find("\"choices\":[]") != std::string_view::npos ||
              payload.starts_with("{\"error\"")) {
            json j = json::parse(payload, nullptr, false);
            if (j.is_discarded()) {
              malformed = true;
            } else if (j.contains("error")) {
              r.error = j["error"].value("message", "error event");
            } else if (j.contains("usage") && j["usage"].is_object()) {
              usage_tokens = j["usage"].value("completion_tokens", int64_t(-1));
              if (c.endpoint == "chat") r.prompt_tokens = j["usage"].value("prompt_tokens", r.prompt_tokens);
            }
            return;
          }
          // A token event carries non-empty text (completions) or content (chat).
          const std::string_view key = c.endpoint == "chat" ? "\"content\":\"" : "\"text\":\"";
          const size_t k = payload.find(key);
          if (k == std::string_view::npos || k + key.size() >= payload.size() ||
              payload[k + key.size()] == '"')
            return;
          ++events;
          if (last < 0) {
            r.ttft = t;
          } else {
            r.itl.push_back(t - last);
          }
          last = t;
        };
        auto chunk_cb = [&](std::uint64_t, beast::string_view body, beast::error_code&) {
          sse.append(body.data(), body.size());
          size_t pos;
          while ((pos = sse.find("\n\n")) != std::string::npos) {
            on_event(std::string_view(sse).substr(0, pos));
            sse.erase(0, pos + 2);
          }
          return body.size();
        };
        parser.on_chunk_body(chunk_cb);
        co_await http::async_read_header(*s, buf, parser, net::redirect_error(use_awaitable, ec));
        if (ec) {
          if (was_idle && attempt == 0 && ec == http::error::end_of_stream) continue;
          throw beast::system_error(ec);
        }
        while (!parser.is_done()) co_await http::async_read_some(*s, buf, parser, use_awaitable);
        const double e2e = std::chrono::duration<double>(Clock::now() - start).count();
        if (parser.get().result_int() != 200) {
          std::string body = parser.get().body();
          json j = json::parse(body, nullptr, false);
          r.error = fmt::format("HTTP {}: {}", parser.get().result_int(),
                                j.is_object() && j.contains("error")
                                    ? j["error"].value("message", body)
                                    : body.substr(0, 200));
        } else if (!r.error.empty()) {
        } else if (malformed || !done_seen || !sse.empty()) {
          r.error = "malformed stream (no data: [DONE] at its end, or a line that is not data:)";
        } else {
          r.ok = true;
          r.e2e = e2e;
          r.output_tokens = usage_tokens >= 0 ? usage_tokens : events;
          if (events == 0) r.ttft = e2e;
        }
        reusable = c.keep_alive && parser.get().keep_alive();
        break;
      }
    } catch (const std::exception& e) {
      r.ok = false;
      if (r.error.empty()) r.error = e.what();
      reusable = false;
    }
    if (s && reusable) {
      s->expires_never();
      idle.push_back(std::move(s));
    }
    co_return;
  }

  awaitable<void> worker() {
    while (next < c.num_requests) {
      const int64_t i = next++;
      co_await one(i);
    }
  }

  awaitable<void> poisson() {
    std::mt19937_64 rng(c.seed ^ 0x5eed);
    std::exponential_distribution<double> gap(c.request_rate);
    net::steady_timer timer(ioc);
    auto at = Clock::now();
    for (int64_t i = 0; i < c.num_requests; ++i) {
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      timer.expires_at(at);
      co_await timer.async_wait(use_awaitable);
      while (c.concurrency > 0 && in_flight >= c.concurrency) {
        timer.expires_after(std::chrono::microseconds(200));
        co_await timer.async_wait(use_awaitable);
      }
      ++in_flight;
      net::co_spawn(ioc, [this, i]() -> awaitable<void> {
        co_await one(i);
        --in_flight;
      }, net::detached);
    }
  }

  awaitable<http::response<http::string_body>> get(const char* path) {
    beast::tcp_stream s(ioc);
    s.expires_after(std::chrono::seconds(30));
    co_await s.async_connect(endpoint, use_awaitable);
    http::request<http::empty_body> req{http::verb::get, path, 11};
    req.set(http::field::host, endpoint.address().to_string());
    if (!c.api_key.empty()) req.set(http::field::authorization, "Bearer " + c.api_key);
    co_await http::async_write(s, req, use_awaitable);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    co_await http::async_read(s, buf, res, use_awaitable);
    co_return res;
  }

  // The server's GPU energy counter from /metrics (ridge serve's ridge_gpu_energy_joules_total);
  // absent when the server has none, or no /metrics at all (another engine): never an error.
  awaitable<std::optional<double>> fetch_energy() {
    try {
      const auto res = co_await get("/metrics");
      if (res.result_int() != 200) co_return std::nullopt;
      static constexpr std::string_view kName = "ridge_gpu_energy_joules_total ";
      const std::string& body = res.body();
      for (size_t at = 0; at < body.size();) {
        size_t end = body.find('\n', at);
        if (end == std::string::npos) end = body.size();
        const std::string_view line(body.data() + at, end - at);
        if (line.substr(0, kName.size()) == kName) {
          const std::string v(line.substr(kName.size()));
          char* stop = nullptr;
          const double x = std::strtod(v.c_str(), &stop);
          co_return stop != v.c_str() ? std::optional<double>(x) : std::nullopt;
        }
        at = end + 1;
      }
    } catch (const std::exception&) {
    }
    co_return std::nullopt;
  }

  awaitable<void> fetch_model() {
    const auto res = co_await get("/v1/models");
    json j = json::parse(res.body(), nullptr, false);
    if (res.result_int() != 200 || j.is_discarded() || !j.contains("data") || j["data"].empty())
      fail("GET /v1/models answered {}: {}", res.result_int(), res.body().substr(0, 200));
    model = j["data"][0].value("id", "");
  }
};

}  // namespace

LoadReport run_load(const LoadConfig& c) {
  if (c.endpoint != "completions" && c.endpoint != "chat")
    fail("endpoint '{}' must be completions or chat", c.endpoint);
  if (c.length_dist != "fixed" && c.length_dist != "uniform" && c.length_dist != "lognormal")
    fail("length distribution '{}' must be fixed, uniform or lognormal", c.length_dist);
  if (c.prompt_kind != "random" && c.prompt_kind != "shared-prefix")
    fail("prompt kind '{}' must be random or shared-prefix", c.prompt_kind);
  if (c.request_rate <= 0 && c.concurrency <= 0) fail("give a concurrency or a request rate");
  if (c.token_high <= c.token_low) fail("empty token range [{}, {})", c.token_low, c.token_high);

  // Every request in flight holds a socket: thousands at once pass the usual soft limit of 1024
  // open files, so take the hard limit.
  if (rlimit r{}; getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  Runner run(c);
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(c.host, ec);
  if (ec) fail("host '{}' is not an IP address", c.host);
  run.endpoint = tcp::endpoint(addr, c.port);
  run.planned = plan(c);
  run.records.resize(run.planned.size());
  run.model = c.model;
  std::exception_ptr setup_error;
  if (run.model.empty()) {
    net::co_spawn(run.ioc, run.fetch_model(), [&](std::exception_ptr e) { setup_error = e; });
    run.ioc.run();
    run.ioc.restart();
    if (setup_error) {
      try {
        std::rethrow_exception(setup_error);
      } catch (const std::exception& e) {
        fail("cannot reach {}:{}: {}", c.host, c.port, e.what());
      }
    }
  }
  auto read_energy = [&run] {
    std::optional<double> v;
    net::co_spawn(run.ioc, run.fetch_energy(),
                  [&v](std::exception_ptr, std::optional<double> r) { v = r; });
    run.ioc.restart();  // after fetch_model's or the run's own ioc.run()
    run.ioc.run();
    return v;
  };
  const std::optional<double> energy_before = read_energy();
  run.ioc.restart();
  run.t0 = Clock::now();
  if (c.request_rate > 0) {
    net::co_spawn(run.ioc, run.poisson(), net::detached);
  } else {
    for (int64_t k = 0; k < std::min(c.concurrency, c.num_requests); ++k)
      net::co_spawn(run.ioc, run.worker(), net::detached);
  }
  run.ioc.run();

  LoadReport rep;
  rep.config = c;
  rep.duration_s = std::chrono::duration<double>(Clock::now() - run.t0).count();
  if (energy_before) {
    const std::optional<double> energy_after = read_energy();
    if (energy_after && *energy_after >= *energy_before) rep.energy_j = *energy_after - *energy_before;
  }
  rep.records = std::move(run.records);
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : rep.records) {
    if (!r.ok) {
      ++rep.failed;
      if (rep.sample_errors.size() < 5) rep.sample_errors.push_back(r.error);
      continue;
    }
    ++rep.completed;
    rep.prompt_tokens += r.prompt_tokens;
    rep.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    double tp = 0;
    if (r.output_tokens > 1) {
      tp = (r.e2e - r.ttft) / double(r.output_tokens - 1) * 1e3;
      tpot.push_back(tp);
    }
    for (double g : r.itl) itl.push_back(g * 1e3);
    const bool good = (c.slo_ttft_ms <= 0 || r.ttft * 1e3 <= c.slo_ttft_ms) &&
                      (c.slo_tpot_ms <= 0 || tp <= c.slo_tpot_ms) &&
                      (c.slo_e2e_ms <= 0 || r.e2e * 1e3 <= c.slo_e2e_ms);
    rep.good += good;
  }
  const double d = std::max(rep.duration_s, 1e-9);
  rep.request_throughput = double(rep.completed) / d;
  rep.output_throughput = double(rep.output_tokens) / d;
  rep.total_token_throughput = double(rep.prompt_tokens + rep.output_tokens) / d;
  rep.goodput = double(rep.good) / d;
  rep.ttft_ms = latency_stats(std::move(ttft));
  rep.tpot_ms = latency_stats(std::move(tpot));
  rep.itl_ms = latency_stats(std::move(itl));
  rep.e2e_ms = latency_stats(std::move(e2e));
  rep.ttft_trend = ttft_trend(rep.records);
  return rep;
}

namespace {
ojson stats_json(const LatencyStats& s) {
  ojson j;
  j["mean"] = s.mean;
  j["p50"] = s.p50;
  j["p90"] = s.p90;
  j["p99"] = s.p99;
  j["max"] = s.max;
  j["count"] = s.count;
  return j;
}
}  // namespace

ojson LoadReport::to_json() const {
  const auto& c = config;
  ojson j;
  j["endpoint"] = fmt::format("http://{}:{}/v1/{}", c.host, c.port,
                              c.endpoint == "chat" ? "chat/completions" : "completions");
  ojson w;
  w["mode"] = c.request_rate > 0 ? "poisson" : c.concurrency >= c.num_requests ? "offline" : "closed-loop";
  w["num_requests"] = c.num_requests;
  w["concurrency"] = c.concurrency;
  w["request_rate"] = c.request_rate;
  w["length_dist"] = c.length_dist;
  w["input_len"] = c.input_len;
  w["output_len"] = c.output_len;
  if (c.length_dist == "uniform") w["range_ratio"] = c.range_ratio;
  if (c.length_dist == "lognormal") w["lognormal_sigma"] = c.lognormal_sigma;
  w["prompt_kind"] = c.prompt_kind;
  if (c.prompt_kind == "shared-prefix") {
    w["prefix_len"] = c.prefix_len;
    w["num_prefixes"] = c.num_prefixes;
  }
  w["seed"] = c.seed;
  j["workload"] = w;
  j["slo_ms"] = {{"ttft", c.slo_ttft_ms}, {"tpot", c.slo_tpot_ms}, {"e2e", c.slo_e2e_ms}};
  j["duration_s"] = duration_s;
  j["completed"] = completed;
  j["failed"] = failed;
  j["prompt_tokens"] = prompt_tokens;
  j["output_tokens"] = output_tokens;
  j["request_throughput"] = request_throughput;
  j["output_token_throughput"] = output_throughput;
  j["total_token_throughput"] = total_token_throughput;
  j["goodput"] = goodput;
  j["good_requests"] = good;
  j["ttft_ms"] = stats_json(ttft_ms);
  j["tpot_ms"] = stats_json(tpot_ms);
  j["itl_ms"] = stats_json(itl_ms);
  j["e2e_ms"] = stats_json(e2e_ms);
  if (ttft_trend.defined) {
    j["ttft_trend"] = {{"slope_ms_per_s", ttft_trend.slope_ms_per_s},
                       {"first_quarter_p50_ms", ttft_trend.first_quarter_p50_ms},
                       {"last_quarter_p50_ms", ttft_trend.last_quarter_p50_ms}};
  } else {
    j["ttft_trend"] = nullptr;
  }
  if (energy_j) {
    j["energy_j"] = *energy_j;
    j["mean_power_w"] = duration_s > 0 ? *energy_j / duration_s : 0.0;
    j["joules_per_output_token"] = output_tokens > 0 ? *energy_j / double(output_tokens) : 0.0;
  }
  j["errors"] = sample_errors;
  return j;
}

std::string LoadReport::table() const {
  std::string t;
  const auto& c = config;
  t += fmt::format("endpoint      http://{}:{} ({}), {} requests, {}\n", c.host, c.port, c.endpoint,
                   c.num_requests,
                   c.request_rate > 0 ? fmt::format("Poisson {:.2f} req/s{}", c.request_rate,
                                                    c.concurrency > 0 ? fmt::format(", at most {} at once", c.concurrency) : "")
                   : c.concurrency >= c.num_requests ? std::string("all at once (offline)")
                                                     : fmt::format("concurrency {}", c.concurrency));
  t += fmt::format("lengths       input {} / output {} ({}), prompts {}\n", c.input_len,
                   c.output_len, c.length_dist, c.prompt_kind);
  t += fmt::format("completed     {} ok, {} failed in {:.2f} s\n", completed, failed, duration_s);
  t += fmt::format("throughput    {:.2f} req/s, {:.1f} output tok/s, {:.1f} total tok/s\n",
                   request_throughput, output_throughput, total_token_throughput);
  if (c.slo_ttft_ms > 0 || c.slo_tpot_ms > 0 || c.slo_e2e_ms > 0)
    t += fmt::format("goodput       {:.2f} req/s ({} of {} met TTFT<={} TPOT<={} E2E<={} ms)\n",
                     goodput, good, completed, c.slo_ttft_ms, c.slo_tpot_ms, c.slo_e2e_ms);
  if (energy_j)
    t += fmt::format("energy        {:.1f} J ({:.0f} W mean), {:.2f} mJ per output token\n", *energy_j,
                     duration_s > 0 ? *energy_j / duration_s : 0.0,
                     output_tokens > 0 ? 1e3 * *energy_j / double(output_tokens) : 0.0);
  t += fmt::format("{:<12}{:>11}{:>11}{:>11}{:>11}{:>11}\n", "latency ms", "mean", "p50", "p90", "p99", "max");
  auto row = [&](const char* name, const LatencyStats& s) {
    t += fmt::format("{:<12}{:>11.2f}{:>11.2f}{:>11.2f}{:>11.2f}{:>11.2f}\n", name, s.mean, s.p50,
                     s.p90, s.p99, s.max);
  };
  row("TTFT", ttft_ms);
  row("TPOT", tpot_ms);
  row("ITL", itl_ms);
  row("E2E", e2e_ms);
  if (ttft_trend.defined)
    t += fmt::format(
        "TTFT trend    {:+.2f} ms per s of arrivals (p50 {:.2f} ms in the first quarter "
        "of arrivals, {:.2f} in the last): a slope that does not vanish is a growing "
        "queue\n",
        ttft_trend.slope_ms_per_s, ttft_trend.first_quarter_p50_ms, ttft_trend.last_quarter_p50_ms);
  for (const auto& e : sample_errors) t += fmt::format("error: {}\n", e);
  return t;
}

}  // namespace ridge::server
