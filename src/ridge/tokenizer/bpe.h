// The BPE model of the `tokenizers` crate: a word (one pre-token) is cut into characters, each
// looked up in the vocabulary (falling back to <0xNN> byte tokens, then to the unknown token),
// then adjacent symbols are merged, always the pair of lowest merge rank first (leftmost on ties),
// through a priority queue over a linked list of symbols: O(n log n) in the word length.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ridge/tokenizer/tokenizer.h"

namespace ridge::tokenizer::detail {

// Transparent hashing so that string_view lookups do not build a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

struct BpeOptions {
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::optional<TokenId> unk_id;
};

class BpeModel {
 public:
  BpeModel() = default;
  // `vocab`: the model vocabulary (token text -> id). Merges are added in rank order.
  BpeModel(const TokenMap* vocab, BpeOptions options);

  // Registers merge (left, right) with the next rank; a pair given twice keeps the later rank,
  // as the `tokenizers` crate's map does. Throws ridge::Error naming `field` when a side or the
  // merged text is not in the vocabulary.
  void add_merge(std::string_view left, std::string_view right, std::string_view field);
  size_t merge_count() const { return merges_.size(); }
  const BpeOptions& options() const { return options_; }

  // Appends the ids of `word` to `out`.
  struct Scratch;
  void tokenize(std::string_view word, std::vector<TokenId>& out, Scratch& scratch) const;

  struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct QueuedMerge {
    int32_t rank;
    int32_t pos;
    TokenId new_id;
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<QueuedMerge> heap;
  };

 private:
  struct MergeInfo {
    int32_t rank;
    TokenId new_id;
  };
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const MergeInfo* find_merge(TokenId a, TokenId b) const;
  void build_symbols(std::string_view word, Scratch& scratch) const;
  void merge_all(Scratch& scratch) const;

  const TokenMap* vocab_ = nullptr;
  BpeOptions options_;
  std::unordered_map<uint64_t, MergeInfo> merges_;
  int32_t next_rank_ = 0;
  std::array<std::optional<TokenId>, 256> byte_tokens_{};  // <0xNN> ids, for byte fallback
};

}  // namespace ridge::tokenizer::detail
