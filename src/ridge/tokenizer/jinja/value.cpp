#include "ridge/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/unicode.h"

namespace ridge::tokenizer::jinja {

namespace {

const std::string kEmpty;
const std::string kGenericUndefined = "value is undefined";

template <typename T>
const std::shared_ptr<T>& payload(const auto& ptr) {
  return std::get<std::shared_ptr<T>>(ptr);
}

}  // namespace

Value::Value(std::string s)
    : kind_(Kind::string), ptr_(std::make_shared<const std::string>(std::move(s))) {}
Value::Value(Array items, bool tuple) : kind_(Kind::array), tuple_(tuple) {
  set_depth_from(items);
  ptr_ = std::make_shared<const Array>(std::move(items));
}
Value::Value(std::shared_ptr<const Array> items, bool tuple) : kind_(Kind::array), tuple_(tuple) {
  set_depth_from(*items);
  ptr_ = std::move(items);
}
Value::Value(Dict d) : Value(std::make_shared<const Dict>(std::move(d))) {}
Value::Value(std::shared_ptr<const Dict> d) : kind_(Kind::dict) {
  int deepest = 0;
  for (const auto& [k, v] : d->entries) deepest = std::max({deepest, k.depth(), v.depth()});
  if (deepest + 1 > kMaxValueDepth) {
    runtime_error(fmt::format("value nested too deeply (more than {} levels)", kMaxValueDepth));
  }
  depth_ = static_cast<uint16_t>(deepest + 1);
  ptr_ = std::move(d);
}

void Value::set_depth_from(const Array& items) {
  int deepest = 0;
  for (const auto& v : items) deepest = std::max(deepest, v.depth());
  if (deepest + 1 > kMaxValueDepth) {
    runtime_error(fmt::format("value nested too deeply (more than {} levels)", kMaxValueDepth));
  }
  depth_ = static_cast<uint16_t>(deepest + 1);
}
Value::Value(std::shared_ptr<const Function> f) : kind_(Kind::function), ptr_(std::move(f)) {}
Value::Value(std::shared_ptr<Object> o) : kind_(Kind::object), ptr_(std::move(o)) {}

Value Value::undefined(std::string message) {
  Value v;
  v.ptr_ = std::make_shared<const std::string>(std::move(message));
  return v;
}

Value Value::generator(Array items) {
  Value v(std::move(items));
  v.generator_ = true;
  return v;
}

Value Value::failed_generator(std::string message) {
  Value v = generator(Array{Value::undefined(std::move(message))});
  v.failed_ = true;
  return v;
}

const std::string& Value::as_string() const {
  return *payload<const std::string>(ptr_);
}
const Array& Value::as_array() const {
  return *payload<const Array>(ptr_);
}
const std::shared_ptr<const Array>& Value::array_ptr() const {
  return payload<const Array>(ptr_);
}
const Dict& Value::as_dict() const {
  return *payload<const Dict>(ptr_);
}
const Function& Value::as_function() const {
  return *payload<const Function>(ptr_);
}
Object& Value::as_object() const {
  return *payload<Object>(ptr_);
}
const std::shared_ptr<Object>& Value::object_ptr() const {
  return payload<Object>(ptr_);
}

std::string Value::undefined_message() const {
  if (const auto* s = std::get_if<std::shared_ptr<const std::string>>(&ptr_)) return **s;
  return kGenericUndefined;
}

// ---- Dict ------------------------------------------------------------------------------------

const Value* Dict::find(std::string_view key) const {
  if (!string_index_.empty()) {
    const auto it = string_index_.find(std::string(key));
    return it == string_index_.end() ? nullptr : &entries[it->second].second;
  }
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries) {
    if (!k.is_string() && equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (const Value* existing = find(key)) {
    const_cast<Value&>(*existing) = std::move(value);
    return;
  }
  entries.emplace_back(std::move(key), std::move(value));
  if (entries.size() == kIndexFrom) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].first.is_string()) string_index_.emplace(entries[i].first.as_string(), i);
    }
  } else if (entries.size() > kIndexFrom && entries.back().first.is_string()) {
    string_index_.emplace(entries.back().first.as_string(), entries.size() - 1);
  }
}

