#include "ridge/tokenizer/jinja/evaluator.h"

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/error.h"

namespace ridge::tokenizer::jinja {

namespace {

// The for-loop's `loop` variable.
class LoopObject : public Object {
 public:
  LoopObject(std::shared_ptr<const Array> items, size_t index0)
      : items_(std::move(items)), index0_(index0) {}

  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return fmt::format("<LoopContext {}/{}>", index0_ + 1, items_->size());
  }

  Value get_attr(std::string_view name) const override {
    const size_t length = items_->size();
    if (name == "index") return index0_ + 1;
    if (name == "index0") return index0_;
    if (name == "revindex") return length - index0_;
    if (name == "revindex0") return length - index0_ - 1;
    if (name == "first") return index0_ == 0;
    if (name == "last") return index0_ + 1 == length;
    if (name == "length") return length;
    if (name == "depth") return 1;
    if (name == "depth0") return 0;
    if (name == "previtem") {
      if (index0_ == 0) return Value::undefined("there is no previous item");
      return (*items_)[index0_ - 1];
    }
    if (name == "nextitem") {
      if (index0_ + 1 >= length) return Value::undefined("there is no next item");
      return (*items_)[index0_ + 1];
    }
    if (name == "cycle") {
      auto fn = std::make_shared<Function>();
      fn->name = "loop.cycle";
      const size_t index0 = index0_;
      fn->call = [index0](Evaluator&, CallArgs& args) -> Value {
        if (args.positional.empty()) runtime_error("no items for cycling given");
        return args.positional[index0 % args.positional.size()];
      };
      return Value(std::shared_ptr<const Function>(std::move(fn)));
    }
    return Value::undefined(fmt::format("'LoopContext object' has no attribute '{}'", name));
  }

 private:
  std::shared_ptr<const Array> items_;
  size_t index0_;
};

// Restores the evaluator's current scope when a block ends (also on exceptions).
class ScopeSwap {
 public:
  ScopeSwap(std::shared_ptr<Scope>& slot, std::shared_ptr<Scope> next)
      : slot_(slot), saved_(std::move(slot)) {
    slot_ = std::move(next);
  }
  ~ScopeSwap() { slot_ = std::move(saved_); }
  ScopeSwap(const ScopeSwap&) = delete;
  ScopeSwap& operator=(const ScopeSwap&) = delete;

 private:
  std::shared_ptr<Scope>& slot_;
  std::shared_ptr<Scope> saved_;
};

[[noreturn]] void rethrow_located(const TemplateError& e, const Node& n) {
  throw TemplateError(e.kind(), e.message(), n.line, n.column);
}

}  // namespace

// ---- Scope -----------------------------------------------------------------------------------

const Value* Scope::find_here(std::string_view name) const {
  if (!index_.empty()) {
    const auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &vars[it->second].second;
  }
  for (const auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    if (const Value* v = s->find_here(name)) return v;
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  if (const Value* existing = find_here(name)) {
    const_cast<Value&>(*existing) = std::move(value);
    return;
  }
  vars.emplace_back(name, std::move(value));
  if (vars.size() == kIndexFrom) {
    for (size_t i = 0; i < vars.size(); ++i) index_.emplace(vars[i].first, i);
  } else if (vars.size() > kIndexFrom) {
    index_.emplace(name, vars.size() - 1);
  }
}

// ---- Evaluator -------------------------------------------------------------------------------

Evaluator::Evaluator(const Limits& limits, std::shared_ptr<Scope> root)
    : limits_(limits), root_(std::move(root)), scope_(root_) {}

void Evaluator::render(const Body& body, std::string& out) {
  exec_body(body, out);
}

void Evaluator::step() {
  if (++steps_ > limits_.max_steps) {
    runtime_error(
        fmt::format("the template ran more than {} steps (loop iterations, calls and "
                    "filters); is it looping without end?",
                    limits_.max_steps));
  }
}

void Evaluator::charge(size_t bytes) {
  work_bytes_ += bytes;
  if (work_bytes_ > limits_.max_work_bytes) {
    runtime_error(fmt::format("the template built more than {} bytes of strings and lists",
                              limits_.max_work_bytes));
  }
}

Value Evaluator::make_string(std::string s) {
  if (s.size() > limits_.max_output_bytes) {
    runtime_error(
        fmt::format("string longer than the output limit of {} bytes", limits_.max_output_bytes));
  }
  charge(s.size());
  return Value(std::move(s));
}

Value Evaluator::make_array(Array items, bool tuple) {
  charge(items.size() * sizeof(Value));
  return Value(std::move(items), tuple);
}

Value Evaluator::make_generator(Array items) {
  charge(items.size() * sizeof(Value));
  return Value::generator(std::move(items));
}

void Evaluator::append(std::string& out, std::string_view text) const {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    runtime_error(
        fmt::format("output longer than the limit of {} bytes", limits_.max_output_bytes));
  }
  out.append(text);
}

