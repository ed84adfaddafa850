// The built-in filters, with jinja2/filters.py's behaviour (and Hugging Face's tojson).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/evaluator.h"
#include "ridge/tokenizer/jinja/strings.h"
#include "ridge/tokenizer/jinja/unicode.h"

namespace ridge::tokenizer::jinja {

namespace args {

int64_t to_int(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  runtime_error(fmt::format("{}: expected an integer, got {}", what, type_name(v)));
}

const std::string& to_string(const Value& v, std::string_view what) {
  if (v.is_string()) return v.as_string();
  runtime_error(fmt::format("{}: expected a string, got {}", what, type_name(v)));
}

}  // namespace args

namespace {

using args::get;

// Jinja's generator filters run when their result is iterated: an error inside them (a
// non-iterable input, a test that fails) surfaces then, not where the filter is applied.
template <typename Fn>
Value lazily(Fn&& compute) {
  try {
    return compute();
  } catch (const TemplateError& e) {
    if (e.kind() != TemplateError::Kind::runtime) throw;
    return Value::failed_generator(e.message());
  }
}

// Jinja's soft_str: strings as they are, anything else through str().
std::string text_of(const Value& v) {
  return v.is_string() ? v.as_string() : to_str(v);
}

Value length_filter(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("length", 0, {});
  switch (v.kind()) {
    case Kind::string:
      return unicode::length(v.as_string());
    case Kind::array:
      if (v.is_generator()) runtime_error("object of type 'generator' has no len()");
      return v.as_array().size();
    case Kind::dict:
      return v.as_dict().size();
    case Kind::undefined:
      return 0;
    default:
      runtime_error(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value abs_filter(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("abs", 0, {});
  if (v.is_float()) return std::fabs(v.as_double());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) runtime_error("integer overflow");
    return v.as_int() < 0 ? -v.as_int() : v.as_int();
  }
  if (v.is_undefined()) fail_undefined(v);
  runtime_error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

Value attr(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("attr", 1, {"name"});
  return ev.get_attr(v, args::to_string(get(a, 0, "name"), "attr"));
}

Value batch_now(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("batch", 2, {"linecount", "fill_with"});
  const int64_t n = args::to_int(get(a, 0, "linecount"), "batch");
  if (n <= 0) runtime_error("batch: linecount must be positive");
  const Value* fill = a.get(1, "fill_with");
  Array out;
  Array current;
  const auto item_seq = ev.iterate(v);
  for (const Value& item : *item_seq) {
    if (static_cast<int64_t>(current.size()) == n) {
      out.push_back(ev.make_array(std::move(current)));
      current = Array();
    }
    current.push_back(item);
  }
  if (!current.empty()) {
    if (fill && !fill->is_none()) {
      while (static_cast<int64_t>(current.size()) < n) current.push_back(*fill);
    }
    out.push_back(ev.make_array(std::move(current)));
  }
  return ev.make_generator(std::move(out));
}

Value capitalize(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("capitalize", 0, {});
  return ev.make_string(unicode::capitalize(text_of(v)));
}

Value center(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("center", 1, {"width"});
  return ev.make_string(
      strings::pad(text_of(v), args::to_int(get(a, 0, "width", 80), "center"), " ", '^'));
}

Value default_filter(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("default", 2, {"default_value", "boolean"});
  const Value fallback = get(a, 0, "default_value", "");
  const bool boolean = truthy(get(a, 1, "boolean", false));
  if (v.is_undefined() || (boolean && !truthy(v))) return fallback;
  return v;
}

// Sort key for sort/dictsort/unique/min/max: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(unicode::lower(v.as_string()));
  return v;
}

Value dictsort(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) runtime_error("dictsort: expected a mapping, got " + type_name(v));
  const bool case_sensitive = truthy(get(a, 0, "case_sensitive", false));
  const std::string by = args::to_string(get(a, 1, "by", "key"), "dictsort");
  const bool reverse = truthy(get(a, 2, "reverse", false));
  if (by != "key" && by != "value")
    runtime_error("You can only sort by either \"key\" or \"value\"");
  Array pairs;
  for (const auto& [k, val] : v.as_dict().entries) pairs.push_back(Value(Array{k, val}, true));
  const size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const int c = compare(sort_key(x.as_array()[pos], case_sensitive),
                          sort_key(y.as_array()[pos], case_sensitive));
    return reverse ? c > 0 : c < 0;
  });
  return ev.make_array(std::move(pairs));
}

Value escape(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("escape", 0, {});
  return ev.make_string(strings::html_escape(text_of(v)));
}

