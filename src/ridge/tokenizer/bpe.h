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
    uint64_t order;  // rank << 32 | position: the heap pops the smallest
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
  // Open addressing with linear probing over (left id, right id) keys: the merge lookup is the
  // innermost operation of encoding.
  class MergeTable {
   public:
    void insert(uint64_t key, MergeInfo info);
    const MergeInfo* find(uint64_t key) const {
      if (slots_.empty()) return nullptr;
      for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.key == key) return &s.info;
        if (s.key == kEmpty) return nullptr;
      }
    }
    size_t size() const { return size_; }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are >= 0, so no pair has this key
    struct Slot {
      uint64_t key = kEmpty;
      MergeInfo info{};
    };
    size_t slot_of(uint64_t key) const {
      return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
    }
    void grow();
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
  };

  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const MergeInfo* find_merge(TokenId a, TokenId b) const { return merges_.find(pair_key(a, b)); }
  // The id of the one-character token `ch` (its code point `c`), or -1.
  TokenId char_id(std::string_view ch, char32_t c) const;
  void build_symbols(std::string_view word, Scratch& scratch) const;
  void merge_all(Scratch& scratch) const;

  const TokenMap* vocab_ = nullptr;
  BpeOptions options_;
  MergeTable merges_;
  int32_t next_rank_ = 0;
  std::array<std::optional<TokenId>, 256> byte_tokens_{};  // <0xNN> ids, for byte fallback
  std::vector<TokenId> bmp_char_ids_;  // one-character tokens below U+10000 by code point, or -1
};

}  // namespace ridge::tokenizer::detail
