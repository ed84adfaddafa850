#include "ridge/server/stub_engine.h"

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <functional>

#include <fmt/format.h>

namespace ridge::server {

using Clock = std::chrono::steady_clock;
using engine::RequestRejected;

struct StubEngine::Seq {
  engine::Request req;
  engine::OutputCallback cb;
  size_t offset = 0;
  int32_t generated = 0;
  int64_t blocks = 0;
  Clock::time_point arrival, first, last;
  double gap_sum = 0;
};

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

StubEngine::StubEngine(StubEngineConfig config) : config_(std::move(config)) {
  if (config_.cycle.empty()) config_.cycle = {1};
  metrics_.kv_blocks_total = config_.kv_blocks;
  metrics_.ttft = engine::Histogram({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80});
  metrics_.tpot = engine::Histogram(
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5});
  metrics_.e2e = engine::Histogram(
      {0.01, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120});
  thread_ = std::thread([this] { loop(); });
}

StubEngine::~StubEngine() { shutdown(false); }

int64_t StubEngine::blocks_for(int64_t tokens) const {
  return (tokens + config_.block_size - 1) / config_.block_size;
}

void StubEngine::submit(engine::Request request, engine::OutputCallback on_output) {
  using K = RequestRejected::Kind;
  if (request.prompt.empty()) throw RequestRejected(K::invalid, "the prompt is empty");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= config_.vocab_size)
      throw RequestRejected(K::invalid, fmt::format("prompt token id {} is outside the "
                                                    "vocabulary [0, {})", t, config_.vocab_size));
  if (request.max_tokens < 1)
    throw RequestRejected(K::invalid, fmt::format("max_tokens {} must be >= 1", request.max_tokens));
  if (int64_t(request.prompt.size()) + request.max_tokens > config_.max_model_len)
    throw RequestRejected(K::invalid, fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds "
                                                  "the context of {} tokens", request.prompt.size(),
                                                  request.max_tokens, config_.max_model_len));
  try {
    request.sampling.validate();
  } catch (const Error& e) {
    throw RequestRejected(K::invalid, e.what());
  }
  auto seq = std::make_unique<Seq>();
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : request.prompt) h = mix(h, uint64_t(uint32_t(t)));
  if (request.sampling.temperature > 0) h = mix(h, request.sampling.seed + 1);
  seq->offset = config_.starts.empty() ? size_t(h % config_.cycle.size())
                                       : config_.starts[h % config_.starts.size()];
  seq->arrival = Clock::now();
  seq->req = std::move(request);
  seq->cb = std::move(on_output);
  {
    std::lock_guard lock(mu_);
    if (!accepting_) throw RequestRejected(K::shutting_down, "the server is shutting down");
    if (int32_t(waiting_.size()) >= config_.max_queue)
      throw RequestRejected(K::queue_full, fmt::format("the queue is full ({} waiting)",
                                                       waiting_.size()));
    if (!live_ids_.insert(seq->req.id).second)
      throw RequestRejected(K::invalid, fmt::format("request id '{}' is live", seq->req.id));
    waiting_.push_back(std::move(seq));
  }
  cv_.notify_one();
}

void StubEngine::cancel(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    if (!live_ids_.count(id)) return;
    cancelled_.insert(id);
  }
  cv_.notify_one();
}