Value first(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("first", 0, {});
  const auto items = ev.iterate(v);
  if (items->empty()) return Value::undefined("No first item, sequence was empty.");
  return items->front();
}

Value last(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("last", 0, {});
  if (v.is_generator()) runtime_error("'generator' object is not reversible");
  const auto items = ev.iterate(v);
  if (items->empty()) return Value::undefined("No last item, sequence was empty.");
  return items->back();
}

Value float_filter(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("float", 1, {"default"});
  const Value fallback = get(a, 0, "default", 0.0);
  if (v.is_undefined()) fail_undefined(v);  // Undefined.__float__ raises
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    if (auto f = strings::parse_float(v.as_string())) return *f;
  }
  return fallback;
}

Value format(Evaluator& ev, const Value& v, const CallArgs& a) {
  if (!a.keyword.empty() && !a.positional.empty()) {
    runtime_error("can't handle positional and keyword arguments at the same time");
  }
  if (!a.keyword.empty()) {
    Dict d;
    for (const auto& [k, val] : a.keyword) d.set(k, val);
    return ev.binary(BinaryOp::mod, Value(text_of(v)), Value(std::move(d)));
  }
  return ev.binary(BinaryOp::mod, Value(text_of(v)), Value(a.positional, true));
}

Value indent(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  const Value width = get(a, 0, "width", 4);
  const std::string indention =
      width.is_string()
          ? width.as_string()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, args::to_int(width, "indent"))),
                        ' ');
  const bool indent_first = truthy(get(a, 1, "first", false));
  const bool blank = truthy(get(a, 2, "blank", false));
  if (!v.is_string()) {
    runtime_error(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
  }
  const std::string s = v.as_string() + "\n";
  std::vector<std::string> lines = strings::splitlines(s, false);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (indent_first) out = indention + out;
  return ev.make_string(std::move(out));
}

Value int_filter(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("int", 2, {"default", "base"});
  const Value fallback = get(a, 0, "default", 0);
  const int64_t base = args::to_int(get(a, 1, "base", 10), "int");
  if (v.is_undefined()) fail_undefined(v);  // Undefined.__int__ raises
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) {
    const double f = v.as_double();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return static_cast<int64_t>(f);
  }
  if (v.is_string()) {
    if (auto i = strings::parse_int(v.as_string(), static_cast<int>(base))) return *i;
    if (auto f = strings::parse_float(v.as_string())) {
      if (std::isfinite(*f) && std::fabs(*f) < 9.2e18) return static_cast<int64_t>(*f);
    }
  }
  return fallback;
}

Value items_now(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("items", 0, {});
  if (v.is_undefined()) return ev.make_generator({});
  if (!v.is_dict()) runtime_error("Can only get item pairs from a mapping.");
  Array out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value(Array{k, val}, true));
  return ev.make_generator(std::move(out));
}

Value join(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("join", 2, {"d", "attribute"});
  const std::string sep = text_of(get(a, 0, "d", ""));
  const Value attribute = get(a, 1, "attribute", nullptr);
  std::string out;
  bool first_item = true;
  const auto item_seq = ev.iterate(v);
  for (const Value& item : *item_seq) {
    if (!first_item) out += sep;
    first_item = false;
    const Value x = attribute.is_none() ? item : ev.get_path(item, text_of(attribute));
    out += text_of(x);
    if (out.size() > ev.limits().max_output_bytes) ev.make_string(std::move(out));
  }
  return ev.make_string(std::move(out));
}

Value list(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("list", 0, {});
  return ev.make_array(*ev.iterate(v));
}

Value lower(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("lower", 0, {});
  return ev.make_string(unicode::lower(text_of(v)));
}

Value upper(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("upper", 0, {});
  return ev.make_string(unicode::upper(text_of(v)));
}

Value title(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("title", 0, {});
  // Jinja splits on runs of [-\s({[<] and upper-cases the first character of each piece.
  const std::string s = text_of(v);
  std::string out;
  bool word_start = true;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const char32_t c = unicode::decode(s, pos, len);
    const bool delimiter =
        unicode::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    const std::string_view ch = std::string_view(s).substr(pos, len);
    if (delimiter) {
      out += ch;
      word_start = true;
    } else {
      out += word_start ? unicode::upper(ch) : unicode::lower(ch);
      word_start = false;
    }
  }
  return ev.make_string(std::move(out));
}

