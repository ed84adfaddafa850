#include "ridge/tokenizer/bpe.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {
namespace {

// Heap order of the `tokenizers` crate: lowest rank first, then leftmost position (both in
// `order`); std::*_heap keep the largest on top, so compare reversed.
struct MergeAfter {
  bool operator()(const BpeModel::QueuedMerge& a, const BpeModel::QueuedMerge& b) const {
    return a.order > b.order;
  }
};

uint64_t merge_order(int32_t rank, int32_t pos) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(pos);
}

}  // namespace

void BpeModel::MergeTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = slot_of(s.key);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void BpeModel::MergeTable::insert(uint64_t key, MergeInfo info) {
  if ((size_ + 1) * 2 > slots_.size()) grow();  // load factor <= 1/2
  size_t i = slot_of(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i] = Slot{key, info};
}

BpeModel::BpeModel(const TokenMap* vocab, BpeOptions options) : vocab_(vocab), options_(options) {
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_->find(fmt::format("<0x{:02X}>", b));
    if (it != vocab_->end()) byte_tokens_[b] = it->second;
  }
  bmp_char_ids_.assign(0x10000, -1);
  for (const auto& [text, id] : *vocab_) {
    if (text.empty() || utf8_valid_char_len(text, 0) != text.size()) continue;
    size_t pos = 0;
    const char32_t c = next_char(text, pos);
    if (c < 0x10000) bmp_char_ids_[c] = id;
  }
}

TokenId BpeModel::char_id(std::string_view ch, char32_t c) const {
  if (c < 0x10000) return bmp_char_ids_[c];
  const auto it = vocab_->find(ch);
  return it == vocab_->end() ? -1 : it->second;
}

void BpeModel::add_merge(std::string_view left, std::string_view right, std::string_view field) {
  const auto l = vocab_->find(left);
  if (l == vocab_->end()) fail("{}: token '{}' is not in the vocabulary", field, left);
  const auto r = vocab_->find(right);
  if (r == vocab_->end()) fail("{}: token '{}' is not in the vocabulary", field, right);
  std::string merged;
  merged.reserve(left.size() + right.size());
  merged.append(left).append(right);
  const auto m = vocab_->find(merged);
  if (m == vocab_->end()) {
    fail("{}: the merged token '{}' is not in the vocabulary", field, merged);
  }
  merges_.insert(pair_key(l->second, r->second), MergeInfo{next_rank_++, m->second});
}

void BpeModel::build_symbols(std::string_view word, Scratch& scratch) const {
  auto& symbols = scratch.symbols;
  symbols.clear();
  auto add = [&](TokenId id, size_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back(Symbol{id, index - 1, -1, static_cast<uint32_t>(len)});
  };
  // A run of characters missing from the vocabulary, waiting to become one (fused) unknown token.
  bool unk_pending = false;
  TokenId unk_id = 0;
  size_t unk_len = 0;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t len = utf8_valid_char_len(word, pos);
    char32_t c = 0xFFFD;
    if (len == 0) {
      len = 1;  // words are valid UTF-8; never loop forever on a stray byte
    } else {
      size_t at = pos;
      c = next_char(word, at);
    }
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (const TokenId id = char_id(ch, c); id >= 0) {
      if (unk_pending) {
        add(unk_id, unk_len);
        unk_pending = false;
      }
      add(id, len);
      continue;
    }
    if (options_.byte_fallback) {
      const bool all_bytes = std::all_of(ch.begin(), ch.end(), [&](char b) {
        return byte_tokens_[static_cast<uint8_t>(b)].has_value();
      });
      if (all_bytes) {
        // As in `tokenizers`, a pending unknown run is not flushed before byte tokens.
        for (char b : ch) add(*byte_tokens_[static_cast<uint8_t>(b)], 1);
        continue;
      }
    }
    if (options_.unk_id) {
      if (unk_pending && options_.fuse_unk) {
        unk_len += len;
      } else {
        if (unk_pending) add(unk_id, unk_len);
        unk_pending = true;
        unk_id = *options_.unk_id;
        unk_len = len;
      }
    }
  }
  if (unk_pending) add(unk_id, unk_len);
}

void BpeModel::merge_all(Scratch& scratch) const {
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  heap.clear();
  const MergeAfter after;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeInfo* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back(QueuedMerge{merge_order(m->rank, static_cast<int32_t>(i)), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), after);
  auto push = [&](const QueuedMerge& q) {
    heap.push_back(q);
    std::push_heap(heap.begin(), heap.end(), after);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const QueuedMerge top = heap.back();
    heap.pop_back();
    const auto top_pos = static_cast<int32_t>(top.order & 0xFFFFFFFFu);
    Symbol& current = symbols[top_pos];
    if (current.len == 0 || current.next == -1) continue;
    const int32_t next_pos = current.next;
    const Symbol right = symbols[next_pos];
    // A stale entry: the pair at this position changed since it was queued. (The check is on the
    // merged id, exactly as in `tokenizers`.)
    const MergeInfo* still = find_merge(current.id, right.id);
    if (still == nullptr || still->new_id != top.new_id) continue;

    current.id = top.new_id;
    current.len += right.len;
    current.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0 && static_cast<size_t>(right.next) < symbols.size()) {
      symbols[right.next].prev = top_pos;
    }
    if (current.prev >= 0) {
      if (const MergeInfo* m = find_merge(symbols[current.prev].id, current.id)) {
        push(QueuedMerge{merge_order(m->rank, current.prev), m->new_id});
      }
    }
    if (current.next >= 0 && static_cast<size_t>(current.next) < symbols.size()) {
      if (const MergeInfo* m = find_merge(current.id, symbols[current.next].id)) {
        push(QueuedMerge{merge_order(m->rank, top_pos), m->new_id});
      }
    }
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<TokenId>& out, Scratch& scratch) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto it = vocab_->find(word); it != vocab_->end()) {
      out.push_back(it->second);
      return;
    }
  }
  build_symbols(word, scratch);
  merge_all(scratch);
  for (const Symbol& s : scratch.symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

}  // namespace ridge::tokenizer::detail
