// EnginePort: what the HTTP server needs from an engine, as an interface, so that the server runs
// over the real engine (EngineAdapter) or over a stub token source (StubEngine: tests and the
// HTTP-layer benchmark, where the model step is stubbed out). Same contract as engine::Engine:
// submit() and cancel() are thread safe, outputs come through the callback on the engine's thread
// (keep it short), the last output has finished = true.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ridge/engine/engine.h"

namespace ridge::server {

class EnginePort {
 public:
  virtual ~EnginePort() = default;
  // Throws engine::RequestRejected (invalid -> 400, queue_full -> 429, shutting_down -> 503).
  virtual void submit(engine::Request request, engine::OutputCallback on_output) = 0;
  virtual void cancel(const std::string& id) = 0;
  virtual void shutdown(bool drain) = 0;
  virtual engine::EngineMetrics metrics() const = 0;
  virtual int64_t max_model_len() const = 0;
  // How many requests may wait at once (--max-queue): one HTTP request of more choices (prompts ×
  // n) can never be queued whole.
  virtual int32_t max_queue() const = 0;
  // The engine's device power now (thread safe); absent when the device reports none.
  virtual std::optional<backend::PowerReading> device_power() const { return std::nullopt; }
};

// The real engine behind the port.
class EngineAdapter final : public EnginePort {
 public:
  explicit EngineAdapter(engine::Engine& engine) : engine_(engine) {}
  void submit(engine::Request request, engine::OutputCallback on_output) override {
    engine_.submit(std::move(request), std::move(on_output));
  }
  void cancel(const std::string& id) override { engine_.cancel(id); }
  void shutdown(bool drain) override { engine_.shutdown(drain); }
  engine::EngineMetrics metrics() const override { return engine_.metrics(); }
  int64_t max_model_len() const override { return engine_.max_model_len(); }
  int32_t max_queue() const override { return engine_.config().max_queue; }
  std::optional<backend::PowerReading> device_power() const override { return engine_.device_power(); }

 private:
  engine::Engine& engine_;
};

}  // namespace ridge::server
