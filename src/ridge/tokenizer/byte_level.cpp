#include "ridge/tokenizer/byte_level.h"

#include <cstdint>

#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte_.fill(-1);
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = printable(b) ? static_cast<char32_t>(b) : next_extra++;
    byte_to_char_[b] = c;
    char_to_byte_[c] = static_cast<int16_t>(b);
    append_utf8(spelling_[b], c);
  }
}

std::optional<uint8_t> ByteLevelAlphabet::byte_of(char32_t c) const {
  if (c >= char_to_byte_.size() || char_to_byte_[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(char_to_byte_[c]);
}

void ByteLevelAlphabet::encode(std::string& out, std::string_view bytes) const {
  for (char b : bytes) out.append(spelling_[static_cast<uint8_t>(b)]);
}

std::optional<std::string> ByteLevelAlphabet::decode(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t len = utf8_valid_char_len(text, pos);
    if (len == 0) return std::nullopt;
    const char32_t c = next_char(text, pos);
    const auto byte = byte_of(c);
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
  }
  return out;
}

}  // namespace ridge::tokenizer::detail
