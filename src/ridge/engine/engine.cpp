// The engine thread: take new requests and cancellations, schedule a step, run it, sample (on
// the device when the backend can, else on the host), hand outputs to the callbacks, repeat.
// See engine.h and scheduler.h for the policy.
#include "ridge/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "ridge/core/log.h"
#include "ridge/engine/device_sampler.h"
#include "ridge/engine/model_runner.h"
#include "ridge/engine/scheduler.h"
#include "ridge/engine/sequence.h"
#include "ridge/kv/block_pool.h"
#include "ridge/kv/prefix_cache.h"

namespace ridge::engine {

namespace {

using Clock = Sequence::Clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Bucket bounds in seconds (vLLM's, so dashboards made for it read ours).
std::vector<double> ttft_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}
std::vector<double> tpot_bounds() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_bounds() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

int64_t resolve_max_model_len(const ModelBundle& bundle, const EngineConfig& c) {
  const int64_t positions = bundle.config().max_position;
  const int64_t pool_tokens = bundle.kv_pool->num_tokens();
  if (c.max_model_len == 0) return std::min(positions, pool_tokens);
  RIDGE_CHECK(c.max_model_len > 0, "max_model_len {} must be >= 0 (0: the model's context)",
              c.max_model_len);
  RIDGE_CHECK(c.max_model_len <= positions,
              "max_model_len {} is past the model's context of {} positions", c.max_model_len,
              positions);
  RIDGE_CHECK(c.max_model_len <= pool_tokens,
              "max_model_len {} does not fit the KV pool of {} tokens (raise the KV capacity)",
              c.max_model_len, pool_tokens);
  return c.max_model_len;
}

SchedulerConfig scheduler_config(const EngineConfig& c) {
  RIDGE_CHECK(c.max_queue >= 0, "max_queue {} must be >= 0", c.max_queue);
  RIDGE_CHECK(c.max_prompt_logprob_rows >= 0, "max_prompt_logprob_rows {} must be >= 0",
              c.max_prompt_logprob_rows);
  return {c.max_num_seqs, c.max_num_batched_tokens, c.enable_prefix_caching,
          c.max_prompt_logprob_rows};
}

}  // namespace

struct Engine::Impl {
  Impl(ModelBundle& b, const EngineConfig& c);

  void loop();
  void step();
  void emit(Sequence& s, bool finished);
  void collect_prompt_logprobs(size_t sampling_rows, std::span<const float> host,
                               const Tensor* device);
  void emit_finished();
  // Hands out the tokens of the sequences in to_emit (the step's, at its end; or, deferred, the
  // last step's while the device runs the next one); returns the seconds it took.
  double flush_outputs();
  void wait_for_device() noexcept;
  void refresh_metrics();
  void add_seconds(double EngineMetrics::*field, Clock::time_point since);
  void stop(bool drain);

  ModelBundle& bundle;
  const EngineConfig config;
  const int64_t max_model_len;
  const int64_t vocab;
  const std::vector<int32_t> model_stop_ids;
  // Owned by the engine thread once it runs.
  kv::BlockPool pool;
  kv::PrefixCache cache;
  Scheduler scheduler;
  ModelRunner runner;
  std::vector<int32_t> sampled;
  DeviceSampler device_sampler;
  std::vector<DeviceSampleRow> device_rows;
  std::vector<SampleResult> device_results;
  std::vector<float> host_logits;  // device logits copied back when the device declines
  std::vector<float> prompt_logits;  // a step's prompt-logprob rows copied back from the device
  std::once_flag trie_once;  // JSON mode's token trie, built by the first request that needs it
  std::shared_ptr<const TokenTrie> trie;
  // Running sequences with tokens of the last step still to hand out (flush_outputs). A sequence
  // leaves it before it is destroyed (emit_finished).
  std::vector<Sequence*> to_emit;
  // EngineConfig::defer_outputs, with RIDGE_OVERLAP_OUTPUTS=0 forcing 0 (A/B runs).
  const int defer_outputs = [](int configured) {
    const char* v = std::getenv("RIDGE_OVERLAP_OUTPUTS");
    return v && std::string_view(v) == "0" ? 0 : configured;
  }(config.defer_outputs);
  // RIDGE_STEP_LOG=FILE: one line per step (when it started, what it held, where its time went),
  // for finding where a serving run's time goes (scripts/device/step_log.py reads it).
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log{nullptr, &std::fclose};
  Clock::time_point started = Clock::now();

