// Jinja lexer: splits template source into data and tag tokens with Jinja2's whitespace rules.
#include "lmx/text/jinja/lexer.h"

#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace lmx::jinja {
namespace {

bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}

// Decodes the code point at `pos`; returns its byte length (1 for an invalid byte).
size_t code_point_at(std::string_view s, size_t pos, char32_t* out) {
  unsigned char b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    *out = b0;
    return 1;
  }
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 1;
  if (len == 1 || pos + len > s.size()) {
    *out = 0xDC00 + b0;
    return 1;
  }
  std::u32string decoded = unicode::decode(s.substr(pos, len));
  if (decoded.size() != 1) {
    *out = 0xDC00 + b0;
    return 1;
  }
  *out = decoded[0];
  return len;
}

// Byte length of the whitespace code point at pos, or 0.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  char32_t c;
  size_t len = code_point_at(s, pos, &c);
  return unicode::is_space(c) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t len = space_at(s, pos)) pos += len;
  return pos;
}

bool all_spaces(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = space_at(s, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

// Python str.rstrip() on UTF-8 text.
std::string_view rstrip_spaces(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    char32_t c;
    size_t len = code_point_at(s, start, &c);
    if (start + len != end) {  // invalid tail byte: look at it alone
      c = 0xDC00 + static_cast<unsigned char>(s[end - 1]);
      start = end - 1;
    }
    if (!unicode::is_space(c)) break;
    end = start;
  }
  return s.substr(0, end);
}

bool is_name_start(std::string_view s, size_t pos, size_t* len) {
  unsigned char b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) {
    *len = 1;
    return ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') || b == '_';
  }
  char32_t c;
  *len = code_point_at(s, pos, &c);
  return unicode::is_alpha(c);
}

