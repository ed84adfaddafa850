#include "ridge/tokenizer/jinja/template.h"

#include "ridge/tokenizer/jinja/ast.h"
#include "ridge/tokenizer/jinja/evaluator.h"
#include "ridge/tokenizer/jinja/parser.h"

namespace ridge::tokenizer::jinja {

struct Template::Impl {
  Options options;
  Body body;
};

Template::Template(std::string_view source, Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->body = parse(tokenize(source, options.lexer), options.limits.max_nesting_depth);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& variables) const {
  auto root = std::make_shared<Scope>();
  if (variables.is_dict()) {
    for (const auto& [k, v] : variables.as_dict().entries) {
      if (k.is_string()) root->set(k.as_string(), v);
    }
  } else if (!variables.is_undefined() && !variables.is_none()) {
    runtime_error("template variables must be a dict, got " + type_name(variables));
  }
  Evaluator ev(impl_->options.limits, root);
  std::string out;
  ev.render(impl_->body, out);
  return out;
}

}  // namespace ridge::tokenizer::jinja
