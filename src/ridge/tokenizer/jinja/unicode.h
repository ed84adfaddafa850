// UTF-8 helpers with Python's string semantics: code point counting and indexing, Python's
// whitespace set (str.isspace / str.strip / re's \s) and simple case mapping.
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Latin Extended Additional (Vietnamese),
// Greek, Cyrillic, Armenian and fullwidth Latin, with Python's special cases in those ranges
// ("ß".upper() == "SS", "İ".lower() == "i̇"). Characters outside them are left unchanged (CJK and
// most other scripts have no case). Invalid UTF-8 bytes are kept byte-for-byte as one "character"
// each, so nothing here ever throws or loses bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::tokenizer::jinja::unicode {

// Decodes one character at s[pos]; sets `len` to its byte length (1 for an invalid byte, which
// decodes to 0xDC00 + byte, the way Python's surrogateescape would hold it).
char32_t decode(std::string_view s, size_t pos, size_t& len);
void append_utf8(std::string& out, char32_t c);

bool is_ascii(std::string_view s);
// Number of characters (code points).
size_t length(std::string_view s);
// Byte offsets of every character start, plus s.size() at the end.
std::vector<size_t> char_offsets(std::string_view s);

// Python's str.isspace() for one character.
bool is_space(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
// Python's str.capitalize(): first character title-cased, the rest lower-cased.
std::string capitalize(std::string_view s);
// Python's str.title(): a cased character after an uncased one is title-cased, others lowered.
std::string title(std::string_view s);
// Whether the character has a case (an upper- or lower-case letter in the covered ranges).
bool is_cased(char32_t c);
bool is_upper_char(char32_t c);
bool is_lower_char(char32_t c);

// Python str.strip/lstrip/rstrip: with chars == nullptr strips whitespace, else any of `chars`.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace ridge::tokenizer::jinja::unicode
