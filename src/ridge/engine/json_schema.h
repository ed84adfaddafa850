// Structured outputs (`response_format: {"type": "json_schema", ...}`): generation constrained to
// JSON that a JSON Schema accepts, by the same token walk as JSON mode (json_constraint.h) over a
// recognizer that follows the schema.
//
// The schema is compiled into a graph of nodes. What a node may be:
//   object   `properties` in the schema's order, each present at most once and in that order;
//            those in `required` must come, the others may be left out; no other keys
//            (`additionalProperties` absent or false). Property names must need no escaping.
//   array    `items`, `minItems`, `maxItems`.
//   string, number, integer, boolean, null (`type`); a list of types is their union.
//   literal  `enum` / `const`: the values' compact JSON text, byte for byte (at most 64 values).
//   union    `anyOf` / `oneOf` whose alternatives start with different bytes ('{', '[', '"',
//            digits, ...), so that a value's first byte picks one.
//   `$ref` to "#/$defs/..." or "#/definitions/..." (recursion included, up to kMaxDepth nested
//   containers).
// Annotations (title, description, default, examples, $schema, $id, $comment, strict) are
// ignored; any other keyword (pattern, format, minimum, minLength, allOf, ...) is refused with a
// clear error rather than silently not enforced. Keys are generated in the schema's order, as
// OpenAI's structured outputs do.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/engine/json_lexer.h"

namespace ridge::engine {

class JsonSchema {
 public:
  // Throws ridge::Error naming the keyword or construct it cannot enforce.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema);

  enum class Kind : uint8_t {
    object,
    array,
    string,
    number,
    integer,
    boolean,
    null,
    literal,
    any_of
  };
  struct Prop {
    std::string name;  // as written between the quotes (no escapes needed)
    int32_t node = -1;
    bool required = false;
  };
  struct Node {
    Kind kind = Kind::string;
    std::vector<Prop> props;  // object
    int32_t items = -1;       // array
    uint32_t min_items = 0, max_items = UINT32_MAX;
    std::vector<std::string> literals;    // literal (compact JSON)
    std::array<int32_t, 256> by_first{};  // any_of: the alternative a first byte picks, or -1
    int32_t min_depth = 0;  // the fewest nested containers a value needs (0 for scalars)
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  int32_t root() const { return root_; }

 private:
  std::vector<Node> nodes_;
  int32_t root_ = -1;
  friend class SchemaCompiler;
};

// The recognizer: JsonMachine's interface (feed, complete, ==, hash) over a
// schema. A few hundred bytes of state (kMaxDepth frames), copied freely by the token walk.
class SchemaMachine {
 public:
  static constexpr int kMaxDepth = 16;
  static constexpr int kMaxWhitespace = 64;

  // The schema must outlive the machine and its copies (the engine's Request holds it).
  explicit SchemaMachine(const std::shared_ptr<const JsonSchema>& schema);

  bool feed(uint8_t b);
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(uint8_t(c))) return false;
    return true;
  }
  bool complete() const { return mode_ == Mode::done; }
  bool operator==(const SchemaMachine& o) const;
  uint64_t hash() const;

 private:
  enum class Mode : uint8_t {
    value,        // a value of node expect_ is expected
    key_first,    // after '{': '"' or '}'
    key,          // after ',' in an object: '"'
    key_name,     // in a key: cand_ are the properties still matching, pos_ bytes read
    colon,        // after a key
    after_value,  // in a container after a value
    scalar,       // in a string or a number: lexer_
    literal,      // matching node expect_'s literals: cand_, pos_
    done,
  };
  struct Frame {
    int32_t node = 0;
    uint32_t index = 0;  // object: the next property that may come; array: the items so far
    bool operator==(const Frame&) const = default;
  };

  const JsonSchema::Node& node(int32_t i) const { return schema_->nodes()[size_t(i)]; }
  bool start_value(uint8_t b);
  void value_done();
  bool structural(uint8_t b);
  // Object frame f: the properties a key may name now ([index, first required at or after it]).
  uint64_t key_candidates(const Frame& f) const;
  bool object_may_close(const Frame& f) const;
  bool literal_byte(uint8_t b);

  const JsonSchema* schema_ = nullptr;  // not owned: copies in the token walk stay cheap
  std::array<Frame, kMaxDepth> frames_{};
  uint8_t depth_ = 0;
  Mode mode_ = Mode::value;
  JsonScalarLexer lexer_;
  uint8_t ws_ = 0;
  int32_t expect_ = 0;       // value / literal: the node
  uint64_t cand_ = 0;        // key_name / literal: candidates still matching
  uint32_t pos_ = 0;         // key_name / literal: bytes matched
  bool array_open_ = false;  // after_value right after '[' (the first item or ']' comes)
};

}  // namespace ridge::engine
