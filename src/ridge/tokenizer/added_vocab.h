// Added tokens (special tokens like <|im_end|>, user-defined tokens like <tool>): found in the text
// before anything else runs, leftmost-longest and without overlaps, as the `tokenizers` crate's
// AddedVocabulary does. lstrip / rstrip widen a match over the whitespace beside it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ridge/tokenizer/tokenizer.h"

namespace ridge::tokenizer::detail {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in the normalized text rather than the original
};

// One piece of a text split on added tokens: plain text [begin, end), or an added token there.
struct AddedSplit {
  size_t begin = 0;
  size_t end = 0;
  int32_t token = -1;  // index into the matcher's tokens, -1 for plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what is searched for token i (its content, or its normalized content).
  void build(std::vector<AddedToken> tokens, std::vector<std::string> patterns);
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits `text`; with skip_special, special tokens are not honoured (their matches are passed
  // over, text included, as with `tokenizers`' encode_special_tokens). Empty text pieces are
  // left out.
  void split(std::string_view text, bool skip_special, std::vector<AddedSplit>& out) const;

 private:
  struct Node {
    // Sorted (byte, child) edges: added-token tries are small and shallow.
    std::vector<std::pair<uint8_t, int32_t>> edges;
    int32_t token = -1;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  // Longest match starting at `pos`: token index and length, or -1.
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace ridge::tokenizer::detail
