#include "ridge/tokenizer/utf8.h"

#include <cstdint>

namespace ridge::tokenizer::detail {
namespace {

// For a lead byte: the sequence length and the allowed range of the second byte (Unicode
// Table 3-7, "Well-Formed UTF-8 Byte Sequences"); length 0 for a byte that cannot start one.
struct LeadInfo {
  uint8_t length;
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Number of bytes at s[pos..] that form a well-formed prefix of one character (at least 1 when
// the lead byte is valid); sets `complete` when that prefix is the whole character.
size_t valid_prefix_len(std::string_view s, size_t pos, bool& complete) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  const LeadInfo info = lead_info(lead);
  complete = false;
  if (info.length == 0) return 0;
  if (info.length == 1) {
    complete = true;
    return 1;
  }
  size_t n = 1;
  while (n < info.length && pos + n < s.size()) {
    const auto b = static_cast<uint8_t>(s[pos + n]);
    const bool ok = n == 1 ? (b >= info.second_lo && b <= info.second_hi) : is_continuation(b);
    if (!ok) return n;
    ++n;
  }
  complete = n == info.length;
  return n;
}

}  // namespace

size_t utf8_valid_char_len(std::string_view s, size_t pos) {
  bool complete = false;
  const size_t n = valid_prefix_len(s, pos, complete);
  return complete ? n : 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = utf8_valid_char_len(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

char32_t next_char(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const size_t n = lead_info(b0).length;
  char32_t c = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  pos += n;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  size_t pos = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one go
  while (pos < bytes.size()) {
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool complete = false;
    const size_t n = valid_prefix_len(bytes, pos, complete);
    if (complete) {
      pos += n;
      continue;
    }
    out.append(bytes.substr(run_start, pos - run_start));
    out.append(kReplacementChar);
    pos += n == 0 ? 1 : n;
    run_start = pos;
  }
  out.append(bytes.substr(run_start));
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_utf8_lossy(out, bytes);
  return out;
}

size_t utf8_incomplete_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    if (is_continuation(static_cast<uint8_t>(bytes[pos]))) continue;
    bool complete = false;
    const size_t len = valid_prefix_len(bytes, pos, complete);
    return (!complete && len == back) ? back : 0;
  }
  return 0;
}

bool is_unicode_whitespace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace ridge::tokenizer::detail
