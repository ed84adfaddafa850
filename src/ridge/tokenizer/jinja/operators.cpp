// Python's operators and Jinja's attribute/item access rules (jinja2.sandbox getattr/getitem):
// a missing attribute, key or index is an undefined value, but using an undefined value
// (attribute access, arithmetic, calling) is an error.
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/evaluator.h"
#include "ridge/tokenizer/jinja/unicode.h"

namespace ridge::tokenizer::jinja {

namespace {

// What visiting one element of a sequence costs against Limits::max_work_bytes.
constexpr size_t kVisitBytes = 8;

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attribute(const Value& object, std::string_view name) {
  return Value::undefined(
      fmt::format("'{}' has no attribute '{}'", object_type_repr(object), name));
}

// A method of a built-in type as a value (`'abc'.upper` without the call).
Value bound_method(const Value& object, std::string_view name) {
  auto fn = std::make_shared<Function>();
  fn->name = std::string(name);
  const std::string method(name);
  fn->call = [object, method](Evaluator& ev, CallArgs& args) {
    Value result;
    call_method(ev, object, method, args, result);
    return result;
  };
  return Value(std::shared_ptr<const Function>(std::move(fn)));
}

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  runtime_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                            type_name(b)));
}

// Python's ints are unbounded; ridge's are 64-bit and overflow is an error, never a wrap.
using IntOp = bool (*)(int64_t, int64_t, int64_t*);
int64_t checked(IntOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) runtime_error("integer overflow (ridge's Jinja integers are 64-bit)");
  return r;
}
bool add_overflow(int64_t a, int64_t b, int64_t* r) {
  return __builtin_add_overflow(a, b, r);
}
bool sub_overflow(int64_t a, int64_t b, int64_t* r) {
  return __builtin_sub_overflow(a, b, r);
}
bool mul_overflow(int64_t a, int64_t b, int64_t* r) {
  return __builtin_mul_overflow(a, b, r);
}

// Python's float divmod.
void float_divmod(double x, double y, double& div, double& mod) {
  if (y == 0.0) runtime_error("float division by zero");
  mod = std::fmod(x, y);
  div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (div != 0.0) {
    const double floor_div = std::floor(div);
    div = (div - floor_div > 0.5) ? floor_div + 1.0 : floor_div;
  } else {
    div = std::copysign(0.0, x / y);
  }
}

std::string repeat(Evaluator& ev, const std::string& s, int64_t n) {
  if (n <= 0 || s.empty()) return {};
  if (static_cast<uint64_t>(n) > ev.limits().max_output_bytes / s.size()) {
    runtime_error(fmt::format("string longer than the output limit of {} bytes",
                              ev.limits().max_output_bytes));
  }
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

// printf-style formatting for `str % args`: %s %r %d %i %f %x %X %% with flags, width, precision.
std::string percent_format(const std::string& fmt_str, const Value& args) {
  const bool mapping = args.is_dict();
  std::vector<Value> items;
  if (args.is_tuple()) {
    items = args.as_array();
  } else if (!mapping) {
    items.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out.push_back(fmt_str[i]);
      continue;
    }
    if (++i >= fmt_str.size()) runtime_error("incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt_str[i] == '(') {
      const size_t close = fmt_str.find(')', i);
      if (close == std::string::npos || !mapping) runtime_error("format requires a mapping");
      const Value* v = args.as_dict().find(std::string_view(fmt_str).substr(i + 1, close - i - 1));
      if (!v) runtime_error("format key not found");
      arg = *v;
      have_arg = true;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt_str.size() && std::string_view("-+ #0").find(fmt_str[i]) != std::string::npos) {
      spec.push_back(fmt_str[i++]);
    }
    while (i < fmt_str.size() &&
           (std::isdigit(static_cast<unsigned char>(fmt_str[i])) || fmt_str[i] == '.')) {
      spec.push_back(fmt_str[i++]);
    }
    if (i >= fmt_str.size()) runtime_error("incomplete format");
    const char conv = fmt_str[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      if (mapping) runtime_error("format requires a mapping");
      if (next >= items.size()) runtime_error("not enough arguments for format string");
      arg = items[next++];
    }
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        const std::string text = conv == 's' ? to_str(arg) : repr(arg);
        spec.push_back('s');
        if (spec == "%s") {
          out += text;
        } else {
          std::snprintf(buf, sizeof buf, spec.c_str(), text.c_str());
          out += buf;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X': {
        if (!arg.is_number())
          runtime_error("%d format: a real number is required, not " + type_name(arg));
        const long long v = arg.is_float() ? static_cast<long long>(arg.as_double()) : arg.as_int();
        spec += "ll";
        spec.push_back(conv == 'i' ? 'd' : conv);
        std::snprintf(buf, sizeof buf, spec.c_str(), v);
        out += buf;
        break;
      }
      case 'f':
      case 'e':
      case 'g': {
        if (!arg.is_number()) runtime_error("must be real number, not " + type_name(arg));
        spec.push_back(conv);
        std::snprintf(buf, sizeof buf, spec.c_str(), arg.as_double());
        out += buf;
        break;
      }
      default:
        runtime_error(fmt::format("unsupported format character '{}'", conv));
    }
  }
  // Python treats any non-tuple argument with __getitem__ (list, dict) as a mapping, so unused
  // arguments are only an error for tuples and scalars.
  if (!mapping && !args.is_sequence() && next < items.size()) {
    runtime_error("not all arguments converted during string formatting");
  }
  if (args.is_tuple() && next < items.size()) {
    runtime_error("not all arguments converted during string formatting");
  }
  return out;
}

