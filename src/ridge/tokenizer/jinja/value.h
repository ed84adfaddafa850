// Value: the data a template computes with, with Python's semantics (what Jinja templates are
// written against): undefined, none, bool, int (64-bit), float, str (UTF-8), list and tuple,
// dict (insertion-ordered, as Python's), functions (globals, macros, bound methods) and objects
// (namespace(), the for-loop's `loop`).
//
// Lists, dicts and strings are immutable and shared (copying a Value is cheap): Hugging Face
// renders templates in an ImmutableSandboxedEnvironment, where lists and dicts cannot change.
// Only objects (namespaces) are mutable, and they have reference semantics as in Python.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace ridge::tokenizer::jinja {

class Value;
class Evaluator;

// Lists and dicts nest at most this deep (built by a template or passed in); deeper is a runtime
// error, so that printing, comparing or freeing a value never recurses without bound.
constexpr int kMaxValueDepth = 256;
struct Dict;
struct Function;
class Object;
using Array = std::vector<Value>;

enum class Kind : uint8_t {
  undefined,
  none,
  boolean,
  integer,
  floating,
  string,
  array,  // list or tuple
  dict,
  function,
  object,
};

class Value {
 public:
  Value() = default;  // undefined (with the generic message)
  Value(std::nullptr_t) : kind_(Kind::none) {}
  Value(bool b) : kind_(Kind::boolean), i_(b ? 1 : 0) {}
  template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) Value(T i)
      : kind_(Kind::integer), i_(static_cast<int64_t>(i)) {}
  Value(double f) : kind_(Kind::floating), f_(f) {}
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(Array items, bool tuple = false);
  Value(std::shared_ptr<const Array> items, bool tuple = false);
  Value(Dict d);
  Value(std::shared_ptr<const Dict> d);
  Value(std::shared_ptr<const Function> f);
  Value(std::shared_ptr<Object> o);

  // An undefined value that carries the error raised when it is used (e.g. "'x' is undefined").
  static Value undefined(std::string message);
  // What Jinja's lazy filters (map, select, unique, ...) return: a generator. It iterates like a
  // list but, as in Python, is always true, has no len() and cannot be indexed or printed as one.
  static Value generator(Array items);
  // A generator whose computation failed: like Python's, it raises only when iterated.
  static Value failed_generator(std::string message);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  // int, float or bool (Python's numbers.Number).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_tuple() const { return kind_ == Kind::array && tuple_; }
  bool is_generator() const { return kind_ == Kind::array && generator_; }
  bool is_failed_generator() const { return is_generator() && failed_; }
  // A list or tuple (a generator is an array that is neither).
  bool is_sequence() const { return kind_ == Kind::array && !generator_; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_function() const { return kind_ == Kind::function; }
  bool is_object() const { return kind_ == Kind::object; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // int or bool
  double as_double() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const;
  const Array& as_array() const;
  const std::shared_ptr<const Array>& array_ptr() const;
  const Dict& as_dict() const;
  const Function& as_function() const;
  Object& as_object() const;
  const std::shared_ptr<Object>& object_ptr() const;
  // The message an undefined value raises when used.
  std::string undefined_message() const;
  // 0 for scalars, 1 + the deepest element for lists and dicts.
  int depth() const { return depth_; }

 private:
  void set_depth_from(const Array& items);

  Kind kind_ = Kind::undefined;
  bool tuple_ = false;
  bool generator_ = false;
  bool failed_ = false;  // a failed generator: its one item is an undefined holding the error
  uint16_t depth_ = 0;
  union {
    int64_t i_ = 0;
    double f_;
  };
  std::variant<std::monostate, std::shared_ptr<const std::string>, std::shared_ptr<const Array>,
               std::shared_ptr<const Dict>, std::shared_ptr<const Function>,
               std::shared_ptr<Object>>
      ptr_;
};

// An insertion-ordered mapping with Python's key equality (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts, or replaces the value of an existing key in place (Python's dict[key] = value).
  void set(Value key, Value value);
  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }

 private:
  std::unordered_map<std::string, size_t> string_index_;  // built past kIndexFrom entries
  static constexpr size_t kIndexFrom = 8;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  const Value* keyword_arg(std::string_view name) const;
  // Positional `index`, else keyword `name`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
  // Throws when more than `max_positional` positional arguments, or a keyword not in `names`,
  // were passed. `what` names the callee in the message.
  void check(std::string_view what, size_t max_positional,
             std::initializer_list<std::string_view> names) const;
};

struct Function {
  std::string name;
  std::function<Value(Evaluator&, CallArgs&)> call;
};

// Attribute bags: namespace() objects and the for-loop's `loop`.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // An undefined value when there is no such attribute.
  virtual Value get_attr(std::string_view name) const = 0;
  // Throws unless the object is a namespace.
  virtual void set_attr(const std::string& name, Value value);
  virtual std::string repr() const;
};

// ---- Python semantics ----------------------------------------------------------------------

// Python's type name: str, int, float, bool, NoneType, list, tuple, dict, Undefined, ...
std::string type_name(const Value& v);
bool truthy(const Value& v);
// str(v); undefined renders as "".
std::string to_str(const Value& v);
// repr(v).
std::string repr(const Value& v);
// repr() of a float: shortest round-trip digits, Python's choice of fixed vs exponent notation.
std::string float_repr(double f);
bool equals(const Value& a, const Value& b);
// <0, 0, >0 like Python's ordering; throws a runtime error for unorderable types.
int compare(const Value& a, const Value& b);
// Throws the error an undefined value raises when it is used.
[[noreturn]] void fail_undefined(const Value& v);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys), as HF's tojson filter calls it.
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";  // "," when indent is set, unless given
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

}  // namespace ridge::tokenizer::jinja
