// Jinja lexer: splits template source into data and tag tokens with Jinja2's whitespace rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmx::jinja {

enum class TokenType : uint8_t {
  kData,           // literal template text (already whitespace-controlled)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,  // value holds the operator text: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;  // data text, name, unescaped string literal or operator text
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
};

// Environment settings that change lexing. ChatTemplate uses transformers' settings:
// trim_blocks and lstrip_blocks on, keep_trailing_newline off.
struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// The source with newlines normalized to "\n" and (unless keep_trailing_newline) one trailing
// newline removed, exactly as Jinja2 prepares it. Token positions refer to this text.
std::string normalize_template_source(const std::string& source, const LexerOptions& options);

// Tokenizes normalized source (see normalize_template_source). Throws TemplateError with the
// position on an unterminated comment or raw block, a bad string escape, an over-long integer
// literal, or a character that starts no token inside a tag. Comments produce no tokens. The
// last token is always kEof.
std::vector<Token> tokenize(const std::string& normalized_source, const LexerOptions& options);

// The 1-based source line `line` of normalized source, without its newline, for error snippets.
std::string source_line(const std::string& normalized_source, int line);

}  // namespace lmx::jinja
