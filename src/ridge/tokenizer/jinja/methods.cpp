// Methods of the built-in types that templates call: str (strip, split, startswith, ...),
// dict (items, keys, values, get) and list (count, index). Methods that would modify a list or
// dict fail, as in Hugging Face's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <array>
#include <cstdint>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/evaluator.h"
#include "ridge/tokenizer/jinja/strings.h"
#include "ridge/tokenizer/jinja/unicode.h"

namespace ridge::tokenizer::jinja {

namespace {

using args::get;

constexpr std::string_view kStringMethods[] = {
    "capitalize",   "center",       "count",   "endswith",   "find",       "format",
    "isalnum",      "isalpha",      "isdigit", "islower",    "isspace",    "istitle",
    "isupper",      "join",         "ljust",   "lower",      "lstrip",     "partition",
    "removeprefix", "removesuffix", "replace", "rfind",      "rjust",      "rpartition",
    "rsplit",       "rstrip",       "split",   "splitlines", "startswith", "strip",
    "swapcase",     "title",        "upper",   "zfill",      "isnumeric",  "isdecimal",
};
constexpr std::string_view kDictMethods[] = {"items",  "keys", "values",  "get",        "copy",
                                             "update", "pop",  "popitem", "setdefault", "clear"};
constexpr std::string_view kListMethods[] = {"count",   "index",  "copy", "append",
                                             "extend",  "insert", "pop",  "remove",
                                             "reverse", "sort",   "clear"};
constexpr std::string_view kMutating[] = {"update", "pop",     "popitem", "setdefault",
                                          "clear",  "append",  "extend",  "insert",
                                          "remove", "reverse", "sort"};

template <size_t N>
bool contains_name(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

std::string text_of(const Value& v) {
  return v.is_string() ? v.as_string() : to_str(v);
}

std::optional<std::string> optional_chars(const CallArgs& a, std::string_view what) {
  const Value chars = get(a, 0, "chars", nullptr);
  if (chars.is_none()) return std::nullopt;
  return args::to_string(chars, what);
}

Value string_list(Evaluator& ev, std::vector<std::string> parts) {
  Array out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(ev.make_string(std::move(p)));
  return ev.make_array(std::move(out));
}

// startswith/endswith(prefix or tuple of prefixes[, start[, end]])
bool affix_match(const std::string& s, const Value& affix, bool at_start, const CallArgs& a) {
  std::string_view view = s;
  if (a.positional.size() > 1) {
    Value start = a.positional[1];
    Value stop = a.positional.size() > 2 ? a.positional[2] : Value(nullptr);
    const std::vector<size_t> offsets = unicode::char_offsets(s);
    const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
    const auto clamp = [n](const Value& v, int64_t dflt) {
      if (v.is_none()) return dflt;
      int64_t i = args::to_int(v, "startswith/endswith");
      if (i < 0) i = std::max<int64_t>(0, i + n);
      return std::min(i, n);
    };
    const int64_t lo = clamp(start, 0);
    const int64_t hi = clamp(stop, n);
    if (lo > hi) return false;
    view = view.substr(offsets[static_cast<size_t>(lo)],
                       offsets[static_cast<size_t>(hi)] - offsets[static_cast<size_t>(lo)]);
  }
  const auto one = [&](const Value& x) {
    const std::string& p = args::to_string(x, at_start ? "startswith" : "endswith");
    return at_start ? view.substr(0, p.size()) == p
                    : (view.size() >= p.size() && view.substr(view.size() - p.size()) == p);
  };
  if (affix.is_tuple()) {
    for (const Value& x : affix.as_array()) {
      if (one(x)) return true;
    }
    return false;
  }
  return one(affix);
}

// str.format with {} / {0} / {name} fields (no format specs or conversions).
std::string str_format(const std::string& f, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      const size_t close = f.find('}', i);
      if (close == std::string::npos) runtime_error("Single '{' encountered in format string");
      const std::string field = f.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        runtime_error("str.format: format specs, conversions and nested fields are not supported");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index >= a.positional.size()) runtime_error("Replacement index out of range");
        v = &a.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(),
                             [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t idx = std::stoul(field);
        if (idx >= a.positional.size()) runtime_error("Replacement index out of range");
        v = &a.positional[idx];
      } else {
        v = a.keyword_arg(field);
        if (!v) runtime_error(fmt::format("KeyError: '{}'", field));
      }
      out += text_of(*v);
      i = close;
    } else if (c == '}') {
      runtime_error("Single '}' encountered in format string");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    if (!pred(unicode::decode(s, pos, len))) return false;
  }
  return true;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return unicode::is_cased(c) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
         (c >= 0xAC00 && c <= 0xD7AF);
}
bool is_digit(char32_t c) {
  return c >= '0' && c <= '9';
}

bool call_string_method(Evaluator& ev, const std::string& s, std::string_view name,
                        const CallArgs& a, Value& result) {
  const auto str = [&](std::string v) { result = ev.make_string(std::move(v)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(std::string(name), 1, {"chars"});
    const auto chars = optional_chars(a, name);
    str(unicode::strip(s, chars ? &*chars : nullptr, name != "rstrip", name != "lstrip"));
  } else if (name == "split" || name == "rsplit") {
    a.check(std::string(name), 2, {"sep", "maxsplit"});
    const Value sep = get(a, 0, "sep", nullptr);
    const int64_t maxsplit = args::to_int(get(a, 1, "maxsplit", -1), name);
    const std::string sep_text = sep.is_none() ? std::string() : args::to_string(sep, name);
    const std::string* sep_ptr = sep.is_none() ? nullptr : &sep_text;
    result = string_list(ev, name == "split" ? strings::split(s, sep_ptr, maxsplit)
                                             : strings::rsplit(s, sep_ptr, maxsplit));
  } else if (name == "splitlines") {
    a.check("splitlines", 1, {"keepends"});
    result = string_list(ev, strings::splitlines(s, truthy(get(a, 0, "keepends", false))));
  } else if (name == "startswith" || name == "endswith") {
    if (a.positional.empty()) runtime_error(fmt::format("{}() takes at least 1 argument", name));
    result = affix_match(s, a.positional[0], name == "startswith", a);
  } else if (name == "upper") {
    str(unicode::upper(s));
  } else if (name == "lower") {
    str(unicode::lower(s));
  } else if (name == "title") {
    str(unicode::title(s));
  } else if (name == "capitalize") {
    str(unicode::capitalize(s));
  } else if (name == "swapcase") {
    std::string out;
    for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
      const char32_t c = unicode::decode(s, pos, len);
      const std::string_view ch = std::string_view(s).substr(pos, len);
      out += unicode::is_upper_char(c)   ? unicode::lower(ch)
             : unicode::is_lower_char(c) ? unicode::upper(ch)
                                         : std::string(ch);
    }
    str(std::move(out));
  } else if (name == "replace") {
    a.check("replace", 3, {"old", "new", "count"});
    str(strings::replace(s, args::to_string(get(a, 0, "old"), "replace"),
                         args::to_string(get(a, 1, "new"), "replace"),
                         args::to_int(get(a, 2, "count", -1), "replace")));
  } else if (name == "find" || name == "rfind") {
    a.check(std::string(name), 1, {});
    result = strings::find(s, args::to_string(get(a, 0, "sub"), name), name == "rfind");
  } else if (name == "count") {
    a.check("count", 1, {});
    result = strings::count(s, args::to_string(get(a, 0, "sub"), "count"));
  } else if (name == "join") {
    a.check("join", 1, {});
    std::string out;
    bool first = true;
    const auto item_seq = ev.iterate(get(a, 0, "iterable"));
    for (const Value& item : *item_seq) {
      if (!first) out += s;
      first = false;
      out += args::to_string(item, "str.join");
      if (out.size() > ev.limits().max_output_bytes) ev.make_string(std::move(out));
    }
    str(std::move(out));
  } else if (name == "center" || name == "ljust" || name == "rjust") {
    a.check(std::string(name), 2, {});
    const std::string fill = text_of(get(a, 1, "fillchar", " "));
    if (unicode::length(fill) != 1)
      runtime_error("The fill character must be exactly one character long");
    const int64_t width = args::to_int(get(a, 0, "width"), name);
    if (width > static_cast<int64_t>(ev.limits().max_output_bytes))
      ev.make_string(std::string(ev.limits().max_output_bytes + 1, ' '));
    str(strings::pad(s, width, fill, name == "center" ? '^' : (name == "ljust" ? '<' : '>')));
  } else if (name == "zfill") {
    a.check("zfill", 1, {});
    const int64_t width = args::to_int(get(a, 0, "width"), "zfill");
    const int64_t len = static_cast<int64_t>(unicode::length(s));
    if (width <= len) {
      str(s);
    } else {
      if (width > static_cast<int64_t>(ev.limits().max_output_bytes))
        ev.make_string(std::string(ev.limits().max_output_bytes + 1, ' '));
      const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
      std::string out = sign ? s.substr(0, 1) : std::string();
      out.append(static_cast<size_t>(width - len), '0');
      out += sign ? s.substr(1) : s;
      str(std::move(out));
    }
  } else if (name == "removeprefix" || name == "removesuffix") {
    a.check(std::string(name), 1, {});
    const std::string& affix = args::to_string(get(a, 0, "affix"), name);
    if (name == "removeprefix") {
      str(s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s);
    } else {
      const bool ends =
          s.size() >= affix.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
      str(ends && !affix.empty() ? s.substr(0, s.size() - affix.size()) : s);
    }
  } else if (name == "partition" || name == "rpartition") {
    a.check(std::string(name), 1, {});
    const std::string& sep = args::to_string(get(a, 0, "sep"), name);
    if (sep.empty()) runtime_error("empty separator");
    const size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    Array parts;
    if (hit == std::string::npos) {
      if (name == "partition") {
        parts = {Value(s), Value(""), Value("")};
      } else {
        parts = {Value(""), Value(""), Value(s)};
      }
    } else {
      parts = {Value(s.substr(0, hit)), Value(sep), Value(s.substr(hit + sep.size()))};
    }
    ev.charge(s.size());
    result = Value(std::move(parts), true);
  } else if (name == "format") {
    str(str_format(s, a));
  } else if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
    result = all_chars(s, is_digit);
  } else if (name == "isalpha") {
    result = all_chars(s, is_alpha);
  } else if (name == "isalnum") {
    result = all_chars(s, [](char32_t c) { return is_alpha(c) || is_digit(c); });
  } else if (name == "isspace") {
    result = all_chars(s, unicode::is_space);
  } else if (name == "islower") {
    result = strings::is_lower(s);
  } else if (name == "isupper") {
    result = strings::is_upper(s);
  } else if (name == "istitle") {
    bool cased = false;
    bool previous_cased = false;
    bool ok = true;
    for (size_t pos = 0, len = 0; pos < s.size() && ok; pos += len) {
      const char32_t c = unicode::decode(s, pos, len);
      if (unicode::is_upper_char(c)) {
        ok = !previous_cased;
        previous_cased = cased = true;
      } else if (unicode::is_lower_char(c)) {
        ok = previous_cased;
        previous_cased = cased = true;
      } else {
        previous_cased = false;
      }
    }
    result = ok && cased;
  } else {
    return false;
  }
  return true;
}

