#include "ridge/tokenizer/jinja/strings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/unicode.h"

namespace ridge::tokenizer::jinja::strings {

namespace {

struct Char {
  char32_t code;
  size_t pos, len;
};

std::vector<Char> chars_of(std::string_view s) {
  std::vector<Char> out;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const char32_t c = unicode::decode(s, pos, len);
    out.push_back({c, pos, len});
  }
  return out;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) runtime_error("empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  const std::vector<Char> cs = chars_of(s);
  size_t i = 0;
  while (true) {
    while (i < cs.size() && unicode::is_space(cs[i].code)) ++i;
    if (i >= cs.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(cs[i].pos));
      break;
    }
    const size_t begin = i;
    while (i < cs.size() && !unicode::is_space(cs[i].code)) ++i;
    const size_t end = i < cs.size() ? cs[i].pos : s.size();
    out.emplace_back(s.substr(cs[begin].pos, end - cs[begin].pos));
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) runtime_error("empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::vector<Char> cs = chars_of(s);
  size_t i = cs.size();  // one past the current character
  while (true) {
    while (i > 0 && unicode::is_space(cs[i - 1].code)) --i;
    if (i == 0) break;
    const size_t end = cs[i - 1].pos + cs[i - 1].len;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(0, end));
      break;
    }
    while (i > 0 && !unicode::is_space(cs[i - 1].code)) --i;
    const size_t begin = i < cs.size() ? cs[i].pos : s.size();
    out.emplace_back(s.substr(begin, end - begin));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const std::vector<Char> cs = chars_of(s);
  size_t line_start = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    const char32_t c = cs[i].code;
    const bool boundary = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    const size_t content_end = cs[i].pos;
    size_t next = cs[i].pos + cs[i].len;
    if (c == '\r' && i + 1 < cs.size() && cs[i + 1].code == '\n') {
      ++i;
      next = cs[i].pos + 1;
    }
    out.emplace_back(s.substr(line_start, (keepends ? next : content_end) - line_start));
    line_start = next;
  }
  if (line_start < s.size()) out.emplace_back(s.substr(line_start));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every character and at the end.
    const std::vector<Char> cs = chars_of(s);
    int64_t done = 0;
    for (const Char& c : cs) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out.append(s.substr(c.pos, c.len));
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(to);
    start = hit + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  const size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(unicode::length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(unicode::length(s)) + 1;
  int64_t n = 0;
  for (size_t hit = s.find(sub); hit != std::string_view::npos;
       hit = s.find(sub, hit + sub.size())) {
    ++n;
  }
  return n;
}

std::string pad(std::string_view s, int64_t width, std::string_view fill, char align) {
  const int64_t len = static_cast<int64_t>(unicode::length(s));
  if (width <= len) return std::string(s);
  const int64_t total = width - len;
  int64_t left = 0;
  if (align == '^') {
    // Python's center: left = total / 2 + (total & width & 1)
    left = total / 2 + (total & width & 1);
  } else if (align == '>') {
    left = total;
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

namespace {

std::string strip_copy(std::string_view s) {
  return unicode::strip(s, nullptr, true, true);
}

// Removes single underscores between digits; nullopt if underscores are misplaced.
std::optional<std::string> remove_underscores(std::string_view s, int base) {
  std::string out;
  const auto is_digit = [base](char c) {
    int v = -1;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z')
      v = c - 'A' + 10;
    return v >= 0 && v < base;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !is_digit(s[i + 1]) || s[i - 1] == '_')
        return std::nullopt;
      continue;
    }
    if (!is_digit(s[i])) return std::nullopt;
    out.push_back(s[i]);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

std::optional<int64_t> parse_int(std::string_view text, int base) {
  const std::string stripped = strip_copy(text);
  std::string_view s = stripped;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (base == 0 || base == 2 || base == 8 || base == 16) {
    if (s.size() > 2 && s[0] == '0') {
      const char p = static_cast<char>(s[1] | 0x20);
      const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed && (base == 0 || base == prefixed)) {
        base = prefixed;
        s.remove_prefix(2);
        if (!s.empty() && s[0] == '_') s.remove_prefix(1);
      }
    }
    if (base == 0) base = 10;
  }
  if (base < 2 || base > 36) return std::nullopt;
  const auto digits = remove_underscores(s, base);
  if (!digits) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits->c_str(), &end, base);
  if (errno == ERANGE || *end != '\0') return std::nullopt;
  return negative ? -v : v;
}

std::optional<double> parse_float(std::string_view text) {
  const std::string stripped = strip_copy(text);
  std::string s;
  for (size_t i = 0; i < stripped.size(); ++i) {
    const char c = stripped[i];
    if (c == '_') {
      const bool between = i > 0 && i + 1 < stripped.size() &&
                           std::isdigit(static_cast<unsigned char>(stripped[i - 1])) &&
                           std::isdigit(static_cast<unsigned char>(stripped[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    s.push_back(c);
  }
  if (s.empty()) return std::nullopt;
  std::string lowered;
  for (char c : s)
    lowered.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  std::string_view body = lowered;
  double sign = 1.0;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1.0 : 1.0;
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  // Only decimal digits, one '.', an exponent: reject hex floats and the like that strtod takes.
  bool digit = false;
  for (char c : body) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = true;
    } else if (c != '.' && c != 'e' && c != '+' && c != '-') {
      return std::nullopt;
    }
  }
  if (!digit) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (const Char& c : chars_of(s)) {
    if (unicode::is_upper_char(c.code)) return false;
    if (unicode::is_lower_char(c.code)) cased = true;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (const Char& c : chars_of(s)) {
    if (unicode::is_lower_char(c.code)) return false;
    if (unicode::is_upper_char(c.code)) cased = true;
  }
  return cased;
}

}  // namespace ridge::tokenizer::jinja::strings
