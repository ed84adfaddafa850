#include "ridge/tokenizer/jinja/unicode.h"

#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::jinja::unicode {

char32_t decode(std::string_view s, size_t pos, size_t& len) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  const auto invalid = [&] {
    len = 1;
    return static_cast<char32_t>(0xDC00 + b0);
  };
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  size_t need = 0;
  char32_t c = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    need = 1, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3, c = b0 & 0x07, min = 0x10000;
  } else {
    return invalid();
  }
  if (pos + need >= s.size()) return invalid();
  for (size_t i = 1; i <= need; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return invalid();
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return invalid();
  len = need + 1;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) {  // an invalid byte held by decode()
    out.push_back(static_cast<char>(c - 0xDC00));
  } else {
    detail::append_utf8(out, c);
  }
}

bool is_ascii(std::string_view s) {
  for (char ch : s) {
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  }
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    decode(s, pos, len);
    ++n;
  }
  return n;
}

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    offsets.push_back(pos);
    decode(s, pos, len);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {

// Ranges of (upper, lower) letters on consecutive code points; `upper_even` says which parity
// holds the upper-case letter.
struct PairRange {
  char32_t first, last;
  bool upper_even;
};

constexpr PairRange kPairRanges[] = {
    {0x0100, 0x012F, true},  {0x0132, 0x0137, true},  {0x0139, 0x0148, false},
    {0x014A, 0x0177, true},  {0x0179, 0x017E, false}, {0x01CD, 0x01DC, false},
    {0x01DE, 0x01EF, true},  {0x01F4, 0x01F5, true},  {0x01F8, 0x021F, true},
    {0x0222, 0x0233, true},  {0x0460, 0x0481, true},  {0x048A, 0x04BF, true},
    {0x04C1, 0x04CE, false}, {0x04D0, 0x052F, true},  {0x1E00, 0x1E95, true},
    {0x1EA0, 0x1EFF, true},
};

// The Latin digraph triples (upper, title, lower): DŽ Dž dž, LJ Lj lj, NJ Nj nj, DZ Dz dz.
bool digraph(char32_t c, char32_t& first) {
  if (c >= 0x1C4 && c <= 0x1CC) {
    first = 0x1C4 + (c - 0x1C4) / 3 * 3;
    return true;
  }
  if (c >= 0x1F1 && c <= 0x1F3) {
    first = 0x1F1;
    return true;
  }
  return false;
}

// Simple (one-to-one) mappings; 0 when the character has none in the covered ranges.
char32_t simple_upper(char32_t c) {
  char32_t first = 0;
  if (digraph(c, first)) return c == first ? 0 : first;
  if (c >= 'a' && c <= 'z') return c - 0x20;
  if (c < 0x80) return 0;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  for (const auto& r : kPairRanges) {
    if (c >= r.first && c <= r.last) {
      const bool even = (c % 2) == 0;
      return even == r.upper_even ? 0 : c - 1;
    }
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  if (c == 0x4CF) return 0x4C0;
  if (c >= 0x561 && c <= 0x586) return c - 0x30;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 0x20;
  return 0;
}

char32_t simple_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 0x20;
  char32_t first = 0;
  if (digraph(c, first)) return c == first + 2 ? 0 : first + 2;
  if (c < 0x80) return 0;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c == 0x1E9E) return 0xDF;
  for (const auto& r : kPairRanges) {
    if (c >= r.first && c <= r.last) {
      const bool even = (c % 2) == 0;
      return even == r.upper_even ? c + 1 : 0;
    }
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  if (c == 0x4C0) return 0x4CF;
  if (c >= 0x531 && c <= 0x556) return c + 0x30;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 0x20;
  return 0;
}

enum class CaseMode { upper, lower, title };

void append_cased(std::string& out, char32_t c, CaseMode mode) {
  if (mode == CaseMode::lower) {
    if (c == 0x130) {  // İ -> i + combining dot above
      out += "i\xCC\x87";
      return;
    }
    const char32_t m = simple_lower(c);
    append_utf8(out, m ? m : c);
    return;
  }
  if (c == 0xDF) {
    out += mode == CaseMode::upper ? "SS" : "Ss";
    return;
  }
  if (c == 0x149) {  // ŉ -> ʼN
    out +=
        "\xCA\xBC"
        "N";
    return;
  }
  char32_t first = 0;
  if (mode == CaseMode::title && digraph(c, first)) {
    append_utf8(out, first + 1);
    return;
  }
  const char32_t m = simple_upper(c);
  append_utf8(out, m ? m : c);
}

template <typename Fn>
void for_each_char(std::string_view s, Fn&& fn) {
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const char32_t c = decode(s, pos, len);
    fn(c, pos, len);
  }
}

std::string map_case(std::string_view s, CaseMode mode) {
  std::string out;
  out.reserve(s.size());
  for_each_char(s, [&](char32_t c, size_t, size_t) { append_cased(out, c, mode); });
  return out;
}

}  // namespace

bool is_upper_char(char32_t c) {
  return simple_lower(c) != 0 || c == 0x130;
}
bool is_lower_char(char32_t c) {
  return simple_upper(c) != 0 || c == 0xDF || c == 0x149;
}
bool is_cased(char32_t c) {
  return is_upper_char(c) || is_lower_char(c);
}

std::string upper(std::string_view s) {
  return map_case(s, CaseMode::upper);
}
std::string lower(std::string_view s) {
  return map_case(s, CaseMode::lower);
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for_each_char(s, [&](char32_t c, size_t, size_t) {
    append_cased(out, c, first ? CaseMode::title : CaseMode::lower);
    first = false;
  });
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for_each_char(s, [&](char32_t c, size_t, size_t) {
    const bool cased = is_cased(c);
    append_cased(out, c, cased && !previous_cased ? CaseMode::title : CaseMode::lower);
    previous_cased = cased;
  });
  return out;
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars) for_each_char(*chars, [&](char32_t c, size_t, size_t) { set.push_back(c); });
  const auto strippable = [&](char32_t c) {
    if (!chars) return is_space(c);
    for (char32_t x : set) {
      if (x == c) return true;
    }
    return false;
  };
  const std::vector<size_t> offsets = char_offsets(s);
  size_t begin = 0;
  size_t end = offsets.size() - 1;  // character indices [begin, end)
  size_t len = 0;
  if (left) {
    while (begin < end && strippable(decode(s, offsets[begin], len))) ++begin;
  }
  if (right) {
    while (end > begin && strippable(decode(s, offsets[end - 1], len))) --end;
  }
  return std::string(s.substr(offsets[begin], offsets[end] - offsets[begin]));
}

}  // namespace ridge::tokenizer::jinja::unicode
