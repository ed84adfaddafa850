#include "ridge/engine/json_schema.h"

#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include "ridge/core/error.h"

namespace ridge::engine {

using Kind = JsonSchema::Kind;

namespace {
const std::set<std::string> kAnnotations = {"title",   "description", "default",  "examples",
                                            "$schema", "$id",         "$comment", "strict",
                                            "$defs",   "definitions"};
}  // namespace

// ---- compiling ----------------------------------------------------------------------------

class SchemaCompiler {
 public:
  SchemaCompiler(const nlohmann::ordered_json& doc, JsonSchema& out) : doc_(doc), out_(out) {}

  int32_t compile(const nlohmann::ordered_json& s, const std::string& where) {
    if (!s.is_object())
      fail("{}: a schema must be an object (true/false schemas are not supported)", where);
    static const std::set<std::string> kKnown = {
        "type",  "properties", "required", "additionalProperties",
        "items", "minItems",   "maxItems", "enum",
        "const", "anyOf",      "oneOf",    "$ref"};
    for (const auto& [k, v] : s.items())
      if (!kKnown.contains(k) && !kAnnotations.contains(k))
        fail(
            "{}: the keyword '{}' is not supported (ridge enforces type, properties, required, "
            "additionalProperties: false, items, minItems, maxItems, enum, const, anyOf, oneOf "
            "and $ref)",
            where, k);
    if (++depth_ > kMaxSchemaDepth)
      fail("{}: the schema nests deeper than {} levels", where, kMaxSchemaDepth);
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    // Keywords that apply together are combined; combinations ridge would have to intersect in
    // other ways are refused rather than half enforced.
    auto others = [&](std::initializer_list<const char*> allowed) {
      for (const auto& [k, v] : s.items())
        if (!kAnnotations.contains(k) &&
            std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }))
          return k;
      return std::string();
    };
    if (auto r = s.find("$ref"); r != s.end()) {
      if (auto k = others({"$ref"}); !k.empty())
        fail("{}: '$ref' beside '{}' is not supported (put it in the definition)", where, k);
      return ref(*r, where);
    }
    if (s.contains("enum") || s.contains("const")) {
      if (auto k = others({"enum", "const", "type"}); !k.empty())
        fail("{}: enum / const beside '{}' is not supported", where, k);
      return literal(s, where);
    }
    if (s.contains("anyOf") && s.contains("oneOf"))
      fail("{}: anyOf beside oneOf is not supported", where);
    if (auto a = s.contains("anyOf") ? s.find("anyOf") : s.find("oneOf"); a != s.end()) {
      if (auto k = others({"anyOf", "oneOf"}); !k.empty())
        fail("{}: anyOf / oneOf beside '{}' is not supported (put it in each alternative)", where,
             k);
      return any_of(*a, where);
    }
    auto t = s.find("type");
    if (t == s.end()) fail("{}: a schema needs a 'type' (or enum, const, anyOf, $ref)", where);
    if (t->is_array()) {
      if (t->empty()) fail("{}: 'type' is an empty list", where);
      if (t->size() == 1) return typed(s, get_type((*t)[0], where), where);
      std::vector<int32_t> alts;
      for (const auto& one : *t) alts.push_back(typed(s, get_type(one, where), where));
      return union_of(alts, where);
    }
    return typed(s, get_type(*t, where), where);
  }

 private:
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
    throw Error("json_schema: " + fmt::format(f, std::forward<A>(a)...));
  }

  int32_t add(JsonSchema::Node n) {
    out_.nodes_.push_back(std::move(n));
    RIDGE_CHECK(out_.nodes_.size() < 100000, "json_schema: the schema has too many nodes");
    return int32_t(out_.nodes_.size() - 1);
  }

  std::string get_type(const nlohmann::ordered_json& t, const std::string& where) {
    if (!t.is_string()) fail("{}: 'type' must be a string or a list of strings", where);
    return t.get<std::string>();
  }

  int32_t literal_node(std::vector<std::string> values) {
    JsonSchema::Node n;
    n.kind = Kind::literal;
    n.literals = std::move(values);
    return add(std::move(n));
  }

  // enum / const, each value kept only where every keyword given accepts it (const and enum
  // intersect; a type filters).
  int32_t literal(const nlohmann::ordered_json& s, const std::string& where) {
    std::vector<nlohmann::ordered_json> values;
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) fail("{}: 'enum' must be a non-empty list", where);
      values.assign(e->begin(), e->end());
    }
    if (auto c = s.find("const"); c != s.end()) {
      if (s.contains("enum") && std::find(values.begin(), values.end(), *c) == values.end())
        values.clear();
      else
        values = {*c};
    }
    if (auto t = s.find("type"); t != s.end()) {
      std::vector<std::string> types;
      if (t->is_array()) {
        for (const auto& one : *t) types.push_back(get_type(one, where));
      } else {
        types.push_back(get_type(*t, where));
      }
      auto fits = [&](const nlohmann::ordered_json& v) {
        for (const auto& ty : types)
          if ((ty == "string" && v.is_string()) || (ty == "number" && v.is_number()) ||
              (ty == "integer" && (v.is_number_integer() || v.is_number_unsigned())) ||
              (ty == "boolean" && v.is_boolean()) || (ty == "null" && v.is_null()) ||
              (ty == "object" && v.is_object()) || (ty == "array" && v.is_array()))
            return true;
        return false;
      };
      std::erase_if(values, [&](const auto& v) { return !fits(v); });
    }
    if (values.empty()) fail("{}: no value satisfies both enum / const and type", where);
    std::vector<std::string> text;
    for (const auto& v : values) text.push_back(v.dump());
    std::sort(text.begin(), text.end());
    text.erase(std::unique(text.begin(), text.end()), text.end());
    if (text.size() > 64) fail("{}: at most 64 enum values, {} given", where, text.size());
    return literal_node(std::move(text));
  }

  int32_t typed(const nlohmann::ordered_json& s, const std::string& type,
                const std::string& where) {
    JsonSchema::Node n;
    if (type == "string") {
      n.kind = Kind::string;
    } else if (type == "number") {
      n.kind = Kind::number;
    } else if (type == "integer") {
      n.kind = Kind::integer;
    } else if (type == "boolean") {
      return literal_node({"false", "true"});
    } else if (type == "null") {
      return literal_node({"null"});
    } else if (type == "array") {
      n.kind = Kind::array;
      auto items = s.find("items");
      if (items == s.end()) fail("{}: an array needs 'items' (any value is not supported)", where);
      if (auto m = s.find("minItems"); m != s.end()) n.min_items = count(*m, where, "minItems");
      if (auto m = s.find("maxItems"); m != s.end()) n.max_items = count(*m, where, "maxItems");
      if (n.min_items > n.max_items) fail("{}: minItems > maxItems", where);
      const int32_t at = add(std::move(n));
      const int32_t item = compile(*items, where + "/items");
      out_.nodes_[size_t(at)].items = item;
      return at;
    } else if (type == "object") {
      n.kind = Kind::object;
      if (auto ap = s.find("additionalProperties");
          ap != s.end() && !(ap->is_boolean() && !ap->get<bool>()))
        fail("{}: 'additionalProperties' must be false or absent (other keys are not allowed)",
             where);
      std::set<std::string> required;
      if (auto r = s.find("required"); r != s.end()) {
        if (!r->is_array()) fail("{}: 'required' must be a list of names", where);
        for (const auto& name : *r) {
          if (!name.is_string()) fail("{}: 'required' must be a list of names", where);
          required.insert(name.get<std::string>());
        }
      }
      const int32_t at = add(std::move(n));
      std::vector<JsonSchema::Prop> props;
      if (auto p = s.find("properties"); p != s.end()) {
        if (!p->is_object()) fail("{}: 'properties' must be an object", where);
        for (const auto& [name, sub] : p->items()) {
          for (unsigned char c : name)
            if (c < 0x20 || c == '"' || c == '\\')
              fail("{}: the property name {} needs escaping, which is not supported", where,
                   nlohmann::ordered_json(name).dump());
          props.push_back(
              {name, compile(sub, where + "/properties/" + name), required.contains(name)});
        }
      }
      for (const auto& r : required)
        if (std::none_of(props.begin(), props.end(), [&](const auto& q) { return q.name == r; }))
          fail("{}: the required property '{}' is not in 'properties'", where, r);
      if (props.size() > 64) fail("{}: at most 64 properties, {} given", where, props.size());
      out_.nodes_[size_t(at)].props = std::move(props);
      return at;
    } else {
      fail("{}: unknown type '{}'", where, type);
    }
    return add(std::move(n));
  }

  uint32_t count(const nlohmann::ordered_json& v, const std::string& where, const char* what) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000000)
      fail("{}: '{}' must be an integer in [0, 1000000]", where, what);
    return uint32_t(v.get<int64_t>());
  }

  // The bytes a value of a schema not compiled yet can start with (a definition being compiled,
  // reached again through anyOf: the recursive nullable pattern), from its keywords.
  std::set<uint8_t> raw_first_bytes(const nlohmann::ordered_json& s, const std::string& where,
                                    int hops = 0) {
    if (hops > 32 || !s.is_object()) fail("{}: a $ref cycle without a value in between", where);
    std::set<uint8_t> out;
    auto add_type = [&](const std::string& t) {
      static const std::map<std::string, std::string> kFirst = {{"object", "{"},
                                                                {"array", "["},
                                                                {"string", "\""},
                                                                {"number", "-0123456789"},
                                                                {"integer", "-0123456789"},
                                                                {"boolean", "tf"},
                                                                {"null", "n"}};
      auto it = kFirst.find(t);
      if (it == kFirst.end()) fail("{}: unknown type '{}'", where, t);
      out.insert(it->second.begin(), it->second.end());
    };
    if (auto r = s.find("$ref"); r != s.end() && r->is_string()) {
      const std::string path = r->get<std::string>();
      for (const char* key : {"$defs", "definitions"}) {
        const std::string prefix = std::string("#/") + key + "/";
        if (path.rfind(prefix, 0) == 0 && doc_.contains(key) &&
            doc_[key].contains(path.substr(prefix.size())))
          return raw_first_bytes(doc_[key][path.substr(prefix.size())], where, hops + 1);
      }
      fail("{}: '$ref' {} names no definition", where, path);
    }
    if (s.contains("enum") || s.contains("const")) {
      if (auto c = s.find("const"); c != s.end()) out.insert(uint8_t(c->dump()[0]));
      if (auto e = s.find("enum"); e != s.end() && e->is_array())
        for (const auto& v : *e) out.insert(uint8_t(v.dump()[0]));
      return out;
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (auto a = s.find(k); a != s.end() && a->is_array()) {
        for (const auto& alt : *a) {
          const auto more = raw_first_bytes(alt, where, hops + 1);
          out.insert(more.begin(), more.end());
        }
        return out;
      }
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_array()) {
        for (const auto& one : *t) add_type(get_type(one, where));
      } else {
        add_type(get_type(*t, where));
      }
    }
    return out;
  }

  // The bytes a value of node i can start with.
  std::set<uint8_t> first_bytes(int32_t i, const std::string& where) {
    if (auto p = pending_.find(i); p != pending_.end()) return raw_first_bytes(*p->second, where);
    const JsonSchema::Node& n = out_.nodes_[size_t(i)];
    switch (n.kind) {
      case Kind::object:
        return {'{'};
      case Kind::array:
        return {'['};
      case Kind::string:
        return {'"'};
      case Kind::number:
      case Kind::integer:
        return {'-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'};
      case Kind::literal: {
        std::set<uint8_t> s;
        for (const auto& l : n.literals) s.insert(uint8_t(l[0]));
        return s;
      }
      default: {
        std::set<uint8_t> s;
        for (int b = 0; b < 256; ++b)
          if (n.by_first[size_t(b)] >= 0) s.insert(uint8_t(b));
        return s;
      }
    }
  }

  int32_t union_of(const std::vector<int32_t>& alts, const std::string& where) {
    JsonSchema::Node n;
    n.kind = Kind::any_of;
    n.by_first.fill(-1);
    for (int32_t a : alts) {
      // A union inside a union: its own alternatives.
      const std::set<uint8_t> bytes = first_bytes(a, where);
      for (uint8_t b : bytes) {
        if (n.by_first[b] >= 0)
          fail(
              "{}: the alternatives overlap (two can start with '{}'): each must start "
              "differently (object, array, string, number, boolean, null)",
              where, char(b));
        const JsonSchema::Node& an = out_.nodes_[size_t(a)];
        n.by_first[b] = an.kind == Kind::any_of && !pending_.contains(a) ? an.by_first[b] : a;
      }
    }
    return add(std::move(n));
  }

  int32_t any_of(const nlohmann::ordered_json& list, const std::string& where) {
    if (!list.is_array() || list.empty()) fail("{}: anyOf / oneOf must be a non-empty list", where);
    std::vector<int32_t> alts;
    for (size_t i = 0; i < list.size(); ++i)
      alts.push_back(compile(list[i], fmt::format("{}/anyOf/{}", where, i)));
    return alts.size() == 1 ? alts[0] : union_of(alts, where);
  }

  int32_t ref(const nlohmann::ordered_json& r, const std::string& where) {
    if (!r.is_string()) fail("{}: '$ref' must be a string", where);
    const std::string path = r.get<std::string>();
    std::string key;
    for (const char* prefix : {"#/$defs/", "#/definitions/"})
      if (path.rfind(prefix, 0) == 0)
        key = std::string(prefix).substr(2, std::string(prefix).size() - 3);
    if (key.empty()) fail("{}: '$ref' {} is not of the form #/$defs/NAME", where, path);
    const std::string name = path.substr(key.size() + 3);
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    auto defs = doc_.find(key);
    if (defs == doc_.end() || !defs->is_object() || !defs->contains(name))
      fail("{}: '$ref' {} names no definition", where, path);
    // A placeholder first, so that a recursive reference finds it.
    const int32_t at = add({});
    refs_[path] = at;
    pending_[at] = &(*defs)[name];
    const int32_t target = compile((*defs)[name], path);
    if (pending_.contains(target))
      fail(
          "{}: '$ref' {} only names another definition being compiled (a cycle with no object "
          "or array in between)",
          where, path);
    pending_.erase(at);
    out_.nodes_[size_t(at)] = out_.nodes_[size_t(target)];
    return at;
  }

  const nlohmann::ordered_json& doc_;
  JsonSchema& out_;
  std::map<std::string, int32_t> refs_;
  // $ref placeholders whose definition is being compiled, with that definition.
  std::map<int32_t, const nlohmann::ordered_json*> pending_;
  int depth_ = 0;
  static constexpr int kMaxSchemaDepth = 64;
};

