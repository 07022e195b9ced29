// UTF-8 and Unicode helpers that give Python str semantics (code points, isspace, case) to byte strings.
#pragma once

#include <string>
#include <string_view>

namespace lmx::jinja::unicode {

// Decodes UTF-8 into code points. Each byte of an invalid sequence decodes to U+DC00 + byte
// (Python's "surrogateescape"), so encode(decode(s)) == s for every byte string.
std::u32string decode(std::string_view text);
// Inverse of decode: U+DC80..U+DCFF become the raw byte again; other code points are UTF-8.
std::string encode(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t code_point);

bool is_ascii(std::string_view text);
// Number of code points (Python len()).
size_t length(std::string_view text);

// Python str predicates on one code point.
bool is_space(char32_t c);      // str.isspace (also what re's \s matches)
bool is_printable(char32_t c);  // str.isprintable
bool is_alpha(char32_t c);
bool is_decimal(char32_t c);  // Unicode Nd
bool is_digit(char32_t c);    // Nd plus No digits (approximation of str.isdigit)
bool is_alnum(char32_t c);
bool is_cased(char32_t c);
bool is_lower(char32_t c);
bool is_upper(char32_t c);

// Simple (one to one) case mappings; Python's few one-to-many mappings (e.g. "ß".upper() ==
// "SS") are not reproduced.
char32_t to_lower(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_title(char32_t c);

std::string lower(std::string_view text);
std::string upper(std::string_view text);

// str.strip/lstrip/rstrip: with chars == nullptr strips whitespace, else any code point in chars.
std::string strip(std::string_view text, const std::string* chars, bool left, bool right);

}  // namespace lmx::jinja::unicode