  // Shared with submit(), cancel() and shutdown().
  std::mutex mu;
  std::condition_variable wake;
  std::vector<std::unique_ptr<Sequence>> inbox;
  std::vector<int64_t> cancels;
  std::unordered_map<std::string, int64_t> live;  // request id -> seq id, submit to final output
  int64_t next_seq_id = 0;
  int32_t scheduler_waiting = 0;
  bool accepting = true;
  bool stopping = false;
  bool drain = true;

  mutable std::mutex metrics_mu;
  EngineMetrics metrics;

  std::mutex join_mu;
  std::thread thread;
  std::thread::id thread_id;  // set before any caller can reach stop()
};

Engine::Impl::Impl(ModelBundle& b, const EngineConfig& c)
    : bundle(b),
      config(c),
      max_model_len(resolve_max_model_len(b, c)),
      vocab(b.config().vocab),
      model_stop_ids(b.tokenizer ? b.tokenizer->stop_ids() : std::vector<int32_t>{}),
      pool(int32_t(b.kv_pool->num_blocks())),
      cache(pool, int32_t(b.kv_pool->block_size())),
      scheduler(scheduler_config(c), cache),
      runner(*b.model, *b.kv_pool, c.max_num_batched_tokens, c.max_num_seqs,
             c.max_prompt_logprob_rows),
      device_sampler(*b.backend) {
  metrics.ttft = Histogram(ttft_bounds());
  metrics.tpot = Histogram(tpot_bounds());
  metrics.e2e = Histogram(e2e_bounds());
  refresh_metrics();
  if (const char* path = std::getenv("RIDGE_STEP_LOG"); path && *path) {
    step_log.reset(std::fopen(path, "w"));
    if (!step_log)
      log::warn("engine: RIDGE_STEP_LOG: cannot write '{}'; no step log", path);
    else
      std::fputs(
          "t_ms,seqs,decodes,prefill_tokens,sampled,running,waiting,"
          "forward_ms,sample_ms,output_ms,wall_ms\n",
          step_log.get());
  }
  log::info(
      "engine: max_num_seqs {}, max_num_batched_tokens {}, max_model_len {}, KV {} blocks "
      "of {} tokens, prefix caching {}",
      c.max_num_seqs, c.max_num_batched_tokens, max_model_len, pool.num_blocks(),
      cache.block_size(), c.enable_prefix_caching ? "on" : "off");
  if (pool.num_blocks() < int64_t(c.max_num_seqs))
    log::warn(
        "engine: the KV pool has {} blocks, fewer than max_num_seqs {}: at most {} sequences can "
        "hold KV at once and the rest wait or are preempted; raise --ctx-size (KV tokens) or "
        "lower --max-num-seqs",
        pool.num_blocks(), c.max_num_seqs, pool.num_blocks());
}

void Engine::Impl::loop() {
  std::vector<int64_t> cancel_now;
  while (true) {
    bool abort_all = false, exit_when_idle = false;
    {
      std::unique_lock lock(mu);
      wake.wait(lock, [&] {
        return !inbox.empty() || !cancels.empty() || stopping || scheduler.has_work();
      });
      for (auto& s : inbox) scheduler.add(std::move(s));
      inbox.clear();
      cancel_now.swap(cancels);
      abort_all = stopping && !drain;
      exit_when_idle = stopping;
    }
    const auto t_between = Clock::now();
    for (int64_t id : cancel_now) scheduler.finish(id, "abort");
    cancel_now.clear();
    if (abort_all) scheduler.finish_all("abort");
    // Gauges first, so that a caller woken by a final output sees its blocks returned.
    refresh_metrics();
    emit_finished();
    add_seconds(&EngineMetrics::seconds_between, t_between);
    if (scheduler.has_work()) {
      try {
        step();
      } catch (const std::exception& e) {
        // A broken invariant: end every request with the error rather than the process.
        log::error("engine: step failed, ending all requests: {}", e.what());
        wait_for_device();
        scheduler.finish_all("error", e.what());
      }
      const auto t_after = Clock::now();
      refresh_metrics();
      emit_finished();
      add_seconds(&EngineMetrics::seconds_between, t_after);
    }
    if (exit_when_idle && !scheduler.has_work()) {
      std::lock_guard lock(mu);
      if (inbox.empty()) break;  // nothing can arrive any more: submit refuses while stopping
    }
  }
}

void Engine::Impl::add_seconds(double EngineMetrics::*field, Clock::time_point since) {
  const double s = seconds(Clock::now() - since);
  std::lock_guard lock(metrics_mu);
  metrics.*field += s;
}

void Engine::Impl::step() {
  const auto t_schedule = Clock::now();
  SchedulerOutput out = scheduler.schedule();
  add_seconds(&EngineMetrics::seconds_schedule, t_schedule);
  if (out.empty()) {
    flush_outputs();
    return;
  }
  const bool on_device = config.device_sampling && device_sampler.available();
  // Deferred hand-out only where the step is queued and runs while the host works (a GPU with
  // device sampling), unless configured: on the CPU the forward runs in execute(), so deferring
  // would only make every token a step later.
  const bool defer = defer_outputs == 1 ||
                     (defer_outputs == -1 && on_device && bundle.backend->device() != Device::cpu);
  const double flush_before = defer ? 0.0 : flush_outputs();  // what a deferring step left
  const auto t_forward = Clock::now();
  std::span<float> logits;
  const Tensor* device_logits = nullptr;
  try {
    if (on_device)
      device_logits = &runner.execute_on_device(out);  // queued: the device may still run it
    else
      logits = runner.execute(out);
  } catch (const std::exception& e) {
    log::error("engine: step of {} tokens failed: {}", out.num_tokens, e.what());
    wait_for_device();
    for (const ScheduledChunk& c : out.chunks) scheduler.finish(c.seq->seq_id, "error", e.what());
    return;
  }
  // Device sampling: every row in one call queued behind the forward, only tokens and logprobs
  // come back. While the device runs both, the previous step's tokens go out (flush_outputs);
  // then the host waits. When the backend declines (no device sampler), this step's logits are
  // sampled on the host and later steps stay there.
  bool device_sampled = false, launched = false;
  if (on_device) {
    device_rows.clear();
    for (const ScheduledChunk& c : out.chunks) {
      if (!c.wants_logits) continue;
      Sequence& s = *c.seq;
      const SamplingParams& sp = s.request.sampling;
      if (uses_penalties(sp))
        s.penalties.update(s.prompt(), s.output(), vocab, sp.repetition_penalty != 1.0f);
      device_rows.push_back(
          {&sp, uint64_t(s.num_output_tokens()), &s.penalties, s.banned_tokens()});
    }
    launched = device_sampler.launch({}, *device_logits, device_rows);
  }
  const double flush_during = defer ? flush_outputs() : 0.0;
  if (on_device) {
    if (launched && !device_rows.empty()) {
      device_sampler.finish({}, device_rows, device_results);
      device_sampled = true;
    } else if (launched) {  // no logits wanted: wait for the step all the same
      bundle.backend->synchronize({});
      device_sampled = true;
    } else {
      const size_t n = (device_rows.size() + runner.prompt_rows().size()) * size_t(vocab);
      if (device_logits->device == Device::cpu) {
        logits = {device_logits->ptr<float>(), n};
      } else {
        host_logits.resize(n);
        bundle.backend->download({}, host_logits.data(), device_logits->data, n * 4);
        bundle.backend->synchronize({});
        logits = host_logits;
      }
    }
  }
  // The step on the device (its sampling kernels included), less the outputs handed out meanwhile.
  const double forward_s = seconds(Clock::now() - t_forward) - flush_during;
  {
    const bool decode_only = size_t(out.num_decodes) == out.chunks.size();
    std::lock_guard lock(metrics_mu);
    metrics.seconds_forward += forward_s;
    (decode_only ? metrics.seconds_forward_decode : metrics.seconds_forward_prefill) += forward_s;
    ++(decode_only ? metrics.steps_decode : metrics.steps_prefill);
    (decode_only ? metrics.tokens_decode_steps : metrics.tokens_prefill_steps) += out.num_tokens;
  }
  const auto t_sample = Clock::now();
  sampled.clear();
  const auto now = Clock::now();
  size_t row = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.wants_logits) continue;
    Sequence& s = *c.seq;
    SampleResult res;
    if (device_sampled) {
      res = std::move(device_results[row++]);
    } else {
      std::span<float> r = logits.subspan(row++ * size_t(vocab), size_t(vocab));
      res = s.sampler.sample(r, s.prompt(), s.output(), s.banned_tokens());
    }
    sampled.push_back(res.token);
    s.advance(res.token);
    s.pending.push_back({res.token, res.logprob, std::move(res.top)});
    if (s.first_token == Clock::time_point{}) {
      s.first_token = now;
      std::lock_guard lock(metrics_mu);
      metrics.ttft.observe(seconds(now - s.arrival));
    }
    s.last_token = now;
  }
  collect_prompt_logprobs(row, logits, device_sampled ? device_logits : nullptr);
  add_seconds(&EngineMetrics::seconds_sample, t_sample);
  const auto t_output = Clock::now();
  scheduler.update(out, sampled);
  {
    std::lock_guard lock(metrics_mu);
    ++metrics.steps;
    metrics.generation_tokens_total += int64_t(sampled.size());
  }
  // Handed out now, or (defer) during the next step's forward; a sequence that finished goes out
  // with its final output instead.
  for (const ScheduledChunk& c : out.chunks)
    if (c.wants_logits && c.seq->status != SequenceStatus::finished) to_emit.push_back(c.seq);
  add_seconds(&EngineMetrics::seconds_output, t_output);
  if (!defer) flush_outputs();
  if (step_log) {
    const auto end = Clock::now();
    // wall_ms: the step's start on the system clock (ms since the Unix epoch), to line the log up
    // with samples taken outside the process (nvidia-smi's clocks and power).
    const double wall_ms =
        1e3 * std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                  .count() -
        1e3 * seconds(end - t_schedule);
    fmt::print(step_log.get(), "{:.3f},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.1f}\n",
               1e3 * seconds(t_schedule - started), out.chunks.size(), out.num_decodes,
               out.num_tokens - out.num_decodes, sampled.size(), scheduler.num_running(),
               scheduler.num_waiting(), 1e3 * forward_s, 1e3 * seconds(t_output - t_sample),
               1e3 * (seconds(end - t_output) + flush_before + flush_during), wall_ms);
    std::fflush(step_log.get());  // read while the server runs
  }
}