// ---- CallArgs --------------------------------------------------------------------------------

const Value* CallArgs::keyword_arg(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  return keyword_arg(name);
}

void CallArgs::check(std::string_view what, size_t max_positional,
                     std::initializer_list<std::string_view> names) const {
  if (positional.size() > max_positional) {
    runtime_error(fmt::format("{} takes at most {} positional argument(s), {} given", what,
                              max_positional, positional.size()));
  }
  for (const auto& [k, v] : keyword) {
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      runtime_error(fmt::format("{} got an unexpected keyword argument '{}'", what, k));
    }
  }
}

// ---- Object ----------------------------------------------------------------------------------

void Object::set_attr(const std::string& name, Value) {
  runtime_error(fmt::format("cannot assign attribute '{}' on a {} object", name, type_name()));
}

std::string Object::repr() const {
  // Built with appends: "<" + name + "..." trips GCC 12's -Wrestrict false positive.
  std::string s = "<";
  s += type_name();
  s += " object>";
  return s;
}

// ---- Python semantics ------------------------------------------------------------------------

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::array:
      return v.is_generator() ? "generator" : (v.is_tuple() ? "tuple" : "list");
    case Kind::dict:
      return "dict";
    case Kind::function:
      return "function";
    case Kind::object:
      return v.as_object().type_name();
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
    case Kind::integer:
      return v.as_int() != 0;
    case Kind::floating:
      return v.as_double() != 0.0;
    case Kind::string:
      return !v.as_string().empty();
    case Kind::array:
      return v.is_generator() || !v.as_array().empty();
    case Kind::dict:
      return !v.as_dict().empty();
    case Kind::function:
    case Kind::object:
      return true;
  }
  return false;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // [-]d[.ddd]e[+-]xx
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return out;
  }
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    out += digits;
    out.append(int_digits - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, int_digits);
    out.push_back('.');
    out.append(digits, int_digits);
  }
  return out;
}

namespace {

// Python's str.isprintable() for non-ASCII characters, approximated: separators, format
// characters, C1 controls, surrogates (our invalid bytes) and private use are not printable.
bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || c == 0x061C || c == 0x180E ||
      (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF) {
    return false;
  }
  if (c >= 0xD800 && c <= 0xF8FF) return false;  // surrogates and private use
  if (c >= 0xF0000) return false;
  return true;
}

void append_string_repr(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const char32_t c = unicode::decode(s, pos, len);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (printable(c)) {
      out.append(s, pos, len);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
}

void append_repr(std::string& out, const Value& v);

void append_array_repr(std::string& out, const Value& v) {
  if (v.is_generator()) {
    out += "<generator object>";
    return;
  }
  const Array& items = v.as_array();
  out.push_back(v.is_tuple() ? '(' : '[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i]);
  }
  if (v.is_tuple() && items.size() == 1) out.push_back(',');
  out.push_back(v.is_tuple() ? ')' : ']');
}

void append_dict_repr(std::string& out, const Dict& d) {
  out.push_back('{');
  bool first = true;
  for (const auto& [k, val] : d.entries) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k);
    out += ": ";
    append_repr(out, val);
  }
  out.push_back('}');
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::string:
      append_string_repr(out, v.as_string());
      return;
    case Kind::array:
      append_array_repr(out, v);
      return;
    case Kind::dict:
      append_dict_repr(out, v.as_dict());
      return;
    case Kind::undefined:
      out += "Undefined";
      return;  // repr(); str() is ""
    default:
      out += to_str(v);
      return;
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return {};
    case Kind::none:
      return "None";
    case Kind::boolean:
      return v.as_bool() ? "True" : "False";
    case Kind::integer:
      return std::to_string(v.as_int());
    case Kind::floating:
      return float_repr(v.as_double());
    case Kind::string:
      return v.as_string();
    case Kind::array:
    case Kind::dict:
      return repr(v);
    case Kind::function:
      return "<function " + v.as_function().name + ">";
    case Kind::object:
      return v.as_object().repr();
  }
  return {};
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::string:
      return a.as_string() == b.as_string();
    case Kind::array: {
      if (a.is_generator() || b.is_generator()) return a.array_ptr() == b.array_ptr();
      if (a.is_tuple() != b.is_tuple()) return false;
      const Array& x = a.as_array();
      const Array& y = b.as_array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, val] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals(val, *other)) return false;
      }
      return true;
    }
    case Kind::function:
      return &a.as_function() == &b.as_function();
    case Kind::object:
      return &a.as_object() == &b.as_object();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double();
      const double y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_sequence() && b.is_sequence() && a.is_tuple() == b.is_tuple()) {
    const Array& x = a.as_array();
    const Array& y = b.as_array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  runtime_error(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a),
                            type_name(b)));
}

