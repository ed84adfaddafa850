// The syntax tree of a parsed template. Expressions and statements are small structs tagged with
// a kind (the evaluator switches on it); every node keeps the line and column it started at.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ridge/tokenizer/jinja/value.h"

namespace ridge::tokenizer::jinja {

struct CallArgs;
class Evaluator;

using FilterFn = Value (*)(Evaluator&, const Value& input, const CallArgs& args);
using TestFn = bool (*)(Evaluator&, const Value& input, const CallArgs& args);

struct Node {
  int line = 0;
  int column = 0;
};

// ---- expressions ---------------------------------------------------------------------------

enum class ExprKind {
  constant,
  name,
  list,  // list or tuple literal
  dict,
  getattr,
  getitem,
  slice,
  call,
  filter,
  test,
  negate,  // unary minus
  plus,    // unary plus
  logical_not,
  binary,
  logical_and,
  logical_or,
  compare,
  condition,  // x if c else y
  concat,     // a ~ b ~ c
};

struct Expr : Node {
  explicit Expr(ExprKind k) : kind(k) {}
  virtual ~Expr() = default;
  ExprKind kind;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr() : Expr(ExprKind::constant) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr() : Expr(ExprKind::name) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr() : Expr(ExprKind::list) {}
  std::vector<ExprPtr> items;
  bool tuple = false;
};

struct DictExpr : Expr {
  DictExpr() : Expr(ExprKind::dict) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetattrExpr : Expr {
  GetattrExpr() : Expr(ExprKind::getattr) {}
  ExprPtr object;
  std::string attribute;
};

struct GetitemExpr : Expr {
  GetitemExpr() : Expr(ExprKind::getitem) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {
  SliceExpr() : Expr(ExprKind::slice) {}
  ExprPtr object;
  ExprPtr start, stop, step;  // each may be null
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr() : Expr(ExprKind::call) {}
  ExprPtr callee;
  Arguments args;
};

struct FilterExpr : Expr {
  FilterExpr() : Expr(ExprKind::filter) {}
  ExprPtr input;  // null for the innermost filter of a {% filter %} or {% set x | f %} block
  std::string name;
  FilterFn fn = nullptr;
  Arguments args;
};

struct TestExpr : Expr {
  TestExpr() : Expr(ExprKind::test) {}
  ExprPtr input;
  std::string name;
  TestFn fn = nullptr;
  Arguments args;
};

struct UnaryExpr : Expr {
  explicit UnaryExpr(ExprKind k) : Expr(k) {}
  ExprPtr operand;
};

enum class BinaryOp { add, sub, mul, div, floordiv, mod, pow };

struct BinaryExpr : Expr {
  explicit BinaryExpr(ExprKind k) : Expr(k) {}
  BinaryOp op = BinaryOp::add;  // for ExprKind::binary
  ExprPtr left, right;
};

enum class CompareOp { eq, ne, lt, le, gt, ge, in, not_in };

struct CompareExpr : Expr {
  CompareExpr() : Expr(ExprKind::compare) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct ConditionExpr : Expr {
  ConditionExpr() : Expr(ExprKind::condition) {}
  ExprPtr test, then, otherwise;  // otherwise may be null (undefined when the test fails)
};

struct ConcatExpr : Expr {
  ConcatExpr() : Expr(ExprKind::concat) {}
  std::vector<ExprPtr> parts;
};

// ---- statements ----------------------------------------------------------------------------

enum class StmtKind {
  data,
  output,
  if_,
  for_,
  set,
  set_block,
  macro,
  call_block,
  filter_block,
  with,
  break_,
  continue_,
  scope,  // a body rendered in place: {% generation %} (HF's extension)
};

struct Stmt : Node {
  explicit Stmt(StmtKind k) : kind(k) {}
  virtual ~Stmt() = default;
  StmtKind kind;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// An assignment target: a name, a tuple of targets, or a namespace attribute (ns.attr).
struct Target {
  enum class Kind { name, tuple, attribute } kind = Kind::name;
  std::string name;       // the name, or the namespace's name
  std::string attribute;  // for Kind::attribute
  std::vector<Target> items;
};

struct DataStmt : Stmt {
  DataStmt() : Stmt(StmtKind::data) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt() : Stmt(StmtKind::output) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  IfStmt() : Stmt(StmtKind::if_) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
};

struct ForStmt : Stmt {
  ForStmt() : Stmt(StmtKind::for_) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // for x in xs if <filter>
  Body body;
  Body otherwise;
};

struct SetStmt : Stmt {
  SetStmt() : Stmt(StmtKind::set) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  SetBlockStmt() : Stmt(StmtKind::set_block) {}
  Target target;
  ExprPtr filter;  // optional filter chain applied to the captured text
  Body body;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

struct MacroStmt : Stmt {
  MacroStmt() : Stmt(StmtKind::macro) {}
  std::shared_ptr<MacroDef> def;
};

struct CallBlockStmt : Stmt {
  CallBlockStmt() : Stmt(StmtKind::call_block) {}
  ExprPtr call;                      // a CallExpr
  std::shared_ptr<MacroDef> caller;  // the body, callable as caller(...)
};

struct FilterBlockStmt : Stmt {
  FilterBlockStmt() : Stmt(StmtKind::filter_block) {}
  ExprPtr filter;
  Body body;
};

struct WithStmt : Stmt {
  WithStmt() : Stmt(StmtKind::with) {}
  std::vector<Target> targets;
  std::vector<ExprPtr> values;
  Body body;
};

struct ScopeStmt : Stmt {
  ScopeStmt() : Stmt(StmtKind::scope) {}
  Body body;
};

struct LoopControlStmt : Stmt {
  explicit LoopControlStmt(StmtKind k) : Stmt(k) {}
};

}  // namespace ridge::tokenizer::jinja
