// Helpers for the Engine tests on the default model (CPU backend): a bundle loaded once per
// KV size, an output collector that waits for final outputs, random prompts.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ridge/core/log.h"
#include "ridge/engine/engine.h"
#include "ridge/engine/model_bundle.h"

namespace ridge::engine::testing {

inline std::string default_model_path() {
  return std::string(RIDGE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The default model on the CPU with a KV pool of kv_tokens; loaded once per size and kept for the
// whole test binary (engines are made and destroyed per test, one at a time). nullptr when the
// model file is absent.
inline ModelBundle* cpu_bundle(int64_t kv_tokens) {
  static std::map<int64_t, std::unique_ptr<ModelBundle>> bundles;
  if (!std::filesystem::exists(default_model_path())) return nullptr;
  auto& b = bundles[kv_tokens];
  if (!b) {
    log::set_level(log::Level::warn);
    BundleOptions o;
    o.model_path = default_model_path();
    o.device = "cpu";
    o.kv_tokens = kv_tokens;
    b = ModelBundle::load(o);
  }
  return b.get();
}

struct Collected {
  std::vector<TokenOutput> tokens;
  std::vector<TokenOutput> prompt_logprobs;
  int outputs = 0;
  bool finished = false;
  std::string finish_reason, error;
  int32_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  std::vector<int32_t> ids() const {
    std::vector<int32_t> v;
    for (const auto& t : tokens) v.push_back(t.token);
    return v;
  }
};

// Gathers every request's outputs; checks the callback contract (nothing after the final one).
class Collector {
 public:
  OutputCallback callback() {
    return [this](RequestOutput&& o) {
      std::lock_guard lock(mu_);
      Collected& c = got_[o.id];
      EXPECT_FALSE(c.finished) << "output for " << o.id << " after its final one";
      for (auto& t : o.tokens) c.tokens.push_back(std::move(t));
      for (auto& t : o.prompt_logprobs) c.prompt_logprobs.push_back(std::move(t));
      ++c.outputs;
      c.finished = o.finished;
      c.finish_reason = o.finish_reason;
      c.error = o.error;
      c.prompt_tokens = o.prompt_tokens;
      c.cached_tokens = o.cached_tokens;
      c.completion_tokens = o.completion_tokens;
      EXPECT_EQ(o.completion_tokens, int32_t(c.tokens.size()));
      cv_.notify_all();
    };
  }
  // Waits until `id` has at least min_tokens tokens or has finished.
  bool wait_tokens(const std::string& id, size_t min_tokens, double timeout_s = 120) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
      auto it = got_.find(id);
      return it != got_.end() && (it->second.finished || it->second.tokens.size() >= min_tokens);
    });
  }
  bool wait_finished(const std::vector<std::string>& ids, double timeout_s = 300) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
      for (const auto& id : ids) {
        auto it = got_.find(id);
        if (it == got_.end() || !it->second.finished) return false;
      }
      return true;
    });
  }
  Collected get(const std::string& id) {
    std::lock_guard lock(mu_);
    return got_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Collected> got_;
};

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t vocab, int n) {
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab) - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = d(rng);
  return p;
}

inline Request greedy_request(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.sampling.top_logprobs = 2;
  return r;
}

}  // namespace ridge::engine::testing
