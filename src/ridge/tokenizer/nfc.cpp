#include "ridge/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {
namespace nfc_data {
extern const uint32_t kCombiningClass[][2];
extern const size_t kCombiningClassCount;
extern const uint32_t kDecomposition[][3];
extern const size_t kDecompositionCount;
extern const uint32_t kDecompositionData[];
extern const uint32_t kComposition[][3];
extern const size_t kCompositionCount;
}  // namespace nfc_data

namespace {

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto* begin = nfc_data::kCombiningClass;
  const auto* end = begin + nfc_data::kCombiningClassCount;
  const auto* it =
      std::lower_bound(begin, end, c, [](const uint32_t(&e)[2], char32_t v) { return e[0] < v; });
  return (it != end && (*it)[0] == c) ? static_cast<uint8_t>((*it)[1]) : 0;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (c >= 0xC0) {
    const auto* begin = nfc_data::kDecomposition;
    const auto* end = begin + nfc_data::kDecompositionCount;
    const auto* it =
        std::lower_bound(begin, end, c, [](const uint32_t(&e)[3], char32_t v) { return e[0] < v; });
    if (it != end && (*it)[0] == c) {
      const uint32_t* data = nfc_data::kDecompositionData + (*it)[1];
      out.insert(out.end(), data, data + (*it)[2]);
      return;
    }
  }
  out.push_back(c);
}

// The primary composite of (first, second), or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto* begin = nfc_data::kComposition;
  const auto* end = begin + nfc_data::kCompositionCount;
  const auto* it = std::lower_bound(begin, end, std::pair{first, second},
                                    [](const uint32_t(&e)[3], std::pair<char32_t, char32_t> v) {
                                      return e[0] != v.first ? e[0] < v.first : e[1] < v.second;
                                    });
  return (it != end && (*it)[0] == first && (*it)[1] == second) ? (*it)[2] : 0;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  // Fast path: nothing below U+0300 decomposes or combines (asserted by the generator), and a
  // character is below U+0300 exactly when its lead byte is below 0xCC.
  if (std::all_of(text.begin(), text.end(),
                  [](char b) { return static_cast<uint8_t>(b) < 0xCC; })) {
    return std::string(text);
  }
  std::vector<char32_t> chars;
  chars.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) decompose(next_char(text, pos), chars);

  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  std::vector<uint8_t> ccc(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) ccc[i] = combining_class(chars[i]);
  for (size_t i = 0; i < chars.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && ccc[j] != 0) ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint8_t, char32_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(ccc[k], chars[k]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) {
        ccc[k] = run[k - i].first;
        chars[k] = run[k - i].second;
      }
    }
    i = j;
  }

  // Canonical composition: each character joins the last starter unless blocked.
  std::vector<char32_t> out;
  std::vector<uint8_t> out_ccc;
  out.reserve(chars.size());
  out_ccc.reserve(chars.size());
  int64_t starter = -1;
  for (size_t i = 0; i < chars.size(); ++i) {
    const char32_t c = chars[i];
    const uint8_t cc = ccc[i];
    if (starter >= 0) {
      const uint8_t last_cc = out_ccc.back();
      const bool adjacent = static_cast<size_t>(starter) == out.size() - 1;
      const bool blocked = !adjacent && (last_cc == 0 || last_cc >= cc);
      if (!blocked) {
        if (const char32_t composite = compose(out[starter], c)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<int64_t>(out.size());
    out.push_back(c);
    out_ccc.push_back(cc);
  }

  std::string result;
  result.reserve(text.size());
  for (char32_t c : out) append_utf8(result, c);
  return result;
}

}  // namespace ridge::tokenizer::detail
