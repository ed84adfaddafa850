// ridge serve: the OpenAI-compatible HTTP server (docs/SERVING.md). SIGINT/SIGTERM stop accepting,
// give in-flight requests --shutdown-timeout seconds to finish, cancel the rest and exit 0; a
// second signal cancels at once.
#include <cstdint>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "common.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/io/gguf.h"
#include "ridge/server/http_server.h"
#include "ridge/server/stub_engine.h"
#include "subcommand.h"

namespace {

struct ServeFlags {
  ridge::engine::BundleOptions model;
  ridge::engine::EngineConfig engine;
  ridge::server::ServerOptions server;
  std::vector<std::string> served_names;
  std::string tokenizer;  // a tokenizer for a model that has none (random-weight checkpoints)
  bool no_prefix_cache = false;
  double shutdown_timeout = 30;
  bool stub = false;
  double stub_step_ms = 0;
  int64_t stub_context = 4096;
};

void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::unique_ptr<ridge::tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  using ridge::tokenizer::Tokenizer;
  if (fs::is_directory(path)) return std::make_unique<Tokenizer>(Tokenizer::from_hf(path));
  auto g = ridge::io::GgufFile::open(path);
  return std::make_unique<Tokenizer>(Tokenizer::from_gguf(g));
}

void serve(ServeFlags& f) {
  using namespace ridge;
  app::resolve_model(f.model);
  raise_fd_limit();
  // Signals are taken by one thread with sigwait(); every other thread (started below) blocks them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);  // internal: ends the signal thread
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::unique_ptr<engine::ModelBundle> bundle;
  std::unique_ptr<tokenizer::Tokenizer> tok_only;
  std::unique_ptr<server::EnginePort> port;
  std::unique_ptr<engine::Engine> eng;
  const tokenizer::Tokenizer* tok = nullptr;
  if (f.stub) {
    tok_only = load_tokenizer(f.tokenizer.empty() ? f.model.model_path : f.tokenizer);
    tok = tok_only.get();
    server::StubEngineConfig sc;
    sc.cycle = tok->encode(
        " The quick brown fox jumps over the lazy dog. Naïve café owners serve crème brûlée — "
        "日本語のテキスト, emoji 🦊🐶 and math: ∑ x² ≤ ∞.", false, false);
    for (size_t i = 0; i < sc.cycle.size(); ++i)  // outputs start at a word
      if (tok->token_bytes(sc.cycle[i]).starts_with(' ')) sc.starts.push_back(i);
    sc.stop_ids = tok->stop_ids();
    sc.vocab_size = int32_t(tok->vocab_size());
    sc.max_model_len = f.engine.max_model_len > 0 ? f.engine.max_model_len : f.stub_context;
    sc.max_num_seqs = f.engine.max_num_seqs;
    sc.max_queue = f.engine.max_queue;
    sc.step_seconds = f.stub_step_ms / 1000.0;
    port = std::make_unique<server::StubEngine>(std::move(sc));
    log::warn("serving the STUB engine: outputs are a fixed token cycle, not the model's "
              "(for testing and benchmarking the HTTP layer)");
  } else {
    bundle = engine::ModelBundle::load(f.model);
    if (!f.tokenizer.empty()) {
      // Before the engine is made: it takes the model's stop tokens from this tokenizer.
      bundle->tokenizer = load_tokenizer(f.tokenizer);
      if (bundle->tokenizer->vocab_size() > size_t(bundle->config().vocab))
        fail("--tokenizer {}: {} tokens, more than the model's {}", f.tokenizer,
             bundle->tokenizer->vocab_size(), bundle->config().vocab);
    }
    if (!bundle->tokenizer)
      fail("{} has no tokenizer: ridge serve needs one (--tokenizer)", f.model.model_path);
    tok = bundle->tokenizer.get();
    f.engine.enable_prefix_caching = !f.no_prefix_cache;
    eng = std::make_unique<engine::Engine>(*bundle, f.engine);
    port = std::make_unique<server::EngineAdapter>(*eng);
  }

  f.server.served_model_names = f.served_names;
  if (f.server.served_model_names.empty())
    f.server.served_model_names.push_back(
        std::filesystem::path(f.model.model_path).filename().replace_extension().string());
  server::HttpServer http(f.server, *tok, *port);
  http.start();
  log::info("serving '{}' on http://{}:{} (context {} tokens{})", f.server.served_model_names[0],
            f.server.host, http.port(), port->max_model_len(),
            f.server.api_key.empty() ? "" : ", API key required");
  // One machine-readable line for scripts that asked for port 0.
  std::printf("ridge serve: listening on http://%s:%u\n", f.server.host.c_str(), unsigned(http.port()));
  std::fflush(stdout);

  const double grace = f.shutdown_timeout;
  std::thread signals([&http, sigs, grace] {
    int count = 0;
    for (;;) {
      int sig = 0;
      if (sigwait(&sigs, &sig) != 0) continue;
      if (sig == SIGUSR1) return;
      ++count;
      log::info("server: {} received, {}", sig == SIGINT ? "SIGINT" : "SIGTERM",
                count == 1 ? fmt::format("finishing in-flight requests (up to {} s)", grace)
                           : std::string("cancelling in-flight requests"));
      http.request_stop(count == 1 ? grace : 0);
    }
  });
  http.wait();
  port->shutdown(/*drain=*/false);
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  log::info("server: stopped");
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<ServeFlags>();
  ridge::app::add_model_options(sub, f->model);
  auto& s = f->server;
  auto& e = f->engine;
  sub.add_option("--host", s.host, "address to bind (use 0.0.0.0 to serve other machines)")
      ->capture_default_str();
  sub.add_option("--port", s.port, "TCP port (0: any free port, printed at start)")->capture_default_str();
  sub.add_option("--tokenizer", f->tokenizer,
                 "tokenizer.json, its folder, or a GGUF file: replaces the model's own (for a "
                 "checkpoint without one, e.g. random weights for benchmarks)");
  sub.add_option("--served-model-name", f->served_names,
                 "model name(s) clients use (default: the model file's name)");
  sub.add_option("--api-key", s.api_key,
                 "require 'Authorization: Bearer KEY' on /v1/* (default: $RIDGE_API_KEY)")
      ->envname("RIDGE_API_KEY");
  sub.add_option("--max-num-seqs", e.max_num_seqs, "sequences running at once")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  sub.add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "tokens per engine step")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  sub.add_option("--max-prompt-logprob-rows", e.max_prompt_logprob_rows,
                 "prompt positions a step may score for echo + logprobs (each a logits row of "
                 "the vocabulary in the workspace; 0 refuses such requests)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  // (0 would refuse every request: the engine's queue would hold none.)
  sub.add_option("--max-queue", e.max_queue, "waiting requests beyond which new ones get 429")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  sub.add_option("--max-model-len", e.max_model_len, "context limit per request (0: the model's)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_flag("--no-prefix-cache", f->no_prefix_cache, "turn the prefix cache off");
  sub.add_option("--max-body-bytes", s.max_body_bytes, "larger request bodies get 413")
      ->capture_default_str();
  sub.add_option("--http-threads", s.http_threads, "I/O threads of the HTTP server")
      ->capture_default_str()->check(CLI::Range(1, 256));
  sub.add_option("--max-pending-bytes", s.max_pending_bytes,
                 "response bytes a connection may have waiting for its client to read; past "
                 "this its request is cancelled and the connection closed")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1) << 16, size_t(1) << 40));
  sub.add_option("--max-connections", s.max_connections, "open connections at most")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  sub.add_option("--keep-alive", s.keep_alive_seconds,
                 "idle connection timeout in seconds (0.001 to 86400)")
      ->capture_default_str()
      ->check(ridge::app::finite_range(0.001, 86400));
  sub.add_option("--shutdown-timeout", f->shutdown_timeout,
                 "seconds in-flight requests get to finish after SIGINT/SIGTERM (0 to 86400)")
      ->capture_default_str()
      ->check(ridge::app::finite_range(0, 86400));
  sub.add_flag("--stub-engine", f->stub,
               "benchmark/test build of the server: the model step is stubbed out (outputs are a "
               "fixed token cycle); only the tokenizer is loaded");
  sub.add_option("--stub-step-ms", f->stub_step_ms, "with --stub-engine: duration of one step")
      ->capture_default_str()
      ->check(ridge::app::finite_range(0, 60000));
  sub.callback([f] { serve(*f); });
}

const ridge::app::Registrar reg("serve", "OpenAI-compatible HTTP server", &setup);

}  // namespace
