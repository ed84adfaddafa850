#include "ridge/server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/engine/json_schema.h"

namespace ridge::server {

using nlohmann::json;

ApiError::ApiError(int s, std::string m, std::string p, std::string t, std::string c)
    : status(s), message(std::move(m)), param(std::move(p)), type(std::move(t)), code(std::move(c)) {
  if (type.empty()) {
    switch (status) {
      case 401: type = "invalid_request_error"; break;
      case 404: type = "invalid_request_error"; break;
      case 429: type = "rate_limit_error"; break;
      case 500: type = "server_error"; break;
      case 503: type = "service_unavailable"; break;
      default: type = "invalid_request_error";
    }
  }
}

std::string ApiError::body() const {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code);
  nlohmann::ordered_json body;
  body["error"] = std::move(e);
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= unsigned(x ^ y);
  }
  // Keep the compiler from turning the loop into an early exit.
  volatile unsigned sink = diff;
  return sink == 0;
}

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    // nlohmann's message names the byte position (a syntax error) or the number that overflows a
    // double (out_of_range 406).
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw ApiError(400, fmt::format("We could not parse the JSON body of your request: {}", what));
  }
  if (!j.is_object())
    throw ApiError(400, fmt::format("the request body must be a JSON object, got {}",
                                    j.type_name()));
  return j;
}

namespace {

const char* type_name(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// The value of `name`, or nullptr when absent or null.
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

double get_number(const json& v, const std::string& name, double lo, double hi, bool lo_open = false) {
  if (!v.is_number())
    bad(name, fmt::format("Invalid type for '{}': expected a number, but got {} instead.", name,
                          type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    bad(name, fmt::format("Invalid value for '{}': {} is outside {}{}, {}].", name, v.dump(),
                          lo_open ? "(" : "[", lo, hi));
  return x;
}

int64_t get_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!(v.is_number_integer() || v.is_number_unsigned()))
    bad(name, fmt::format("Invalid type for '{}': expected an integer, but got {} instead.", name,
                          type_name(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, fmt::format("Invalid value for '{}': {} is outside [{}, {}].", name, v.dump(), lo, hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(name, fmt::format("Invalid value for '{}': {} is outside [{}, {}].", name, x, lo, hi));
  return x;
}

bool get_bool(const json& v, const std::string& name) {
  if (!v.is_boolean())
    bad(name, fmt::format("Invalid type for '{}': expected a boolean, but got {} instead.", name,
                          type_name(v)));
  return v.get<bool>();
}

const std::string& get_string(const json& v, const std::string& name) {
  if (!v.is_string())
    bad(name, fmt::format("Invalid type for '{}': expected a string, but got {} instead.", name,
                          type_name(v)));
  return v.get_ref<const std::string&>();
}

std::vector<int32_t> token_ids(const json& arr, const std::string& name, size_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const auto& t = arr[i];
    const std::string where = fmt::format("{}[{}]", name, i);
    if (!(t.is_number_integer() || t.is_number_unsigned()))
      bad(name, fmt::format("Invalid type for '{}': expected a token id (integer), but got {} "
                            "instead.", where, type_name(t)));
    const int64_t id = t.get<int64_t>();
    if (id < 0 || uint64_t(id) >= vocab)
      bad(name, fmt::format("Invalid value for '{}': token id {} is outside the vocabulary "
                            "[0, {}).", where, id, vocab));
    ids.push_back(int32_t(id));
  }
  return ids;
}

// logit_bias: {"token id": bias, ...}, ids as decimal strings within the vocabulary, biases in
// [-100, 100]; sorted by id.
std::vector<engine::TokenBias> logit_bias(const json& v, size_t vocab) {
  const std::string name = "logit_bias";
  if (!v.is_object())
    bad(name, fmt::format("Invalid type for 'logit_bias': expected an object mapping token ids "
                          "to biases, but got {} instead.",
                          type_name(v)));
  if (v.size() > engine::SamplingParams::kMaxLogitBias)
    bad(name, fmt::format("Invalid 'logit_bias': {} entries, at most {}.", v.size(),
                          engine::SamplingParams::kMaxLogitBias));
  std::vector<engine::TokenBias> out;
  for (const auto& [key, value] : v.items()) {
    const bool digits =
        !key.empty() && key.size() <= 9 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      bad(name,
          fmt::format("Invalid key in 'logit_bias': {} is not a token id.", json(key).dump()));
    const int64_t id = std::stoll(key);
    if (uint64_t(id) >= vocab)
      bad(name, fmt::format("Invalid key in 'logit_bias': token id {} is outside the vocabulary "
                            "[0, {}).",
                            id, vocab));
    if (!value.is_number())
      bad(name, fmt::format("Invalid type for 'logit_bias' of token {}: expected a number, but "
                            "got {} instead.",
                            id, type_name(value)));
    const double b = value.get<double>();
    if (!std::isfinite(b) || b < -100 || b > 100)
      bad(name, fmt::format("Invalid value for 'logit_bias' of token {}: {} is outside [-100, "
                            "100].",
                            id, value.dump()));
    out.push_back({int32_t(id), float(b)});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.token < b.token; });
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].token == out[i - 1].token)  // "7" and "07"
      bad(name, fmt::format("Invalid 'logit_bias': token id {} is given twice.", out[i].token));
  return out;
}

std::string message_content(const json& m, size_t i, const std::string& role) {
  const std::string name = fmt::format("messages[{}].content", i);
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return "";
    bad(name, fmt::format("Missing required parameter: '{}'.", name));
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    bad(name, fmt::format("Invalid type for '{}': expected a string or an array of content "
                          "parts, but got {} instead.", name, type_name(*it)));
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const json& part = (*it)[k];
    const std::string pname = fmt::format("{}[{}]", name, k);
    if (!part.is_object())
      bad(pname, fmt::format("Invalid type for '{}': expected an object, but got {} instead.",
                             pname, type_name(part)));
    const json* type = field(part, "type");
    if (!type) bad(pname + ".type", fmt::format("Missing required parameter: '{}.type'.", pname));
    const std::string& t = get_string(*type, pname + ".type");
    if (t != "text")
      bad(pname + ".type", fmt::format("Invalid value for '{}.type': '{}' is not supported by "
                                       "this model (only 'text').", pname, t));
    const json* tx = field(part, "text");
    if (!tx) bad(pname + ".text", fmt::format("Missing required parameter: '{}.text'.", pname));
    if (!text.empty()) text += "\n";
    text += get_string(*tx, pname + ".text");
  }
  return text;
}

}  // namespace