// Before requests end on an error: a queued step may still read the metadata staging or write
// the blocks about to be freed. A device that fails here is past saving; the error was logged.
void Engine::Impl::wait_for_device() noexcept {
  try {
    bundle.backend->synchronize({});
  } catch (const std::exception&) {
  }
}

double Engine::Impl::flush_outputs() {
  if (to_emit.empty()) return 0;
  const auto t0 = Clock::now();
  for (Sequence* s : to_emit)
    if (s->status != SequenceStatus::finished && !s->pending.empty()) emit(*s, false);
  to_emit.clear();
  const double s = seconds(Clock::now() - t0);
  std::lock_guard lock(metrics_mu);
  metrics.seconds_output += s;
  return s;
}

// The step's prompt-logprob rows follow its `sampling_rows` sampling rows: in `host` (the logits
// on the host), else on the device (`device`, copied back here).
void Engine::Impl::collect_prompt_logprobs(size_t sampling_rows, std::span<const float> host,
                                           const Tensor* device) {
  const auto& rows = runner.prompt_rows();
  if (rows.empty()) return;
  const size_t V = size_t(vocab), n = rows.size() * V;
  std::span<const float> all;
  if (device == nullptr) {
    RIDGE_CHECK(host.size() >= (sampling_rows + rows.size()) * V,
                "engine: {} logits floats for {} sampling and {} prompt rows", host.size(),
                sampling_rows, rows.size());
    all = host.subspan(sampling_rows * V, n);
  } else if (device->device == Device::cpu) {
    all = {device->ptr<float>() + sampling_rows * V, n};
  } else {
    prompt_logits.resize(n);
    bundle.backend->download({}, prompt_logits.data(), device->ptr<float>() + sampling_rows * V,
                             n * 4);
    bundle.backend->synchronize({});
    all = prompt_logits;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    Sequence& s = *rows[i].seq;
    const int32_t token = s.tokens[size_t(rows[i].token)];
    SampleResult r = raw_logprobs(all.subspan(i * V, V), token, s.request.prompt_logprobs);
    s.prompt_logprobs.push_back({r.token, r.logprob, std::move(r.top), r.rank});
    s.prompt_logprobs_next = rows[i].token + 1;
  }
}

