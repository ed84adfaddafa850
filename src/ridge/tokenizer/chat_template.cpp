#include "ridge/tokenizer/chat_template.h"

#include "ridge/tokenizer/jinja/template.h"

namespace ridge::tokenizer {

struct ChatTemplate::Impl {
  explicit Impl(const std::string& source) : tmpl(source) {}
  jinja::Template tmpl;
};

ChatTemplate::ChatTemplate(const std::string& source) : impl_(std::make_unique<Impl>(source)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

namespace {

// The variables HF's render_jinja_template always passes.
jinja::Dict base_variables() {
  jinja::Dict vars;
  vars.set("tools", nullptr);
  vars.set("documents", nullptr);
  return vars;
}

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token, const nlohmann::json& extra) const {
  jinja::Array list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", m.role);
    d.set("content", m.content);
    list.emplace_back(std::move(d));
  }
  jinja::Dict vars = base_variables();
  vars.set("messages", jinja::Value(std::move(list)));
  vars.set("add_generation_prompt", add_generation_prompt);
  vars.set("bos_token", bos_token);
  vars.set("eos_token", eos_token);
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it)
      vars.set(it.key(), jinja::from_json(it.value()));
  }
  return impl_->tmpl.render(jinja::Value(std::move(vars)));
}

std::string ChatTemplate::render_variables(const nlohmann::ordered_json& variables) const {
  jinja::Dict vars = base_variables();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) {
      vars.set(it.key(), jinja::from_json(it.value()));
    }
  }
  return impl_->tmpl.render(jinja::Value(std::move(vars)));
}

const std::string& default_chat_template() {
  // ChatML, the template transformers used to fall back to.
  static const std::string chatml =
      "{% for message in messages %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
      "{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return chatml;
}

}  // namespace ridge::tokenizer