Value Evaluator::lookup(const std::string& name) const {
  if (const Value* v = scope_->find(name)) return *v;
  if (const Value* g = find_global(name)) return *g;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

// ---- statements ------------------------------------------------------------------------------

Evaluator::Flow Evaluator::exec_body(const Body& body, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s, std::string& out) {
  try {
    return exec_inner(s, out);
  } catch (const TemplateError& e) {
    if (e.line() == 0) rethrow_located(e, s);
    throw;
  }
}

Evaluator::Flow Evaluator::exec_inner(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case StmtKind::data:
      append(out, static_cast<const DataStmt&>(s).text);
      return Flow::normal;
    case StmtKind::output: {
      const Value v = eval(*static_cast<const OutputStmt&>(s).expr);
      if (v.is_string()) {
        append(out, v.as_string());
      } else {
        append(out, to_str(v));
      }
      return Flow::normal;
    }
    case StmtKind::if_: {
      const auto& st = static_cast<const IfStmt&>(s);
      for (const auto& [cond, body] : st.branches) {
        if (truthy(eval(*cond))) return exec_body(body, out);
      }
      return exec_body(st.otherwise, out);
    }
    case StmtKind::for_:
      return exec_for(static_cast<const ForStmt&>(s), out);
    case StmtKind::set: {
      const auto& st = static_cast<const SetStmt&>(s);
      assign(st.target, eval(*st.value));
      return Flow::normal;
    }
    case StmtKind::set_block: {
      const auto& st = static_cast<const SetBlockStmt&>(s);
      std::string captured;
      exec_body(st.body, captured);
      Value v = make_string(std::move(captured));
      if (st.filter) v = eval_filter_chain(*st.filter, v);
      assign(st.target, v);
      return Flow::normal;
    }
    case StmtKind::macro: {
      const auto& st = static_cast<const MacroStmt&>(s);
      scope_->set(st.def->name, make_macro(st.def));
      return Flow::normal;
    }
    case StmtKind::call_block: {
      const auto& st = static_cast<const CallBlockStmt&>(s);
      const auto& call = static_cast<const CallExpr&>(*st.call);
      Value callee = call.callee->kind == ExprKind::getattr
                         ? get_attr(eval(*static_cast<const GetattrExpr&>(*call.callee).object),
                                    static_cast<const GetattrExpr&>(*call.callee).attribute)
                         : eval(*call.callee);
      CallArgs args = eval_args(call.args);
      args.keyword.emplace_back("caller", make_macro(st.caller));
      const Value v = this->call(callee, args);
      append(out, to_str(v));
      return Flow::normal;
    }
    case StmtKind::filter_block: {
      const auto& st = static_cast<const FilterBlockStmt&>(s);
      std::string captured;
      exec_body(st.body, captured);
      append(out, to_str(eval_filter_chain(*st.filter, make_string(std::move(captured)))));
      return Flow::normal;
    }
    case StmtKind::with: {
      const auto& st = static_cast<const WithStmt&>(s);
      auto inner = std::make_shared<Scope>(scope_);
      std::vector<Value> values;
      for (const auto& v : st.values) values.push_back(eval(*v));
      ScopeSwap swap(scope_, inner);
      for (size_t i = 0; i < st.targets.size(); ++i) assign(st.targets[i], values[i]);
      return exec_body(st.body, out);
    }
    case StmtKind::scope: {
      ScopeSwap swap(scope_, std::make_shared<Scope>(scope_));
      return exec_body(static_cast<const ScopeStmt&>(s).body, out);
    }
    case StmtKind::break_:
      return Flow::break_loop;
    case StmtKind::continue_:
      return Flow::continue_loop;
  }
  return Flow::normal;
}