namespace {
// The fewest containers a value of each node needs (a fixpoint: recursion makes it a graph);
// INT32_MAX where no finite value exists.
void set_min_depths(std::vector<JsonSchema::Node>& nodes) {
  constexpr int32_t kInf = INT32_MAX;
  for (auto& n : nodes) n.min_depth = kInf;
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& n : nodes) {
      int32_t d = kInf;
      switch (n.kind) {
        case Kind::object: {
          int32_t worst = 0;
          for (const auto& p : n.props)
            if (p.required) worst = std::max(worst, nodes[size_t(p.node)].min_depth);
          d = worst == kInf ? kInf : worst + 1;
          break;
        }
        case Kind::array: {
          const int32_t item = n.min_items == 0 ? 0 : nodes[size_t(n.items)].min_depth;
          d = item == kInf ? kInf : item + 1;
          break;
        }
        case Kind::any_of:
          for (int b = 0; b < 256; ++b)
            if (n.by_first[size_t(b)] >= 0)
              d = std::min(d, nodes[size_t(n.by_first[size_t(b)])].min_depth);
          break;
        default:
          d = 0;
      }
      if (d < n.min_depth) {
        n.min_depth = d;
        changed = true;
      }
    }
  }
}
}  // namespace

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::ordered_json& schema) {
  auto s = std::make_shared<JsonSchema>();
  SchemaCompiler c(schema, *s);
  s->root_ = c.compile(schema, "#");
  set_min_depths(s->nodes_);
  const int32_t need = s->nodes_[size_t(s->root_)].min_depth;
  if (need == INT32_MAX)
    throw Error(
        "json_schema: no finite instance exists (required properties or items recurse "
        "without end)");
  if (need > SchemaMachine::kMaxDepth)
    throw Error(
        fmt::format("json_schema: an instance needs {} nested containers, more than the "
                    "{} supported",
                    need, SchemaMachine::kMaxDepth));
  return s;
}