Value map_now(Evaluator& ev, const Value& v, const CallArgs& a) {
  if (!truthy(v)) return ev.make_generator({});  // Jinja: `if value:` -- none|map(...) is empty
  Array out;
  const auto seq = ev.iterate(v);
  if (a.positional.empty()) {
    a.check("map", 0, {"attribute", "default"});
    const Value* attribute = a.keyword_arg("attribute");
    if (!attribute) runtime_error("map: a filter name or attribute= is required");
    const Value* fallback = a.keyword_arg("default");
    for (const Value& item : *seq) {
      Value x = ev.get_path(item, text_of(*attribute));
      if (x.is_undefined() && fallback) x = *fallback;
      out.push_back(std::move(x));
    }
    return ev.make_generator(std::move(out));
  }
  const std::string name = args::to_string(a.positional[0], "map");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : *seq) out.push_back(ev.apply_filter(name, item, rest));
  return ev.make_generator(std::move(out));
}

Value min_max(Evaluator& ev, const Value& v, const CallArgs& a, bool want_max) {
  a.check(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(get(a, 0, "case_sensitive", false));
  const Value attribute = get(a, 1, "attribute", nullptr);
  const auto seq = ev.iterate(v);
  if (seq->empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const auto key = [&](const Value& x) {
    return sort_key(attribute.is_none() ? x : ev.get_path(x, text_of(attribute)), case_sensitive);
  };
  const Value* best = &seq->front();
  Value best_key = key(*best);
  for (const Value& item : *seq) {
    Value k = key(item);
    const int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = &item;
      best_key = std::move(k);
    }
  }
  return *best;
}

Value max_filter(Evaluator& ev, const Value& v, const CallArgs& a) {
  return min_max(ev, v, a, true);
}
Value min_filter(Evaluator& ev, const Value& v, const CallArgs& a) {
  return min_max(ev, v, a, false);
}

// select / reject / selectattr / rejectattr.
Value select_impl(Evaluator& ev, const Value& v, const CallArgs& a, bool by_attribute, bool keep) {
  if (!truthy(v)) return ev.make_generator({});  // Jinja: `if value:` -- none|select is empty
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.positional.empty()) runtime_error("selectattr/rejectattr: missing attribute name");
    attribute = text_of(a.positional[next++]);
  }
  std::string test;
  if (next < a.positional.size()) test = args::to_string(a.positional[next++], "select");
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next),
                              a.positional.end());
  test_args.keyword = a.keyword;
  Array out;
  const auto item_seq = ev.iterate(v);
  for (const Value& item : *item_seq) {
    const Value x = by_attribute ? ev.get_path(item, attribute) : item;
    const bool passed = test.empty() ? truthy(x) : ev.apply_test(test, x, test_args);
    if (passed == keep) out.push_back(item);
  }
  return ev.make_generator(std::move(out));
}

Value select(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return select_impl(ev, v, a, false, true); });
}
Value reject(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return select_impl(ev, v, a, false, false); });
}
Value selectattr(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return select_impl(ev, v, a, true, true); });
}
Value rejectattr(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return select_impl(ev, v, a, true, false); });
}
Value items(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return items_now(ev, v, a); });
}
Value map(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return map_now(ev, v, a); });
}
Value batch(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return batch_now(ev, v, a); });
}

Value replace(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("replace", 3, {"old", "new", "count"});
  const Value count = get(a, 2, "count", nullptr);
  return ev.make_string(strings::replace(text_of(v), text_of(get(a, 0, "old")),
                                         text_of(get(a, 1, "new")),
                                         count.is_none() ? -1 : args::to_int(count, "replace")));
}

Value reverse(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("reverse", 0, {});
  if (v.is_string()) {
    std::string out;
    const std::vector<size_t> offsets = unicode::char_offsets(v.as_string());
    for (size_t i = offsets.size() - 1; i > 0; --i) {
      out.append(v.as_string(), offsets[i - 1], offsets[i] - offsets[i - 1]);
    }
    return ev.make_string(std::move(out));
  }
  if (v.is_undefined()) return ev.make_generator({});  // reversed() of an empty sequence
  Array items = *ev.iterate(v);
  std::reverse(items.begin(), items.end());
  // Python's reversed() gives an iterator; an iterator itself cannot be reversed(), so Jinja
  // falls back to a reversed list.
  if (v.is_generator()) return ev.make_array(std::move(items));
  return ev.make_generator(std::move(items));
}