void Engine::Impl::emit(Sequence& s, bool finished) {
  RequestOutput o;
  o.id = s.request.id;
  o.tokens = std::move(s.pending);
  s.pending.clear();
  o.prompt_logprobs = std::move(s.prompt_logprobs);
  s.prompt_logprobs.clear();
  o.finished = finished;
  if (finished) {
    o.finish_reason = s.finish_reason;
    o.error = s.error;
  }
  o.prompt_tokens = s.num_prompt_tokens();
  o.cached_tokens = s.num_cached_prompt;
  o.completion_tokens = s.num_output_tokens();
  if (!s.on_output) return;
  try {
    s.on_output(std::move(o));
  } catch (const std::exception& e) {
    log::warn("engine: the output callback of request '{}' threw ({}); cancelling it", s.request.id,
              e.what());
    if (finished) return;
    // Ended between steps, as a cancel: a deferred hand-out runs while a step that may hold
    // this sequence is in flight.
    std::lock_guard lock(mu);
    cancels.push_back(s.seq_id);
  }
}

void Engine::Impl::emit_finished() {
  auto finished = scheduler.take_finished();
  if (finished.empty()) return;
  // A finished sequence's undelivered tokens go out with its final output (emit reads pending),
  // and the sequence is destroyed below: to_emit must not keep it.
  std::erase_if(to_emit, [](const Sequence* s) { return s->status == SequenceStatus::finished; });
  for (auto& s : finished) {
    {
      std::lock_guard lock(mu);
      live.erase(s->request.id);
    }
    {
      std::lock_guard lock(metrics_mu);
      ++metrics.requests_finished;
      metrics.e2e.observe(seconds(Clock::now() - s->arrival));
      const int32_t n = s->num_output_tokens();
      if (n >= 2) metrics.tpot.observe(seconds(s->last_token - s->first_token) / double(n - 1));
    }
    emit(*s, true);
  }
}

