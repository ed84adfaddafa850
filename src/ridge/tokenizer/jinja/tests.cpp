// The built-in tests (`x is defined`, ...) and global functions (range, namespace, dict, and
// Hugging Face's raise_exception and strftime_now).
#include <cstdint>
#include <ctime>
#include <unordered_map>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/evaluator.h"
#include "ridge/tokenizer/jinja/strings.h"

namespace ridge::tokenizer::jinja {

namespace {

using args::get;

const Value& arg0(const CallArgs& a, std::string_view test) {
  if (a.positional.empty()) runtime_error(fmt::format("test '{}' needs an argument", test));
  return a.positional[0];
}

bool t_defined(Evaluator&, const Value& v, const CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_undefined();
}
bool t_none(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_none();
}
bool t_boolean(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_bool();
}
bool t_true(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_int();
}
bool t_float(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_float();
}
bool t_number(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_number();
}
bool t_string(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_string();
}
bool t_mapping(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_dict();
}
// Jinja's Undefined has __call__ (it raises), so Python's callable() says yes.
bool t_callable(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_function() || v.is_undefined();
}
bool t_escaped(Evaluator&, const Value&, const CallArgs&) {
  return false;
}
// Jinja's Undefined supports iteration and len()/[] (it is empty), so it counts as both.
bool t_iterable(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_array() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_sequence(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_sequence() || v.is_dict() || v.is_string() || v.is_undefined();
}

Value modulo(Evaluator& ev, const Value& v, const Value& d) {
  return ev.binary(BinaryOp::mod, v, d);
}
bool t_odd(Evaluator& ev, const Value& v, const CallArgs&) {
  return equals(modulo(ev, v, Value(2)), Value(1));
}
bool t_even(Evaluator& ev, const Value& v, const CallArgs&) {
  return equals(modulo(ev, v, Value(2)), Value(0));
}
bool t_divisibleby(Evaluator& ev, const Value& v, const CallArgs& a) {
  return equals(modulo(ev, v, arg0(a, "divisibleby")), Value(0));
}

bool t_eq(Evaluator&, const Value& v, const CallArgs& a) {
  return equals(v, arg0(a, "eq"));
}
bool t_ne(Evaluator&, const Value& v, const CallArgs& a) {
  return !equals(v, arg0(a, "ne"));
}
bool t_lt(Evaluator&, const Value& v, const CallArgs& a) {
  return compare(v, arg0(a, "lt")) < 0;
}
bool t_le(Evaluator&, const Value& v, const CallArgs& a) {
  return compare(v, arg0(a, "le")) <= 0;
}
bool t_gt(Evaluator&, const Value& v, const CallArgs& a) {
  return compare(v, arg0(a, "gt")) > 0;
}
bool t_ge(Evaluator&, const Value& v, const CallArgs& a) {
  return compare(v, arg0(a, "ge")) >= 0;
}
bool t_in(Evaluator& ev, const Value& v, const CallArgs& a) {
  return ev.contains(arg0(a, "in"), v);
}

bool t_sameas(Evaluator&, const Value& v, const CallArgs& a) {
  const Value& other = arg0(a, "sameas");
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Kind::none:
    case Kind::undefined:
      return true;
    case Kind::boolean:
      return v.as_bool() == other.as_bool();
    case Kind::integer:  // CPython caches small ints, so `is` holds for them
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Kind::string:
      return &v.as_string() == &other.as_string();
    case Kind::array:
      return v.array_ptr() == other.array_ptr();
    case Kind::dict:
      return &v.as_dict() == &other.as_dict();
    case Kind::function:
      return &v.as_function() == &other.as_function();
    case Kind::object:
      return &v.as_object() == &other.as_object();
    default:
      return false;
  }
}

bool t_lower(Evaluator&, const Value& v, const CallArgs&) {
  return strings::is_lower(v.is_string() ? v.as_string() : to_str(v));
}
bool t_upper(Evaluator&, const Value& v, const CallArgs&) {
  return strings::is_upper(v.is_string() ? v.as_string() : to_str(v));
}
bool t_filter(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(Evaluator&, const Value& v, const CallArgs&) {
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& test_registry() {
  static const std::unordered_map<std::string_view, TestFn> tests = {
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {">=", t_ge},
      {"gt", t_gt},
      {">", t_gt},
      {"greaterthan", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"<=", t_le},
      {"lower", t_lower},
      {"lt", t_lt},
      {"<", t_lt},
      {"lessthan", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"!=", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return tests;
}

// ---- globals ---------------------------------------------------------------------------------

class NamespaceObject : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  Value get_attr(std::string_view name) const override {
    if (const Value* v = attrs_.find(name)) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  void set_attr(const std::string& name, Value value) override {
    attrs_.set(Value(name), std::move(value));
  }
  std::string repr() const override { return "<Namespace " + jinja::repr(Value(attrs_)) + ">"; }

 private:
  Dict attrs_;
};

// dict(*args, **kwargs) as Python builds it: a mapping or a sequence of pairs, then keywords.
Dict build_dict(Evaluator& ev, const CallArgs& a, std::string_view what) {
  if (a.positional.size() > 1) {
    runtime_error(fmt::format("{} expected at most 1 positional argument", what));
  }
  Dict d;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      const auto pair_seq = ev.iterate(src);
      for (const Value& pair : *pair_seq) {
        const auto kv = ev.iterate(pair);
        if (kv->size() != 2)
          runtime_error(fmt::format("{}: sequence elements must be pairs", what));
        d.set((*kv)[0], (*kv)[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
  return d;
}

Value g_namespace(Evaluator& ev, CallArgs& a) {
  const Dict attrs = build_dict(ev, a, "namespace");
  auto ns = std::make_shared<NamespaceObject>();
  for (const auto& [k, v] : attrs.entries) {
    if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_') {
      runtime_error(fmt::format("cannot store underscore-prefixed attribute '{}' on a namespace",
                                k.as_string()));
    }
    if (!k.is_string()) runtime_error("namespace attribute names must be strings");
    ns->set_attr(k.as_string(), v);
  }
  return Value(std::shared_ptr<Object>(std::move(ns)));
}

Value g_dict(Evaluator& ev, CallArgs& a) {
  return Value(build_dict(ev, a, "dict"));
}

Value g_range(Evaluator& ev, CallArgs& a) {
  a.check("range", 3, {});
  if (a.positional.empty()) runtime_error("range expected at least 1 argument, got 0");
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = args::to_int(a.positional[0], "range");
  } else {
    start = args::to_int(a.positional[0], "range");
    stop = args::to_int(a.positional[1], "range");
    if (a.positional.size() == 3) step = args::to_int(a.positional[2], "range");
  }
  if (step == 0) runtime_error("range() arg 3 must not be zero");
  // The sandbox's MAX_RANGE.
  constexpr int64_t kMaxRange = 100000;
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (count > kMaxRange) {
    runtime_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  Array out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.emplace_back(start + i * step);
  return ev.make_array(std::move(out));
}

Value g_raise_exception(Evaluator&, CallArgs& a) {
  const Value message = get(a, 0, "message", "");
  throw TemplateError(TemplateError::Kind::raised,
                      message.is_string() ? message.as_string() : to_str(message));
}

Value g_strftime_now(Evaluator& ev, CallArgs& a) {
  a.check("strftime_now", 1, {"format"});
  const std::string& format = args::to_string(get(a, 0, "format"), "strftime_now");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(format.size() * 8 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  if (n == 0 && !format.empty()) runtime_error("strftime_now: the formatted date is too long");
  buf.resize(n);
  return ev.make_string(std::move(buf));
}

Value make_global(const char* name, Value (*fn)(Evaluator&, CallArgs&)) {
  auto f = std::make_shared<Function>();
  f->name = name;
  f->call = fn;
  return Value(std::shared_ptr<const Function>(std::move(f)));
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& r = test_registry();
  const auto it = r.find(name);
  return it == r.end() ? nullptr : it->second;
}

const Value* find_global(std::string_view name) {
  static const std::unordered_map<std::string_view, Value> globals = {
      {"range", make_global("range", g_range)},
      {"namespace", make_global("namespace", g_namespace)},
      {"dict", make_global("dict", g_dict)},
      {"raise_exception", make_global("raise_exception", g_raise_exception)},
      {"strftime_now", make_global("strftime_now", g_strftime_now)},
  };
  const auto it = globals.find(name);
  return it == globals.end() ? nullptr : &it->second;
}

}  // namespace ridge::tokenizer::jinja