bool call_dict_method(Evaluator& ev, const Value& d, std::string_view name, const CallArgs& a,
                      Value& result) {
  const Dict& dict = d.as_dict();
  if (name == "items") {
    a.check("items", 0, {});
    Array out;
    for (const auto& [k, v] : dict.entries) out.push_back(Value(Array{k, v}, true));
    result = ev.make_array(std::move(out));
  } else if (name == "keys" || name == "values") {
    a.check(std::string(name), 0, {});
    Array out;
    for (const auto& [k, v] : dict.entries) out.push_back(name == "keys" ? k : v);
    result = ev.make_array(std::move(out));
  } else if (name == "get") {
    a.check("get", 2, {});
    if (a.positional.empty()) runtime_error("get expected at least 1 argument, got 0");
    const Value* v = dict.find(a.positional[0]);
    result = v ? *v : get(a, 1, "default", nullptr);
  } else if (name == "copy") {
    a.check("copy", 0, {});
    result = d;
  } else {
    return false;
  }
  return true;
}

bool call_list_method(Evaluator&, const Value& l, std::string_view name, const CallArgs& a,
                      Value& result) {
  const Array& items = l.as_array();
  if (name == "count") {
    a.check("count", 1, {});
    int64_t n = 0;
    for (const Value& v : items) n += equals(v, get(a, 0, "value")) ? 1 : 0;
    result = n;
  } else if (name == "index") {
    a.check("index", 1, {});
    const Value x = get(a, 0, "value");
    for (size_t i = 0; i < items.size(); ++i) {
      if (equals(items[i], x)) {
        result = i;
        return true;
      }
    }
    runtime_error(fmt::format("{} is not in list", repr(x)));
  } else if (name == "copy") {
    a.check("copy", 0, {});
    result = l;
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool has_method(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Kind::string:
      return contains_name(kStringMethods, name);
    case Kind::dict:
      return contains_name(kDictMethods, name);
    case Kind::array:
      if (object.is_generator()) return false;
      return object.is_tuple() ? (name == "count" || name == "index")
                               : contains_name(kListMethods, name);
    default:
      return false;
  }
}

bool call_method(Evaluator& ev, const Value& object, std::string_view name, CallArgs& args,
                 Value& result) {
  if (!has_method(object, name)) return false;
  if (contains_name(kMutating, name)) {
    runtime_error(
        fmt::format("access to attribute '{}' of '{}' object is unsafe (templates cannot "
                    "modify lists and dicts; use namespace() to carry values)",
                    name, type_name(object)));
  }
  switch (object.kind()) {
    case Kind::string:
      return call_string_method(ev, object.as_string(), name, args, result);
    case Kind::dict:
      return call_dict_method(ev, object, name, args, result);
    case Kind::array:
      return call_list_method(ev, object, name, args, result);
    default:
      return false;
  }
}

}  // namespace ridge::tokenizer::jinja
