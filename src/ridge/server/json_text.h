// Fast JSON text building for the streaming path (one SSE event per token must stay cheap): string
// escaping that always yields valid JSON, replacing invalid UTF-8 with U+FFFD.
#pragma once

#include <string>
#include <string_view>

namespace ridge::server {

// Appends `s` as a JSON string literal (quotes included).
void append_json_string(std::string& out, std::string_view s);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view s);
// Number of Unicode characters in valid UTF-8 text (Python's len()).
size_t utf8_length(std::string_view s);
// Shortest round-trip form of a float ("-0.25", "1e-05"); NaN/inf become -9999.0 (JSON has none).
void append_json_number(std::string& out, float v);

}  // namespace ridge::server
