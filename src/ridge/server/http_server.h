// HttpServer: the OpenAI-compatible HTTP/1.1 server (Boost.Beast over Boost.Asio).
//
//   POST /v1/chat/completions, POST /v1/completions   generation, JSON or SSE (stream: true)
//   GET  /v1/models, /v1/models/{id}                  the served model
//   GET  /health                                      200, or 503 while shutting down
//   GET  /metrics                                     Prometheus text format
//
// Threads: `http_threads` I/O threads, each running its own io_context; a connection lives on one
// of them for its whole life, so its state needs no locks. The engine's output callback only
// posts the output to that connection's thread, where detokenization (incremental, whole UTF-8
// characters), stop-string matching and JSON/SSE formatting run; writes are coalesced per
// connection. A client that goes away (a failed write, or EOF seen while its request runs) has
// its engine requests cancelled at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ridge/server/engine_port.h"
#include "ridge/tokenizer/chat_template.h"
#include "ridge/tokenizer/tokenizer.h"

namespace ridge::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                          // 0: any free port (see HttpServer::port())
  std::vector<std::string> served_model_names;  // the first is reported; requests may use any
  std::string api_key;                           // non-empty: /v1/* need "Authorization: Bearer KEY"
  size_t max_body_bytes = size_t(8) << 20;      // larger bodies get 413
  int http_threads = 1;
  double keep_alive_seconds = 60;                // idle connection timeout (also header reads)
  int max_connections = 16384;                   // beyond: new connections get 503 and close
  // Response bytes a connection may have waiting for its client to read them: a client that
  // keeps its connection but stops reading (a stalled stream) gets its request cancelled and the
  // connection closed past this, instead of the server buffering its whole output.
  size_t max_pending_bytes = size_t(32) << 20;
};

class HttpServer {
 public:
  // The tokenizer and the engine must outlive the server. The chat template is the model's own
  // (or ChatML when the vocabulary ships none).
  HttpServer(ServerOptions options, const tokenizer::Tokenizer& tokenizer, EnginePort& engine);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, starts the I/O threads. Throws ridge::Error when the address is taken.
  void start();
  uint16_t port() const;

  // Graceful stop, callable from any thread, more than once: stop accepting, let in-flight
  // requests run up to `grace_seconds`, then cancel the rest; connections close once their
  // responses are written. A later call may shorten the grace (a second Ctrl-C: 0).
  void request_stop(double grace_seconds);
  // Blocks until a stop completes and the I/O threads have ended.
  void wait();
  bool stopping() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::server