void StubEngine::shutdown(bool drain) {
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    if (!drain) abort_all_ = true;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

engine::EngineMetrics StubEngine::metrics() const {
  std::lock_guard lock(mu_);
  engine::EngineMetrics m = metrics_;
  m.running = int32_t(running_.size());
  m.waiting = int32_t(waiting_.size());
  m.kv_blocks_used = blocks_used_;
  return m;
}

void StubEngine::loop() {
  std::vector<std::pair<Seq*, engine::RequestOutput>> outs;
  std::vector<std::unique_ptr<Seq>> done;
  auto next_step = Clock::now();
  for (;;) {
    outs.clear();
    done.clear();
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !waiting_.empty() || !running_.empty() || !cancelled_.empty();
      });
      if (stop_ && waiting_.empty() && running_.empty()) break;
      // Cancellations (and an abort of everything) take effect at the start of a step.
      auto finish_abort = [&](std::unique_ptr<Seq>& s) {
        engine::RequestOutput o;
        o.id = s->req.id;
        o.finished = true;
        o.finish_reason = "abort";
        o.prompt_tokens = int32_t(s->req.prompt.size());
        o.completion_tokens = s->generated;
        outs.emplace_back(s.get(), std::move(o));
        blocks_used_ -= s->blocks;
        live_ids_.erase(s->req.id);
        done.push_back(std::move(s));
      };
      if (abort_all_ || !cancelled_.empty()) {
        for (auto& s : running_)
          if (abort_all_ || cancelled_.count(s->req.id)) finish_abort(s);
        for (auto& s : waiting_)
          if (abort_all_ || cancelled_.count(s->req.id)) finish_abort(s);
        std::erase(running_, nullptr);
        std::erase(waiting_, nullptr);
        cancelled_.clear();
      }
      // Admission: as many waiting requests as fit in max_num_seqs and the KV blocks.
      while (!waiting_.empty() && int32_t(running_.size()) < config_.max_num_seqs) {
        auto& s = waiting_.front();
        const int64_t need = blocks_for(int64_t(s->req.prompt.size()) + 1);
        if (blocks_used_ + need > config_.kv_blocks) {
          if (!running_.empty()) break;  // it fits once running sequences return their blocks
          // Every block is free and it still does not fit: it never will (as the engine's
          // Scheduler::schedule answers it). Waiting would spin this loop forever and hold up
          // every request behind it.
          engine::RequestOutput o;
          o.id = s->req.id;
          o.finished = true;
          o.finish_reason = "error";
          o.error = fmt::format("the sequence needs {} KV blocks, more than the pool's {}", need,
                                config_.kv_blocks);
          o.prompt_tokens = int32_t(s->req.prompt.size());
          outs.emplace_back(s.get(), std::move(o));
          live_ids_.erase(s->req.id);
          done.push_back(std::move(s));
          waiting_.pop_front();
          continue;
        }
        s->blocks = need;
        blocks_used_ += need;
        metrics_.prompt_tokens_total += int64_t(s->req.prompt.size());
        metrics_.prefix_query_tokens += int64_t(s->req.prompt.size());
        running_.push_back(std::move(s));
        waiting_.pop_front();
      }
      // The stubbed step: one token for every running sequence.
      const auto now = Clock::now();
      const int32_t eos = config_.stop_ids.empty() ? -1 : config_.stop_ids[0];
      for (auto& s : running_) {
        const size_t pos = (s->offset + size_t(s->generated)) % (config_.cycle.size() + 1);
        int32_t token;
        bool stop = false;
        // Before min_tokens no stop token comes: a lap's end then wraps, and stop tokens in the
        // cycle do not end the sequence (the real engine would not draw them).
        const bool may_stop = s->generated >= s->req.min_tokens;
        if (pos == config_.cycle.size()) {  // the end of a lap
          if (config_.stop_at_cycle_end && eos >= 0 && !s->req.ignore_eos && may_stop) {
            token = eos;
            stop = true;
          } else {
            token = config_.cycle[0];
            ++s->offset;
          }
        } else {
          token = config_.cycle[pos];
        }
        // ignore_eos turns off the model's stop tokens, not the request's stop_token_ids.
        if (!stop && !s->req.ignore_eos && may_stop)
          stop = std::find(config_.stop_ids.begin(), config_.stop_ids.end(), token) !=
                 config_.stop_ids.end();
        if (!stop && may_stop)
          stop = std::find(s->req.stop_token_ids.begin(), s->req.stop_token_ids.end(), token) !=
                 s->req.stop_token_ids.end();
        ++s->generated;
        ++metrics_.generation_tokens_total;
        if (s->generated == 1) {
          s->first = now;
          metrics_.ttft.observe(seconds(now - s->arrival));
        } else {
          s->gap_sum += seconds(now - s->last);
        }
        s->last = now;
        const int64_t need =
            blocks_for(int64_t(s->req.prompt.size()) + s->generated + 1) - s->blocks;
        s->blocks += need;
        blocks_used_ += need;

        engine::RequestOutput o;
        o.id = s->req.id;
        engine::TokenOutput t;
        t.token = token;
        t.logprob = -0.25f;
        for (int32_t k = 0; k < s->req.sampling.top_logprobs; ++k)
          t.top.push_back({k == 0 ? token : (token + k) % config_.vocab_size,
                           k == 0 ? -0.25f : -0.25f - 1.5f * float(k)});
        o.tokens.push_back(std::move(t));
        o.prompt_tokens = int32_t(s->req.prompt.size());
        o.completion_tokens = s->generated;
        if (stop || s->generated >= s->req.max_tokens) {
          o.finished = true;
          o.finish_reason = stop ? "stop" : "length";
          if (s->generated > 1) metrics_.tpot.observe(s->gap_sum / (s->generated - 1));
          metrics_.e2e.observe(seconds(now - s->arrival));
          ++metrics_.requests_finished;
          blocks_used_ -= s->blocks;
          live_ids_.erase(s->req.id);
          outs.emplace_back(s.get(), std::move(o));
          done.push_back(std::move(s));
        } else {
          outs.emplace_back(s.get(), std::move(o));
        }
      }
      std::erase(running_, nullptr);
      ++metrics_.steps;
    }
    // Callbacks run outside the lock (they may call cancel()). A running sequence is owned by
    // running_, which only this thread changes; finished ones are held in `done`.
    for (auto& [seq, out] : outs) seq->cb(std::move(out));
    if (config_.step_seconds > 0) {
      next_step += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(config_.step_seconds));
      const auto now = Clock::now();
      if (next_step < now) next_step = now;
      std::this_thread::sleep_until(next_step);
    }
  }
}

}  // namespace ridge::server