void Engine::Impl::refresh_metrics() {
  {
    std::lock_guard lock(mu);
    scheduler_waiting = scheduler.num_waiting();
  }
  std::lock_guard lock(metrics_mu);
  metrics.running = scheduler.num_running();
  metrics.waiting = scheduler.num_waiting();
  metrics.kv_blocks_total = pool.num_blocks();
  metrics.kv_blocks_cached = cache.num_evictable();
  metrics.kv_blocks_used = pool.num_blocks() - pool.num_free() - cache.num_evictable();
  const SchedulerStats& st = scheduler.stats();
  metrics.prefix_query_tokens = st.prefix_query_tokens;
  metrics.prefix_hit_tokens = st.prefix_hit_tokens;
  metrics.prompt_tokens_total = st.prompt_tokens;
  metrics.preemptions = st.preemptions;
}

void Engine::Impl::stop(bool drain_first) {
  {
    std::lock_guard lock(mu);
    accepting = false;
    if (!stopping) {
      stopping = true;
      drain = drain_first;
    } else if (!drain_first) {
      drain = false;  // an abort overrides a drain in progress
    }
  }
  wake.notify_all();
  if (std::this_thread::get_id() == thread_id) return;  // from a callback: cannot join
  std::lock_guard lock(join_mu);
  if (thread.joinable()) thread.join();
}

Engine::Engine(ModelBundle& bundle, const EngineConfig& config)
    : impl_(std::make_unique<Impl>(bundle, config)) {
  impl_->thread = std::thread([this] { impl_->loop(); });
  impl_->thread_id = impl_->thread.get_id();
}

// Never destroy the engine from one of its callbacks: the thread cannot join itself.
Engine::~Engine() {
  impl_->stop(false);
}

