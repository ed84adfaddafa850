#include "ridge/server/http_server.h"

#include <cstdint>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/server/json_text.h"
#include "ridge/server/openai_api.h"
#include "ridge/server/stop_matcher.h"

namespace ridge::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

constexpr int kCodes[] = {200, 400, 401, 404, 405, 413, 429, 431, 500, 503};
int code_index(int status) {
  for (int i = 0; i < int(std::size(kCodes)); ++i)
    if (kCodes[i] == status) return i;
  return -1;
}

std::string http_head(int status, std::string_view content_type, int64_t content_length,
                      bool keep_alive, std::string_view extra = {}) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\nServer: ridge\r\nContent-Type: {}\r\n", status,
                              reason(status), content_type);
  if (content_length >= 0)
    h += fmt::format("Content-Length: {}\r\n", content_length);
  else
    h += "Transfer-Encoding: chunked\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  h += extra;
  h += "\r\n";
  return h;
}

std::string random_hex(size_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string s(n, '0');
  uint64_t bits = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 16 == 0) bits = rng();
    s[i] = hex[bits & 15];
    bits >>= 4;
  }
  return s;
}

void append_histogram(std::string& out, const char* name, const char* help,
                      const engine::Histogram& h) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < h.bounds.size(); ++i)
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], h.counts[i]);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     h.sum, name, h.count);
}