Evaluator::Flow Evaluator::exec_for(const ForStmt& s, std::string& out) {
  std::shared_ptr<const Array> items = iterate(eval(*s.iterable));
  if (s.filter) {
    Array kept;
    ScopeSwap swap(scope_, std::make_shared<Scope>(scope_));
    for (const Value& item : *items) {
      step();
      assign(s.target, item);
      if (truthy(eval(*s.filter))) kept.push_back(item);
    }
    charge(kept.size() * sizeof(Value));
    items = std::make_shared<const Array>(std::move(kept));
  }
  if (items->empty()) {
    ScopeSwap swap(scope_, std::make_shared<Scope>(scope_));
    return exec_body(s.otherwise, out);  // the else body is outside the loop
  }
  const std::shared_ptr<Scope> outer = scope_;
  for (size_t i = 0; i < items->size(); ++i) {
    step();
    ScopeSwap swap(scope_, std::make_shared<Scope>(outer));
    assign(s.target, (*items)[i]);
    scope_->set("loop", Value(std::shared_ptr<Object>(std::make_shared<LoopObject>(items, i))));
    if (exec_body(s.body, out) == Flow::break_loop) break;
  }
  return Flow::normal;
}

void Evaluator::assign(const Target& target, const Value& value) {
  switch (target.kind) {
    case Target::Kind::name:
      scope_->set(target.name, value);
      return;
    case Target::Kind::attribute: {
      const Value ns = lookup(target.name);
      if (!ns.is_object()) runtime_error("cannot assign attribute on non-namespace object");
      if (!target.attribute.empty() && target.attribute[0] == '_') {
        runtime_error(fmt::format("cannot store underscore-prefixed attribute '{}' on a namespace",
                                  target.attribute));
      }
      ns.as_object().set_attr(target.attribute, value);
      return;
    }
    case Target::Kind::tuple: {
      const std::shared_ptr<const Array> items = iterate(value);
      if (items->size() != target.items.size()) {
        if (items->size() > target.items.size()) {
          runtime_error(
              fmt::format("too many values to unpack (expected {})", target.items.size()));
        }
        runtime_error(fmt::format("not enough values to unpack (expected {}, got {})",
                                  target.items.size(), items->size()));
      }
      for (size_t i = 0; i < items->size(); ++i) assign(target.items[i], (*items)[i]);
      return;
    }
  }
}

Value Evaluator::make_macro(const std::shared_ptr<MacroDef>& def) {
  auto fn = std::make_shared<Function>();
  fn->name = def->name;
  std::weak_ptr<Scope> defining = scope_;
  fn->call = [def, defining](Evaluator& ev, CallArgs& args) {
    return ev.call_macro(*def, defining, args);
  };
  return Value(std::shared_ptr<const Function>(std::move(fn)));
}

