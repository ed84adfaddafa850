#include "ridge/tokenizer/jinja/error.h"

#include <fmt/format.h>

namespace ridge::tokenizer::jinja {

TemplateError::TemplateError(Kind kind, std::string message, int line, int column)
    : ridge::Error(format(kind, message, line, column)),
      kind_(kind),
      message_(std::move(message)),
      line_(line),
      column_(column) {}

std::string TemplateError::format(Kind kind, const std::string& message, int line, int column) {
  switch (kind) {
    case Kind::raised:
      return message;
    case Kind::syntax:
      if (line > 0) {
        return fmt::format("chat template syntax error at line {}, column {}: {}", line, column,
                           message);
      }
      return "chat template syntax error: " + message;
    case Kind::runtime:
      break;
  }
  if (line > 0) return fmt::format("chat template error at line {}: {}", line, message);
  return "chat template error: " + message;
}

void runtime_error(std::string message) {
  throw TemplateError(TemplateError::Kind::runtime, std::move(message));
}

}  // namespace ridge::tokenizer::jinja
