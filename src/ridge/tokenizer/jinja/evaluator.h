// Evaluator: renders a syntax tree against variables, with Jinja's scoping (a for-loop iteration,
// a macro call and a with-block each get their own scope; `set` writes to the innermost one;
// namespace() objects carry values out) and Python's value semantics. Also the shared operations
// (attribute and item access, operators, calls) that the built-in filters use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ridge/tokenizer/jinja/ast.h"
#include "ridge/tokenizer/jinja/template.h"
#include "ridge/tokenizer/jinja/value.h"

namespace ridge::tokenizer::jinja {

struct Scope {
  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  // Looks through this scope and its parents; nullptr when the name is not set anywhere.
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);

  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

 private:
  const Value* find_here(std::string_view name) const;

  // Past kIndexFrom variables a scope also indexes them by name (templates that set thousands of
  // names stay linear).
  static constexpr size_t kIndexFrom = 16;
  std::unordered_map<std::string, size_t> index_;
};

class Evaluator {
 public:
  Evaluator(const Limits& limits, std::shared_ptr<Scope> root);

  void render(const Body& body, std::string& out);
  Value eval(const Expr& e);

  // ---- accounting (every builtin that builds strings or lists reports them) ----
  void step();
  void charge(size_t bytes);
  // A string value, checked against max_output_bytes and charged to the work budget.
  Value make_string(std::string s);
  Value make_array(Array items, bool tuple = false);
  Value make_generator(Array items);
  const Limits& limits() const { return limits_; }

  // ---- operations with Jinja's semantics ----
  Value call(const Value& callee, CallArgs& args);
  Value get_attr(const Value& object, std::string_view name);
  Value get_item(const Value& object, const Value& key);
  Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);
  // What a for-loop iterates: list items, dict keys, string characters; nothing for undefined.
  // Keep the returned pointer while iterating: `for (x : *iterate(v))` would dangle when the
  // array was built just for this call (a range-for does not extend that temporary in C++20).
  std::shared_ptr<const Array> iterate(const Value& v);
  Value binary(BinaryOp op, const Value& a, const Value& b);
  bool compare(CompareOp op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  Value apply_filter(std::string_view name, const Value& input, const CallArgs& args);
  bool apply_test(std::string_view name, const Value& input, const CallArgs& args);
  // Attribute lookup by a dotted path ("a.b.0"), as map(attribute=...) and selectattr use it.
  Value get_path(const Value& object, std::string_view path);

  // Invoked through the Function values that {% macro %} and {% call %} create.
  Value call_macro(const struct MacroDef& def, const std::weak_ptr<Scope>& defining,
                   CallArgs& args);

 private:
  enum class Flow { normal, break_loop, continue_loop };

  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  Flow exec_inner(const Stmt& s, std::string& out);
  Flow exec_for(const ForStmt& s, std::string& out);
  Value eval_inner(const Expr& e);
  Value eval_call(const CallExpr& e);
  Value eval_filter_chain(const Expr& filter, const Value& input);
  CallArgs eval_args(const Arguments& a);
  Value lookup(const std::string& name) const;
  void assign(const Target& target, const Value& value);
  Value make_macro(const std::shared_ptr<MacroDef>& def);
  void append(std::string& out, std::string_view text) const;

  const Limits& limits_;
  std::shared_ptr<Scope> root_;
  std::shared_ptr<Scope> scope_;
  uint64_t steps_ = 0;
  size_t work_bytes_ = 0;
  int call_depth_ = 0;
};

}  // namespace ridge::tokenizer::jinja
