// The expression half of the parser: Jinja's precedence climbing from conditional expressions down
// to primaries, postfix subscripts and calls, filters and tests.
#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/parser_impl.h"

namespace ridge::tokenizer::jinja::detail {

ExprPtr Parser::parse_tuple(bool with_condexpr, Tags extra_end, bool explicit_parentheses) {
  const Token& at = cur();
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) {
      fail(fmt::format("expected an expression, got {}", describe(cur())));
    }
  }
  auto t = node<ListExpr>(at);
  t->items = std::move(args);
  t->tuple = true;
  return t;
}

bool Parser::is_tuple_end(Tags extra_end) const {
  const Token& t = cur();
  if (t.type == TokenType::variable_end || t.type == TokenType::block_end || is_op(")")) {
    return true;
  }
  return t.type == TokenType::name &&
         std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  DepthGuard guard(*this);
  const Token& at = cur();
  const size_t first_unknown = unknown_.size();
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    for (size_t i = first_unknown; i < unknown_.size(); ++i) unknown_[i].soft = true;
    SoftRegion soft(*this, true);
    auto c = node<ConditionExpr>(at);
    c->test = parse_or();
    if (skip_name("else")) c->otherwise = parse_condexpr();
    c->then = std::move(expr);
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    auto b = node<BinaryExpr>(cur(), ExprKind::logical_or);
    advance();
    b->left = std::move(left);
    b->right = parse_and();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    auto b = node<BinaryExpr>(cur(), ExprKind::logical_and);
    advance();
    b->left = std::move(left);
    b->right = parse_not();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto n = node<UnaryExpr>(cur(), ExprKind::logical_not);
    advance();
    n->operand = parse_not();
    return n;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Token& at = cur();
  ExprPtr expr = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    CompareOp op;
    if (cur().type == TokenType::op &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      const std::string& t = cur().text;
      op = t == "=="   ? CompareOp::eq
           : t == "!=" ? CompareOp::ne
           : t == "<"  ? CompareOp::lt
           : t == "<=" ? CompareOp::le
           : t == ">"  ? CompareOp::gt
                       : CompareOp::ge;
      advance();
    } else if (is_name("in")) {
      op = CompareOp::in;
      advance();
    } else if (is_name("not") && peek().type == TokenType::name && peek().text == "in") {
      op = CompareOp::not_in;
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = node<CompareExpr>(at);
      cmp->first = std::move(expr);
    }
    cmp->rest.emplace_back(op, parse_math1());
  }
  if (cmp) return cmp;
  return expr;
}

