// Helpers for the Jinja engine tests: render a template with variables given as JSON text.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ridge/tokenizer/jinja/template.h"

namespace ridge::tokenizer::jinja::testing {

inline std::string render(std::string_view source, const char* variables_json = "{}",
                          const Options& options = {}) {
  const Template t(source, options);
  return t.render(from_json(nlohmann::ordered_json::parse(variables_json)));
}

// The error a template raises (parse or render); "" when it renders.
inline TemplateError::Kind error_kind(std::string_view source, const char* variables_json = "{}",
                                      const Options& options = {}) {
  try {
    render(source, variables_json, options);
  } catch (const TemplateError& e) {
    return e.kind();
  }
  throw std::runtime_error("expected the template to fail: " + std::string(source));
}

inline TemplateError catch_error(std::string_view source, const char* variables_json = "{}",
                                 const Options& options = {}) {
  try {
    render(source, variables_json, options);
  } catch (const TemplateError& e) {
    return e;
  }
  throw std::runtime_error("expected the template to fail: " + std::string(source));
}

}  // namespace ridge::tokenizer::jinja::testing