// ---- the recognizer -------------------------------------------------------------------------

SchemaMachine::SchemaMachine(const std::shared_ptr<const JsonSchema>& schema)
    : schema_(schema.get()) {
  RIDGE_CHECK(schema_ && schema_->root() >= 0, "schema machine: no schema");
  expect_ = schema_->root();
}

bool SchemaMachine::operator==(const SchemaMachine& o) const {
  if (schema_ != o.schema_ || depth_ != o.depth_ || mode_ != o.mode_ || !(lexer_ == o.lexer_) ||
      ws_ != o.ws_ || expect_ != o.expect_ || cand_ != o.cand_ || pos_ != o.pos_ ||
      array_open_ != o.array_open_)
    return false;
  return std::equal(frames_.begin(), frames_.begin() + depth_, o.frames_.begin());
}

uint64_t SchemaMachine::hash() const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (uint8_t i = 0; i < depth_; ++i)
    mix(uint64_t(uint32_t(frames_[i].node)) << 32 | frames_[i].index);
  mix(uint64_t(depth_) | uint64_t(mode_) << 8 | uint64_t(lexer_.bits()) << 16 |
      uint64_t(ws_) << 40 | uint64_t(array_open_) << 48);
  mix(uint64_t(uint32_t(expect_)) << 32 | pos_);
  mix(cand_);
  return h;
}

