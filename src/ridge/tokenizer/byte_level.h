// GPT-2's byte-level alphabet: every byte 0..255 is spelled as one printable code point, so that
// a byte-level vocabulary can be stored as text. Bytes that are printable Latin-1 ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 map, in byte order, to U+0100..U+0143
// (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ridge::tokenizer::detail {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  char32_t char_of(uint8_t byte) const { return byte_to_char_[byte]; }
  // The UTF-8 spelling of `byte` in the alphabet.
  std::string_view spelling_of(uint8_t byte) const { return spelling_[byte]; }
  std::optional<uint8_t> byte_of(char32_t c) const;

  // Appends the alphabet spelling of every byte of `bytes`.
  void encode(std::string& out, std::string_view bytes) const;
  // The bytes a token spelled in the alphabet stands for; nullopt when some character of it is not
  // in the alphabet (then the token's own UTF-8 bytes stand for themselves, as in `tokenizers`).
  std::optional<std::string> decode(std::string_view text) const;

 private:
  ByteLevelAlphabet();
  std::array<char32_t, 256> byte_to_char_{};
  std::array<std::string, 256> spelling_{};
  std::array<int16_t, 0x144> char_to_byte_{};  // -1 where the code point is not in the alphabet
};

}  // namespace ridge::tokenizer::detail