void Engine::submit(Request r, OutputCallback on_output) {
  Impl& I = *impl_;
  using Kind = RequestRejected::Kind;
  auto invalid = [](const std::string& m) { throw RequestRejected(Kind::invalid, m); };
  if (r.id.empty()) invalid("request id is empty");
  if (r.prompt.empty()) invalid("prompt is empty: it needs at least one token");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= I.vocab)
      invalid(fmt::format("prompt token id {} at position {} is outside the vocabulary of {}",
                          r.prompt[i], i, I.vocab));
  if (r.max_tokens < 1) invalid(fmt::format("max_tokens {} must be >= 1", r.max_tokens));
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > 20)
    invalid(fmt::format("prompt_logprobs {} is outside [-1, 20]", r.prompt_logprobs));
  if (r.prompt_logprobs >= 0 && I.config.max_prompt_logprob_rows == 0)
    invalid("prompt logprobs are off in this engine (max_prompt_logprob_rows is 0)");
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens)
    invalid(
        fmt::format("min_tokens {} is outside [0, max_tokens = {}]", r.min_tokens, r.max_tokens));
  const int64_t want = int64_t(r.prompt.size()) + r.max_tokens;
  if (want > I.max_model_len)
    invalid(
        fmt::format("prompt ({} tokens) plus max_tokens ({}) is {} tokens, past "
                    "max_model_len {}",
                    r.prompt.size(), r.max_tokens, want, I.max_model_len));
  for (int32_t t : r.stop_token_ids)
    if (t < 0 || t >= I.vocab)
      invalid(fmt::format("stop_token_ids entry {} is outside the vocabulary of {}", t, I.vocab));
  for (const TokenBias& b : r.sampling.logit_bias)
    if (b.token >= I.vocab)
      invalid(
          fmt::format("logit_bias token id {} is outside the vocabulary of {}", b.token, I.vocab));
  try {
    r.sampling.validate();
  } catch (const Error& e) {
    invalid(e.what());
  }
  std::vector<int32_t> stops = r.ignore_eos ? std::vector<int32_t>{} : I.model_stop_ids;
  stops.insert(stops.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  std::unique_ptr<TokenConstraint> constraint;
  if (r.json_object || r.json_schema) {
    if (!I.bundle.tokenizer) invalid("JSON mode needs the model's tokenizer, and it has none");
    // The vocabulary's trie, built by the first JSON request and kept (a few MB).
    std::call_once(I.trie_once,
                   [&] { I.trie = std::make_shared<const TokenTrie>(*I.bundle.tokenizer); });
    if (r.json_schema)
      constraint = std::make_unique<GrammarConstraint<SchemaMachine>>(I.trie, stops, I.vocab,
                                                                      SchemaMachine(r.json_schema));
    else
      constraint = std::make_unique<JsonConstraint>(I.trie, stops, I.vocab);
  }

  // The sequence is made (its stop list sorted and deduplicated, its prompt moved) before the
  // lock: the engine thread and every other submitter wait on I.mu. Its id is drawn atomically
  // here; a refused request's id is simply not used, and of two submits racing for the lock
  // either may be queued first (they arrived together).
  const int64_t seq_id = std::atomic_ref(I.next_seq_id).fetch_add(1, std::memory_order_relaxed);
  auto seq =
      std::make_unique<Sequence>(seq_id, std::move(r), std::move(stops), std::move(on_output));
  seq->constraint = std::move(constraint);

  std::lock_guard lock(I.mu);
  if (!I.accepting) throw RequestRejected(Kind::shutting_down, "the engine is shutting down");
  if (I.live.contains(seq->request.id))
    invalid(fmt::format("request id '{}' is already in use", seq->request.id));
  const int64_t queued = int64_t(I.inbox.size()) + I.scheduler_waiting;
  if (queued >= I.config.max_queue)
    throw RequestRejected(Kind::queue_full,
                          fmt::format("the queue is full: {} requests waiting (max_queue {})",
                                      queued, I.config.max_queue));
  I.live.emplace(seq->request.id, seq->seq_id);
  I.inbox.push_back(std::move(seq));
  I.wake.notify_one();
}

void Engine::cancel(const std::string& id) {
  Impl& I = *impl_;
  {
    std::lock_guard lock(I.mu);
    auto it = I.live.find(id);
    if (it == I.live.end()) return;
    I.cancels.push_back(it->second);
  }
  I.wake.notify_one();
}

void Engine::shutdown(bool drain) {
  impl_->stop(drain);
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  {
    std::lock_guard lock(impl_->metrics_mu);
    m = impl_->metrics;
  }
  std::lock_guard lock(impl_->mu);
  m.waiting += int32_t(impl_->inbox.size());
  return m;
}

const EngineConfig& Engine::config() const {
  return impl_->config;
}
std::optional<backend::PowerReading> Engine::device_power() const {
  return impl_->bundle.backend->power_reading();
}

int64_t Engine::max_model_len() const {
  return impl_->max_model_len;
}

}  // namespace ridge::engine