std::string requested_model(const json& body) {
  const json* m = field(body, "model");
  return m ? get_string(*m, "model") : std::string();
}

GenParams parse_generation(Api api, const json& body, const PromptContext& ctx,
                           std::string_view raw_body) {
  GenParams p;
  p.api = api;
  p.model = requested_model(body);
  const auto& tok = *ctx.tokenizer;
  const size_t vocab = tok.vocab_size();

  if (api == Api::chat) {
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "Missing required parameter: 'messages'.");
    if (!msgs->is_array())
      bad("messages", fmt::format("Invalid type for 'messages': expected an array, but got {} "
                                  "instead.", type_name(*msgs)));
    if (msgs->empty()) bad("messages", "Invalid 'messages': empty array. Expected at least one message.");
    std::vector<tokenizer::ChatMessage> messages;
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      const std::string name = fmt::format("messages[{}]", i);
      if (!m.is_object())
        bad(name, fmt::format("Invalid type for '{}': expected an object, but got {} instead.",
                              name, type_name(m)));
      const json* role = field(m, "role");
      if (!role) bad(name + ".role", fmt::format("Missing required parameter: '{}.role'.", name));
      std::string r = get_string(*role, name + ".role");
      if (r == "developer") r = "system";
      if (r != "system" && r != "user" && r != "assistant")
        bad(name + ".role", fmt::format("Invalid value for '{}.role': '{}' is not supported "
                                        "(system, developer, user, assistant).", name, r));
      messages.push_back({r, message_content(m, i, r)});
    }
    std::string text;
    try {
      text = ctx.chat_template->render(messages, /*add_generation_prompt=*/true, ctx.bos_token,
                                       ctx.eos_token);
    } catch (const Error& e) {
      bad("messages", fmt::format("The chat template refused the messages: {}", e.what()));
    }
    p.prompts.push_back(tok.encode(text, /*add_special=*/false, /*parse_special=*/true));
  } else {
    const json* pr = field(body, "prompt");
    if (!pr) bad("prompt", "Missing required parameter: 'prompt'.");
    if (pr->is_string()) {
      p.prompts.push_back(tok.encode(pr->get<std::string>(), true, true));
    } else if (pr->is_array()) {
      if (pr->empty()) bad("prompt", "Invalid 'prompt': empty array.");
      const json& first = (*pr)[0];
      if (first.is_number()) {
        p.prompts.push_back(token_ids(*pr, "prompt", vocab));
      } else {
        // Checked before any prompt is built: each becomes n choices on the server, which
        // queues at most max_queue of them.
        const size_t max_prompts =
            ctx.max_queue > 0 ? size_t(ctx.max_queue) : GenParams::kMaxPrompts;
        if (pr->size() > max_prompts)
          bad("prompt",
              fmt::format("Invalid 'prompt': {} prompts, at most {} in one request{}.", pr->size(),
                          max_prompts, ctx.max_queue > 0 ? " (the server's --max-queue)" : ""));
        for (size_t i = 0; i < pr->size(); ++i) {
          const json& e = (*pr)[i];
          const std::string name = fmt::format("prompt[{}]", i);
          if (e.is_string()) {
            p.prompts.push_back(tok.encode(e.get<std::string>(), true, true));
          } else if (e.is_array()) {
            if (e.empty()) bad("prompt", fmt::format("Invalid '{}': empty array.", name));
            p.prompts.push_back(token_ids(e, name, vocab));
          } else {
            bad("prompt", fmt::format("Invalid type for '{}': expected a string or an array of "
                                      "token ids, but got {} instead.", name, type_name(e)));
          }
        }
      }
    } else {
      bad("prompt", fmt::format("Invalid type for 'prompt': expected a string, an array of token "
                                "ids, or an array of those, but got {} instead.", type_name(*pr)));
    }
    for (const auto& pt : p.prompts)
      if (pt.empty()) bad("prompt", "Invalid 'prompt': it encodes to no tokens.");
    if (const json* e = field(body, "echo")) p.echo = get_bool(*e, "echo");
    if (const json* s = field(body, "suffix"); s && !get_string(*s, "suffix").empty())
      bad("suffix", "Invalid value for 'suffix': suffixes are not supported.");
  }

  // Generation length. For chat, max_completion_tokens replaces the deprecated max_tokens.
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  if (const json* v = field(body, "max_tokens")) p.max_tokens = int32_t(get_int(*v, "max_tokens", 1, kMaxInt));
  if (api == Api::chat)
    if (const json* v = field(body, "max_completion_tokens"))
      p.max_tokens = int32_t(get_int(*v, "max_completion_tokens", 1, kMaxInt));

  auto& s = p.sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  if (const json* v = field(body, "temperature")) s.temperature = float(get_number(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) s.top_p = float(get_number(*v, "top_p", 0, 1, true));
  if (const json* v = field(body, "top_k")) {
    const int64_t k = get_int(*v, "top_k", -1, kMaxInt);
    s.top_k = k < 0 ? 0 : int32_t(k);
  }
  if (const json* v = field(body, "min_p")) s.min_p = float(get_number(*v, "min_p", 0, 1));
  if (const json* v = field(body, "presence_penalty"))
    s.presence_penalty = float(get_number(*v, "presence_penalty", -2, 2));
  if (const json* v = field(body, "frequency_penalty"))
    s.frequency_penalty = float(get_number(*v, "frequency_penalty", -2, 2));
  if (const json* v = field(body, "repetition_penalty"))
    s.repetition_penalty = float(get_number(*v, "repetition_penalty", 0, 10, true));
  if (const json* v = field(body, "seed")) {
    s.seed = uint64_t(get_int(*v, "seed", std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max()));
    p.seed_given = true;
  }
  if (const json* v = field(body, "n")) p.n = int32_t(get_int(*v, "n", 1, 128));
  if (const json* v = field(body, "best_of"); v && get_int(*v, "best_of", 1, 128) != p.n)
    bad("best_of", "Invalid value for 'best_of': only best_of == n is supported.");

  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      p.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > GenParams::kMaxStops)
        bad("stop", fmt::format("Invalid 'stop': {} strings, at most {}.", v->size(),
                                GenParams::kMaxStops));
      for (size_t i = 0; i < v->size(); ++i)
        p.stop.push_back(get_string((*v)[i], fmt::format("stop[{}]", i)));
    } else {
      bad("stop", fmt::format("Invalid type for 'stop': expected a string or an array of "
                              "strings, but got {} instead.", type_name(*v)));
    }
    for (const auto& st : p.stop) {
      if (st.empty()) bad("stop", "Invalid 'stop': stop strings must not be empty.");
      // Every choice holds the stop strings, and matching one costs up to its length squared per
      // output piece (StopMatcher::push).
      if (st.size() > GenParams::kMaxStopBytes)
        bad("stop", fmt::format("Invalid 'stop': a stop string of {} bytes, at most {}.", st.size(),
                                GenParams::kMaxStopBytes));
    }
  }
  if (const json* v = field(body, "stop_token_ids")) {
    if (!v->is_array())
      bad("stop_token_ids", fmt::format("Invalid type for 'stop_token_ids': expected an array, "
                                        "but got {} instead.", type_name(*v)));
    auto& ids = p.stop_token_ids;
    ids = token_ids(*v, "stop_token_ids", vocab);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() > GenParams::kMaxStopTokenIds)
      bad("stop_token_ids",
          fmt::format("Invalid 'stop_token_ids': {} distinct token ids, at most {}.", ids.size(),
                      GenParams::kMaxStopTokenIds));
  }
  if (const json* v = field(body, "ignore_eos")) p.ignore_eos = get_bool(*v, "ignore_eos");
  if (const json* v = field(body, "min_tokens")) {
    p.min_tokens = int32_t(get_int(*v, "min_tokens", 0, kMaxInt));
    if (p.max_tokens >= 0 && p.min_tokens > p.max_tokens)
      bad("min_tokens", fmt::format("Invalid value for 'min_tokens': {} is more than max_tokens "
                                    "({}).",
                                    p.min_tokens, p.max_tokens));
  }
  if (const json* v = field(body, "logit_bias")) s.logit_bias = logit_bias(*v, vocab);
  if (const json* v = field(body, "prompt_logprobs"))
    p.prompt_logprobs = int32_t(get_int(*v, "prompt_logprobs", 0, 20));

  if (const json* v = field(body, "stream")) p.stream = get_bool(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!p.stream)
      bad("stream_options", "Invalid value for 'stream_options': only allowed when 'stream' is true.");
    if (!v->is_object())
      bad("stream_options", fmt::format("Invalid type for 'stream_options': expected an object, "
                                        "but got {} instead.", type_name(*v)));
    if (const json* u = field(*v, "include_usage"))
      p.include_usage = get_bool(*u, "stream_options.include_usage");
  }

  if (api == Api::chat) {
    if (const json* v = field(body, "logprobs")) p.logprobs = get_bool(*v, "logprobs");
    if (const json* v = field(body, "top_logprobs")) {
      s.top_logprobs = int32_t(get_int(*v, "top_logprobs", 0, 20));
      if (!p.logprobs)
        bad("top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be true when "
                            "'top_logprobs' is given.");
    }
  } else {
    if (const json* v = field(body, "logprobs")) {
      s.top_logprobs = int32_t(get_int(*v, "logprobs", 0, 20));
      p.logprobs = true;
    }
  }
  if (const json* v = field(body, "user")) p.user = get_string(*v, "user");
  if (p.prompt_logprobs >= 0 && p.stream)
    bad("prompt_logprobs", "Invalid value for 'prompt_logprobs': not supported with 'stream'.");
  if (const json* v = field(body, "tools"); v && !(v->is_array() && v->empty()))
    bad("tools", "Invalid value for 'tools': tool calling is not supported.");
  if (const json* v = field(body, "response_format")) {
    const json* t = v->is_object() ? field(*v, "type") : nullptr;
    const std::string type = t && t->is_string() ? t->get<std::string>() : "";
    if (type == "json_object") {
      p.json_object = true;
    } else if (type == "json_schema") {
      const json* js = field(*v, "json_schema");
      if (!js || !js->is_object() || !field(*js, "schema") || !field(*js, "schema")->is_object())
        bad("response_format",
            "Invalid value for 'response_format': 'json_schema' needs an "
            "object with a 'schema' object.");
      // The schema as written (its properties' order is the order keys are generated in).
      nlohmann::ordered_json schema;
      if (!raw_body.empty())
        schema =
            nlohmann::ordered_json::parse(raw_body)["response_format"]["json_schema"]["schema"];
      else
        schema = nlohmann::ordered_json(*field(*js, "schema"));
      try {
        p.json_schema = engine::JsonSchema::compile(schema);
      } catch (const Error& e) {
        bad("response_format", fmt::format("Invalid value for 'response_format': {}", e.what()));
      }
    } else if (type != "text") {
      bad("response_format",
          "Invalid value for 'response_format': the type must be \"text\", \"json_object\" or "
          "\"json_schema\".");
    }
  }
  return p;
}

}  // namespace ridge::server
