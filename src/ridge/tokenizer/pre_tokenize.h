// Normalizers and pre-tokenizers of the `tokenizers` crate that the supported vocabularies use:
// normalizers NFC, Prepend, Replace (literal); pre-tokenizers Split (regex or literal, any
// delimiter behaviour), ByteLevel, Digits, Metaspace. Each text piece keeps whether it starts the
// original text, which Metaspace's prepend_scheme "first" needs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ridge/tokenizer/regex.h"

namespace ridge::tokenizer::detail {

struct NormalizerStep {
  enum class Kind { nfc, prepend, replace };
  Kind kind = Kind::replace;
  std::string pattern;  // replace: the literal searched for
  std::string content;  // prepend: the prefix; replace: the replacement
};

// Applies the steps in order (an empty list leaves the text as it is).
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text);

enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };
enum class PrependScheme { first, always, never };

struct PreTokenizerStep {
  enum class Kind { split, byte_level, digits, metaspace };
  Kind kind = Kind::split;
  std::shared_ptr<const Regex> regex;  // split, digits, byte_level with use_regex
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;            // split: the matches are the pieces' complement
  bool add_prefix_space = false;  // byte_level
  std::string replacement;        // metaspace (one character, UTF-8)
  PrependScheme prepend_scheme = PrependScheme::always;
  bool metaspace_split = true;
};

// Text pieces over one buffer.
struct Pieces {
  struct Span {
    size_t begin;
    size_t end;
    bool at_start;  // begins at offset 0 of the original text
  };
  std::string buffer;
  std::vector<Span> spans;
};

// Runs the pre-tokenizer steps over `pieces` in place; the result are the words for the model.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, Pieces& pieces);

// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex).
extern const char* const kGpt2Pattern;
// A regex matching `literal` exactly.
std::string escape_regex(std::string_view literal);

}  // namespace ridge::tokenizer::detail