Value round_filter(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("round", 2, {"precision", "method"});
  const int64_t precision = args::to_int(get(a, 0, "precision", 0), "round");
  const std::string method = args::to_string(get(a, 1, "method", "common"), "round");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) runtime_error("round: expected a number, got " + type_name(v));
  const double x = v.as_double();
  if (method == "common") {
    if (v.is_int() || v.is_bool()) {
      // round(int, n) stays an int; negative n rounds half to even at 10**-n.
      const int64_t i = v.as_int();
      if (precision >= 0) return i;
      if (precision < -18) return 0;
      int64_t scale = 1;
      for (int64_t k = 0; k < -precision; ++k) scale *= 10;
      int64_t q = i / scale;
      int64_t r = i % scale;
      if (r < 0) {
        q -= 1;
        r += scale;
      }
      if (2 * r > scale || (2 * r == scale && (q % 2 != 0))) q += 1;
      return q * scale;
    }
    if (!std::isfinite(x) || precision > 300 || precision < -300) return x;
    if (precision >= 0) {
      // printf rounds the exact binary value half-to-even, as Python's round() does.
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return std::strtod(buf, nullptr);
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return std::nearbyint(x / scale) * scale;
  }
  if (method != "ceil" && method != "floor") {
    runtime_error("method must be common, ceil or floor");
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
  return r / scale;
}

Value safe(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("safe", 0, {});
  if (v.is_string()) return v;
  return ev.make_string(to_str(v));
}

Value sort(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = truthy(get(a, 0, "reverse", false));
  const bool case_sensitive = truthy(get(a, 1, "case_sensitive", false));
  const Value attribute = get(a, 2, "attribute", nullptr);
  Array items = *ev.iterate(v);
  std::vector<std::pair<Value, size_t>> keys;
  keys.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Value x = attribute.is_none() ? items[i] : ev.get_path(items[i], text_of(attribute));
    keys.emplace_back(sort_key(x, case_sensitive), i);
  }
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& x, const auto& y) {
    const int c = compare(x.first, y.first);
    return reverse ? c > 0 : c < 0;
  });
  Array out;
  out.reserve(items.size());
  for (const auto& [k, i] : keys) out.push_back(items[i]);
  return ev.make_array(std::move(out));
}

Value string(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("string", 0, {});
  if (v.is_string()) return v;
  return ev.make_string(to_str(v));
}

Value sum(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("sum", 2, {"attribute", "start"});
  const Value attribute = get(a, 0, "attribute", nullptr);
  Value total = get(a, 1, "start", 0);
  const auto item_seq = ev.iterate(v);
  for (const Value& item : *item_seq) {
    total = ev.binary(BinaryOp::add, total,
                      attribute.is_none() ? item : ev.get_path(item, text_of(attribute)));
  }
  return total;
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) -- not Jinja's HTML-safe one.
Value tojson(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = truthy(get(a, 0, "ensure_ascii", false));
  const Value indent_arg = get(a, 1, "indent", nullptr);
  if (indent_arg.is_string()) {
    o.indent = indent_arg.as_string();
  } else if (!indent_arg.is_none()) {
    const int64_t n = args::to_int(indent_arg, "tojson indent");
    o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1024)), ' ');
  }
  const Value separators = get(a, 2, "separators", nullptr);
  if (!separators.is_none()) {
    if (!separators.is_array() || separators.as_array().size() != 2) {
      runtime_error("tojson: separators must be a pair of strings");
    }
    o.item_separator = args::to_string(separators.as_array()[0], "tojson separators");
    o.key_separator = args::to_string(separators.as_array()[1], "tojson separators");
  } else if (o.indent) {
    o.item_separator = ",";
  }
  o.sort_keys = truthy(get(a, 3, "sort_keys", false));
  return ev.make_string(to_json(v, o));
}

Value trim(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("trim", 1, {"chars"});
  const Value chars = get(a, 0, "chars", nullptr);
  const std::string chars_text = chars.is_none() ? std::string() : text_of(chars);
  return ev.make_string(
      unicode::strip(text_of(v), chars.is_none() ? nullptr : &chars_text, true, true));
}