void append_metric(std::string& out, const char* name, const char* type, const char* help,
                   double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

class Session;
class Job;

struct HttpServer::Impl {
  ServerOptions opt;
  const tokenizer::Tokenizer& tok;
  EnginePort& engine;
  std::unique_ptr<tokenizer::ChatTemplate> tmpl;
  PromptContext pctx;
  std::vector<int32_t> model_stop_ids;  // the tokenizer's stop ids, sorted, without duplicates
  std::string fingerprint;
  int64_t created = 0;

  std::vector<std::unique_ptr<net::io_context>> iocs;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<net::steady_timer> accept_retry;
  size_t next_ioc = 0;
  uint16_t bound_port = 0;

  std::atomic<bool> stopping{false};
  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> busy{0};  // connections with a request whose response is not yet written
  std::atomic<uint64_t> responses[std::size(kCodes) + 1] = {};
  std::atomic<uint64_t> disconnect_cancels{0};
  std::atomic<uint64_t> stop_string_stops{0};
  std::atomic<uint64_t> connections_total{0};

  // Jobs whose engine requests are not all finished.
  std::mutex jobs_mu;
  std::unordered_map<std::string, std::weak_ptr<Job>> jobs;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop_requested = false;
  bool stop_done = false;
  Clock::time_point deadline;
  std::thread stopper;

  // The GPU's energy counter when the server started (or at its first reading, if that one
  // failed): /metrics counts energy from there. Set under energy_mu by any /metrics thread.
  std::mutex energy_mu;
  std::optional<double> energy_at_start;

  Impl(ServerOptions o, const tokenizer::Tokenizer& t, EnginePort& e)
      : opt(std::move(o)), tok(t), engine(e) {
    if (auto p = engine.device_power()) {
      energy_at_start = p->energy_j;
      log::info("server: GPU power limit {:.0f} W (now {:.0f} W, SM {:.0f} MHz); /metrics reports the "
                "GPU's power{}",
                p->power_limit_w, p->power_w, p->sm_clock_mhz, p->energy_j ? " and energy" : "");
    }
  }
  // Energy since the server started, from a reading's counter.
  double energy_since_start(double counter) {
    std::lock_guard lock(energy_mu);
    if (!energy_at_start) energy_at_start = counter;
    return std::max(0.0, counter - *energy_at_start);
  }
  ~Impl() {
    // Connections (held by pending handlers) go with their io_context, before the counters.
    guards.clear();
    acceptor.reset();
    accept_retry.reset();
    iocs.clear();
  }

  void count(int status) {
    const int i = code_index(status);
    responses[i < 0 ? std::size(kCodes) : size_t(i)].fetch_add(1, std::memory_order_relaxed);
  }
  size_t live_jobs() {
    std::lock_guard lock(jobs_mu);
    return jobs.size();
  }
  void do_accept();
  void stop_thread();
  void cancel_all_jobs();
  std::string metrics_text();
  bool model_known(const std::string& m) const {
    if (m.empty()) return true;
    for (const auto& n : opt.served_model_names)
      if (n == m) return true;
    return false;
  }
};

// ------------------------------------------------------------------------------------------------
// Session: one connection; all its state lives on its io_context's thread.

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl& srv, tcp::socket socket, net::io_context& ioc)
      : srv_(srv), ioc_(ioc), stream_(std::move(socket)) {
    srv_.connections.fetch_add(1);
    srv_.connections_total.fetch_add(1);
  }
  ~Session() { srv_.connections.fetch_sub(1); }

  void start(bool reject) {
    if (reject) {
      keep_alive_ = false;
      begin_response();
      respond_error(ApiError(503, "too many connections", "", "service_unavailable"));
      return;
    }
    read_next();
  }

  net::io_context& ioc() { return ioc_; }

  // Appends bytes of the response body (framed as one HTTP chunk when chunked).
  void send_body(std::string_view data) {
    if (data.empty() || closed_ || stalled_) return;
    if (chunked_) {
      char buf[20];
      auto r = std::to_chars(buf, buf + sizeof buf, data.size(), 16);
      pending_.append(buf, r.ptr);
      pending_.append("\r\n");
      pending_.append(data);
      pending_.append("\r\n");
    } else {
      pending_.append(data);
    }
    flush();
    check_stalled();
  }
  void send_raw(std::string_view data) {
    if (closed_ || stalled_) return;
    pending_.append(data);
    flush();
    check_stalled();
  }
  // Starts a streamed (chunked) response.
  void start_stream(std::string_view extra_headers) {
    // HTTP/1.0 has no chunked encoding: the body then ends when the connection closes.
    chunked_ = !http10_;
    streaming_ = true;
    if (http10_) keep_alive_ = false;
    std::string head = http_head(200, "text/event-stream; charset=utf-8", -1, keep_alive_,
                                 fmt::format("Cache-Control: no-cache\r\n{}", extra_headers));
    if (http10_) {
      const auto te = head.find("Transfer-Encoding: chunked\r\n");
      head.erase(te, std::string_view("Transfer-Encoding: chunked\r\n").size());
    }
    send_raw(head);
    srv_.count(200);
  }
  // The whole response is queued.
  void end_response() {
    if (chunked_) pending_.append("0\r\n\r\n");
    response_queued_ = true;
    flush();
  }
  void respond(int status, std::string_view content_type, std::string_view body,
               std::string_view extra = {}) {
    srv_.count(status);
    if (srv_.stopping.load()) keep_alive_ = false;
    send_raw(http_head(status, content_type, int64_t(body.size()), keep_alive_, extra));
    if (!head_only_) send_raw(body);
    end_response();
  }
  void respond_error(const ApiError& e) {
    respond(e.status, "application/json", e.body());
  }
  void respond_json(const ojson& j) {
    respond(200, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace));
  }

  // The client went away: cancel its request, close.
  void disconnect();
  bool closed() const { return closed_; }
  bool keep_alive() const { return keep_alive_; }

 private:
  void read_next() {
    parser_.emplace();
    parser_->body_limit(srv_.opt.max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(srv_.opt.keep_alive_seconds)));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // The headers are in: a client that waits for "100 Continue" before sending its body (curl does
  // past 1 MB) gets it, then the body is read; unless the headers alone refuse the request (no
  // such POST route, a bad API key, a shutdown, an unknown Transfer-Encoding): then the refusal
  // is the answer, the body is never read, and the connection closes after it (RFC 9110 10.1.1).
  // HTTP/1.0 clients' Expect is ignored. (A body over the limit was refused by its Content-Length
  // already, in on_read.)
  void on_header(beast::error_code ec) {
    if (closed_) return;
    if (ec) {
      on_read(ec);
      return;
    }
    const auto& h = parser_->get();
    if (!parser_->is_done() && h.version() >= 11 &&
        beast::iequals(h[http::field::expect], "100-continue")) {
      if (refused_before_body(h)) {
        stream_.expires_never();
        begin_response();
        auto req = parser_->release();
        dispatch(req, /*body_unread*/ true);
        return;
      }
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         if (ec) {
                           self->close();
                           return;
                         }
                         self->read_body();
                       });
      return;
    }
    read_body();
  }
  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (closed_) return;
    if (ec) {
      if (ec == http::error::body_limit) {
        keep_alive_ = false;
        begin_response();
        respond_error(ApiError(413, fmt::format("The request body is larger than the limit of {} "
                                                "bytes.", srv_.opt.max_body_bytes)));
      } else if (ec == http::error::header_limit) {
        keep_alive_ = false;
        begin_response();
        respond_error(ApiError(431, "The request headers are too large."));
      } else if (ec.category() == beast::error_code(http::error::end_of_stream).category() &&
                 ec != http::error::end_of_stream && ec != http::error::partial_message) {
        keep_alive_ = false;
        begin_response();
        respond_error(ApiError(400, fmt::format("Malformed HTTP request: {}", ec.message())));
      } else {
        close();
      }
      return;
    }
    stream_.expires_never();
    begin_response();
    auto req = parser_->release();
    dispatch(req, /*body_unread*/ false);
  }

  // Whether a request with these headers is refused whatever its body (see on_header).
  bool refused_before_body(const http::request<http::string_body>& h) const {
    if (srv_.stopping.load()) return true;
    if (h.count(http::field::transfer_encoding) && !h.chunked()) return true;
    const std::string_view target = path_of(h);
    if (h.method() != http::verb::post ||
        (target != "/v1/completions" && target != "/v1/chat/completions"))
      return true;
    try {
      check_api_key(h, target);
    } catch (const ApiError&) {
      return true;
    }
    return false;
  }

  // One request, read (or, body_unread, refused on its headers: the connection then closes).
  void dispatch(http::request<http::string_body>& req, bool body_unread) {
    keep_alive_ = req.keep_alive() && !srv_.stopping.load() && !body_unread;
    http10_ = req.version() < 11;
    if (body_unread && srv_.stopping.load()) {
      respond_error(ApiError(503, "The server is shutting down.", "", "service_unavailable"));
      return;
    }
    // A Transfer-Encoding whose last coding is not chunked leaves the body's length unknown
    // (RFC 9112 6.3): refused, and the connection closed, so that what follows is never read as
    // another request.
    if (req.count(http::field::transfer_encoding) && !req.chunked()) {
      keep_alive_ = false;
      respond_error(ApiError(400, fmt::format("Transfer-Encoding '{}' is not supported: the body "
                                              "must be chunked last or sized by Content-Length.",
                                              std::string(req[http::field::transfer_encoding]))));
      return;
    }
    try {
      handle(req);
    } catch (const ApiError& e) {
      respond_error(e);
    } catch (const std::exception& e) {
      log::error("server: {}", e.what());
      respond_error(ApiError(500, fmt::format("internal error: {}", e.what())));
    }
  }

  void begin_response() {
    in_response_ = true;
    chunked_ = false;
    streaming_ = false;
    head_only_ = false;
    srv_.busy.fetch_add(1);
  }

  void handle(http::request<http::string_body>& req);
  void handle_generation(http::request<http::string_body>& req, Api api);
  static std::string_view path_of(const http::request<http::string_body>& req) {
    std::string_view target(req.target().data(), req.target().size());
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    return target;
  }
  // With --api-key, /v1/* need "Authorization: Bearer KEY" (compared in constant time): throws
  // the 401 otherwise.
  void check_api_key(const http::request<http::string_body>& req, std::string_view target) const;

  void flush() {
    if (writing_ || closed_) return;
    if (pending_.empty()) {
      if (response_queued_) response_written();
      return;
    }
    writing_buf_.swap(pending_);
    pending_.clear();
    writing_ = true;
    net::async_write(stream_, net::buffer(writing_buf_),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       self->writing_buf_.clear();
                       if (ec) {
                         self->disconnect();
                         return;
                       }
                       self->flush();
                     });
  }

  void response_written();
  void watch_disconnect();

  // A streaming client that does not read: past max_pending_bytes waiting to be written, its
  // request is cancelled and the connection closed (after the caller's output handler returns).
  void check_stalled() {
    // (Streams only: a whole response queued at once is as large as it is, and waits once.
    // pending_ holds bytes only while a write is in flight: what piles up behind the socket.)
    if (!streaming_ || stalled_ || closed_ || pending_.size() <= srv_.opt.max_pending_bytes) return;
    stalled_ = true;
    log::warn(
        "server: a client is not reading its response ({} bytes waiting, the limit is {}); "
        "its request is cancelled and the connection closed",
        pending_.size(), srv_.opt.max_pending_bytes);
    pending_.clear();
    net::post(ioc_, [self = shared_from_this()] { self->disconnect(); });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (in_response_) {
      in_response_ = false;
      srv_.busy.fetch_sub(1);
    }
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  HttpServer::Impl& srv_;
  net::io_context& ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string pending_, writing_buf_;
  bool writing_ = false;
  bool streaming_ = false;  // the response in progress is a stream (start_stream)
  bool head_only_ = false;  // a HEAD request: the response's headers without its body
  bool stalled_ = false;    // cancelled for not reading (check_stalled)
  bool response_queued_ = false;
  bool in_response_ = false;
  bool chunked_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool closed_ = false;
  bool watching_ = false;
  uint64_t watch_gen_ = 0;
  std::shared_ptr<Job> job_;

  friend class Job;
};

