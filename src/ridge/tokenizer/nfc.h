// Unicode Normalization Form C (the `NFC` normalizer of Qwen2's tokenizer.json), from tables
// generated out of Python's unicodedata by gen_nfc_data.py. Text whose code points are all below
// U+0300 is already NFC and is returned as it is without decoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ridge::tokenizer::detail {

// `text` must be valid UTF-8.
std::string to_nfc(std::string_view text);

}  // namespace ridge::tokenizer::detail
