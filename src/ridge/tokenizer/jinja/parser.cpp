#include "ridge/tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/builtins.h"
#include "ridge/tokenizer/jinja/error.h"

namespace ridge::tokenizer::jinja {

namespace {

using Tags = std::initializer_list<std::string_view>;

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::data: return "template data";
    case TokenType::variable_begin: return "begin of print statement";
    case TokenType::variable_end: return "end of print statement";
    case TokenType::block_begin: return "begin of statement block";
    case TokenType::block_end: return "end of statement block";
    case TokenType::string: return "string";
    case TokenType::integer: return "integer";
    case TokenType::floating: return "float";
    case TokenType::eof: return "end of template";
    case TokenType::name:
    case TokenType::op: return "'" + t.text + "'";
  }
  return "token";
}

std::string join_tags(Tags tags) {
  std::string out;
  for (auto t : tags) {
    if (!out.empty()) out += " or ";
    out += "'" + std::string(t) + "'";
  }
  return out;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  Body parse_template() {
    Body body = parse_body({});
    // Jinja checks filter and test names when compiling, except inside an if statement or a
    // conditional expression, where an unknown name fails only if it is reached.
    for (const Unknown& u : unknown_) {
      if (!u.soft) fail_at(u.at, fmt::format("no {} named '{}'", u.is_filter ? "filter" : "test", u.name));
    }
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t k = 1) const {
    return tokens_[std::min(pos_ + k, tokens_.size() - 1)];
  }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const {
    return cur().type == TokenType::op && cur().text == op;
  }
  bool is_name(std::string_view name) const {
    return cur().type == TokenType::name && cur().text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const std::string& message) const { fail_at(cur(), message); }
  [[noreturn]] static void fail_at(const Node& n, const std::string& message) {
    throw TemplateError(TemplateError::Kind::syntax, message, n.line, n.column);
  }
  [[noreturn]] static void fail_at(const Token& t, const std::string& message) {
    throw TemplateError(TemplateError::Kind::syntax, message, t.line, t.column);
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) fail(fmt::format("expected '{}', got {}", name, describe(cur())));
  }
  std::string expect_identifier() {
    if (cur().type != TokenType::name) fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string name = cur().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (cur().type != TokenType::block_end) {
      fail(fmt::format("expected end of statement block, got {}", describe(cur())));
    }
    advance();
  }

  template <typename T>
  std::unique_ptr<T> node(const Token& at) {
    auto n = std::make_unique<T>();
    n->line = at.line;
    n->column = at.column;
    return n;
  }
  template <typename T, typename K>
  std::unique_ptr<T> node(const Token& at, K kind) {
    auto n = std::make_unique<T>(kind);
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > parser.max_depth_) {
        parser.fail(fmt::format("template nesting too deep (more than {} levels)",
                                parser.max_depth_));
      }
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // ---- statements ----

  // Parses until one of `end_tags` opens a block ({% endfor %}, ...); returns with the cursor on
  // that tag's name. With no end tags, parses to the end of the template.
  Body parse_body(Tags end_tags) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::data: {
          auto d = node<DataStmt>(t);
          d->text = t.text;
          body.push_back(std::move(d));
          advance();
          break;
        }
        case TokenType::variable_begin: {
          auto out = node<OutputStmt>(t);
          advance();
          out->expr = parse_tuple(false, true, {}, false);
          if (cur().type != TokenType::variable_end) {
            fail(fmt::format("expected end of print statement, got {}", describe(cur())));
          }
          advance();
          body.push_back(std::move(out));
          break;
        }
        case TokenType::block_begin: {
          const Token& tag = peek();
          if (tag.type == TokenType::name &&
              std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
            advance();
            return body;
          }
          advance();
          parse_statement(body);
          break;
        }
        case TokenType::eof:
          if (end_tags.size() != 0) {
            std::string msg = "unexpected end of template, expected " + join_tags(end_tags);
            if (!open_tags_.empty()) {
              msg += fmt::format(" to close the '{}' at line {}", open_tags_.back().first,
                                 open_tags_.back().second);
            }
            fail(msg);
          }
          return body;
        default: fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // expect block end, then the body up to one of `end_tags`.
  Body parse_statements(Tags end_tags) {
    expect_block_end();
    return parse_body(end_tags);
  }

  struct OpenTag {
    OpenTag(Parser& p, const Token& t) : parser(p) { p.open_tags_.emplace_back(t.text, t.line); }
    ~OpenTag() { parser.open_tags_.pop_back(); }
    Parser& parser;
  };

  void parse_statement(Body& body) {
    const Token& t = cur();
    if (t.type != TokenType::name) fail("tag name expected");
    OpenTag open(*this, t);
    const std::string& tag = t.text;
    if (tag == "for") {
      body.push_back(parse_for());
    } else if (tag == "if") {
      body.push_back(parse_if());
    } else if (tag == "set") {
      body.push_back(parse_set());
    } else if (tag == "macro") {
      body.push_back(parse_macro());
    } else if (tag == "call") {
      body.push_back(parse_call_block());
    } else if (tag == "filter") {
      body.push_back(parse_filter_block());
    } else if (tag == "with") {
      body.push_back(parse_with());
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      body.push_back(node<LoopControlStmt>(t, tag == "break" ? StmtKind::break_
                                                              : StmtKind::continue_));
      advance();
      expect_block_end();
    } else if (tag == "generation" || tag == "block") {
      body.push_back(parse_scope(tag));
    } else if (tag == "print") {
      auto out = node<OutputStmt>(t);
      advance();
      out->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      body.push_back(std::move(out));
    } else if (tag == "include" || tag == "extends" || tag == "import" || tag == "from") {
      fail(fmt::format("'{}' is not supported: chat templates are rendered on their own", tag));
    } else {
      fail(fmt::format("unknown tag '{}'", tag));
    }
  }

  StmtPtr parse_for() {
    SoftRegion soft(*this, false);
    auto s = node<ForStmt>(cur());
    advance();
    s->target = parse_assign_target(true, {"in"}, false);
    expect_name("in");
    s->iterable = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"});
    --loop_depth_;
    if (is_name("else")) {
      advance();
      s->otherwise = parse_statements({"endfor"});
    }
    advance();  // endfor
    expect_block_end();
    return s;
  }

  StmtPtr parse_if() {
    SoftRegion soft(*this, true);
    auto s = node<IfStmt>(cur());
    advance();
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        s->otherwise = parse_statements({"endif"});
      }
      advance();  // endif
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_set() {
    const Token& at = cur();
    advance();
    Target target = parse_assign_target(true, {}, true);
    if (skip_op("=")) {
      auto s = node<SetStmt>(at);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    SoftRegion soft(*this, false);
    auto s = node<SetBlockStmt>(at);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  void parse_signature(MacroDef& def) {
    expect_op("(");
    while (!is_op(")")) {
      if (!def.params.empty()) expect_op(",");
      if (is_op(")")) break;
      def.params.push_back(expect_identifier());
      if (skip_op("=")) {
        def.defaults.push_back(parse_expression(true));
      } else if (!def.defaults.empty()) {
        fail("non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    SoftRegion soft(*this, false);
    auto s = node<MacroStmt>(cur());
    advance();
    s->def = std::make_shared<MacroDef>();
    s->def->name = expect_identifier();
    parse_signature(*s->def);
    macros_.push_back(s->def.get());
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    s->def->body = parse_statements({"endmacro"});
    loop_depth_ = saved_loop_depth;
    macros_.pop_back();
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    SoftRegion soft(*this, false);
    auto s = node<CallBlockStmt>(cur());
    advance();
    s->caller = std::make_shared<MacroDef>();
    s->caller->name = "caller";
    if (is_op("(")) parse_signature(*s->caller);
    const Token& call_at = cur();
    s->call = parse_expression(true);
    if (s->call->kind != ExprKind::call) fail_at(call_at, "expected a call");
    macros_.push_back(s->caller.get());
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    s->caller->body = parse_statements({"endcall"});
    loop_depth_ = saved_loop_depth;
    macros_.pop_back();
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    SoftRegion soft(*this, false);
    auto s = node<FilterBlockStmt>(cur());
    advance();
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    SoftRegion soft(*this, false);
    auto s = node<WithStmt>(cur());
    advance();
    while (cur().type != TokenType::block_end) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(true, {}, false));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_scope(const std::string& tag) {
    auto s = node<ScopeStmt>(cur());
    advance();
    std::string name;
    if (tag == "block") {
      name = expect_identifier();
      skip_name("scoped");
      skip_name("required");
    }
    const std::string end = "end" + tag;
    s->body = parse_statements({end});
    advance();
    if (tag == "block" && cur().type == TokenType::name && cur().text == name) advance();
    expect_block_end();
    return s;
  }

  // ---- assignment targets ----

  Target parse_target_item(bool with_namespace) {
    if (skip_op("(")) {
      Target t;
      t.kind = Target::Kind::tuple;
      while (!is_op(")")) {
        if (!t.items.empty()) expect_op(",");
        if (is_op(")")) break;
        t.items.push_back(parse_target_item(false));
      }
      expect_op(")");
      if (t.items.size() == 1) return std::move(t.items[0]);
      return t;
    }
    if (cur().type != TokenType::name) fail(fmt::format("can't assign to {}", describe(cur())));
    Target t;
    t.name = cur().text;
    if (t.name == "true" || t.name == "false" || t.name == "none" || t.name == "True" ||
        t.name == "False" || t.name == "None") {
      fail(fmt::format("can't assign to '{}'", t.name));
    }
    advance();
    if (with_namespace && is_op(".")) {
      advance();
      t.kind = Target::Kind::attribute;
      t.attribute = expect_identifier();
    }
    return t;
  }

  Target parse_assign_target(bool with_tuple, Tags extra_end, bool with_namespace) {
    Target first = parse_target_item(with_namespace);
    if (!with_tuple || !is_op(",")) return first;
    Target t;
    t.kind = Target::Kind::tuple;
    t.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_tuple_end(extra_end) || is_op("=")) break;
      t.items.push_back(parse_target_item(with_namespace));
    }
    return t;
  }

  // ---- expressions ----

  bool is_tuple_end(Tags extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::variable_end || t.type == TokenType::block_end || is_op(")")) {
      return true;
    }
    return t.type == TokenType::name &&
           std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  }

  ExprPtr parse_tuple(bool /*simplified*/, bool with_condexpr, Tags extra_end,
                      bool explicit_parentheses) {
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

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
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

  ExprPtr parse_or() {
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

  ExprPtr parse_and() {
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

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto n = node<UnaryExpr>(cur(), ExprKind::logical_not);
      advance();
      n->operand = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr expr = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      CompareOp op;
      if (cur().type == TokenType::op && (cur().text == "==" || cur().text == "!=" ||
                                          cur().text == "<" || cur().text == "<=" ||
                                          cur().text == ">" || cur().text == ">=")) {
        const std::string& t = cur().text;
        op = t == "==" ? CompareOp::eq
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

  ExprPtr make_binary(const Token& at, BinaryOp op, ExprPtr left, ExprPtr right) {
    auto b = node<BinaryExpr>(at, ExprKind::binary);
    b->op = op;
    b->left = std::move(left);
    b->right = std::move(right);
    return b;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      advance();
      left = make_binary(at, at.text == "+" ? BinaryOp::add : BinaryOp::sub, std::move(left),
                         parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = node<ConcatExpr>(at);
    c->parts.push_back(std::move(first));
    while (skip_op("~")) c->parts.push_back(parse_math2());
    return c;
  }

  ExprPtr parse_math2() {
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

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token at = cur();
      advance();
      left = make_binary(at, BinaryOp::pow, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  void note_special_name(const std::string& name) {
    if (macros_.empty()) return;
    if (name == "varargs") macros_.back()->uses_varargs = true;
    if (name == "kwargs") macros_.back()->uses_kwargs = true;
    if (name == "caller") macros_.back()->uses_caller = true;
  }

  ExprPtr parse_list() {
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

  ExprPtr parse_dict() {
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

  ExprPtr parse_postfix(ExprPtr n) {
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

  ExprPtr parse_filter_expr(ExprPtr n) {
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

  ExprPtr parse_subscript(ExprPtr object) {
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

  Arguments parse_call_args() {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node<CallExpr>(cur());
    c->args = parse_call_args();
    c->callee = std::move(callee);
    return c;
  }

  std::string parse_dotted_name() {
    std::string name = expect_identifier();
    while (skip_op(".")) name += "." + expect_identifier();
    return name;
  }

  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr input) {
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
                cur().type == TokenType::integer || cur().type == TokenType::floating ||
                is_op("(") || is_op("[") || is_op("{")) &&
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

  struct Unknown {
    Token at;
    std::string name;
    bool is_filter;
    bool soft;
  };
  // Sets soft_ for a region (an if statement: true; a scope of its own: false).
  struct SoftRegion {
    SoftRegion(Parser& p, bool soft) : parser(p), saved(p.soft_) { p.soft_ = soft; }
    ~SoftRegion() { parser.soft_ = saved; }
    Parser& parser;
    bool saved;
  };

  std::vector<Unknown> unknown_;
  bool soft_ = false;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;
  std::vector<std::pair<std::string, int>> open_tags_;  // tag name, line
};

}  // namespace

Body parse(std::vector<Token> tokens, int max_depth) {
  return Parser(std::move(tokens), max_depth).parse_template();
}

}  // namespace ridge::tokenizer::jinja
