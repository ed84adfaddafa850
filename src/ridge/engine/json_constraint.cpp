#include "ridge/engine/json_constraint.h"

#include "ridge/engine/json_schema.h"

#include <algorithm>
#include <numeric>

#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/tokenizer/tokenizer.h"

namespace ridge::engine {

namespace {
constexpr const char* kLiterals[3] = {"true", "false", "null"};
}  // namespace

// ---- JsonMachine ---------------------------------------------------------------------------

bool JsonMachine::whitespace_allowed() const {
  switch (mode_) {
    case Mode::literal:
      return false;
    case Mode::scalar:  // whitespace may end a number, then it is a run of one
      return lexer_.number_may_end();
    case Mode::done:
      return true;
    default:
      return ws_ < kMaxWhitespace;
  }
}

uint64_t JsonMachine::hash() const {
  uint64_t h = stack_ * 0x9e3779b97f4a7c15ull;
  const uint64_t rest = uint64_t(depth_) | uint64_t(mode_) << 8 | uint64_t(lexer_.bits()) << 16 |
                        uint64_t(count_) << 32 | uint64_t(literal_) << 40 | uint64_t(ws_) << 48 |
                        uint64_t(key_) << 56 | uint64_t(object_only_) << 57;
  h ^= rest + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

bool JsonMachine::open(bool object) {
  if (depth_ >= kMaxDepth) return false;
  if (object)
    stack_ |= uint64_t(1) << depth_;
  else
    stack_ &= ~(uint64_t(1) << depth_);
  ++depth_;
  mode_ = object ? Mode::key_first : Mode::array_first;
  return true;
}

bool JsonMachine::close(bool object) {
  if (depth_ == 0 || in_object() != object) return false;
  --depth_;
  stack_ &= ~(uint64_t(1) << depth_);
  value_done();
  return true;
}

void JsonMachine::value_done() {
  mode_ = depth_ == 0 ? Mode::done : Mode::after_value;
  // What the finished value's modes used, reset so that equal states compare (and hash) equal.
  lexer_ = {};
  count_ = literal_ = 0;
  key_ = false;
}

bool JsonMachine::start_value(uint8_t b) {
  if (depth_ == 0 && object_only_ && b != '{') return false;
  switch (b) {
    case '{':
      return open(true);
    case '[':
      return open(false);
    case '"':
      mode_ = Mode::scalar;
      lexer_.start_string();
      key_ = false;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::literal;
      literal_ = b == 't' ? 0 : b == 'f' ? 1 : 2;
      count_ = 1;
      return true;
    default:
      if (!lexer_.start_number(b, false)) return false;
      mode_ = Mode::scalar;
      return true;
  }
}

bool JsonMachine::after_value_byte(uint8_t b) {
  if (b == ',') {
    mode_ = in_object() ? Mode::key : Mode::value;
    return true;
  }
  if (b == '}') return close(true);
  if (b == ']') return close(false);
  return false;
}

bool JsonMachine::feed(uint8_t b) {
  switch (mode_) {
    case Mode::scalar:
      switch (lexer_.feed(b)) {
        case JsonScalarLexer::Result::more:
          return true;
        case JsonScalarLexer::Result::reject:
          return false;
        case JsonScalarLexer::Result::string_end:
          if (key_) {
            mode_ = Mode::colon;
            key_ = false;
          } else {
            value_done();
          }
          return true;
        case JsonScalarLexer::Result::number_end:
          value_done();
          ws_ = 0;
          return feed(b);
      }
      return false;
    case Mode::literal: {
      const char* lit = kLiterals[literal_];
      if (b != uint8_t(lit[count_])) return false;
      if (lit[++count_] == 0) value_done();
      return true;
    }
    default:
      break;
  }
  // Between tokens of the grammar: whitespace (bounded runs; after the value, unbounded:
  // JsonConstraint decides when it must end) or structure.
  if (json_is_ws(b)) return json_whitespace(ws_, mode_ == Mode::done, kMaxWhitespace);
  ws_ = 0;
  switch (mode_) {
    case Mode::value:
      return start_value(b);
    case Mode::array_first:
      if (b == ']') return close(false);
      return start_value(b);
    case Mode::key_first:
      if (b == '}') return close(true);
      [[fallthrough]];
    case Mode::key:
      if (b != '"') return false;
      mode_ = Mode::scalar;
      lexer_.start_string();
      key_ = true;
      return true;
    case Mode::colon:
      if (b != ':') return false;
      mode_ = Mode::value;
      return true;
    case Mode::after_value:
      return after_value_byte(b);
    default:  // done
      return false;
  }
}

// ---- TokenTrie -------------------------------------------------------------------------------

TokenTrie::TokenTrie(const tokenizer::Tokenizer& tok) : vocab_(int32_t(tok.vocab_size())) {
  bytes_.resize(size_t(vocab_));
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_; ++id) {
    if (tok.is_special(id)) continue;
    bytes_[size_t(id)] = tok.token_bytes(id);
    if (bytes_[size_t(id)].empty()) continue;
    ids.push_back(id);
    const std::string& b = bytes_[size_t(id)];
    if (std::all_of(b.begin(), b.end(), [](char c) { return json_is_ws(uint8_t(c)); }))
      whitespace_.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] < bytes_[size_t(b)] ||
           (bytes_[size_t(a)] == bytes_[size_t(b)] && a < b);
  });
  // Node of the tokens ids[lo, hi), which share their first `d` bytes: the ones of exactly d bytes
  // end here (they sort first), the others go to one child per next byte.
  auto build = [&](auto& self, size_t lo, size_t hi, size_t d) -> uint32_t {
    const uint32_t at = uint32_t(nodes_.size());
    nodes_.push_back({});
    size_t i = lo;
    const uint32_t first_token = uint32_t(tokens_.size());
    while (i < hi && bytes_[size_t(ids[i])].size() == d) tokens_.push_back(ids[i++]);
    const uint32_t num_tokens = uint32_t(tokens_.size()) - first_token;  // before the children's
    std::vector<Edge> children;
    while (i < hi) {
      const uint8_t c = uint8_t(bytes_[size_t(ids[i])][d]);
      size_t j = i;
      while (j < hi && uint8_t(bytes_[size_t(ids[j])][d]) == c) ++j;
      children.push_back({c, self(self, i, j, d + 1)});
      i = j;
    }
    Node& n = nodes_[at];
    n.first_token = first_token;
    n.num_tokens = num_tokens;
    n.first_child = uint32_t(edges_.size());
    n.num_children = uint32_t(children.size());
    edges_.insert(edges_.end(), children.begin(), children.end());
    return at;
  };
  build(build, 0, ids.size(), 0);
}

