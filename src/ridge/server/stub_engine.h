// StubEngine: an EnginePort whose "model step" is stubbed out: each step gives every running
// request its next token from a fixed token cycle, without a model. It keeps the engine's
// contract (validation and refusals, max_num_seqs, a waiting queue, cancellation within one step,
// finish reasons, logprobs, KV-block accounting, latency histograms), so the HTTP layer can be
// tested and benchmarked alone: `ridge serve --stub-engine` and the server unit tests use it.
//
// Determinism: a greedy request (temperature 0) starts in the cycle at an offset derived from its
// prompt, a sampled one from its prompt and seed; so equal requests get equal outputs, alone or
// batched.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "ridge/server/engine_port.h"

namespace ridge::server {

struct StubEngineConfig {
  std::vector<int32_t> cycle;     // token ids the output cycles through (non-empty)
  std::vector<size_t> starts;     // positions in the cycle an output may start at (empty: any)
  std::vector<int32_t> stop_ids;  // the model's stop tokens; stop_ids[0] ends a lap of the cycle
  bool stop_at_cycle_end = true;  // emit stop_ids[0] after the last token of the cycle
  int32_t vocab_size = 32000;
  int64_t max_model_len = 2048;
  int32_t max_num_seqs = 256;
  int32_t max_queue = 4096;
  int64_t kv_blocks = 8192;
  int32_t block_size = 16;
  double step_seconds = 0;  // the stubbed model step's duration (0: as fast as it can)
  // The device power the stub reports (tests of the server's GPU metrics); empty: none.
  std::function<std::optional<backend::PowerReading>()> power;
};

class StubEngine final : public EnginePort {
 public:
  explicit StubEngine(StubEngineConfig config);
  ~StubEngine() override;

  void submit(engine::Request request, engine::OutputCallback on_output) override;
  void cancel(const std::string& id) override;
  void shutdown(bool drain) override;
  engine::EngineMetrics metrics() const override;
  int64_t max_model_len() const override { return config_.max_model_len; }
  int32_t max_queue() const override { return config_.max_queue; }
  std::optional<backend::PowerReading> device_power() const override {
    return config_.power ? config_.power() : std::nullopt;
  }

 private:
  struct Seq;
  void loop();
  int64_t blocks_for(int64_t tokens) const;

  StubEngineConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  std::unordered_set<std::string> live_ids_;
  std::unordered_set<std::string> cancelled_;
  int64_t blocks_used_ = 0;
  bool accepting_ = true;
  bool stop_ = false;
  bool abort_all_ = false;
  engine::EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace ridge::server