// Python's slice.indices(length).
void slice_indices(const Value& start, const Value& stop, const Value& step, int64_t length,
                   int64_t& lo, int64_t& hi, int64_t& st) {
  const auto as_index = [](const Value& v) {
    if (!v.is_int() && !v.is_bool()) {
      runtime_error("slice indices must be integers or None");
    }
    return v.as_int();
  };
  st = step.is_none() ? 1 : as_index(step);
  if (st == 0) runtime_error("slice step cannot be zero");
  const auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = as_index(v);
    if (i < 0) {
      i += length;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= length) {
      i = st < 0 ? length - 1 : length;
    }
    return i;
  };
  lo = adjust(start, st < 0 ? length - 1 : 0);
  hi = adjust(stop, st < 0 ? -1 : length);
}

}  // namespace

Value Evaluator::get_attr(const Value& object, std::string_view name) {
  if (object.is_undefined()) fail_undefined(object);
  if (!name.empty() && name[0] == '_') return missing_attribute(object, name);
  switch (object.kind()) {
    case Kind::dict:
      if (has_method(object, name)) return bound_method(object, name);
      if (const Value* v = object.as_dict().find(name)) return *v;
      return missing_attribute(object, name);
    case Kind::string:
    case Kind::array:
      if (has_method(object, name)) return bound_method(object, name);
      return missing_attribute(object, name);
    case Kind::object: {
      Value v = object.as_object().get_attr(name);
      if (v.is_undefined()) return missing_attribute(object, name);
      return v;
    }
    default:
      return missing_attribute(object, name);
  }
}

Value Evaluator::get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  switch (object.kind()) {
    case Kind::dict:
      if (const Value* v = object.as_dict().find(key)) return *v;
      break;
    case Kind::array:
      if ((key.is_int() || key.is_bool()) && object.is_sequence()) {
        const Array& items = object.as_array();
        int64_t i = key.as_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
        return Value::undefined(
            fmt::format("'{}' has no element {}", object_type_repr(object), key.as_int()));
      }
      break;
    case Kind::string:
      if (key.is_int() || key.is_bool()) {
        const std::string& s = object.as_string();
        if (unicode::is_ascii(s)) {
          int64_t i = key.as_int();
          if (i < 0) i += static_cast<int64_t>(s.size());
          if (i >= 0 && i < static_cast<int64_t>(s.size())) {
            return make_string(std::string(1, s[static_cast<size_t>(i)]));
          }
        } else {
          const std::vector<size_t> offsets = unicode::char_offsets(s);
          const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
          int64_t i = key.as_int();
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            const size_t b = offsets[static_cast<size_t>(i)];
            return make_string(s.substr(b, offsets[static_cast<size_t>(i) + 1] - b));
          }
        }
        return Value::undefined(fmt::format("'str object' has no element {}", key.as_int()));
      }
      break;
    case Kind::object:
      if (key.is_string()) return get_attr(object, key.as_string());
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (!key.as_string().empty() && key.as_string()[0] != '_' &&
        has_method(object, key.as_string())) {
      return bound_method(object, key.as_string());
    }
    return missing_attribute(object, key.as_string());
  }
  return Value::undefined(
      fmt::format("'{}' has no element {}", object_type_repr(object), repr(key)));
}

