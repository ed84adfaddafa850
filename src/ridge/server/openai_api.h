// The OpenAI API's request side: parsing and validating /v1/chat/completions and /v1/completions
// bodies into what the engine runs, and OpenAI's error JSON. Every refusal names the parameter
// at fault, with OpenAI's status, type and code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/engine/sampler.h"
#include "ridge/tokenizer/chat_template.h"
#include "ridge/tokenizer/tokenizer.h"

namespace ridge::engine {
class JsonSchema;
}

namespace ridge::server {

// An error answered in OpenAI's form: {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::exception {
  int status;
  std::string message;
  std::string param;  // "" -> null
  std::string type;
  std::string code;   // "" -> null
  ApiError(int status, std::string message, std::string param = "", std::string type = "",
           std::string code = "");
  const char* what() const noexcept override { return message.c_str(); }
  std::string body() const;
};

enum class Api { chat, completions };

// One parsed generation request.
struct GenParams {
  // Bounds on what one request may ask for (each past it is a 400 naming the parameter): the
  // server copies the stop lists into every choice, and a completions request's prompts × n
  // choices are built before the queue can refuse them.
  // completions: prompts in one request when the server's queue has no bound (max_queue 0);
  // else the bound is max_queue (PromptContext), as no more choices could ever be queued.
  static constexpr size_t kMaxPrompts = 4096;
  static constexpr size_t kMaxStops = 16;           // stop strings
  static constexpr size_t kMaxStopBytes = 1024;     // bytes of one stop string
  static constexpr size_t kMaxStopTokenIds = 1024;  // distinct stop_token_ids

  Api api = Api::chat;
  std::string model;                          // "" when not given
  std::vector<std::vector<int32_t>> prompts;  // token ids; chat has one, completions one or more
  int32_t n = 1;                              // choices per prompt
  int32_t max_tokens = -1;                    // -1: not given (the server picks the default)
  engine::SamplingParams sampling;            // OpenAI's defaults: temperature 1, top_p 1
  bool seed_given = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // sorted, without duplicates
  bool ignore_eos = false;
  int32_t min_tokens = 0;  // vLLM's: no stop token nor stop string before this many tokens
  // completions: the prompt's text (and, with logprobs, its logprobs) first
  bool echo = false;
  bool json_object = false;  // response_format {"type": "json_object"}
  std::shared_ptr<const engine::JsonSchema> json_schema;  // {"type": "json_schema", ...}
  // vLLM's prompt_logprobs (0..20; -1 not asked): each prompt token's logprob and rank with this
  // many alternatives, in the response (not streamed)
  int32_t prompt_logprobs = -1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // chat: logprobs; completions: logprobs is not null
  std::string user;
};

// What turning messages or prompt text into tokens needs.
struct PromptContext {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;
  std::string bos_token, eos_token;
  // The server's --max-queue: a completions request of more prompts is refused while parsing
  // (0: no bound on the queue, GenParams::kMaxPrompts prompts at most).
  int32_t max_queue = 0;
};

// Parses the body as JSON: malformed JSON or a body that is not an object is a 400.
nlohmann::json parse_body(std::string_view body);
// The "model" field ("" when absent or null); a non-string is a 400.
std::string requested_model(const nlohmann::json& body);
// Validates every known parameter (types and ranges) and builds the prompt tokens (the chat
// template for messages). Throws ApiError (400) naming the parameter.
// raw_body: the body's text, for what needs its key order (a JSON schema's properties).
GenParams parse_generation(Api api, const nlohmann::json& body, const PromptContext& ctx,
                           std::string_view raw_body = {});

// Compares secrets in time that depends on their lengths only, not on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace ridge::server