bool is_name_continue(std::string_view s, size_t pos, size_t* len) {
  if (is_name_start(s, pos, len)) return true;
  unsigned char b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) return is_ascii_digit(static_cast<char>(b));
  char32_t c;
  *len = code_point_at(s, pos, &c);
  return unicode::is_alnum(c) || (c >= 0x300 && c <= 0x36F);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(const std::string& source, const LexerOptions& options) : src_(source), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t open = find_tag_open(pos);
      if (open == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char sign = open + 2 < n && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      size_t raw_end = kind == '%' ? match_raw_begin(open) : 0;
      std::string_view text = std::string_view(src_).substr(pos, open - pos);
      text = control_whitespace(text, sign, kind != '{', line_starting);
      emit_data(pos, text);
      line_starting = false;
      size_t after_open = open + 2 + (sign ? 1 : 0);
      if (raw_end) {
        line_starting = src_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(open, after_open, &line_starting);
      } else {
        pos = lex_tag(open, after_open, kind == '%', &line_starting);
      }
    }
    Token eof;
    eof.type = TokenType::kEof;
    locate(src_.size(), &eof);
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  void locate(size_t offset, Token* token) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    token->line = static_cast<int>(line_index + 1);
    token->column = static_cast<int>(offset - line_starts_[line_index] + 1);
  }

  [[noreturn]] void fail(const std::string& reason, size_t offset) const {
    Token where;
    locate(offset, &where);
    throw TemplateError(reason, where.line, where.column, source_line(src_, where.line));
  }

  void push(TokenType type, size_t offset, std::string value = {}) {
    Token token;
    token.type = type;
    token.value = std::move(value);
    locate(offset, &token);
    tokens_.push_back(std::move(token));
  }

  void emit_data(size_t offset, std::string_view text) {
    if (!text.empty()) push(TokenType::kData, offset, std::string(text));
  }

  size_t find_tag_open(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  // Applies "-" (strip all whitespace before the tag) or lstrip_blocks (strip spaces between
  // the line start and a block or comment tag) to the text preceding a tag.
  std::string_view control_whitespace(std::string_view text, char sign, bool is_block_or_comment,
                                      bool line_starting) const {
    if (sign == '-') return rstrip_spaces(text);
    if (sign != '+' && options_.lstrip_blocks && is_block_or_comment) {
      size_t newline = text.rfind('\n');
      size_t l_pos = newline == std::string_view::npos ? 0 : newline + 1;
      if (l_pos > 0 || line_starting) {
        std::string_view tail = text.substr(l_pos);
        if (!tail.empty() && all_spaces(tail)) return text.substr(0, l_pos);
      }
    }
    return text;
  }

  // Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at `open`; returns the end offset or 0.
  size_t match_raw_begin(size_t open) const {
    size_t p = open + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return 0;
    p = skip_spaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return skip_spaces(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  // Lexes `(.*?){%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)`; the text before becomes data.
  size_t lex_raw(size_t pos, bool* line_starting) {
    size_t search = pos;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) fail("Missing end of raw directive", pos);
      size_t p = open + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_spaces(src_, p);
      if (src_.compare(p, 6, "endraw") == 0) {
        p = skip_spaces(src_, p + 6);
        size_t end = block_end_at(p);
        if (end) {
          std::string_view text = std::string_view(src_).substr(pos, open - pos);
          emit_data(pos, control_whitespace(text, sign, true, *line_starting));
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      search = open + 2;
    }
  }

  // Matches a block end (`+%}`, `-%}\s*`, `%}` plus one newline under trim_blocks) at p.
  size_t block_end_at(size_t p) const {
    if (src_.compare(p, 3, "+%}") == 0) return p + 3;
    if (src_.compare(p, 3, "-%}") == 0) return skip_spaces(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
      if (options_.trim_blocks && p < src_.size() && src_[p] == '\n') ++p;
      return p;
    }
    return 0;
  }

  size_t lex_comment(size_t open, size_t pos, bool* line_starting) {
    for (size_t p = pos; p < src_.size(); ++p) {
      size_t end = 0;
      if (src_.compare(p, 3, "+#}") == 0) {
        end = p + 3;
      } else if (src_.compare(p, 3, "-#}") == 0) {
        end = skip_spaces(src_, p + 3);
      } else if (src_.compare(p, 2, "#}") == 0) {
        end = p + 2;
        if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      }
      if (end) {
        *line_starting = src_[end - 1] == '\n';
        return end;
      }
    }
    fail("Missing end of comment tag", open);
  }

  size_t lex_tag(size_t open, size_t pos, bool is_block, bool* line_starting) {
    push(is_block ? TokenType::kBlockBegin : TokenType::kVariableBegin, open);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (pos < n) {
      if (balance.empty()) {
        size_t end = 0;
        if (is_block) {
          end = block_end_at(pos);
        } else if (src_.compare(pos, 3, "-}}") == 0) {
          end = skip_spaces(src_, pos + 3);
        } else if (src_.compare(pos, 2, "}}") == 0) {
          end = pos + 2;
        }
        if (end) {
          push(is_block ? TokenType::kBlockEnd : TokenType::kVariableEnd, pos);
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      if (size_t len = space_at(src_, pos)) {
        pos = skip_spaces(src_, pos + len);
        continue;
      }
      if (size_t end = lex_number(pos)) {
        pos = end;
        continue;
      }
      size_t name_len;
      if (is_name_start(src_, pos, &name_len)) {
        size_t end = pos + name_len;
        while (end < n && is_name_continue(src_, end, &name_len)) end += name_len;
        push(TokenType::kName, pos, src_.substr(pos, end - pos));
        pos = end;
        continue;
      }
      char c = src_[pos];
      if (c == '\'' || c == '"') {
        if (size_t end = lex_string(pos)) {
          pos = end;
          continue;
        }
      }
      if (size_t end = lex_operator(pos, &balance)) {
        pos = end;
        continue;
      }
      char32_t cp;
      code_point_at(src_, pos, &cp);
      std::string shown;
      unicode::append_utf8(shown, cp);
      // Jinja's message: the character's Python repr and its code-point offset in the source.
      fail("unexpected char " + string_repr(shown) + " at " +
               std::to_string(unicode::length(std::string_view(src_).substr(0, pos))),
           pos);
    }
    return pos;  // end of source inside a tag: the parser reports the missing end
  }

  // Digits with single underscores between groups: (\d+_)*\d+. Returns the end or pos.
  size_t digits(size_t pos) const {
    size_t p = pos;
    if (p >= src_.size() || !is_ascii_digit(src_[p])) return pos;
    while (p < src_.size() && is_ascii_digit(src_[p])) ++p;
    while (p + 1 < src_.size() && src_[p] == '_' && is_ascii_digit(src_[p + 1])) {
      ++p;
      while (p < src_.size() && is_ascii_digit(src_[p])) ++p;
    }
    return p;
  }

  size_t exponent(size_t pos) const {
    if (pos >= src_.size() || (src_[pos] != 'e' && src_[pos] != 'E')) return 0;
    size_t p = pos + 1;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    size_t end = digits(p);
    return end == p ? 0 : end;
  }

  static std::string without_underscores(std::string_view s) {
    std::string out;
    for (char c : s)
      if (c != '_') out.push_back(c);
    return out;
  }

  size_t lex_number(size_t pos) {
    if (!is_ascii_digit(src_[pos])) return 0;
    // Float first, as Jinja's rule order has it: int part, then fraction and/or exponent.
    if (pos == 0 || src_[pos - 1] != '.') {
      size_t int_end = digits(pos);
      size_t end = 0;
      if (int_end < src_.size() && src_[int_end] == '.' && digits(int_end + 1) != int_end + 1) {
        size_t frac_end = digits(int_end + 1);
        size_t exp_end = exponent(frac_end);
        end = exp_end ? exp_end : frac_end;
      } else if (size_t exp_end = exponent(int_end)) {
        end = exp_end;
      }
      if (end) {
        Token token;
        token.type = TokenType::kFloat;
        token.value = src_.substr(pos, end - pos);
        token.float_value = std::strtod(without_underscores(token.value).c_str(), nullptr);
        locate(pos, &token);
        tokens_.push_back(std::move(token));
        return end;
      }
    }
    // Integer: 0b/0o/0x prefixed, [1-9](_?\d)*, or 0(_?0)*.
    size_t end = pos;
    int base = 10;
    auto group = [&](size_t p, auto accept) {
      size_t q = p;
      while (true) {
        size_t r = q;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (r < src_.size() && accept(src_[r])) {
          q = r + 1;
        } else {
          return q;
        }
      }
    };
    char next = pos + 1 < src_.size() ? static_cast<char>(src_[pos + 1] | 0x20) : 0;
    if (src_[pos] == '0' && (next == 'b' || next == 'o' || next == 'x')) {
      base = next == 'b' ? 2 : next == 'o' ? 8 : 16;
      size_t after = group(pos + 2, [&](char c) { return hex_value(c) >= 0 && hex_value(c) < base; });
      if (after > pos + 2) end = after;
    }
    if (end == pos) {
      base = 10;
      if (src_[pos] == '0') {
        end = group(pos + 1, [](char c) { return c == '0'; });
      } else {
        end = group(pos + 1, [](char c) { return is_ascii_digit(c); });
      }
    }
    Token token;
    token.type = TokenType::kInteger;
    token.value = src_.substr(pos, end - pos);
    locate(pos, &token);
    std::string clean = without_underscores(token.value);
    size_t skip = base == 10 ? 0 : 2;
    unsigned __int128 value = 0;
    for (size_t i = skip; i < clean.size(); ++i) {
      value = value * static_cast<unsigned>(base) + static_cast<unsigned>(hex_value(clean[i]));
      if (value > static_cast<unsigned __int128>(INT64_MAX)) fail("integer literal too large", pos);
    }
    token.int_value = static_cast<int64_t>(value);
    tokens_.push_back(std::move(token));
    return end;
  }

  // A quoted string with Python unicode-escape semantics; returns 0 if unterminated.
  size_t lex_string(size_t pos) {
    char quote = src_[pos];
    size_t p = pos + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) return 0;
    push(TokenType::kString, pos, unescape(std::string_view(src_).substr(pos + 1, p - pos - 1), pos));
    return p + 1;
  }

  std::string unescape(std::string_view body, size_t offset) const {
    std::string out;
    out.reserve(body.size());
    for (size_t i = 0; i < body.size(); ++i) {
      char c = body[i];
      if (c != '\\' || i + 1 >= body.size()) {
        out.push_back(c);
        continue;
      }
      char e = body[++i];
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t value = 0;
          for (size_t k = 0; k < count; ++k) {
            int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
            if (h < 0) fail(std::string("truncated \\") + e + " escape in string literal", offset);
            value = value * 16 + static_cast<char32_t>(h);
          }
          if (value > 0x10FFFF) fail("illegal Unicode character in string literal", offset);
          unicode::append_utf8(out, value);
          i += count;
          break;
        }
        case 'N':
          fail("\\N{...} escapes are not supported in string literals", offset);
        default:
          if (e >= '0' && e <= '7') {
            char32_t value = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              value = value * 8 + static_cast<char32_t>(body[++i] - '0');
            unicode::append_utf8(out, value);
          } else {
            out.push_back('\\');  // unknown escapes keep their backslash, as in Python
            out.push_back(e);
          }
      }
    }
    return out;
  }

  size_t lex_operator(size_t pos, std::vector<char>* balance) {
    static const char* const kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoChar) {
      if (src_.compare(pos, 2, op) == 0) {
        push(TokenType::kOperator, pos, op);
        return pos + 2;
      }
    }
    char c = src_[pos];
    if (!std::strchr("+-/*%~[](){}><=.:|,;", c) || c == 0) return 0;
    if (c == '{' || c == '(' || c == '[') {
      balance->push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
    } else if (c == '}' || c == ')' || c == ']') {
      if (balance->empty()) fail(std::string("unexpected '") + c + "'", pos);
      char expected = balance->back();
      balance->pop_back();
      if (expected != c) fail(std::string("unexpected '") + c + "', expected '" + expected + "'", pos);
    }
    push(TokenType::kOperator, pos, std::string(1, c));
    return pos + 1;
  }

  const std::string& src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_template_source(const std::string& source, const LexerOptions& options) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(c);
    }
  }
  if (!options.keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& normalized_source, const LexerOptions& options) {
  return Lexer(normalized_source, options).run();
}

std::string source_line(const std::string& normalized_source, int line) {
  size_t start = 0;
  for (int l = 1; l < line; ++l) {
    start = normalized_source.find('\n', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  size_t end = normalized_source.find('\n', start);
  std::string text =
      normalized_source.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

}  // namespace lmx::jinja