Value Evaluator::call_macro(const MacroDef& def, const std::weak_ptr<Scope>& defining,
                            CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    runtime_error(fmt::format("macro calls nested more than {} deep (runaway recursion?)",
                              limits_.max_call_depth));
  }
  std::shared_ptr<Scope> parent = defining.lock();
  auto scope = std::make_shared<Scope>(parent ? parent : root_);
  const size_t n_params = def.params.size();
  if (args.positional.size() > n_params && !def.uses_varargs) {
    runtime_error(fmt::format("macro '{}' takes not more than {} argument(s)", def.name, n_params));
  }
  std::vector<bool> bound(n_params, false);
  for (size_t i = 0; i < n_params && i < args.positional.size(); ++i) {
    scope->set(def.params[i], args.positional[i]);
    bound[i] = true;
  }
  Dict extra_kwargs;
  Value caller;
  for (auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < n_params && def.params[i] != name) ++i;
    if (i < n_params) {
      if (bound[i]) {
        runtime_error(
            fmt::format("macro '{}' got multiple values for argument '{}'", def.name, name));
      }
      scope->set(name, value);
      bound[i] = true;
    } else if (name == "caller" && def.uses_caller) {
      caller = value;
    } else if (def.uses_kwargs) {
      extra_kwargs.set(name, value);
    } else {
      runtime_error(fmt::format("macro '{}' takes no keyword argument '{}'", def.name, name));
    }
  }
  ++call_depth_;
  struct DepthRestore {
    int& depth;
    ~DepthRestore() { --depth; }
  } restore{call_depth_};
  ScopeSwap swap(scope_, scope);
  const size_t first_default = n_params - def.defaults.size();
  for (size_t i = 0; i < n_params; ++i) {
    if (bound[i]) continue;
    if (i >= first_default) {
      scope->set(def.params[i], eval(*def.defaults[i - first_default]));
    } else {
      scope->set(def.params[i],
                 Value::undefined(fmt::format("parameter '{}' was not provided", def.params[i])));
    }
  }
  if (def.uses_varargs) {
    Array rest;
    for (size_t i = n_params; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value(std::move(rest), true));
  }
  if (def.uses_kwargs) scope->set("kwargs", Value(std::move(extra_kwargs)));
  if (def.uses_caller) {
    scope->set("caller", caller.is_undefined()
                             ? Value::undefined("no caller passed to macro '" + def.name + "'")
                             : caller);
  }
  std::string out;
  exec_body(def.body, out);
  return make_string(std::move(out));
}

// ---- expressions -----------------------------------------------------------------------------

Value Evaluator::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (const TemplateError& err) {
    if (err.line() == 0) rethrow_located(err, e);
    throw;
  }
}

CallArgs Evaluator::eval_args(const Arguments& a) {
  CallArgs args;
  args.positional.reserve(a.positional.size());
  for (const auto& p : a.positional) args.positional.push_back(eval(*p));
  for (const auto& [name, expr] : a.keyword) args.keyword.emplace_back(name, eval(*expr));
  if (a.star_args) {
    const auto v_seq = iterate(eval(*a.star_args));
    for (const Value& v : *v_seq) args.positional.push_back(v);
  }
  if (a.star_kwargs) {
    const Value kw = eval(*a.star_kwargs);
    if (!kw.is_dict()) runtime_error("argument after ** must be a mapping, not " + type_name(kw));
    for (const auto& [k, v] : kw.as_dict().entries) {
      if (!k.is_string()) runtime_error("keywords must be strings");
      args.keyword.emplace_back(k.as_string(), v);
    }
  }
  return args;
}

Value Evaluator::eval_call(const CallExpr& e) {
  if (e.callee->kind == ExprKind::getattr) {
    const auto& g = static_cast<const GetattrExpr&>(*e.callee);
    const Value object = eval(*g.object);
    if (object.is_undefined()) fail_undefined(object);
    CallArgs args = eval_args(e.args);
    Value result;
    step();
    if (g.attribute.empty() || g.attribute[0] != '_') {
      if (call_method(*this, object, g.attribute, args, result)) return result;
    }
    return call(get_attr(object, g.attribute), args);
  }
  const Value callee = eval(*e.callee);
  CallArgs args = eval_args(e.args);
  return call(callee, args);
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) {
    step();
    return callee.as_function().call(*this, args);
  }
  if (callee.is_undefined()) fail_undefined(callee);
  runtime_error(fmt::format("'{}' object is not callable", type_name(callee)));
}

Value Evaluator::eval_filter_chain(const Expr& filter, const Value& input) {
  if (filter.kind != ExprKind::filter) return eval(filter);
  const auto& f = static_cast<const FilterExpr&>(filter);
  const Value in = f.input ? eval_filter_chain(*f.input, input) : input;
  const CallArgs args = eval_args(f.args);
  step();
  if (!f.fn) runtime_error(fmt::format("no filter named '{}'", f.name));
  return f.fn(*this, in, args);
}