uint64_t SchemaMachine::key_candidates(const Frame& f) const {
  const auto& props = node(f.node).props;
  uint64_t c = 0;
  for (size_t i = f.index; i < props.size(); ++i) {
    if (props[i].required) {  // cannot be skipped (and fits: its object was checked)
      c |= uint64_t(1) << i;
      break;
    }
    // An optional one whose value cannot fit in the depth left is left out.
    if (depth_ + node(props[i].node).min_depth <= kMaxDepth) c |= uint64_t(1) << i;
  }
  return c;
}

bool SchemaMachine::object_may_close(const Frame& f) const {
  const auto& props = node(f.node).props;
  for (size_t i = f.index; i < props.size(); ++i)
    if (props[i].required) return false;
  return true;
}

void SchemaMachine::value_done() {
  lexer_ = {};
  cand_ = 0;
  pos_ = 0;
  expect_ = 0;
  if (depth_ == 0) {
    mode_ = Mode::done;
    return;
  }
  Frame& f = frames_[depth_ - 1];
  if (node(f.node).kind == Kind::array) ++f.index;
  mode_ = Mode::after_value;
}

bool SchemaMachine::start_value(uint8_t b) {
  int32_t n = expect_;
  while (node(n).kind == Kind::any_of) {
    n = node(n).by_first[b];
    if (n < 0) return false;
  }
  const JsonSchema::Node& nd = node(n);
  // A value that could not be finished within kMaxDepth containers never starts (no dead end).
  if (depth_ + nd.min_depth > kMaxDepth) return false;
  switch (nd.kind) {
    case Kind::object:
    case Kind::array:
      if (b != (nd.kind == Kind::object ? '{' : '[') || depth_ >= kMaxDepth) return false;
      frames_[depth_++] = {n, 0};
      expect_ = 0;
      // An array: the first item or ']' next (after_value with array_open_).
      mode_ = nd.kind == Kind::object ? Mode::key_first : Mode::after_value;
      array_open_ = nd.kind == Kind::array;
      return true;
    case Kind::string:
      if (b != '"') return false;
      mode_ = Mode::scalar;
      lexer_.start_string();
      return true;
    case Kind::number:
    case Kind::integer:
      if (!lexer_.start_number(b, nd.kind == Kind::integer)) return false;
      mode_ = Mode::scalar;
      return true;
    case Kind::literal: {
      uint64_t c = 0;
      for (size_t i = 0; i < nd.literals.size(); ++i)
        if (uint8_t(nd.literals[i][0]) == b) c |= uint64_t(1) << i;
      if (!c) return false;
      expect_ = n;
      cand_ = c;
      pos_ = 1;
      mode_ = Mode::literal;
      bool all_done = true;
      for (uint64_t m = c; m; m &= m - 1)
        all_done = all_done && nd.literals[size_t(std::countr_zero(m))].size() == 1;
      if (all_done) value_done();
      return true;
    }
    default:
      return false;
  }
}

