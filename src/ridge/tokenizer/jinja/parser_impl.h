// Internal to the parser (parser.cpp: statements, parser_expressions.cpp: expressions): the
// recursive-descent Parser over the lexer's tokens, following jinja2/parser.py.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ridge/tokenizer/jinja/ast.h"
#include "ridge/tokenizer/jinja/error.h"
#include "ridge/tokenizer/jinja/lexer.h"

namespace ridge::tokenizer::jinja::detail {

using Tags = std::initializer_list<std::string_view>;

inline std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::data:
      return "template data";
    case TokenType::variable_begin:
      return "begin of print statement";
    case TokenType::variable_end:
      return "end of print statement";
    case TokenType::block_begin:
      return "begin of statement block";
    case TokenType::block_end:
      return "end of statement block";
    case TokenType::string:
      return "string";
    case TokenType::integer:
      return "integer";
    case TokenType::floating:
      return "float";
    case TokenType::eof:
      return "end of template";
    case TokenType::name:
    case TokenType::op: {
      std::string quoted = "'";  // appends: "'" + text trips GCC 12's -Wrestrict false positive
      quoted += t.text;
      quoted += '\'';
      return quoted;
    }
  }
  return "token";
}

inline std::string join_tags(Tags tags) {
  std::string out;
  for (auto t : tags) {
    if (!out.empty()) out += " or ";
    out += '\'';
    out += t;
    out += '\'';
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
      if (!u.soft)
        fail_at(u.at, fmt::format("no {} named '{}'", u.is_filter ? "filter" : "test", u.name));
    }
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t k = 1) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::op && cur().text == op; }
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
    if (cur().type != TokenType::name)
      fail(fmt::format("expected a name, got {}", describe(cur())));
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
        parser.fail(
            fmt::format("template nesting too deep (more than {} levels)", parser.max_depth_));
      }
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // ---- statements ----

  // Parses until one of `end_tags` opens a block ({% endfor %}, ...); returns with the cursor on
  // that tag's name. With no end tags, parses to the end of the template.
  Body parse_body(Tags end_tags);

  // expect block end, then the body up to one of `end_tags`.
  Body parse_statements(Tags end_tags);
  struct OpenTag {
    OpenTag(Parser& p, const Token& t) : parser(p) { p.open_tags_.emplace_back(t.text, t.line); }
    ~OpenTag() { parser.open_tags_.pop_back(); }
    Parser& parser;
  };
  void parse_statement(Body& body);
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  void parse_signature(MacroDef& def);
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  StmtPtr parse_scope(const std::string& tag);

  // ---- assignment targets ----

  Target parse_target_item(bool with_namespace);
  Target parse_assign_target(bool with_tuple, Tags extra_end, bool with_namespace);

  // ---- expressions ----

  bool is_tuple_end(Tags extra_end) const;

  // A single expression, or a tuple when commas separate several (Jinja's parse_tuple).
  ExprPtr parse_tuple(bool with_condexpr, Tags extra_end, bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr make_binary(const Token& at, BinaryOp op, ExprPtr left, ExprPtr right);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  void note_special_name(const std::string& name);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr n);
  ExprPtr parse_filter_expr(ExprPtr n);
  ExprPtr parse_subscript(ExprPtr object);
  Arguments parse_call_args();
  ExprPtr parse_call(ExprPtr callee);
  std::string parse_dotted_name();
  ExprPtr parse_filter(ExprPtr input, bool start_inline);
  ExprPtr parse_test(ExprPtr input);
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

}  // namespace ridge::tokenizer::jinja::detail
