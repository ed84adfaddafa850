// Lexer: template source -> tokens, with Jinja's whitespace control exactly as Hugging Face
// configures it (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//   - "\r\n" and "\r" become "\n"; one trailing newline of the source is dropped;
//   - trim_blocks: the first "\n" after a block tag "%}" or comment "#}" is removed
//     ("+%}" keeps it);
//   - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag are
//     removed ("{%+" keeps them; "{{" is never lstripped);
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::tokenizer::jinja {

enum class TokenType : uint8_t {
  data,  // template text (already whitespace-controlled)
  variable_begin,
  variable_end,
  block_begin,
  block_end,
  name,
  string,  // value unescaped into `text`
  integer,
  floating,
  op,  // operator or punctuation, in `text`
  eof,
};

struct Token {
  TokenType type = TokenType::eof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError(syntax) with line and column on malformed input.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

// "\r\n" and "\r" -> "\n" (Jinja's newline normalization of template text and string literals).
std::string normalize_newlines(std::string_view s);

}  // namespace ridge::tokenizer::jinja