bool SchemaMachine::literal_byte(uint8_t b) {
  const auto& lits = node(expect_).literals;
  uint64_t next = 0;
  bool complete = false;
  for (uint64_t m = cand_; m; m &= m - 1) {
    const auto& l = lits[size_t(std::countr_zero(m))];
    if (l.size() == pos_)
      complete = true;
    else if (uint8_t(l[pos_]) == b)
      next |= m & -m;
  }
  if (!next) {
    if (!complete) return false;
    value_done();  // a shorter value ended here (enum [1, 12]): b comes after it
    return feed(b);
  }
  cand_ = next;
  ++pos_;
  bool all_done = true;
  for (uint64_t m = next; m; m &= m - 1)
    all_done = all_done && lits[size_t(std::countr_zero(m))].size() == pos_;
  if (all_done) value_done();
  return true;
}

bool SchemaMachine::structural(uint8_t b) {
  if (json_is_ws(b)) return json_whitespace(ws_, mode_ == Mode::done, kMaxWhitespace);
  ws_ = 0;
  switch (mode_) {
    case Mode::value:
      return start_value(b);
    case Mode::key_first:
    case Mode::key: {
      Frame& f = frames_[depth_ - 1];
      if (b == '}' && mode_ == Mode::key_first && object_may_close(f)) {
        --depth_;
        value_done();
        return true;
      }
      if (b != '"') return false;
      cand_ = key_candidates(f);
      if (!cand_) return false;
      pos_ = 0;
      mode_ = Mode::key_name;
      return true;
    }
    case Mode::colon:
      if (b != ':') return false;
      mode_ = Mode::value;
      return true;
    case Mode::after_value: {
      Frame& f = frames_[depth_ - 1];
      const JsonSchema::Node& nd = node(f.node);
      if (nd.kind == Kind::array) {
        const bool first = array_open_;
        if (b == ']' && f.index >= nd.min_items) {
          array_open_ = false;
          --depth_;
          value_done();
          return true;
        }
        if (f.index >= nd.max_items) return false;
        if (first) {  // the first item starts right after '['
          array_open_ = false;
          expect_ = nd.items;
          mode_ = Mode::value;
          return start_value(b);
        }
        if (b != ',') return false;
        expect_ = nd.items;
        mode_ = Mode::value;
        return true;
      }
      if (b == '}' && object_may_close(f)) {
        --depth_;
        value_done();
        return true;
      }
      if (b != ',' || !key_candidates(f)) return false;
      mode_ = Mode::key;
      return true;
    }
    default:  // done
      return false;
  }
}

