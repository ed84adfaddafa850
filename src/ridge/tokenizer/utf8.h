// UTF-8 helpers for the tokenizer, with the semantics of the Hugging Face `tokenizers` crate
// (Rust): lossy conversion replaces each maximal invalid subpart with one U+FFFD (as Rust's
// String::from_utf8_lossy does), and "whitespace" is Unicode's White_Space property (as Rust's
// char::is_whitespace and Oniguruma's \s are).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ridge::tokenizer::detail {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Byte length of the well-formed character starting at s[pos], or 0 when the bytes there are not
// one (invalid lead byte, bad continuation, truncated, overlong, surrogate, > U+10FFFF).
size_t utf8_valid_char_len(std::string_view s, size_t pos);
bool is_valid_utf8(std::string_view s);

// Decodes the character at s[pos] of a string known to be valid UTF-8 and advances pos.
char32_t next_char(std::string_view s, size_t& pos);
void append_utf8(std::string& out, char32_t c);

// Appends `bytes` with every maximal invalid subpart replaced by U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);
std::string utf8_lossy(std::string_view bytes);

// Number of trailing bytes that form a well-formed but incomplete character (0..3): the bytes a
// streaming decoder must hold until more arrive.
size_t utf8_incomplete_tail(std::string_view bytes);

// Unicode White_Space (the 25 code points of PropList.txt).
bool is_unicode_whitespace(char32_t c);

}  // namespace ridge::tokenizer::detail
