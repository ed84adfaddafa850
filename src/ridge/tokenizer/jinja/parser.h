// Parser: tokens -> syntax tree, following Jinja's grammar (jinja2/parser.py) and operator
// precedence. Filters and tests are resolved by name here, so an unknown filter or test is a
// syntax error, as in Jinja (which checks them when compiling).
#pragma once

#include <vector>

#include "ridge/tokenizer/jinja/ast.h"
#include "ridge/tokenizer/jinja/lexer.h"

namespace ridge::tokenizer::jinja {

// Throws TemplateError(syntax) with the line and column of the offending token. `max_depth`
// bounds the nesting of blocks and expressions (so a hostile template cannot exhaust the stack).
Body parse(std::vector<Token> tokens, int max_depth);

}  // namespace ridge::tokenizer::jinja
