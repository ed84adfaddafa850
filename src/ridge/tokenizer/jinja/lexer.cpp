#include "ridge/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/unicode.h"

namespace ridge::tokenizer::jinja {

std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      char sign = 0;
      if (start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')) {
        sign = src_[start + 2];
      }
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(start, raw_end);
      emit_data(pos, strip_text(src_.substr(pos, start - pos), sign, kind != '{', line_starting));
      const size_t after_open = start + 2 + (sign ? 1 : 0);
      if (raw) {
        line_starting = src_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(start, after_open, line_starting);
      } else {
        pos = lex_tag(start, after_open, kind == '%', line_starting);
      }
    }
    Token eof;
    eof.type = TokenType::eof;
    locate(src_.size(), eof);
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    Token t;
    locate(pos, t);
    throw TemplateError(TemplateError::Kind::syntax, message, t.line, t.column);
  }

  // Line and column (in characters) of byte offset `pos`. Tokens arrive in source order, so the
  // column is counted on from the previous position on the same line: linear over the template
  // even when it is one long line.
  void locate(size_t pos, Token& t) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line_start = *(it - 1);
    t.line = static_cast<int>(it - line_starts_.begin());
    if (!(cursor_line_start_ == line_start && cursor_pos_ <= pos)) {
      cursor_line_start_ = line_start;
      cursor_pos_ = line_start;
      cursor_column_ = 1;
    }
    cursor_column_ +=
        unicode::length(std::string_view(src_).substr(cursor_pos_, pos - cursor_pos_));
    cursor_pos_ = pos;
    t.column = static_cast<int>(cursor_column_);
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // Whitespace (Python's \s) starting at pos; returns the position after it.
  size_t skip_space(size_t pos) const {
    while (pos < src_.size()) {
      size_t len = 0;
      if (!unicode::is_space(unicode::decode(src_, pos, len))) break;
      pos += len;
    }
    return pos;
  }

  bool starts_with(size_t pos, std::string_view s) const {
    return src_.compare(pos, s.size(), s) == 0;
  }

  // "{%" [-+]? \s* "raw" \s* ("-%}" \s* | "%}")
  bool match_raw_begin(size_t start, size_t& end) const {
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      end = skip_space(p + 3);
      return true;
    }
    if (starts_with(p, "%}")) {
      end = p + 2;
      return true;
    }
    return false;
  }

  // Jinja's OptionalLStrip: the text before a tag, with "-" or lstrip_blocks applied.
  std::string strip_text(std::string text, char sign, bool lstrip_applies, bool line_starting) {
    if (sign == '-') {
      return unicode::strip(text, nullptr, false, true);
    }
    if (sign != '+' && options_.lstrip_blocks && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          skip_space_in(text, l_pos) == text.size()) {
        text.resize(l_pos);
      }
    }
    return text;
  }

  static size_t skip_space_in(const std::string& s, size_t pos) {
    while (pos < s.size()) {
      size_t len = 0;
      if (!unicode::is_space(unicode::decode(s, pos, len))) break;
      pos += len;
    }
    return pos;
  }

  void emit_data(size_t pos, std::string text) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::data;
    t.text = std::move(text);
    locate(pos, t);
    tokens_.push_back(std::move(t));
  }

  void emit(TokenType type, size_t pos, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    locate(pos, t);
    tokens_.push_back(std::move(t));
  }

  // Consumes a tag end at `pos` ("+%}", "-%}\s*", "%}\n?" or "-}}\s*", "}}"); returns the new
  // position, or npos when there is no end here.
  size_t match_end(size_t pos, bool block, bool& ends_with_newline) const {
    const std::string_view close = block ? "%}" : "}}";
    size_t end = std::string::npos;
    if (block && src_[pos] == '+' && starts_with(pos + 1, close)) {
      end = pos + 3;
    } else if (src_[pos] == '-' && starts_with(pos + 1, close)) {
      end = skip_space(pos + 3);
    } else if (starts_with(pos, close)) {
      end = pos + 2;
      if (block && options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
    }
    if (end != std::string::npos) ends_with_newline = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_raw(size_t pos, bool& line_starting) {
    // Body up to "{%" [-+]? \s* "endraw" \s* end.
    for (size_t i = src_.find("{%", pos); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_space(p);
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      if (p >= src_.size()) break;
      bool nl = false;
      const size_t end = match_end(p, true, nl);
      if (end == std::string::npos) continue;
      emit_data(pos, strip_text(src_.substr(pos, i - pos), sign, true, line_starting));
      line_starting = nl;
      return end;
    }
    fail(pos, "Missing end of raw directive");
  }

  size_t lex_comment(size_t start, size_t content, bool& line_starting) {
    const size_t close = src_.find("#}", content);
    if (close == std::string::npos) fail(start, "Missing end of comment tag");
    size_t end = close + 2;
    if (close > content && src_[close - 1] == '-') {
      end = skip_space(end);
    } else if (close > content && src_[close - 1] == '+') {
      // keep what follows
    } else if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    line_starting = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t start, size_t pos, bool block, bool& line_starting) {
    emit(block ? TokenType::block_begin : TokenType::variable_begin, start);
    std::vector<char> balance;
    while (true) {
      if (pos >= src_.size()) fail(start, "unexpected end of template: the tag is not closed");
      if (balance.empty()) {
        bool nl = false;
        const size_t end = match_end(pos, block, nl);
        if (end != std::string::npos) {
          emit(block ? TokenType::block_end : TokenType::variable_end, pos);
          line_starting = nl;
          return end;
        }
      }
      size_t len = 0;
      if (unicode::is_space(unicode::decode(src_, pos, len))) {
        pos = skip_space(pos);
        continue;
      }
      const char c = src_[pos];
      if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t end = pos;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        emit(TokenType::name, pos, src_.substr(pos, end - pos));
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, balance);
      }
    }
  }

  // Digits with optional single underscores between them: (\d+_)*\d+
  size_t scan_digits(size_t pos) const {
    if (pos >= src_.size() || !is_digit(src_[pos])) return std::string::npos;
    while (true) {
      while (pos < src_.size() && is_digit(src_[pos])) ++pos;
      if (pos + 1 < src_.size() && src_[pos] == '_' && is_digit(src_[pos + 1])) {
        ++pos;
        continue;
      }
      return pos;
    }
  }

  static std::string without_underscores(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c != '_') out.push_back(c);
    }
    return out;
  }

  size_t lex_number(size_t pos) {
    // Float first (as Jinja), unless the number directly follows a "." (e.g. `x.0.1`).
    if (pos == 0 || src_[pos - 1] != '.') {
      const size_t int_end = scan_digits(pos);
      size_t end = std::string::npos;
      size_t p = int_end;
      size_t frac_end = std::string::npos;
      if (p < src_.size() && src_[p] == '.') frac_end = scan_digits(p + 1);
      const size_t mantissa_end = frac_end != std::string::npos ? frac_end : int_end;
      if (mantissa_end < src_.size() && (src_[mantissa_end] == 'e' || src_[mantissa_end] == 'E')) {
        size_t q = mantissa_end + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        const size_t exp_end = scan_digits(q);
        if (exp_end != std::string::npos) end = exp_end;
      }
      if (end == std::string::npos && frac_end != std::string::npos) end = frac_end;
      if (end != std::string::npos) {
        const std::string text = without_underscores(std::string_view(src_).substr(pos, end - pos));
        Token t;
        t.type = TokenType::floating;
        t.text = text;
        t.float_value = std::strtod(text.c_str(), nullptr);
        locate(pos, t);
        tokens_.push_back(std::move(t));
        return end;
      }
    }
    // Integer: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)*
    int base = 10;
    size_t digits_begin = pos;
    size_t end = pos;
    const auto scan_based = [&](auto valid) {
      size_t p = pos + 2;
      size_t last = std::string::npos;
      while (p < src_.size()) {
        if (src_[p] == '_' && p + 1 < src_.size() && valid(src_[p + 1])) {
          p += 2;
        } else if (valid(src_[p])) {
          ++p;
        } else {
          break;
        }
        last = p;
      }
      return last;
    };
    const char prefix = pos + 1 < src_.size() ? static_cast<char>(src_[pos + 1] | 0x20) : 0;
    size_t based = std::string::npos;
    if (src_[pos] == '0' && prefix == 'b') {
      based = scan_based([](char c) { return c == '0' || c == '1'; }), base = 2;
    } else if (src_[pos] == '0' && prefix == 'o') {
      based = scan_based([](char c) { return c >= '0' && c <= '7'; }), base = 8;
    } else if (src_[pos] == '0' && prefix == 'x') {
      based = scan_based([](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
      base = 16;
    }
    if (based != std::string::npos) {
      digits_begin = pos + 2;
      end = based;
    } else {
      base = 10;
      if (src_[pos] == '0') {
        end = pos + 1;
        while (end < src_.size() &&
               (src_[end] == '0' ||
                (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0'))) {
          end += src_[end] == '_' ? 2 : 1;
        }
      } else {
        end = scan_digits(pos);
      }
    }
    const std::string digits =
        without_underscores(std::string_view(src_).substr(digits_begin, end - digits_begin));
    errno = 0;
    const long long v = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) fail(pos, "integer literal too large (ridge's integers are 64-bit)");
    Token t;
    t.type = TokenType::integer;
    t.text = src_.substr(pos, end - pos);
    t.int_value = v;
    locate(pos, t);
    tokens_.push_back(std::move(t));
    return end;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<char>(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }

  // A string literal with Python's unicode-escape rules (what Jinja applies).
  size_t lex_string(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) fail(pos, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail(pos, "unterminated string literal");
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          char32_t code = 0;
          for (int i = 0; i < n; ++i) {
            const int h = p < src_.size() ? hex_value(src_[p]) : -1;
            if (h < 0) fail(pos, fmt::format("truncated \\{}{} escape", e, std::string(n, 'X')));
            code = code * 16 + static_cast<char32_t>(h);
            ++p;
          }
          if (code > 0x10FFFF) fail(pos, "illegal Unicode character in string literal");
          unicode::append_utf8(value, code);
          break;
        }
        case 'N':
          fail(pos, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t code = static_cast<char32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              code = code * 8 + static_cast<char32_t>(src_[p++] - '0');
            }
            unicode::append_utf8(value, code);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    emit(TokenType::string, pos, std::move(value));
    return p + 1;
  }

  size_t lex_operator(size_t pos, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (starts_with(pos, op)) {
        emit(TokenType::op, pos, std::string(op));
        return pos + 2;
      }
    }
    const char c = src_[pos];
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      size_t len = 0;
      unicode::decode(src_, pos, len);
      fail(pos, fmt::format("unexpected char '{}'", src_.substr(pos, len)));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(pos, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) {
        fail(pos, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      }
      balance.pop_back();
    }
    emit(TokenType::op, pos, std::string(1, c));
    return pos + 1;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  mutable size_t cursor_line_start_ = 0;  // locate()'s memo: a position and its column
  mutable size_t cursor_pos_ = 0;
  mutable size_t cursor_column_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  std::string src = normalize_newlines(source);
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).run();
}

}  // namespace ridge::tokenizer::jinja
