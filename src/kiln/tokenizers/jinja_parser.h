#pragma once
// Recursive-descent parser for the Jinja subset chat templates use, with
// jinja2's grammar and operator precedence (parser.py). Filter and test names
// are checked here, as jinja2 checks them when it compiles a template.
#include <vector>

#include "kiln/tokenizers/jinja_ast.h"
#include "kiln/tokenizers/jinja_lexer.h"

namespace kiln::tokenizers::jinja {

// Throws kiln::Error "name:line:col: message" on a syntax error.
Body parse(const Source& source, const std::vector<Token>& tokens);

}  // namespace kiln::tokenizers::jinja
