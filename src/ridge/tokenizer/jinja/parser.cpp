// The statement half of the parser: template data, {{ }} and {% %} blocks with their bodies,
// assignment targets; expressions are in parser_expressions.cpp.
#include "ridge/tokenizer/jinja/parser.h"

#include "ridge/tokenizer/jinja/parser_impl.h"

namespace ridge::tokenizer::jinja {

namespace detail {

Body Parser::parse_body(Tags end_tags) {
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
        out->expr = parse_tuple(true, {}, false);
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
      default:
        fail(fmt::format("unexpected {}", describe(t)));
    }
  }
}

Body Parser::parse_statements(Tags end_tags) {
  expect_block_end();
  return parse_body(end_tags);
}

void Parser::parse_statement(Body& body) {
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
    body.push_back(
        node<LoopControlStmt>(t, tag == "break" ? StmtKind::break_ : StmtKind::continue_));
    advance();
    expect_block_end();
  } else if (tag == "generation" || tag == "block") {
    body.push_back(parse_scope(tag));
  } else if (tag == "print") {
    auto out = node<OutputStmt>(t);
    advance();
    out->expr = parse_tuple(true, {}, false);
    expect_block_end();
    body.push_back(std::move(out));
  } else if (tag == "include" || tag == "extends" || tag == "import" || tag == "from") {
    fail(fmt::format("'{}' is not supported: chat templates are rendered on their own", tag));
  } else {
    fail(fmt::format("unknown tag '{}'", tag));
  }
}

StmtPtr Parser::parse_for() {
  SoftRegion soft(*this, false);
  auto s = node<ForStmt>(cur());
  advance();
  s->target = parse_assign_target(true, {"in"}, false);
  expect_name("in");
  s->iterable = parse_tuple(false, {"recursive"}, false);
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

StmtPtr Parser::parse_if() {
  SoftRegion soft(*this, true);
  auto s = node<IfStmt>(cur());
  advance();
  while (true) {
    ExprPtr cond = parse_tuple(false, {}, false);
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

StmtPtr Parser::parse_set() {
  const Token& at = cur();
  advance();
  Target target = parse_assign_target(true, {}, true);
  if (skip_op("=")) {
    auto s = node<SetStmt>(at);
    s->target = std::move(target);
    s->value = parse_tuple(true, {}, false);
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

void Parser::parse_signature(MacroDef& def) {
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

StmtPtr Parser::parse_macro() {
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

StmtPtr Parser::parse_call_block() {
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

StmtPtr Parser::parse_filter_block() {
  SoftRegion soft(*this, false);
  auto s = node<FilterBlockStmt>(cur());
  advance();
  s->filter = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"});
  advance();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_with() {
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

StmtPtr Parser::parse_scope(const std::string& tag) {
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

Target Parser::parse_target_item(bool with_namespace) {
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

Target Parser::parse_assign_target(bool with_tuple, Tags extra_end, bool with_namespace) {
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

}  // namespace detail

Body parse(std::vector<Token> tokens, int max_depth) {
  return detail::Parser(std::move(tokens), max_depth).parse_template();
}

}  // namespace ridge::tokenizer::jinja
