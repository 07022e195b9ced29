// Jinja parser: turns lexer tokens into a statement tree, following Jinja2's grammar and precedence.
#pragma once

#include "lmx/text/jinja/ast.h"
#include "lmx/text/jinja/lexer.h"

#include <string>
#include <vector>

namespace lmx::jinja {

// Deepest nesting of blocks and expressions a template may have; deeper input is a TemplateError
// rather than a stack overflow.
inline constexpr int kMaxParseDepth = 200;

// Parses the tokens of `normalized_source` (which is used for error snippets). Throws
// TemplateError with line, column and the source line for syntax errors, unknown tags, filters
// and tests, misplaced break/continue, and Jinja features lmx does not implement (extends,
// include, import, block, recursive loops, ...).
Body parse_template(const std::vector<Token>& tokens, const std::string& normalized_source);

}  // namespace lmx::jinja