Value Evaluator::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::constant:
      return static_cast<const ConstExpr&>(e).value;
    case ExprKind::name:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::list: {
      const auto& l = static_cast<const ListExpr&>(e);
      Array items;
      items.reserve(l.items.size());
      for (const auto& i : l.items) items.push_back(eval(*i));
      return make_array(std::move(items), l.tuple);
    }
    case ExprKind::dict: {
      Dict d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k);
        if (key.is_array() || key.is_dict() || key.is_undefined() || key.is_object()) {
          runtime_error("unhashable type: '" + type_name(key) + "'");
        }
        d.set(std::move(key), eval(*v));
      }
      charge(d.size() * 2 * sizeof(Value));
      return Value(std::move(d));
    }
    case ExprKind::getattr: {
      const auto& g = static_cast<const GetattrExpr&>(e);
      return get_attr(eval(*g.object), g.attribute);
    }
    case ExprKind::getitem: {
      const auto& g = static_cast<const GetitemExpr&>(e);
      const Value object = eval(*g.object);
      return get_item(object, eval(*g.index));
    }
    case ExprKind::slice: {
      const auto& sl = static_cast<const SliceExpr&>(e);
      const Value object = eval(*sl.object);
      const Value start = sl.start ? eval(*sl.start) : Value(nullptr);
      const Value stop = sl.stop ? eval(*sl.stop) : Value(nullptr);
      const Value step_value = sl.step ? eval(*sl.step) : Value(nullptr);
      return slice(object, start, stop, step_value);
    }
    case ExprKind::call:
      return eval_call(static_cast<const CallExpr&>(e));
    case ExprKind::filter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      const Value input = f.input ? eval(*f.input) : Value();
      const CallArgs args = eval_args(f.args);
      step();
      if (!f.fn) runtime_error(fmt::format("no filter named '{}'", f.name));
      return f.fn(*this, input, args);
    }
    case ExprKind::test: {
      const auto& t = static_cast<const TestExpr&>(e);
      const Value input = eval(*t.input);
      const CallArgs args = eval_args(t.args);
      if (!t.fn) runtime_error(fmt::format("no test named '{}'", t.name));
      return t.fn(*this, input, args);
    }
    case ExprKind::negate:
    case ExprKind::plus: {
      const Value v = eval(*static_cast<const UnaryExpr&>(e).operand);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) {
        runtime_error(fmt::format("bad operand type for unary {}: '{}'",
                                  e.kind == ExprKind::negate ? '-' : '+', type_name(v)));
      }
      if (e.kind == ExprKind::plus) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return -v.as_double();
      if (v.as_int() == INT64_MIN) runtime_error("integer overflow");
      return -v.as_int();
    }
    case ExprKind::logical_not:
      return !truthy(eval(*static_cast<const UnaryExpr&>(e).operand));
    case ExprKind::binary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      const Value left = eval(*b.left);
      return binary(b.op, left, eval(*b.right));
    }
    case ExprKind::logical_and: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value left = eval(*b.left);
      return truthy(left) ? eval(*b.right) : left;
    }
    case ExprKind::logical_or: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value left = eval(*b.left);
      return truthy(left) ? left : eval(*b.right);
    }
    case ExprKind::compare: {
      const auto& c = static_cast<const CompareExpr&>(e);
      Value left = eval(*c.first);
      for (const auto& [op, expr] : c.rest) {
        Value right = eval(*expr);
        if (!compare(op, left, right)) return false;
        left = std::move(right);
      }
      return true;
    }
    case ExprKind::condition: {
      const auto& c = static_cast<const ConditionExpr&>(e);
      if (truthy(eval(*c.test))) return eval(*c.then);
      if (c.otherwise) return eval(*c.otherwise);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section "
          "was defined");
    }
    case ExprKind::concat: {
      std::string s;
      for (const auto& p : static_cast<const ConcatExpr&>(e).parts) {
        const Value v = eval(*p);
        s += v.is_string() ? v.as_string() : to_str(v);
      }
      return make_string(std::move(s));
    }
  }
  return Value();
}

Value Evaluator::apply_filter(std::string_view name, const Value& input, const CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) runtime_error(fmt::format("no filter named '{}'", name));
  step();
  return fn(*this, input, args);
}

bool Evaluator::apply_test(std::string_view name, const Value& input, const CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) runtime_error(fmt::format("no test named '{}'", name));
  return fn(*this, input, args);
}

}  // namespace ridge::tokenizer::jinja
