#include "ridge/engine/generator.h"

#include <cstdint>
#include <algorithm>
#include <chrono>

#include "ridge/core/error.h"

namespace ridge::engine {

Generator::Generator(model::LlamaModel& model, kv::KvPool& pool, std::vector<int32_t> stop_ids)
    : model_(model), pool_(pool), stop_ids_(std::move(stop_ids)), device_sampler_(model.backend()) {
  block_table_.resize(size_t(pool.num_blocks()));
  for (int32_t i = 0; i < int32_t(block_table_.size()); ++i) block_table_[size_t(i)] = i;
}

int32_t Generator::context_limit() const {
  return int32_t(std::min<int64_t>(pool_.num_tokens(), model_.config().max_position));
}

void Generator::run_step(const std::vector<int32_t>& tokens, int32_t context_len, float* logits) {
  batch_.clear();
  const int32_t bs = int32_t(pool_.block_size());
  const int32_t blocks = (context_len + bs - 1) / bs;
  std::vector<int32_t> table(block_table_.begin(), block_table_.begin() + blocks);
  batch_.add_sequence(tokens, context_len, table, bs, true);
  if (!logits) {
    model_.forward({}, batch_, pool_.layers(), nullptr);
    return;
  }
  const std::span<float> out = model_.forward_logits({}, batch_, pool_.layers());
  std::copy(out.begin(), out.end(), logits);
}

GenerateStats Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                  const std::function<bool(const GeneratedToken&)>& on_token) {
  using clock = std::chrono::steady_clock;
  RIDGE_CHECK(!prompt.empty(), "the prompt is empty");
  RIDGE_CHECK(opt.max_tokens >= 0, "max_tokens {} must be >= 0", opt.max_tokens);
  const int32_t limit = context_limit();
  const int64_t want = int64_t(prompt.size()) + opt.max_tokens;
  RIDGE_CHECK(want <= limit,
              "the prompt ({} tokens) plus max_tokens ({}) is {} tokens, past the context limit "
              "of {}",
              prompt.size(), opt.max_tokens, want, limit);
  const int64_t vocab = model_.config().vocab;
  for (int32_t t : prompt)
    RIDGE_CHECK(t >= 0 && t < vocab, "prompt token id {} is outside the vocabulary of {}", t, vocab);

  GenerateStats st;
  st.prompt_tokens = int32_t(prompt.size());
  // Reuse the cached prefix; at least the last prompt token is recomputed for its logits.
  size_t common = 0;
  while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common])
    ++common;
  common = std::min(common, prompt.size() - 1);
  st.cached_tokens = int32_t(common);
  cached_.resize(common);

  Sampler sampler(opt.sampling);
  std::vector<float> logits(static_cast<size_t>(vocab));
  // Device sampling leaves the logits on the device (nothing downloaded but the token); the
  // host Sampler takes over for good when the backend declines.
  bool on_device = opt.device_sampling && device_sampler_.available();
  PenaltyHistory history;
  std::vector<SampleResult> device_out;
  const auto t0 = clock::now();
  const int32_t chunk = std::max(1, opt.prefill_chunk);
  for (size_t pos = common; pos < prompt.size(); pos += size_t(chunk)) {
    const size_t end = std::min(prompt.size(), pos + size_t(chunk));
    std::vector<int32_t> piece(prompt.begin() + long(pos), prompt.begin() + long(end));
    run_step(piece, int32_t(end), on_device ? nullptr : logits.data());
    cached_.insert(cached_.end(), piece.begin(), piece.end());
    ++st.prefill_steps;
  }
  const auto t1 = clock::now();
  st.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  std::vector<int32_t> output;
  st.finish_reason = "length";
  auto t_first = t1;
  while (int32_t(output.size()) < opt.max_tokens) {
    SampleResult r;
    if (on_device) {
      if (uses_penalties(opt.sampling))
        history.update(prompt, output, vocab, opt.sampling.repetition_penalty != 1.0f);
      const DeviceSampleRow row{&opt.sampling, uint64_t(output.size()), &history, {}};
      if (device_sampler_.sample({}, model_.device_logits(), {&row, 1}, device_out)) {
        r = std::move(device_out[0]);
      } else {  // no device sampler: this step's logits to the host, and the host from now on
        on_device = false;
        model_.backend().download({}, logits.data(), model_.device_logits().data,
                                  size_t(vocab) * 4);
        model_.backend().synchronize({});
      }
    }
    if (!on_device) r = sampler.sample(logits, prompt, output);
    output.push_back(r.token);
    if (output.size() == 1) t_first = clock::now();
    const bool is_stop = !opt.ignore_eos &&
                         std::find(stop_ids_.begin(), stop_ids_.end(), r.token) != stop_ids_.end();
    if (!on_token({r.token, r.logprob, std::move(r.top)})) {
      st.finish_reason = "cancelled";
      break;
    }
    if (is_stop) {
      st.finish_reason = "stop";
      break;
    }
    if (int32_t(output.size()) == opt.max_tokens) break;
    run_step({r.token}, int32_t(cached_.size()) + 1, on_device ? nullptr : logits.data());
    cached_.push_back(r.token);
  }
  st.generated = int32_t(output.size());
  st.decode_seconds = std::chrono::duration<double>(clock::now() - t_first).count();
  return st;
}

}  // namespace ridge::engine
