// Sequence: one request as the engine tracks it. Its tokens are the prompt followed by the tokens
// generated so far; the KV of the first num_computed tokens lives in the blocks of block_table.
// Each step computes a chunk of the not-yet-computed tokens; a chunk that reaches the last token
// gives a logits row from which the next token is sampled. A preempted sequence drops its blocks
// and num_computed to 0 and later recomputes prompt + generated tokens as one long prefill (its
// sampler state continues).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ridge/engine/device_sampler.h"
#include "ridge/engine/engine.h"
#include "ridge/engine/json_constraint.h"
#include "ridge/engine/json_schema.h"
#include "ridge/engine/sampler.h"

namespace ridge::engine {

enum class SequenceStatus { waiting, running, finished };

struct Sequence {
  using Clock = std::chrono::steady_clock;

  // stop_ids: the tokens that end this sequence (the model's unless ignore_eos, plus the
  // request's stop_token_ids).
  Sequence(int64_t seq_id, Request request, std::vector<int32_t> stop_ids,
           OutputCallback on_output = {});

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_prompt_tokens() const { return num_prompt; }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt; }
  std::span<const int32_t> prompt() const { return {tokens.data(), size_t(num_prompt)}; }
  std::span<const int32_t> output() const {
    return {tokens.data() + num_prompt, size_t(num_output_tokens())};
  }
  // Tokens not computed yet: 1 for a decode, more for a (re)prefill.
  int32_t num_uncomputed() const { return num_tokens() - num_computed; }
  bool is_stop_token(int32_t token) const;
  // Positions in [start, start + n) whose logits give a prompt logprob still owed
  // (Request::prompt_logprobs): [first, last), empty when none.
  std::pair<int32_t, int32_t> prompt_logprob_positions(int32_t start, int32_t n) const {
    if (request.prompt_logprobs < 0) return {start, start};
    const int32_t lo = std::max(start, prompt_logprobs_next - 1);
    const int32_t hi = std::min(start + n, num_prompt - 1);
    return lo < hi ? std::pair{lo, hi} : std::pair{start, start};
  }
  bool owes_prompt_logprobs() const {
    return request.prompt_logprobs >= 0 && prompt_logprobs_next < num_prompt;
  }
  // The tokens the next draw must not pick, ascending: the stop tokens until request.min_tokens
  // tokens have been generated, and what the JSON constraint rules out. Valid until the next
  // token is drawn (advance()).
  std::span<const int32_t> banned_tokens();
  // A token was drawn: the constraint (if any) reads it.
  void advance(int32_t token) {
    if (constraint) constraint->advance(token);
  }

  const int64_t seq_id;  // arrival order: smaller is older
  Request request;       // its prompt was moved into tokens
  std::vector<int32_t> stop_ids;
  OutputCallback on_output;
  Sampler sampler;
  std::unique_ptr<TokenConstraint> constraint;  // Request::json_object / json_schema
  // The tokens seen so far with their output counts, for device sampling with penalties (updated
  // before each device-sampled step; empty otherwise).
  PenaltyHistory penalties;

  std::vector<int32_t> tokens;
  int32_t num_prompt = 0;
  int32_t num_computed = 0;
  std::vector<int32_t> block_table;
  // Chain hashes of the leading full blocks known to the prefix cache (inserted or matched).
  std::vector<uint64_t> block_hashes;
  SequenceStatus status = SequenceStatus::waiting;
  bool admitted_once = false;
  int32_t num_cached_prompt = 0;  // prompt tokens served from the prefix cache at first admission
  int32_t num_preemptions = 0;
  std::string finish_reason;  // "stop" | "length" | "abort" | "error"
  std::string error;

  // Prompt logprobs: the next prompt token owed one (token 0 has none), and those computed and
  // not handed out yet.
  int32_t prompt_logprobs_next = 1;
  std::vector<TokenOutput> prompt_logprobs;
  // Produced in this step, not handed to on_output yet.
  std::vector<TokenOutput> pending;
  Clock::time_point arrival = Clock::now();
  Clock::time_point first_token{}, last_token{};
};

}  // namespace ridge::engine