// ------------------------------------------------------------------------------------------------
// Job: one generation request (n choices per prompt), fed by the engine's outputs on its
// session's thread.

class Job : public std::enable_shared_from_this<Job> {
 public:
  struct Choice {
    std::string engine_id;
    size_t prompt_index = 0;
    tokenizer::IncrementalDecoder decoder;
    StopMatcher matcher;
    std::string text;
    size_t text_chars = 0;
    json logprobs;  // non-streaming accumulation
    json prompt_logprobs;  // vLLM's form, from the first output
    int32_t completion_tokens = 0;
    int32_t cached_tokens = 0;
    std::string finish_reason;
    bool done = false;
    bool engine_done = false;
    bool submitted = false;
    bool echoed = false;
    Choice(const tokenizer::Tokenizer& t, std::shared_ptr<const std::vector<std::string>> stops)
        : decoder(t, /*skip_special=*/true), matcher(std::move(stops)) {}
  };

  Job(HttpServer::Impl& srv, std::shared_ptr<Session> session, GenParams params,
      std::string model)
      : srv_(srv),
        ioc_(session->ioc()),
        session_(std::move(session)),
        p_(std::move(params)),
        model_(std::move(model)) {
    id_ = (p_.api == Api::chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    created_ = int64_t(std::time(nullptr));
    // One copy of the stop strings, shared by every choice's matcher.
    const auto stops = std::make_shared<const std::vector<std::string>>(p_.stop);
    for (size_t pi = 0; pi < p_.prompts.size(); ++pi)
      for (int32_t j = 0; j < p_.n; ++j) {
        auto& c = choices_.emplace_back(std::make_unique<Choice>(srv_.tok, stops));
        c->prompt_index = pi;
        c->engine_id = fmt::format("{}-{}", id_, choices_.size() - 1);
      }
    // The constant start of every streamed event.
    head0_ = "data: {\"id\":\"" + id_ + "\",\"object\":\"";
    head0_ += p_.api == Api::chat ? "chat.completion.chunk" : "text_completion";
    head0_ += fmt::format("\",\"created\":{},\"model\":", created_);
    append_json_string(head0_, model_);
    head0_ += ",\"system_fingerprint\":\"" + srv_.fingerprint + "\",";
    head_ = head0_ + "\"choices\":[{\"index\":";
    tail_ = p_.include_usage ? "}],\"usage\":null}\n\n" : "}]}\n\n";
    // Both lists are sorted and without duplicates: their union is too.
    stop_ids_.reserve(srv_.model_stop_ids.size() + p_.stop_token_ids.size());
    std::set_union(srv_.model_stop_ids.begin(), srv_.model_stop_ids.end(),
                   p_.stop_token_ids.begin(), p_.stop_token_ids.end(),
                   std::back_inserter(stop_ids_));
  }

  const std::string& id() const { return id_; }
  // Engine ids never change after construction: readable from any thread.
  std::vector<std::string> engine_ids() const {
    std::vector<std::string> ids;
    for (const auto& c : choices_) ids.push_back(c->engine_id);
    return ids;
  }

  // Submits every choice; throws ApiError when the engine refuses (earlier choices cancelled).
  // (More choices than the queue can hold were refused before the job was made:
  // check_choices.)
  void submit() {
    std::random_device rd;
    const uint64_t base_seed = p_.seed_given ? p_.sampling.seed : (uint64_t(rd()) << 32 | rd());
    {
      std::lock_guard lock(srv_.jobs_mu);
      srv_.jobs.emplace(id_, weak_from_this());
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      auto& c = *choices_[i];
      engine::Request r;
      r.id = c.engine_id;
      r.prompt = p_.prompts[c.prompt_index];
      r.sampling = p_.sampling;
      r.sampling.seed = base_seed + uint64_t(i % size_t(p_.n));
      r.max_tokens = p_.max_tokens;
      r.ignore_eos = p_.ignore_eos;
      r.stop_token_ids = p_.stop_token_ids;
      r.min_tokens = p_.min_tokens;
      r.json_object = p_.json_object;
      r.json_schema = p_.json_schema;
      // Echo's logprobs and vLLM's prompt_logprobs share the engine's rows (the larger top).
      r.prompt_logprobs =
          std::max(p_.prompt_logprobs, p_.echo && p_.logprobs ? p_.sampling.top_logprobs : -1);
      auto self = shared_from_this();
      try {
        srv_.engine.submit(std::move(r), [self, i](engine::RequestOutput&& out) {
          net::io_context& ioc = self->ioc_;
          net::post(ioc, [self, i, out = std::move(out)]() mutable {
            self->on_output(i, std::move(out));
          });
        });
        c.submitted = true;
        ++engine_live_;
      } catch (const engine::RequestRejected& e) {
        failed_ = true;
        for (auto& o : choices_)
          if (o->submitted) srv_.engine.cancel(o->engine_id);
        if (engine_live_ == 0) unregister();
        using K = engine::RequestRejected::Kind;
        if (e.kind == K::queue_full)
          throw ApiError(429, fmt::format("The server is busy: {}. Retry later.", e.what()), "",
                         "rate_limit_error", "queue_full");
        if (e.kind == K::shutting_down)
          throw ApiError(503, "The server is shutting down.", "", "service_unavailable");
        throw ApiError(400, e.what());
      }
    }
  }

  // A streamed response sends its headers and, for chat, the role deltas at once.
  void start_stream() {
    auto& s = *session_;
    s.start_stream(fmt::format("x-request-id: {}\r\n", id_));
    if (p_.api == Api::chat) {
      std::string ev;
      for (size_t i = 0; i < choices_.size(); ++i) {
        ev += head_;
        ev += std::to_string(i);
        ev += ",\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},"
              "\"logprobs\":null,\"finish_reason\":null";
        ev += tail_;
      }
      s.send_body(ev);
    }
  }

  // The client is gone: cancel what still runs.
  void client_gone() {
    if (!session_) return;
    session_.reset();
    bool any = false;
    for (auto& c : choices_)
      if (c->submitted && !c->engine_done) {
        srv_.engine.cancel(c->engine_id);
        any = true;
      }
    if (any) srv_.disconnect_cancels.fetch_add(1);
  }

  void on_output(size_t i, engine::RequestOutput&& out);

 private:
  void unregister() {
    std::lock_guard lock(srv_.jobs_mu);
    srv_.jobs.erase(id_);
  }
  bool is_stop_token(int32_t t) const {
    return std::binary_search(stop_ids_.begin(), stop_ids_.end(), t);
  }
  json logprob_entry(const engine::TokenOutput& t, size_t text_offset) const;
  // echo: the prompt's text into `text` and, with logprobs, an entry per prompt token into `lps`
  // (the first without a logprob; the others from the engine's prompt logprobs).
  void echo_prompt(Choice& c, const engine::RequestOutput& out, std::string& text, json& lps) const;
  // vLLM's prompt_logprobs list for a choice.
  json vllm_prompt_logprobs(const Choice& c, const engine::RequestOutput& out) const;
  void add_event(std::string& ev, size_t i, std::string_view text, const json* lp,
                 const std::string* finish);
  void finish_all();
  ojson usage() const;

  HttpServer::Impl& srv_;
  net::io_context& ioc_;
  std::shared_ptr<Session> session_;
  GenParams p_;
  std::string model_;
  std::string id_;
  int64_t created_ = 0;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::vector<int32_t> stop_ids_;
  std::string head0_, head_, tail_;
  int engine_live_ = 0;
  size_t done_count_ = 0;
  bool failed_ = false;
  bool finished_ = false;
};

json Job::logprob_entry(const engine::TokenOutput& t, size_t text_offset) const {
  auto bytes_of = [&](int32_t id) {
    const std::string b = srv_.tok.token_bytes(id);
    json arr = json::array();
    for (unsigned char ch : b) arr.push_back(int(ch));
    return std::pair{valid_utf8(b), arr};
  };
  auto [text, bytes] = bytes_of(t.token);
  if (p_.api == Api::chat) {
    json top = json::array();
    for (const auto& a : t.top) {
      auto [at, ab] = bytes_of(a.token);
      top.push_back({{"token", at}, {"logprob", a.logprob}, {"bytes", ab}});
    }
    return {{"token", text}, {"logprob", t.logprob}, {"bytes", bytes}, {"top_logprobs", top}};
  }
  // Keyed by text: tokens whose text is the same (the pieces of a split character all read
  // U+FFFD) share one key, which keeps the most likely of them (t.top is best first), so the
  // chosen greedy token's logprob is never replaced by a worse alternative's.
  json top = json::object();
  for (const auto& a : t.top) top.emplace(valid_utf8(srv_.tok.token_bytes(a.token)), a.logprob);
  return {{"token", text}, {"logprob", t.logprob}, {"top", top}, {"offset", text_offset}};
}

json Job::vllm_prompt_logprobs(const Choice& c, const engine::RequestOutput& out) const {
  // [null, {"id": {"logprob", "rank", "decoded_token"}, ...}, ...]: each prompt token after the
  // first, with the top prompt_logprobs alternatives (ranks 1..k).
  const std::vector<int32_t>& ids = p_.prompts[c.prompt_index];
  json arr = json::array();
  arr.push_back(nullptr);
  auto entry = [&](float lp, int32_t rank, int32_t id) {
    return json{
        {"logprob", lp}, {"rank", rank}, {"decoded_token", valid_utf8(srv_.tok.token_bytes(id))}};
  };
  for (size_t j = 1; j < ids.size(); ++j) {
    if (j - 1 >= out.prompt_logprobs.size()) {
      arr.push_back(nullptr);
      continue;
    }
    const engine::TokenOutput& t = out.prompt_logprobs[j - 1];
    json d = json::object();
    d[std::to_string(t.token)] = entry(t.logprob, t.rank, t.token);
    for (size_t k = 0; k < t.top.size() && k < size_t(p_.prompt_logprobs); ++k)
      if (t.top[k].token != t.token)
        d[std::to_string(t.top[k].token)] = entry(t.top[k].logprob, int32_t(k) + 1, t.top[k].token);
    arr.push_back(std::move(d));
  }
  return arr;
}

void Job::echo_prompt(Choice& c, const engine::RequestOutput& out, std::string& text,
                      json& lps) const {
  const std::vector<int32_t>& ids = p_.prompts[c.prompt_index];
  // The choice's own decoder: the completion continues the prompt's stream (a SentencePiece
  // decoder strips only the stream's first leading space; a character split across the join
  // stays whole).
  for (size_t j = 0; j < ids.size(); ++j) {
    if (p_.logprobs) {
      const bool have = j >= 1 && j - 1 < out.prompt_logprobs.size();
      engine::TokenOutput t =
          have ? out.prompt_logprobs[j - 1] : engine::TokenOutput{ids[j], 0, {}};
      if (t.top.size() > size_t(p_.sampling.top_logprobs))  // prompt_logprobs may ask for more
        t.top.resize(size_t(p_.sampling.top_logprobs));
      json e = logprob_entry(t, c.text_chars + utf8_length(text));
      if (!have) e["logprob"] = e["top"] = nullptr;
      lps.push_back(std::move(e));
    }
    text += c.decoder.push(ids[j]);
  }
}

namespace {
// Completions' logprobs object from per-token entries.
json completion_logprobs(const json& entries) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    tops.push_back(e["top"]);
    offs.push_back(e["offset"]);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

void Job::add_event(std::string& ev, size_t i, std::string_view text, const json* lp,
                    const std::string* finish) {
  ev += head_;
  ev += std::to_string(i);
  if (p_.api == Api::chat) {
    if (finish) {
      ev += ",\"delta\":{}";
    } else {
      ev += ",\"delta\":{\"content\":";
      append_json_string(ev, text);
      ev += "}";
    }
    ev += ",\"logprobs\":";
    if (lp) {
      ev += "{\"content\":";
      ev += dump(*lp);
      ev += ",\"refusal\":null}";
    } else {
      ev += "null";
    }
  } else {
    ev += ",\"text\":";
    append_json_string(ev, text);
    ev += ",\"logprobs\":";
    ev += lp ? dump(completion_logprobs(*lp)) : "null";
  }
  ev += ",\"finish_reason\":";
  if (finish) {
    append_json_string(ev, *finish);
  } else {
    ev += "null";
  }
  ev += tail_;
}

void Job::on_output(size_t i, engine::RequestOutput&& out) {
  auto& c = *choices_[i];
  if (out.finished && !c.engine_done) {
    c.engine_done = true;
    if (--engine_live_ == 0) unregister();
  }
  c.cached_tokens = std::max(c.cached_tokens, out.cached_tokens);
  if (failed_ || finished_ || !session_ || c.done) return;

  const bool want_lp = p_.logprobs;
  std::string text;
  json lps = json::array();
  if (p_.echo && !c.echoed) {
    c.echoed = true;
    echo_prompt(c, out, text, lps);
  }
  if (p_.prompt_logprobs >= 0 && c.prompt_logprobs.is_null() && !out.prompt_logprobs.empty())
    c.prompt_logprobs = vllm_prompt_logprobs(c, out);
  for (size_t k = 0; k < out.tokens.size() && !c.done; ++k) {
    const auto& t = out.tokens[k];
    ++c.completion_tokens;
    // A stop token (the model's, or one of stop_token_ids) ends the text without being part of it.
    if (out.finished && k + 1 == out.tokens.size() && out.finish_reason == "stop" &&
        is_stop_token(t.token))
      break;
    // Stop strings are matched in the text that follows the first min_tokens tokens'.
    std::string piece = c.decoder.push(t.token);
    if (c.completion_tokens > p_.min_tokens) piece = c.matcher.push(piece);
    if (want_lp) lps.push_back(logprob_entry(t, c.text_chars + utf8_length(text)));
    text += piece;
    if (c.matcher.stopped()) {
      c.done = true;
      c.finish_reason = "stop";
      srv_.stop_string_stops.fetch_add(1, std::memory_order_relaxed);
      if (!c.engine_done) srv_.engine.cancel(c.engine_id);
    }
  }
  if (!c.done && out.finished) {
    std::string rest = c.matcher.push(c.decoder.flush());
    if (c.matcher.stopped()) {
      c.finish_reason = "stop";
    } else {
      rest += c.matcher.flush();
      c.finish_reason = out.finish_reason;
    }
    text += rest;
    c.done = true;
    if (out.finish_reason == "error") {
      failed_ = true;
      finished_ = true;
      for (auto& o : choices_)
        if (!o->engine_done) srv_.engine.cancel(o->engine_id);
      auto s = std::move(session_);
      const ApiError err(500, out.error.empty() ? "the engine failed" : out.error);
      if (p_.stream) {
        s->send_body("data: " + err.body() + "\n\ndata: [DONE]\n\n");
        s->end_response();
      } else {
        s->respond_error(err);
      }
      s->job_.reset();
      return;
    }
  }
  if (p_.stream) {
    std::string ev;
    if (!text.empty() || (want_lp && !lps.empty()))
      add_event(ev, i, text, want_lp ? &lps : nullptr, nullptr);
    if (c.done) add_event(ev, i, "", nullptr, &c.finish_reason);
    session_->send_body(ev);
  } else {
    c.text += text;
    if (want_lp) {
      if (c.logprobs.is_null()) c.logprobs = json::array();
      for (auto& e : lps) c.logprobs.push_back(std::move(e));
    }
  }
  c.text_chars += utf8_length(text);
  if (c.done && ++done_count_ == choices_.size()) finish_all();
}

ojson Job::usage() const {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (const auto& pt : p_.prompts) prompt += int64_t(pt.size());
  std::vector<int32_t> cached_per_prompt(p_.prompts.size(), 0);
  for (const auto& c : choices_) {
    completion += c->completion_tokens;
    cached_per_prompt[c->prompt_index] = std::max(cached_per_prompt[c->prompt_index], c->cached_tokens);
  }
  for (int32_t v : cached_per_prompt) cached += v;
  ojson u;
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = completion;
  u["total_tokens"] = prompt + completion;
  u["prompt_tokens_details"] = {{"cached_tokens", cached}, {"audio_tokens", 0}};
  u["completion_tokens_details"] = {{"reasoning_tokens", 0},
                                    {"audio_tokens", 0},
                                    {"accepted_prediction_tokens", 0},
                                    {"rejected_prediction_tokens", 0}};
  return u;
}

void Job::finish_all() {
  finished_ = true;
  auto s = std::move(session_);
  if (p_.stream) {
    std::string ev;
    if (p_.include_usage) {
      ev += head0_;
      ev += "\"choices\":[],\"usage\":";
      ev += usage().dump();
      ev += "}\n\n";
    }
    ev += "data: [DONE]\n\n";
    s->send_body(ev);
    s->end_response();
  } else {
    ojson j;
    j["id"] = id_;
    j["object"] = p_.api == Api::chat ? "chat.completion" : "text_completion";
    j["created"] = created_;
    j["model"] = model_;
    j["system_fingerprint"] = srv_.fingerprint;
    ojson choices = ojson::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const auto& c = *choices_[i];
      ojson ch;
      ch["index"] = i;
      if (p_.api == Api::chat) {
        ch["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr},
                         {"annotations", ojson::array()}};
        if (p_.logprobs)
          ch["logprobs"] = {{"content", c.logprobs.is_null() ? json::array() : c.logprobs},
                            {"refusal", nullptr}};
        else
          ch["logprobs"] = nullptr;
      } else {
        ch["text"] = c.text;
        ch["logprobs"] = p_.logprobs ? ojson(completion_logprobs(c.logprobs.is_null() ? json::array()
                                                                                      : c.logprobs))
                                     : ojson(nullptr);
      }
      ch["finish_reason"] = c.finish_reason;
      // vLLM's prompt_logprobs: in each completions choice, once for a chat response.
      if (p_.prompt_logprobs >= 0 && p_.api == Api::completions)
        ch["prompt_logprobs"] = c.prompt_logprobs;
      choices.push_back(std::move(ch));
    }
    j["choices"] = std::move(choices);
    if (p_.prompt_logprobs >= 0 && p_.api == Api::chat)
      j["prompt_logprobs"] = choices_.empty() ? json(nullptr) : choices_[0]->prompt_logprobs;
    j["usage"] = usage();
    s->respond(200, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace),
               fmt::format("x-request-id: {}\r\n", id_));
  }
  s->job_.reset();
}

