// The scalar tokens both JSON recognizers (JsonMachine, SchemaMachine) read byte by byte: a
// string's body after its opening quote (escapes and \uXXXX checked; any other byte from 0x20 up
// as well-formed UTF-8: RFC 3629's table, so no overlong forms, surrogates or code points past
// U+10FFFF, which a byte-level vocabulary could otherwise spell) and a number (RFC 8259's grammar:
// no leading zeros, a digit after '.', 'e' / 'E' with an optional sign; optionally an integer
// only). Two bytes of state, compared and hashed as part of the recognizer's.
#pragma once

#include <cstdint>

namespace ridge::engine {

inline bool json_is_ws(uint8_t b) {
  return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

// A whitespace byte between a document's tokens, for both recognizers: inside the value runs are
// bounded by `limit` (run counts the current one); after the value (`done`) any number may follow
// and the state stays as it was, so the constraint's per-state cache sees it once.
inline bool json_whitespace(uint8_t& run, bool done, int limit) {
  if (done) return true;
  if (run >= limit) return false;
  ++run;
  return true;
}

class JsonScalarLexer {
 public:
  enum class Result : uint8_t {
    more,        // b was read; the token goes on
    reject,      // no valid token continues with b
    string_end,  // b was the closing quote
    number_end,  // the number ended before b, which belongs to what follows
  };

  bool active() const { return mode_ != Mode::none; }
  void start_string() { *this = {}, mode_ = Mode::string; }
  // b: the number's first byte ('-' or a digit); false when it cannot start one.
  bool start_number(uint8_t b, bool integer_only) {
    *this = {};
    integer_ = integer_only;
    if (b == '-')
      num_ = Num::minus;
    else if (b == '0')
      num_ = Num::zero;
    else if (b >= '1' && b <= '9')
      num_ = Num::integer;
    else
      return false;
    mode_ = Mode::number;
    return true;
  }
  // In a number that whitespace (or any byte that is not part of it) may end now.
  bool number_may_end() const {
    return mode_ == Mode::number && (num_ == Num::zero || num_ == Num::integer ||
                                     num_ == Num::fraction || num_ == Num::exponent);
  }

  Result feed(uint8_t b) {
    switch (mode_) {
      case Mode::string:
        if (b == '"') return end(Result::string_end);
        if (b == '\\') mode_ = Mode::escape;
        if (b < 0x80) return b >= 0x20 ? Result::more : Result::reject;
        return utf8_lead(b);
      case Mode::utf8: {
        // The first continuation byte's range depends on the lead byte; later ones are 80..BF.
        static constexpr uint8_t kLo[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
        static constexpr uint8_t kHi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
        if (b < kLo[int(first_)] || b > kHi[int(first_)]) return Result::reject;
        first_ = First::any;
        if (--count_ == 0) mode_ = Mode::string;
        return Result::more;
      }
      case Mode::escape:
        if (b == 'u') {
          mode_ = Mode::unicode;
          count_ = 4;
          return Result::more;
        }
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
            b == 't') {
          mode_ = Mode::string;
          return Result::more;
        }
        return Result::reject;
      case Mode::unicode:
        if (!is_hex(b)) return Result::reject;
        if (--count_ == 0) mode_ = Mode::string;
        return Result::more;
      case Mode::number:
        return number(b);
      case Mode::none:
        break;
    }
    return Result::reject;
  }

  bool operator==(const JsonScalarLexer&) const = default;
  uint32_t bits() const {
    return uint32_t(mode_) | uint32_t(num_) << 4 | uint32_t(count_) << 8 |
           uint32_t(integer_) << 12 | uint32_t(first_) << 13;
  }

 private:
  enum class Mode : uint8_t { none, string, escape, unicode, number, utf8 };
  // The range of a multi-byte character's first continuation byte: 80..BF, or after E0 A0..BF
  // (no overlong 3-byte forms), ED 80..9F (no surrogates), F0 90..BF (no overlong 4-byte forms),
  // F4 80..8F (nothing past U+10FFFF).
  enum class First : uint8_t { any, e0, ed, f0, f4 };
  enum class Num : uint8_t { minus, zero, integer, dot, fraction, exp_mark, exp_sign, exponent };

  static bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
  static bool is_hex(uint8_t b) {
    return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
  }
  // A string byte from 0x80 up: the lead byte of a 2-4 byte character, or nothing valid.
  Result utf8_lead(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF)
      count_ = 1, first_ = First::any;
    else if (b >= 0xE0 && b <= 0xEF)
      count_ = 2, first_ = b == 0xE0 ? First::e0 : b == 0xED ? First::ed : First::any;
    else if (b >= 0xF0 && b <= 0xF4)
      count_ = 3, first_ = b == 0xF0 ? First::f0 : b == 0xF4 ? First::f4 : First::any;
    else
      return Result::reject;  // a continuation byte, C0, C1 or F5..FF
    mode_ = Mode::utf8;
    return Result::more;
  }
  Result end(Result r) {
    *this = {};
    return r;
  }

  Result number(uint8_t b) {
    switch (num_) {
      case Num::minus:
        if (b == '0')
          num_ = Num::zero;
        else if (is_digit(b))
          num_ = Num::integer;
        else
          return Result::reject;
        return Result::more;
      case Num::zero:
      case Num::integer:
        if (num_ == Num::integer && is_digit(b)) return Result::more;
        if (!integer_ && b == '.')
          num_ = Num::dot;
        else if (!integer_ && (b == 'e' || b == 'E'))
          num_ = Num::exp_mark;
        else
          return end(Result::number_end);
        return Result::more;
      case Num::dot:
        if (!is_digit(b)) return Result::reject;
        num_ = Num::fraction;
        return Result::more;
      case Num::fraction:
        if (is_digit(b)) return Result::more;
        if (b == 'e' || b == 'E')
          num_ = Num::exp_mark;
        else
          return end(Result::number_end);
        return Result::more;
      case Num::exp_mark:
        if (b == '+' || b == '-')
          num_ = Num::exp_sign;
        else if (is_digit(b))
          num_ = Num::exponent;
        else
          return Result::reject;
        return Result::more;
      case Num::exp_sign:
        if (!is_digit(b)) return Result::reject;
        num_ = Num::exponent;
        return Result::more;
      case Num::exponent:
        if (is_digit(b)) return Result::more;
        return end(Result::number_end);
    }
    return Result::reject;
  }

  Mode mode_ = Mode::none;
  Num num_ = Num::minus;
  uint8_t count_ = 0;  // \uXXXX digits or UTF-8 continuation bytes left
  bool integer_ = false;
  First first_ = First::any;
};

}  // namespace ridge::engine