Value Evaluator::slice(const Value& object, const Value& start, const Value& stop,
                       const Value& step_value) {
  if (object.is_undefined()) fail_undefined(object);
  if (!object.is_sequence() && !object.is_string()) {
    return Value::undefined(fmt::format("'{}' cannot be sliced", object_type_repr(object)));
  }
  if (object.is_array()) {
    const Array& items = object.as_array();
    int64_t lo = 0, hi = 0, st = 1;
    slice_indices(start, stop, step_value, static_cast<int64_t>(items.size()), lo, hi, st);
    Array out;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
      out.push_back(items[static_cast<size_t>(i)]);
    return make_array(std::move(out), object.is_tuple());
  }
  const std::string& s = object.as_string();
  const bool ascii = unicode::is_ascii(s);
  std::vector<size_t> offsets;
  if (!ascii) offsets = unicode::char_offsets(s);
  const int64_t n =
      ascii ? static_cast<int64_t>(s.size()) : static_cast<int64_t>(offsets.size()) - 1;
  int64_t lo = 0, hi = 0, st = 1;
  slice_indices(start, stop, step_value, n, lo, hi, st);
  std::string out;
  if (st == 1) {
    if (hi > lo) {
      const size_t b = ascii ? static_cast<size_t>(lo) : offsets[static_cast<size_t>(lo)];
      const size_t e = ascii ? static_cast<size_t>(hi) : offsets[static_cast<size_t>(hi)];
      out = s.substr(b, e - b);
    }
  } else {
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
      const size_t idx = static_cast<size_t>(i);
      if (ascii) {
        out.push_back(s[idx]);
      } else {
        out.append(s, offsets[idx], offsets[idx + 1] - offsets[idx]);
      }
    }
  }
  return make_string(std::move(out));
}

std::shared_ptr<const Array> Evaluator::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::array:
      if (v.is_failed_generator()) fail_undefined(v.as_array().front());
      // Every visit of an element counts against the work budget, so that nested traversals
      // (`x in big_list` inside a loop over it) stay bounded.
      charge(v.as_array().size() * kVisitBytes);
      return v.array_ptr();
    case Kind::undefined: {
      static const auto empty = std::make_shared<const Array>();
      return empty;
    }
    case Kind::dict: {
      Array keys;
      keys.reserve(v.as_dict().size());
      charge(v.as_dict().size() * kVisitBytes);
      for (const auto& [k, val] : v.as_dict().entries) keys.push_back(k);
      charge(keys.size() * sizeof(Value));
      return std::make_shared<const Array>(std::move(keys));
    }
    case Kind::string: {
      const std::string& s = v.as_string();
      Array chars;
      for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
        unicode::decode(s, pos, len);
        chars.emplace_back(s.substr(pos, len));
      }
      charge(chars.size() * sizeof(Value) + s.size());
      return std::make_shared<const Array>(std::move(chars));
    }
    default:
      runtime_error(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

Value Evaluator::get_path(const Value& object, std::string_view path) {
  Value v = object;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string_view part =
        path.substr(start, dot == std::string_view::npos ? path.npos : dot - start);
    bool numeric = !part.empty();
    for (char c : part) numeric = numeric && c >= '0' && c <= '9';
    if (numeric) {
      v = get_item(v, Value(static_cast<int64_t>(std::stoll(std::string(part)))));
    } else {
      v = get_item(v, Value(part));
    }
    if (dot == std::string_view::npos) return v;
    start = dot + 1;
  }
}