// ------------------------------------------------------------------------------------------------

void Session::disconnect() {
  if (job_) {
    job_->client_gone();
    job_.reset();
  }
  close();
}

void Session::response_written() {
  response_queued_ = false;
  job_.reset();
  if (watching_) {
    watching_ = false;
    ++watch_gen_;
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }
  if (in_response_) {
    in_response_ = false;
    srv_.busy.fetch_sub(1);
  }
  if (!keep_alive_ || srv_.stopping.load()) {
    close();
    return;
  }
  read_next();
}

void Session::watch_disconnect() {
  watching_ = true;
  const uint64_t gen = watch_gen_;
  stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
        if (gen != self->watch_gen_ || self->closed_ || !self->watching_) return;
        if (ec) {
          if (ec != net::error::operation_aborted) self->disconnect();
          return;
        }
        char c;
        const ssize_t r =
            ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) {
          self->disconnect();
        } else if (r < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            self->watch_disconnect();
          else
            self->disconnect();
        } else {
          self->watching_ = false;  // the next (pipelined) request is arriving
        }
      });
}

void Session::check_api_key(const http::request<http::string_body>& req,
                            std::string_view target) const {
  if (target.starts_with("/v1/") && !srv_.opt.api_key.empty()) {
    auto it = req.find(http::field::authorization);
    if (it == req.end())
      throw ApiError(401, "You didn't provide an API key. You need to provide your API key in an "
                          "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                     "", "invalid_request_error", "missing_api_key");
    std::string_view v(it->value().data(), it->value().size());
    std::string_view key;
    if (v.size() >= 7 && (v.substr(0, 7) == "Bearer " || v.substr(0, 7) == "bearer ")) key = v.substr(7);
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
    while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
    if (!constant_time_equal(key, srv_.opt.api_key))
      throw ApiError(401, "Incorrect API key provided.", "", "invalid_request_error",
                     "invalid_api_key");
  }
}

void Session::handle(http::request<http::string_body>& req) {
  const std::string_view target = path_of(req);
  const auto method = req.method();
  // HEAD is GET without the body (RFC 9110 9.3.2: the same headers, Content-Length included).
  head_only_ = method == http::verb::head;
  const bool get = method == http::verb::get || head_only_;
  const bool post = method == http::verb::post;

  check_api_key(req, target);

  auto allow = [&](bool ok, const char* methods) {
    if (!ok) {
      const ApiError e(405, fmt::format("Method {} is not allowed on {} (allowed: {}).",
                                        std::string(req.method_string()), target, methods));
      respond(405, "application/json", e.body(), fmt::format("Allow: {}\r\n", methods));
      return false;
    }
    return true;
  };

  if (target == "/health") {
    if (!allow(get, "GET, HEAD")) return;
    if (srv_.stopping.load())
      respond_error(ApiError(503, "The server is shutting down."));
    else
      respond(200, "application/json", "{\"status\":\"ok\"}");
  } else if (target == "/metrics") {
    if (!allow(get, "GET, HEAD")) return;
    respond(200, "text/plain; version=0.0.4; charset=utf-8", srv_.metrics_text());
  } else if (target == "/v1/models" || target.starts_with("/v1/models/")) {
    if (!allow(get, "GET, HEAD")) return;
    auto model = [&](const std::string& name) {
      ojson m;
      m["id"] = name;
      m["object"] = "model";
      m["created"] = srv_.created;
      m["owned_by"] = "ridge";
      m["max_model_len"] = srv_.engine.max_model_len();
      return m;
    };
    if (target == "/v1/models") {
      ojson list;
      list["object"] = "list";
      list["data"] = ojson::array();
      for (const auto& n : srv_.opt.served_model_names) list["data"].push_back(model(n));
      respond_json(list);
    } else {
      const std::string name(target.substr(std::string_view("/v1/models/").size()));
      if (name.empty() || !srv_.model_known(name))
        throw ApiError(404, fmt::format("The model `{}` does not exist.", name), "model",
                       "invalid_request_error", "model_not_found");
      respond_json(model(name));
    }
  } else if (target == "/v1/chat/completions") {
    if (!allow(post, "POST")) return;
    handle_generation(req, Api::chat);
  } else if (target == "/v1/completions") {
    if (!allow(post, "POST")) return;
    handle_generation(req, Api::completions);
  } else {
    throw ApiError(404, fmt::format("Unknown route {} {}.", std::string(req.method_string()), target),
                   "", "invalid_request_error", "unknown_url");
  }
}

namespace {

// More choices than the queue can ever hold: refused before any is made or queued (each choice
// holds a decoder, a stop matcher and its texts, so prompts × n unchecked could exhaust memory;
// a 429 would tell the client to retry a request that cannot succeed, and the choices queued
// meanwhile would push others out).
void check_choices(const GenParams& p, int32_t max_queue) {
  const uint64_t choices = uint64_t(p.prompts.size()) * uint64_t(p.n);
  if (max_queue > 0 && choices > uint64_t(max_queue))
    throw ApiError(
        400,
        fmt::format("This request asks for {} choices ({} prompt{} × n = {}), more "
                    "than the server queues at once ({}, --max-queue).",
                    choices, p.prompts.size(), p.prompts.size() == 1 ? "" : "s", p.n, max_queue),
        "n");
}

}  // namespace

void Session::handle_generation(http::request<http::string_body>& req, Api api) {
  if (srv_.stopping.load()) throw ApiError(503, "The server is shutting down.");
  const json body = parse_body(req.body());
  std::string model = requested_model(body);
  if (!srv_.model_known(model))
    throw ApiError(404, fmt::format("The model `{}` does not exist.", model), "model",
                   "invalid_request_error", "model_not_found");
  if (model.empty()) model = srv_.opt.served_model_names.at(0);
  GenParams p = parse_generation(api, body, srv_.pctx, req.body());
  check_choices(p, srv_.engine.max_queue());

  const int64_t limit = srv_.engine.max_model_len();
  const char* what = api == Api::chat ? "messages" : "prompt";
  int64_t longest = 0;
  for (const auto& pt : p.prompts) {
    const int64_t n = int64_t(pt.size());
    longest = std::max(longest, n);
    if (p.max_tokens > 0 && n + p.max_tokens > limit)
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, "
                                      "you requested {} tokens ({} in the {}, {} in the "
                                      "completion). Please reduce the length of the {} or "
                                      "completion.", limit, n + p.max_tokens, n, what,
                                      p.max_tokens, what),
                     what, "invalid_request_error", "context_length_exceeded");
    if (p.max_tokens <= 0 && n >= limit)
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, "
                                      "your {} has {} tokens, which leaves no room for the "
                                      "completion. Please reduce the length of the {}.",
                                      limit, what, n, what),
                     what, "invalid_request_error", "context_length_exceeded");
  }
  if (p.max_tokens <= 0)
    p.max_tokens = int32_t(api == Api::chat ? limit - longest : std::min<int64_t>(16, limit - longest));
  if (p.min_tokens > p.max_tokens)  // against the default max_tokens (a given one was checked)
    throw ApiError(400,
                   fmt::format("Invalid value for 'min_tokens': {} is more than max_tokens "
                               "({}).",
                               p.min_tokens, p.max_tokens),
                   "min_tokens");

  const bool stream = p.stream;
  auto job = std::make_shared<Job>(srv_, shared_from_this(), std::move(p), model);
  job->submit();  // throws ApiError when refused
  job_ = job;
  if (stream) job->start_stream();
  watch_disconnect();
}

