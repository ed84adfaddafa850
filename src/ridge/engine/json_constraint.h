// JSON mode (`response_format: {"type": "json_object"}`): generation constrained to one JSON
// object (RFC 8259), token by token.
//
// JsonMachine reads bytes and says whether each one can still be part of a valid document: a
// pushdown recognizer whose whole state is a few bytes (the container stack is a bit set), so that
// it is copied freely while the allowed tokens are searched. Strings take any byte from 0x80 up
// (UTF-8 is not checked), escapes and \uXXXX are checked, numbers follow the grammar (no leading
// zeros), literals are true / false / null. Whitespace runs inside the value are bounded
// (kMaxWhitespace bytes between two other bytes) and nesting is bounded (kMaxDepth), so a
// constrained model cannot pad or nest forever; after the value, JsonConstraint allows only the
// end tokens where they may come.
//
// JsonConstraint turns that into the tokens a sequence may draw next: the vocabulary's byte
// strings sit in a trie (TokenTrie, built once per tokenizer), and a walk of the trie that feeds
// each edge's byte to a copy of the machine finds every token that keeps the document valid in
// time proportional to the trie nodes it can reach. The end tokens (the sequence's stop tokens)
// are allowed once the object is complete, and then only they are (whitespace only while they
// may not come). Results are cached per machine state. The engine builds the trie once, at the
// first JSON request. What the engine uses is banned(): the complement, which the samplers turn
// into -inf logits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ridge/engine/json_lexer.h"

namespace ridge::tokenizer {
class Tokenizer;
}

namespace ridge::engine {

class JsonMachine {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxWhitespace = 64;

  // object_only: the document must be an object (json_object); else any JSON value.
  explicit JsonMachine(bool object_only = true) : object_only_(object_only) {}

  // Reads one byte; false (the state then undefined: use a copy) when no valid document
  // continues this way.
  bool feed(uint8_t b);
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(uint8_t(c))) return false;
    return true;
  }
  // A whole value has been read (only whitespace may follow). A number at the top level is
  // complete once a byte after it shows where it ends; object_only documents never end that way.
  bool complete() const { return mode_ == Mode::done; }
  // Whitespace is allowed now (and the run so far is below the limit; after the value it always
  // is, and leaves the state as it was).
  bool whitespace_allowed() const;

  bool operator==(const JsonMachine&) const = default;
  uint64_t hash() const;

 private:
  enum class Mode : uint8_t {
    value,        // a value is expected (after ':' or ',' in an array, or at the start)
    array_first,  // after '[': a value or ']'
    key_first,    // after '{': '"' or '}'
    key,          // after ',' in an object: '"'
    colon,        // after a key
    after_value,  // in a container after a value: ',' or the closing bracket
    scalar,       // in a string (key or value) or a number: lexer_
    literal,      // in true / false / null (count_ bytes read, literal_ which)
    done,         // the top-level value is complete
  };

  bool open(bool object);       // '{' or '['
  bool close(bool object);      // '}' or ']'
  void value_done();            // a value ended: after_value in a container, else done
  bool start_value(uint8_t b);  // the first byte of a value
  bool after_value_byte(uint8_t b);
  bool in_object() const { return depth_ > 0 && (stack_ >> (depth_ - 1) & 1u); }

  uint64_t stack_ = 0;  // bit i: container i is an object (1) or an array (0)
  uint8_t depth_ = 0;
  Mode mode_ = Mode::value;
  JsonScalarLexer lexer_;
  uint8_t count_ = 0;
  uint8_t literal_ = 0;  // 0 true, 1 false, 2 null
  uint8_t ws_ = 0;       // whitespace bytes in the current run
  bool key_ = false;     // the string being read is a key
  bool object_only_ = true;
};

// The vocabulary as a trie of token byte strings (special tokens and empty strings left out).
class TokenTrie {
 public:
  explicit TokenTrie(const tokenizer::Tokenizer& tok);
  int32_t vocab_size() const { return vocab_; }

  struct Node {
    uint32_t first_child = 0, num_children = 0;  // into children_, sorted by byte
    uint32_t first_token = 0, num_tokens = 0;    // into tokens_: the tokens spelled exactly so
  };
  struct Edge {
    uint8_t byte;
    uint32_t node;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Tokens made only of whitespace bytes.
  const std::vector<int32_t>& whitespace_tokens() const { return whitespace_; }
  // The bytes of token `id` ("" for special tokens and ids past the vocabulary).
  const std::string& bytes(int32_t id) const;

 private:
  int32_t vocab_ = 0;
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> whitespace_;
};

// What the engine holds per constrained sequence (Sequence::constraint).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The tokens that must not come next, ascending. ends_allowed: whether the end tokens may come
  // once the value is complete (not while min_tokens holds them back; whitespace then goes on,
  // so that a row is never banned whole). Valid until the next advance() or a call with the
  // other flag.
  virtual std::span<const int32_t> banned(bool ends_allowed = true) = 0;
  // The token was drawn: its bytes move the machine. An end token leaves it where it is; a token
  // the machine refuses (never drawn when the samplers honour banned()) leaves it too, with a
  // warning, and returns false.
  virtual bool advance(int32_t token) = 0;
};

// The token walk over a byte recognizer M (JsonMachine, SchemaMachine: feed, complete, ==,
// hash).
template <class M>
class GrammarConstraint final : public TokenConstraint {
 public:
  // end_tokens: the tokens that end the sequence (allowed once the value is complete); vocab:
  // the model's (ids past the tokenizer's are always banned).
  GrammarConstraint(std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_tokens,
                    int64_t vocab, M machine = M());

  std::span<const int32_t> banned(bool ends_allowed = true) override;
  bool advance(int32_t token) override;
  const M& machine() const { return machine_; }

 private:
  std::vector<int32_t> compute_banned(bool ends_allowed) const;

  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_tokens_;  // sorted
  int64_t vocab_;
  M machine_;
  struct Cached {
    M machine;
    bool ends_allowed;
    std::vector<int32_t> banned;
  };
  std::unordered_map<uint64_t, Cached> cache_;
  const std::vector<int32_t>* current_ = nullptr;
  bool current_ends_ = true;
  bool warned_ = false;
};

using JsonConstraint = GrammarConstraint<JsonMachine>;

}  // namespace ridge::engine