Value Evaluator::binary(BinaryOp op, const Value& a, const Value& b) {
  // Python's str % x treats Jinja's Undefined (it has __getitem__) as an empty mapping.
  if (op == BinaryOp::mod && a.is_string() && b.is_undefined()) {
    if (a.as_string().find('%') == std::string::npos) return a;
    fail_undefined(b);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool numbers = a.is_number() && b.is_number();
  switch (op) {
    case BinaryOp::add:
      if (ints) return checked(add_overflow, a.as_int(), b.as_int());
      if (numbers) return a.as_double() + b.as_double();
      if (a.is_string() && b.is_string()) return make_string(a.as_string() + b.as_string());
      if (a.is_sequence() && b.is_sequence() && a.is_tuple() == b.is_tuple()) {
        Array items = a.as_array();
        items.insert(items.end(), b.as_array().begin(), b.as_array().end());
        return make_array(std::move(items), a.is_tuple());
      }
      if (a.is_string()) {
        runtime_error(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
      }
      unsupported("+", a, b);
    case BinaryOp::sub:
      if (ints) return checked(sub_overflow, a.as_int(), b.as_int());
      if (numbers) return a.as_double() - b.as_double();
      unsupported("-", a, b);
    case BinaryOp::mul:
      if (ints) return checked(mul_overflow, a.as_int(), b.as_int());
      if (numbers) return a.as_double() * b.as_double();
      if (a.is_string() && (b.is_int() || b.is_bool())) {
        return make_string(repeat(*this, a.as_string(), b.as_int()));
      }
      if (b.is_string() && (a.is_int() || a.is_bool())) {
        return make_string(repeat(*this, b.as_string(), a.as_int()));
      }
      if ((a.is_sequence() && (b.is_int() || b.is_bool())) ||
          (b.is_sequence() && (a.is_int() || a.is_bool()))) {
        const Value& list = a.is_array() ? a : b;
        const int64_t n = a.is_array() ? b.as_int() : a.as_int();
        Array items;
        if (n > 0 && !list.as_array().empty()) {
          const uint64_t total = static_cast<uint64_t>(n) * list.as_array().size();
          charge(total * sizeof(Value));
          for (int64_t i = 0; i < n; ++i) {
            items.insert(items.end(), list.as_array().begin(), list.as_array().end());
          }
        }
        return make_array(std::move(items), list.is_tuple());
      }
      unsupported("*", a, b);
    case BinaryOp::div:
      if (numbers) {
        if (b.as_double() == 0.0) runtime_error("division by zero");
        return a.as_double() / b.as_double();
      }
      unsupported("/", a, b);
    case BinaryOp::floordiv:
    case BinaryOp::mod:
      if (ints) {
        const int64_t x = a.as_int();
        const int64_t y = b.as_int();
        if (y == 0) {
          runtime_error(op == BinaryOp::mod ? "integer modulo by zero"
                                            : "integer division or modulo by zero");
        }
        if (x == INT64_MIN && y == -1) runtime_error("integer overflow");
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q -= 1;
          m += y;
        }
        return op == BinaryOp::mod ? m : q;
      }
      if (numbers) {
        double div = 0, mod = 0;
        float_divmod(a.as_double(), b.as_double(), div, mod);
        return op == BinaryOp::mod ? mod : div;
      }
      if (op == BinaryOp::mod && a.is_string())
        return make_string(percent_format(a.as_string(), b));
      unsupported(op == BinaryOp::mod ? "%" : "//", a, b);
    case BinaryOp::pow:
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int();
        int64_t e = b.as_int();
        int64_t result = 1;
        while (e > 0) {
          if (e & 1) result = checked(mul_overflow, result, base);
          e >>= 1;
          if (e > 0) base = checked(mul_overflow, base, base);
        }
        return result;
      }
      if (numbers) {
        if (a.as_double() == 0.0 && b.as_double() < 0) {
          runtime_error("0.0 cannot be raised to a negative power");
        }
        return std::pow(a.as_double(), b.as_double());
      }
      unsupported("** or pow()", a, b);
  }
  return Value();
}

bool Evaluator::compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::eq:
      return equals(a, b);
    case CompareOp::ne:
      return !equals(a, b);
    case CompareOp::lt:
      return jinja::compare(a, b) < 0;
    case CompareOp::le:
      return jinja::compare(a, b) <= 0;
    case CompareOp::gt:
      return jinja::compare(a, b) > 0;
    case CompareOp::ge:
      return jinja::compare(a, b) >= 0;
    case CompareOp::in:
      return contains(b, a);
    case CompareOp::not_in:
      return !contains(b, a);
  }
  return false;
}

bool Evaluator::contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::string:
      if (!item.is_string()) {
        runtime_error(
            fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::array: {
      const auto items = iterate(container);
      for (const Value& v : *items) {
        if (equals(v, item)) return true;
      }
      return false;
    }
    case Kind::dict:
      if (item.is_array() || item.is_dict()) {
        runtime_error("unhashable type: '" + type_name(item) + "'");
      }
      return container.as_dict().find(item) != nullptr;
    case Kind::undefined:
      return false;
    default:
      runtime_error(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

}  // namespace ridge::tokenizer::jinja