const std::string& TokenTrie::bytes(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && id < vocab_ ? bytes_[size_t(id)] : kNone;
}

// ---- GrammarConstraint --------------------------------------------------------------------------

template <class M>
GrammarConstraint<M>::GrammarConstraint(std::shared_ptr<const TokenTrie> trie,
                                        std::vector<int32_t> end_tokens, int64_t vocab, M machine)
    : trie_(std::move(trie)),
      end_tokens_(std::move(end_tokens)),
      vocab_(vocab),
      machine_(std::move(machine)) {
  RIDGE_CHECK(trie_ != nullptr, "json constraint: no token trie");
  std::sort(end_tokens_.begin(), end_tokens_.end());
  end_tokens_.erase(std::unique(end_tokens_.begin(), end_tokens_.end()), end_tokens_.end());
}

template <class M>
std::vector<int32_t> GrammarConstraint<M>::compute_banned(bool ends_allowed) const {
  std::vector<char> ok(size_t(vocab_), 0);
  const auto& nodes = trie_->nodes();
  const auto& edges = trie_->edges();
  const auto& tokens = trie_->tokens();
  // Depth-first over the trie, each node reached with the machine after its bytes.
  std::vector<std::pair<uint32_t, M>> stack = {{0u, machine_}};
  while (!stack.empty()) {
    auto [n, m] = stack.back();
    stack.pop_back();
    const auto& node = nodes[n];
    for (uint32_t e = node.first_child; e < node.first_child + node.num_children; ++e) {
      M c = m;
      if (!c.feed(edges[e].byte)) continue;
      const auto& child = nodes[edges[e].node];
      for (uint32_t t = child.first_token; t < child.first_token + child.num_tokens; ++t)
        if (tokens[t] < vocab_) ok[size_t(tokens[t])] = 1;
      if (child.num_children) stack.emplace_back(edges[e].node, c);
    }
  }
  // End tokens by the end rule only (a stop token that spells JSON bytes would still end the
  // sequence mid-object).
  const bool ends = machine_.complete() && ends_allowed;
  bool any_end = false;
  for (int32_t t : end_tokens_)
    if (t >= 0 && t < vocab_) ok[size_t(t)] = ends, any_end = true;
  // After the value only whitespace can come (the walk allowed nothing else): where an end token
  // may come, it must (no trailing whitespace: a model tends to pad before it ends). Where none
  // may (none given, or min_tokens holds them back) whitespace goes on, so that a row is never
  // banned whole.
  if (ends && any_end)
    for (int32_t t : trie_->whitespace_tokens())
      if (t < vocab_) ok[size_t(t)] = 0;
  std::vector<int32_t> banned;
  for (int64_t t = 0; t < vocab_; ++t)
    if (!ok[size_t(t)]) banned.push_back(int32_t(t));
  return banned;
}

template <class M>
std::span<const int32_t> GrammarConstraint<M>::banned(bool ends_allowed) {
  if (current_ && current_ends_ == ends_allowed) return *current_;
  const uint64_t h = machine_.hash() ^ (ends_allowed ? 0 : 0x5bd1e995ull);
  auto it = cache_.find(h);
  if (it == cache_.end() || !(it->second.machine == machine_) ||
      it->second.ends_allowed != ends_allowed) {
    if (cache_.size() >= 256) cache_.clear();
    it = cache_.insert_or_assign(h, Cached{machine_, ends_allowed, compute_banned(ends_allowed)})
             .first;
  }
  current_ = &it->second.banned;
  current_ends_ = ends_allowed;
  return *current_;
}

template <class M>
bool GrammarConstraint<M>::advance(int32_t token) {
  current_ = nullptr;
  if (std::binary_search(end_tokens_.begin(), end_tokens_.end(), token)) return true;
  M m = machine_;
  if (m.feed(trie_->bytes(token))) {
    machine_ = m;
    return true;
  }
  if (!warned_) {
    warned_ = true;
    log::warn(
        "json mode: token {} does not continue the JSON object; the output is no longer "
        "kept to valid JSON from here",
        token);
  }
  return false;
}

template class GrammarConstraint<JsonMachine>;
template class GrammarConstraint<SchemaMachine>;

}  // namespace ridge::engine
