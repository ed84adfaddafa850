// Python str algorithms on UTF-8 strings (character-based where Python counts characters).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::tokenizer::jinja::strings {

// str.split(sep, maxsplit) / str.rsplit; sep == nullptr splits on runs of whitespace.
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
// str.splitlines(keepends): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029.
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0: all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// str.find / str.rfind as character indexes (-1 when absent).
int64_t find(std::string_view s, std::string_view sub, bool reverse);
// str.count(sub): non-overlapping occurrences.
int64_t count(std::string_view s, std::string_view sub);
// str.center / ljust / rjust with a one-character fill.
std::string pad(std::string_view s, int64_t width, std::string_view fill, char align);
// markupsafe.escape: & < > " ' -> entities.
std::string html_escape(std::string_view s);
// int(s, base) / float(s) as Python parses strings (surrounding whitespace, underscores, signs,
// base prefixes); nullopt when Python would raise ValueError.
std::optional<int64_t> parse_int(std::string_view s, int base);
std::optional<double> parse_float(std::string_view s);
// Python's str.islower()/isupper(): at least one cased character and no cased character of
// the other case.
bool is_lower(std::string_view s);
bool is_upper(std::string_view s);

}  // namespace ridge::tokenizer::jinja::strings
