#include "ridge/tokenizer/added_vocab.h"

#include <algorithm>
#include <cstdint>

#include "ridge/tokenizer/utf8.h"

namespace ridge::tokenizer::detail {
namespace {

// Byte offset where the run of whitespace ending `s` starts (s.size() when there is none).
size_t trailing_whitespace_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<uint8_t>(s[begin]) & 0xC0) == 0x80 && end - begin < 4) --begin;
    if (utf8_valid_char_len(s, begin) != end - begin) break;
    size_t pos = begin;
    if (!is_unicode_whitespace(next_char(s, pos))) break;
    end = begin;
  }
  return end;
}

// Byte length of the run of whitespace starting `s`.
size_t leading_whitespace_len(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (utf8_valid_char_len(s, pos) == 0) break;
    size_t next = pos;
    if (!is_unicode_whitespace(next_char(s, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedTokenMatcher::build(std::vector<AddedToken> tokens, std::vector<std::string> patterns) {
  tokens_ = std::move(tokens);
  nodes_.assign(1, Node{});
  first_byte_.fill(false);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    first_byte_[static_cast<uint8_t>(p[0])] = true;
    int32_t node = 0;
    for (char ch : p) {
      const auto byte = static_cast<uint8_t>(ch);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{});
        auto& edges = nodes_[node].edges;
        edges.insert(std::lower_bound(edges.begin(), edges.end(), std::pair{byte, int32_t{-1}}),
                     {byte, next});
      }
      node = next;
    }
    // The same text added twice: the first registration wins the match.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& edges = nodes_[node].edges;
  const auto it = std::lower_bound(edges.begin(), edges.end(), std::pair{byte, int32_t{-1}});
  return (it != edges.end() && it->first == byte) ? it->second : -1;
}

std::pair<int32_t, size_t> AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  int32_t node = 0;
  int32_t best = -1;
  size_t best_len = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      best_len = i + 1 - pos;
    }
  }
  return {best, best_len};
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special,
                              std::vector<AddedSplit>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [token, len] = longest_at(text, pos);
    if (token < 0) {
      ++pos;
      continue;
    }
    const AddedToken& added = tokens_[token];
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;  // the search resumes after the match, whether it is used or not
    if (skip_special && added.special) continue;
    if (added.lstrip) {
      start = std::max(trailing_whitespace_start(text.substr(0, start)), start_offset);
    }
    if (added.rstrip) stop += leading_whitespace_len(text.substr(stop));
    if (start > start_offset) out.push_back(AddedSplit{start_offset, start, -1});
    out.push_back(AddedSplit{start, stop, token});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) out.push_back(AddedSplit{start_offset, text.size(), -1});
}

}  // namespace ridge::tokenizer::detail