// ------------------------------------------------------------------------------------------------

void HttpServer::Impl::do_accept() {
  net::io_context& ioc = *iocs[next_ioc++ % iocs.size()];
  acceptor->async_accept(ioc, [this, &ioc](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      // Out of descriptors or similar: try again shortly rather than spinning.
      log::warn("server: accept failed: {}", ec.message());
      accept_retry->expires_after(std::chrono::milliseconds(50));
      accept_retry->async_wait([this](beast::error_code e) {
        if (!e && acceptor->is_open()) do_accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const bool reject = connections.load() >= opt.max_connections;
    auto s = std::make_shared<Session>(*this, std::move(socket), ioc);
    net::post(ioc, [s, reject] { s->start(reject); });
    do_accept();
  });
}

void HttpServer::Impl::cancel_all_jobs() {
  std::vector<std::shared_ptr<Job>> live;
  {
    std::lock_guard lock(jobs_mu);
    for (auto& [id, w] : jobs)
      if (auto j = w.lock()) live.push_back(std::move(j));
  }
  for (auto& j : live)
    for (const auto& id : j->engine_ids()) engine.cancel(id);
}

void HttpServer::Impl::stop_thread() {
  {
    std::unique_lock lock(stop_mu);
    while (live_jobs() > 0 && Clock::now() < deadline)
      stop_cv.wait_for(lock, std::chrono::milliseconds(20));
  }
  if (size_t n = live_jobs()) {
    log::info("server: cancelling {} unfinished requests", n);
    cancel_all_jobs();
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (live_jobs() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Let the last responses reach their clients.
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (busy.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (auto& g : guards) g.reset();
  for (auto& ioc : iocs) ioc->stop();
  {
    std::lock_guard lock(stop_mu);
    stop_done = true;
  }
  stop_cv.notify_all();
}

std::string HttpServer::Impl::metrics_text() {
  const engine::EngineMetrics m = engine.metrics();
  std::string out;
  out.reserve(8192);
  append_metric(out, "ridge_requests_running", "gauge", "Requests running in the engine.", m.running);
  append_metric(out, "ridge_requests_waiting", "gauge", "Requests waiting for admission.", m.waiting);
  append_metric(out, "ridge_kv_blocks_total", "gauge", "KV cache blocks in the pool.", double(m.kv_blocks_total));
  append_metric(out, "ridge_kv_blocks_used", "gauge", "KV blocks referenced by live sequences.", double(m.kv_blocks_used));
  append_metric(out, "ridge_kv_blocks_free", "gauge", "KV blocks not referenced by a live sequence (cached ones included).",
                double(m.kv_blocks_total - m.kv_blocks_used));
  append_metric(out, "ridge_kv_blocks_cached", "gauge", "Free KV blocks holding a reusable prefix.", double(m.kv_blocks_cached));
  append_metric(out, "ridge_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks in use.",
                m.kv_blocks_total ? double(m.kv_blocks_used) / double(m.kv_blocks_total) : 0.0);
  append_metric(out, "ridge_prefix_cache_hit_rate", "gauge", "Prompt tokens found in the prefix cache / prompt tokens looked up.",
                m.prefix_query_tokens ? double(m.prefix_hit_tokens) / double(m.prefix_query_tokens) : 0.0);
  append_metric(out, "ridge_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", double(m.prefix_query_tokens));
  append_metric(out, "ridge_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", double(m.prefix_hit_tokens));
  append_metric(out, "ridge_prompt_tokens_total", "counter", "Prompt tokens processed.", double(m.prompt_tokens_total));
  append_metric(out, "ridge_generation_tokens_total", "counter", "Tokens generated.", double(m.generation_tokens_total));
  append_metric(out, "ridge_requests_finished_total", "counter", "Engine requests finished.", double(m.requests_finished));
  append_metric(out, "ridge_preemptions_total", "counter", "Sequences preempted for KV space.", double(m.preemptions));
  append_metric(out, "ridge_engine_steps_total", "counter", "Engine steps run.", double(m.steps));
  out += "# HELP ridge_engine_seconds_total Seconds of the engine thread by part of its loop.\n"
         "# TYPE ridge_engine_seconds_total counter\n";
  for (const auto& [part, v] : {std::pair<const char*, double>{"schedule", m.seconds_schedule},
                                {"forward", m.seconds_forward},
                                {"sample", m.seconds_sample},
                                {"output", m.seconds_output},
                                {"between", m.seconds_between}})
    out += fmt::format("ridge_engine_seconds_total{{part=\"{}\"}} {}\n", part, v);
  out += "# HELP ridge_engine_forward_seconds_total Seconds of the model's forward by kind of step "
         "(decode: decode tokens only; prefill: at least one prefill chunk).\n"
         "# TYPE ridge_engine_forward_seconds_total counter\n";
  out += fmt::format("ridge_engine_forward_seconds_total{{kind=\"decode\"}} {}\n", m.seconds_forward_decode);
  out += fmt::format("ridge_engine_forward_seconds_total{{kind=\"prefill\"}} {}\n", m.seconds_forward_prefill);
  out += "# HELP ridge_engine_kind_steps_total Engine steps by kind (as above).\n"
         "# TYPE ridge_engine_kind_steps_total counter\n";
  out += fmt::format("ridge_engine_kind_steps_total{{kind=\"decode\"}} {}\n", m.steps_decode);
  out += fmt::format("ridge_engine_kind_steps_total{{kind=\"prefill\"}} {}\n", m.steps_prefill);
  out += "# HELP ridge_engine_kind_tokens_total Tokens computed in engine steps by kind (as above).\n"
         "# TYPE ridge_engine_kind_tokens_total counter\n";
  out += fmt::format("ridge_engine_kind_tokens_total{{kind=\"decode\"}} {}\n", m.tokens_decode_steps);
  out += fmt::format("ridge_engine_kind_tokens_total{{kind=\"prefill\"}} {}\n", m.tokens_prefill_steps);
  append_histogram(out, "ridge_time_to_first_token_seconds", "Time to first token.", m.ttft);
  append_histogram(out, "ridge_time_per_output_token_seconds", "Mean time between output tokens of a request.", m.tpot);
  append_histogram(out, "ridge_e2e_request_latency_seconds", "Request latency, arrival to last token.", m.e2e);
  // The GPU's power (NVML, where the driver reports it): whether the power cap holds the clocks
  // down, and the energy since start that energy per token is read from (docs/SERVING.md).
  if (auto p = engine.device_power()) {
    append_metric(out, "ridge_gpu_power_watts", "gauge", "Board power of the engine's GPU now.", p->power_w);
    append_metric(out, "ridge_gpu_power_limit_watts", "gauge", "The GPU's enforced power limit.", p->power_limit_w);
    append_metric(out, "ridge_gpu_power_capped", "gauge", "1 while the power cap holds the GPU's clocks down, else 0.",
                  p->power_capped ? 1.0 : 0.0);
    append_metric(out, "ridge_gpu_sm_clock_mhz", "gauge", "The GPU's SM clock now.", p->sm_clock_mhz);
    if (p->energy_j)
      append_metric(out, "ridge_gpu_energy_joules_total", "counter", "Energy the GPU used since the server started.",
                    energy_since_start(*p->energy_j));
  }
  append_metric(out, "ridge_http_connections", "gauge", "Open HTTP connections.", double(connections.load()));
  append_metric(out, "ridge_http_connections_total", "counter", "HTTP connections accepted.", double(connections_total.load()));
  append_metric(out, "ridge_http_requests_in_flight", "gauge", "HTTP requests whose response is not yet written.", double(busy.load()));
  append_metric(out, "ridge_http_disconnect_cancels_total", "counter", "Requests cancelled because the client disconnected.",
                double(disconnect_cancels.load()));
  append_metric(out, "ridge_stop_string_finishes_total", "counter", "Choices ended by a stop string.", double(stop_string_stops.load()));
  out += "# HELP ridge_http_responses_total HTTP responses by status code.\n# TYPE ridge_http_responses_total counter\n";
  for (size_t i = 0; i < std::size(kCodes); ++i)
    out += fmt::format("ridge_http_responses_total{{code=\"{}\"}} {}\n", kCodes[i], responses[i].load());
  out += fmt::format("ridge_http_responses_total{{code=\"other\"}} {}\n", responses[std::size(kCodes)].load());
  return out;
}

// ------------------------------------------------------------------------------------------------

HttpServer::HttpServer(ServerOptions options, const tokenizer::Tokenizer& tokenizer, EnginePort& engine)
    : impl_(std::make_unique<Impl>(std::move(options), tokenizer, engine)) {
  auto& s = *impl_;
  if (s.opt.served_model_names.empty()) s.opt.served_model_names.push_back("ridge");
  if (s.opt.http_threads < 1) s.opt.http_threads = 1;
  const std::string& src = tokenizer.chat_template().empty() ? tokenizer::default_chat_template()
                                                             : tokenizer.chat_template();
  s.tmpl = std::make_unique<tokenizer::ChatTemplate>(src);
  s.pctx.tokenizer = &tokenizer;
  s.pctx.chat_template = s.tmpl.get();
  s.pctx.bos_token = tokenizer.bos_id() ? tokenizer.token_text(*tokenizer.bos_id()) : "";
  s.pctx.eos_token = tokenizer.eos_id() ? tokenizer.token_text(*tokenizer.eos_id()) : "";
  s.pctx.max_queue = engine.max_queue();
  s.model_stop_ids = tokenizer.stop_ids();
  std::sort(s.model_stop_ids.begin(), s.model_stop_ids.end());
  s.model_stop_ids.erase(std::unique(s.model_stop_ids.begin(), s.model_stop_ids.end()),
                         s.model_stop_ids.end());
  s.created = int64_t(std::time(nullptr));
  s.fingerprint = "fp_ridge";
}

HttpServer::~HttpServer() {
  if (!impl_->threads.empty()) {
    request_stop(0);
    wait();
  }
}

void HttpServer::start() {
  auto& s = *impl_;
  for (int i = 0; i < s.opt.http_threads; ++i) {
    s.iocs.push_back(std::make_unique<net::io_context>(1));
    s.guards.push_back(net::make_work_guard(*s.iocs.back()));
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(s.opt.host, ec);
  if (ec) fail("--host '{}' is not an IP address: {}", s.opt.host, ec.message());
  const tcp::endpoint ep(address, s.opt.port);
  s.acceptor = std::make_unique<tcp::acceptor>(*s.iocs[0]);
  s.accept_retry = std::make_unique<net::steady_timer>(*s.iocs[0]);
  s.acceptor->open(ep.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(ep, ec);
  if (!ec) s.acceptor->listen(4096, ec);
  if (ec) fail("cannot listen on {}:{}: {}", s.opt.host, s.opt.port, ec.message());
  s.bound_port = s.acceptor->local_endpoint().port();
  s.do_accept();
  for (auto& ioc : s.iocs)
    s.threads.emplace_back([&ioc] {
      for (;;) {
        try {
          ioc->run();
          return;
        } catch (const std::exception& e) {
          log::error("server: I/O thread: {}", e.what());
        }
      }
    });
}

uint16_t HttpServer::port() const { return impl_->bound_port; }

bool HttpServer::stopping() const { return impl_->stopping.load(); }

void HttpServer::request_stop(double grace_seconds) {
  auto& s = *impl_;
  std::lock_guard lock(s.stop_mu);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(0.0, grace_seconds)));
  if (!s.stop_requested) {
    s.stop_requested = true;
    s.stopping.store(true);
    s.deadline = deadline;
    if (!s.iocs.empty()) {
      net::post(*s.iocs[0], [&s] {
        beast::error_code ec;
        if (s.acceptor) s.acceptor->close(ec);
        if (s.accept_retry) s.accept_retry->cancel();
      });
    }
    s.stopper = std::thread([&s] { s.stop_thread(); });
  } else if (deadline < s.deadline) {
    s.deadline = deadline;
  }
  s.stop_cv.notify_all();
}

void HttpServer::wait() {
  auto& s = *impl_;
  {
    std::unique_lock lock(s.stop_mu);
    s.stop_cv.wait(lock, [&] { return s.stop_done; });
  }
  if (s.stopper.joinable()) s.stopper.join();
  for (auto& t : s.threads)
    if (t.joinable()) t.join();
  s.threads.clear();
}

}  // namespace ridge::server