Value truncate(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("truncate", 4, {"length", "killwords", "end", "leeway"});
  const int64_t length = args::to_int(get(a, 0, "length", 255), "truncate");
  const bool killwords = truthy(get(a, 1, "killwords", false));
  const std::string end = text_of(get(a, 2, "end", "..."));
  const Value leeway_arg = get(a, 3, "leeway", nullptr);
  const int64_t leeway = leeway_arg.is_none() ? 5 : args::to_int(leeway_arg, "truncate");
  if (!v.is_string()) {
    // Jinja slices the value itself: a short list comes back unchanged, a long one fails.
    const int64_t n = args::to_int(length_filter(ev, v, CallArgs()), "truncate");
    if (n <= length + leeway) return v;
    runtime_error("truncate: expected a string, got " + type_name(v));
  }
  const std::string& s = v.as_string();
  const int64_t end_len = static_cast<int64_t>(unicode::length(end));
  if (length < end_len) runtime_error("expected length >= len(end)");
  if (leeway < 0) runtime_error("expected leeway >= 0");
  const std::vector<size_t> offsets = unicode::char_offsets(s);
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  if (n <= length + leeway) return ev.make_string(s);
  std::string head = s.substr(0, offsets[static_cast<size_t>(length - end_len)]);
  if (!killwords) {
    const size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return ev.make_string(head + end);
}

// A string that is equal for values Python's set() would merge (1, 1.0 and True are one key);
// lists and dicts are unhashable.
std::string hash_key(const Value& k) {
  std::string key;
  switch (k.kind()) {
    case Kind::string:
      key = "s";
      key += k.as_string();
      return key;
    case Kind::none:
      return "n";
    case Kind::undefined:
      return "u";
    case Kind::boolean:
    case Kind::integer:
      return fmt::format("i{}", k.as_int());
    case Kind::floating: {
      const double f = k.as_double();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18) {
        return fmt::format("i{}", static_cast<int64_t>(f));
      }
      return "f" + float_repr(f);
    }
    case Kind::array:
      if (!k.is_tuple()) break;
      key = "t";
      for (const Value& e : k.as_array()) {
        key += hash_key(e);
        key += '\x1f';
      }
      return key;
    case Kind::function:
      return fmt::format("c{}", static_cast<const void*>(&k.as_function()));
    case Kind::object:
      return fmt::format("o{}", static_cast<const void*>(&k.as_object()));
    case Kind::dict:
      break;
  }
  runtime_error("unhashable type: '" + type_name(k) + "'");
}

Value unique_now(Evaluator& ev, const Value& v, const CallArgs& a) {
  a.check("unique", 2, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(get(a, 0, "case_sensitive", false));
  const Value attribute = get(a, 1, "attribute", nullptr);
  Array out;
  std::unordered_set<std::string> seen;
  const auto item_seq = ev.iterate(v);
  for (const Value& item : *item_seq) {
    const Value k = sort_key(attribute.is_none() ? item : ev.get_path(item, text_of(attribute)),
                             case_sensitive);
    if (seen.insert(hash_key(k)).second) out.push_back(item);
  }
  return ev.make_generator(std::move(out));
}

Value wordcount(Evaluator&, const Value& v, const CallArgs& a) {
  a.check("wordcount", 0, {});
  const std::string s = text_of(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const char32_t c = unicode::decode(s, pos, len);
    const bool word = (c < 0x80 && (std::isalnum(static_cast<int>(c)) || c == '_')) ||
                      (c >= 0x80 && !unicode::is_space(c));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return n;
}

Value unique(Evaluator& ev, const Value& v, const CallArgs& a) {
  return lazily([&] { return unique_now(ev, v, a); });
}

const std::unordered_map<std::string_view, FilterFn>& registry() {
  static const std::unordered_map<std::string_view, FilterFn> filters = {
      {"abs", abs_filter},
      {"attr", attr},
      {"batch", batch},
      {"capitalize", capitalize},
      {"center", center},
      {"count", length_filter},
      {"d", default_filter},
      {"default", default_filter},
      {"dictsort", dictsort},
      {"e", escape},
      {"escape", escape},
      {"first", first},
      {"float", float_filter},
      {"forceescape", escape},
      {"format", format},
      {"indent", indent},
      {"int", int_filter},
      {"items", items},
      {"join", join},
      {"last", last},
      {"length", length_filter},
      {"list", list},
      {"lower", lower},
      {"map", map},
      {"max", max_filter},
      {"min", min_filter},
      {"reject", reject},
      {"rejectattr", rejectattr},
      {"replace", replace},
      {"reverse", reverse},
      {"round", round_filter},
      {"safe", safe},
      {"select", select},
      {"selectattr", selectattr},
      {"sort", sort},
      {"string", string},
      {"sum", sum},
      {"title", title},
      {"tojson", tojson},
      {"trim", trim},
      {"truncate", truncate},
      {"unique", unique},
      {"upper", upper},
      {"wordcount", wordcount},
  };
  return filters;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& r = registry();
  const auto it = r.find(name);
  return it == r.end() ? nullptr : it->second;
}

}  // namespace ridge::tokenizer::jinja
