// ridge's Jinja subset: parse a template once, render it many times. The subset (statements,
// expressions, filters, tests, globals, methods) and the limits are documented in docs/JINJA.md.
//
//   jinja::Template t("{% for m in messages %}{{ m.role }}{% endfor %}");
//   std::string text = t.render(variables);  // variables: a dict Value (see from_json)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/lexer.h"
#include "ridge/tokenizer/jinja/value.h"

namespace ridge::tokenizer::jinja {

// Bounds that keep a hostile template from crashing or exhausting the process. Exceeding one is
// a runtime TemplateError, never a crash.
struct Limits {
  int max_nesting_depth = 200;                 // nested blocks + nested expressions (parse time)
  int max_call_depth = 64;                     // macro calls within macro calls
  size_t max_output_bytes = size_t{64} << 20;  // the rendered text, and any one string value
  size_t max_work_bytes = size_t{1} << 30;     // all strings and lists built during one render
  uint64_t max_steps = 10'000'000;             // loop iterations, calls, filters during one render
};

struct Options {
  LexerOptions lexer;  // Hugging Face's settings by default
  Limits limits;
};

class Template {
 public:
  // Throws TemplateError(syntax) with line and column.
  explicit Template(std::string_view source, Options options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `variables` is a dict of the names the template sees; functions such as raise_exception,
  // namespace and range are always available (a variable of the same name shadows them).
  // Throws TemplateError (runtime or raised).
  std::string render(const Value& variables) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::tokenizer::jinja