void fail_undefined(const Value& v) {
  runtime_error(v.undefined_message());
}

// ---- JSON ------------------------------------------------------------------------------------

namespace {

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const char32_t c = unicode::decode(s, pos, len);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else if (c < 0x80 || !ensure_ascii) {
      out.append(s, pos, len);
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      const char32_t v = c - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                         static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    }
  }
  out.push_back('"');
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return float_repr(f);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::string:
      return k.as_string();
    case Kind::boolean:
      return k.as_bool() ? "true" : "false";
    case Kind::integer:
      return std::to_string(k.as_int());
    case Kind::floating:
      return json_float(k.as_double());
    case Kind::none:
      return "null";
    default:
      runtime_error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int level, int depth) {
  if (depth > 512) runtime_error("tojson: value nested too deeply");
  const auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::none:
      out += "null";
      return;
    case Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Kind::floating:
      out += json_float(v.as_double());
      return;
    case Kind::string:
      append_json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Kind::array: {
      if (v.is_generator()) runtime_error("Object of type generator is not JSON serializable");
      const Array& items = v.as_array();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      if (o.indent) newline(level + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          out += o.item_separator;
          if (o.indent) newline(level + 1);
        }
        append_json(out, items[i], o, level + 1, depth + 1);
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return;
    }
    case Kind::dict: {
      const Dict& d = v.as_dict();
      if (d.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : d.entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
          return compare(a->first, b->first) < 0;
        });
      }
      out.push_back('{');
      if (o.indent) newline(level + 1);
      bool first = true;
      for (const auto* e : entries) {
        if (!first) {
          out += o.item_separator;
          if (o.indent) newline(level + 1);
        }
        first = false;
        append_json_string(out, json_key(e->first), o.ensure_ascii);
        out += o.key_separator;
        append_json(out, e->second, o, level + 1, depth + 1);
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      runtime_error("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

template <typename Json>
Value from_json_impl(const Json& j, int depth) {
  if (depth > kMaxValueDepth) {
    runtime_error(fmt::format("value nested too deeply (more than {} levels)", kMaxValueDepth));
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return nullptr;
    case nlohmann::json::value_t::boolean:
      return j.template get<bool>();
    case nlohmann::json::value_t::number_integer:
      return j.template get<int64_t>();
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return static_cast<double>(u);
      return static_cast<int64_t>(u);
    }
    case nlohmann::json::value_t::number_float:
      return j.template get<double>();
    case nlohmann::json::value_t::string:
      return j.template get_ref<const std::string&>();
    case nlohmann::json::value_t::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e, depth + 1));
      return Value(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.set(it.key(), from_json_impl(it.value(), depth + 1));
      return Value(std::move(d));
    }
    default:
      return nullptr;  // binary / discarded: not produced by parsing text
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  append_json(out, v, options, 0, 0);
  return out;
}

Value from_json(const nlohmann::json& j) {
  return from_json_impl(j, 0);
}
Value from_json(const nlohmann::ordered_json& j) {
  return from_json_impl(j, 0);
}

}  // namespace ridge::tokenizer::jinja
