// The built-in filters, tests, global functions and methods of str, dict and list (the subset is
// listed in docs/JINJA.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "ridge/tokenizer/jinja/ast.h"
#include "ridge/tokenizer/jinja/value.h"

namespace ridge::tokenizer::jinja {

// nullptr when there is no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// Global functions (range, namespace, dict, raise_exception, strftime_now, ...); nullptr if none.
const Value* find_global(std::string_view name);

// Methods of built-in types: 'abc'.upper(), d.items(), ...
bool has_method(const Value& object, std::string_view name);
// Calls object.name(args); false when the type has no such method.
bool call_method(Evaluator& ev, const Value& object, std::string_view name, CallArgs& args,
                 Value& result);

}  // namespace ridge::tokenizer::jinja

namespace ridge::tokenizer::jinja::args {

// Positional `index` or keyword `name`, else `fallback`.
inline Value get(const CallArgs& a, size_t index, std::string_view name, Value fallback = {}) {
  const Value* v = a.get(index, name);
  return v ? *v : fallback;
}
// An int argument (bool counts, as in Python); throws naming `what` otherwise.
int64_t to_int(const Value& v, std::string_view what);
// A str argument; throws naming `what` otherwise.
const std::string& to_string(const Value& v, std::string_view what);

}  // namespace ridge::tokenizer::jinja::args
