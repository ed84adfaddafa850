// Chat templates: the model's own Jinja template rendered by ridge's Jinja subset (no Jinja
// library is packaged for C++ in Debian; the subset and its limits are in docs/JINJA.md).
// Rendering matches Hugging Face's apply_chat_template(..., tokenize=False): same environment
// (trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now, tojson as
// json.dumps), same variables (tools and documents are none unless given).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ridge::tokenizer {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

class ChatTemplate {
 public:
  // Parses the template; throws ridge::Error with the line/column of a syntax error.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the variables HF transformers passes: messages, add_generation_prompt,
  // bos_token, eos_token, plus `extra` (an object of further variables).
  // Template-raised errors (raise_exception) become ridge::Error with the template's message.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token,
                     const nlohmann::json& extra = nlohmann::json::object()) const;

  // Renders with every variable given by the caller: `variables` is a JSON object holding
  // messages (with any fields: tool_calls, content parts, ...), add_generation_prompt,
  // bos_token, eos_token, tools, ... Key order is kept, so tojson output matches Python's.
  // tools and documents are none unless given.
  std::string render_variables(const nlohmann::ordered_json& variables) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A generic template for vocabularies that ship none (ChatML).
const std::string& default_chat_template();

}  // namespace ridge::tokenizer