bool SchemaMachine::feed(uint8_t b) {
  switch (mode_) {
    case Mode::scalar:
      switch (lexer_.feed(b)) {
        case JsonScalarLexer::Result::more:
          return true;
        case JsonScalarLexer::Result::reject:
          return false;
        case JsonScalarLexer::Result::string_end:
          value_done();
          return true;
        case JsonScalarLexer::Result::number_end:
          value_done();
          return feed(b);
      }
      return false;
    case Mode::literal:
      return literal_byte(b);
    case Mode::key_name: {
      Frame& f = frames_[depth_ - 1];
      const auto& props = node(f.node).props;
      if (b == '"') {
        for (uint64_t m = cand_; m; m &= m - 1) {
          const size_t i = size_t(std::countr_zero(m));
          if (props[i].name.size() == pos_) {
            f.index = uint32_t(i) + 1;
            expect_ = props[i].node;
            cand_ = 0;
            pos_ = 0;
            mode_ = Mode::colon;
            return true;
          }
        }
        return false;
      }
      if (b < 0x20 || b == '\\') return false;
      uint64_t next = 0;
      for (uint64_t m = cand_; m; m &= m - 1) {
        const auto& name = props[size_t(std::countr_zero(m))].name;
        if (name.size() > pos_ && uint8_t(name[pos_]) == b) next |= m & -m;
      }
      if (!next) return false;
      cand_ = next;
      ++pos_;
      return true;
    }
    default:
      return structural(b);
  }
}

}  // namespace ridge::engine