ExprPtr Parser::make_binary(const Token& at, BinaryOp op, ExprPtr left, ExprPtr right) {
  auto b = node<BinaryExpr>(at, ExprKind::binary);
  b->op = op;
  b->left = std::move(left);
  b->right = std::move(right);
  return b;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token at = cur();
    advance();
    left = make_binary(at, at.text == "+" ? BinaryOp::add : BinaryOp::sub, std::move(left),
                       parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const Token& at = cur();
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto c = node<ConcatExpr>(at);
  c->parts.push_back(std::move(first));
  while (skip_op("~")) c->parts.push_back(parse_math2());
  return c;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token at = cur();
    advance();
    const BinaryOp op = at.text == "*"    ? BinaryOp::mul
                        : at.text == "/"  ? BinaryOp::div
                        : at.text == "//" ? BinaryOp::floordiv
                                          : BinaryOp::mod;
    left = make_binary(at, op, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token at = cur();
    advance();
    left = make_binary(at, BinaryOp::pow, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr n;
  if (is_op("-") || is_op("+")) {
    DepthGuard guard(*this);
    auto u = node<UnaryExpr>(cur(), is_op("-") ? ExprKind::negate : ExprKind::plus);
    advance();
    u->operand = parse_unary(false);
    n = std::move(u);
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  if (with_filter) n = parse_filter_expr(std::move(n));
  return n;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  switch (t.type) {
    case TokenType::name: {
      auto c = node<ConstExpr>(t);
      if (t.text == "true" || t.text == "True") {
        c->value = true;
      } else if (t.text == "false" || t.text == "False") {
        c->value = false;
      } else if (t.text == "none" || t.text == "None") {
        c->value = nullptr;
      } else {
        auto n = node<NameExpr>(t);
        n->name = t.text;
        note_special_name(t.text);
        advance();
        return n;
      }
      advance();
      return c;
    }
    case TokenType::string: {
      auto c = node<ConstExpr>(t);
      std::string s;
      while (cur().type == TokenType::string) {
        s += cur().text;
        advance();
      }
      c->value = std::move(s);
      return c;
    }
    case TokenType::integer: {
      auto c = node<ConstExpr>(t);
      c->value = t.int_value;
      advance();
      return c;
    }
    case TokenType::floating: {
      auto c = node<ConstExpr>(t);
      c->value = t.float_value;
      advance();
      return c;
    }
    case TokenType::op:
      if (t.text == "(") {
        DepthGuard guard(*this);
        advance();
        ExprPtr e = parse_tuple(true, {}, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default:
      break;
  }
  fail(fmt::format("unexpected {}", describe(t)));
}

void Parser::note_special_name(const std::string& name) {
  if (macros_.empty()) return;
  if (name == "varargs") macros_.back()->uses_varargs = true;
  if (name == "kwargs") macros_.back()->uses_kwargs = true;
  if (name == "caller") macros_.back()->uses_caller = true;
}

ExprPtr Parser::parse_list() {
  DepthGuard guard(*this);
  auto l = node<ListExpr>(cur());
  expect_op("[");
  while (!is_op("]")) {
    if (!l->items.empty()) expect_op(",");
    if (is_op("]")) break;
    l->items.push_back(parse_expression(true));
  }
  expect_op("]");
  return l;
}

ExprPtr Parser::parse_dict() {
  DepthGuard guard(*this);
  auto d = node<DictExpr>(cur());
  expect_op("{");
  while (!is_op("}")) {
    if (!d->items.empty()) expect_op(",");
    if (is_op("}")) break;
    ExprPtr key = parse_expression(true);
    expect_op(":");
    ExprPtr value = parse_expression(true);
    d->items.emplace_back(std::move(key), std::move(value));
  }
  expect_op("}");
  return d;
}

ExprPtr Parser::parse_postfix(ExprPtr n) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      n = parse_subscript(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      return n;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr n) {
  while (true) {
    if (is_op("|")) {
      n = parse_filter(std::move(n), false);
    } else if (is_name("is")) {
      n = parse_test(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      return n;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr object) {
  const Token at = cur();
  advance();
  if (at.text == ".") {
    const Token& attr = cur();
    if (attr.type == TokenType::name) {
      auto g = node<GetattrExpr>(at);
      g->object = std::move(object);
      g->attribute = attr.text;
      advance();
      return g;
    }
    if (attr.type == TokenType::integer) {
      auto g = node<GetitemExpr>(at);
      g->object = std::move(object);
      auto c = node<ConstExpr>(attr);
      c->value = attr.int_value;
      g->index = std::move(c);
      advance();
      return g;
    }
    fail("expected name or number");
  }
  // "[": an index, a slice, or a tuple of indexes.
  DepthGuard guard(*this);
  std::vector<ExprPtr> indexes;
  std::unique_ptr<SliceExpr> slice;
  while (!is_op("]")) {
    if (!indexes.empty() || slice) expect_op(",");
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) {
        indexes.push_back(std::move(start));
        continue;
      }
    }
    if (slice || !indexes.empty()) fail("multi-dimensional subscripts are not supported");
    slice = node<SliceExpr>(at);
    slice->start = std::move(start);
    advance();  // ':'
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
  }
  expect_op("]");
  if (slice) {
    if (!indexes.empty()) fail_at(at, "multi-dimensional subscripts are not supported");
    slice->object = std::move(object);
    return slice;
  }
  if (indexes.empty()) fail_at(at, "expected subscript expression");
  auto g = node<GetitemExpr>(at);
  g->object = std::move(object);
  if (indexes.size() == 1) {
    g->index = std::move(indexes[0]);
  } else {
    auto t = node<ListExpr>(at);
    t->items = std::move(indexes);
    t->tuple = true;
    g->index = std::move(t);
  }
  return g;
}

Arguments Parser::parse_call_args() {
  DepthGuard guard(*this);
  Arguments args;
  expect_op("(");
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*")) {
      if (args.star_args || args.star_kwargs) fail("invalid syntax for function call expression");
      advance();
      args.star_args = parse_expression(true);
    } else if (is_op("**")) {
      if (args.star_kwargs) fail("invalid syntax for function call expression");
      advance();
      args.star_kwargs = parse_expression(true);
    } else if (cur().type == TokenType::name && peek().type == TokenType::op &&
               peek().text == "=") {
      if (args.star_kwargs) fail("invalid syntax for function call expression");
      std::string key = cur().text;
      advance();
      advance();
      args.keyword.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (args.star_args || args.star_kwargs || !args.keyword.empty()) {
        fail("invalid syntax for function call expression");
      }
      args.positional.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
  return args;
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto c = node<CallExpr>(cur());
  c->args = parse_call_args();
  c->callee = std::move(callee);
  return c;
}

std::string Parser::parse_dotted_name() {
  std::string name = expect_identifier();
  while (skip_op(".")) {
    name += '.';
    name += expect_identifier();
  }
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr input, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const Token at = cur();
    auto f = node<FilterExpr>(at);
    f->name = parse_dotted_name();
    f->fn = find_filter(f->name);
    if (!f->fn) unknown_.push_back({at, f->name, true, soft_});
    if (is_op("(")) f->args = parse_call_args();
    f->input = std::move(input);
    input = std::move(f);
  }
  return input;
}

ExprPtr Parser::parse_test(ExprPtr input) {
  const Token at = cur();
  advance();  // 'is'
  const bool negated = skip_name("not");
  const Token name_at = cur();
  auto t = node<TestExpr>(at);
  t->name = parse_dotted_name();
  t->fn = find_test(t->name);
  if (!t->fn) unknown_.push_back({name_at, t->name, false, soft_});
  if (is_op("(")) {
    t->args = parse_call_args();
  } else if ((cur().type == TokenType::name || cur().type == TokenType::string ||
              cur().type == TokenType::integer || cur().type == TokenType::floating || is_op("(") ||
              is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("you cannot chain multiple tests with is");
    ExprPtr arg = parse_postfix(parse_primary());
    t->args.positional.push_back(std::move(arg));
  }
  t->input = std::move(input);
  if (!negated) return t;
  auto n = node<UnaryExpr>(at, ExprKind::logical_not);
  n->operand = std::move(t);
  return n;
}
}  // namespace ridge::tokenizer::jinja::detail
