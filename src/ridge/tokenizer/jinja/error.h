// The engine's one exception type: a ridge::Error that also says what kind of failure it was and
// where in the template it happened (line and column are 1-based; 0 when unknown).
#pragma once

#include <string>

#include "ridge/core/error.h"

namespace ridge::tokenizer::jinja {

class TemplateError : public ridge::Error {
 public:
  enum class Kind {
    syntax,   // the template does not parse
    runtime,  // evaluation failed (type error, undefined value used, a limit was hit, ...)
    raised,   // the template called raise_exception(message)
  };

  // what(): for `raised`, exactly the template's message (what HF shows the user); otherwise
  // "chat template syntax error at line L, column C: ..." / "chat template error at line L: ...".
  TemplateError(Kind kind, std::string message, int line = 0, int column = 0);

  Kind kind() const { return kind_; }
  // The message without the location prefix.
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  static std::string format(Kind kind, const std::string& message, int line, int column);

  Kind kind_;
  std::string message_;
  int line_;
  int column_;
};

// Throws a runtime TemplateError without a location (the evaluator adds the line).
[[noreturn]] void runtime_error(std::string message);

}  // namespace ridge::tokenizer::jinja
