// UTF-8 and Unicode helpers for the tokenizer, with the semantics of the Rust char methods that
// HF tokenizers relies on (char::is_whitespace, is_numeric, to_lowercase, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lmx::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point starting at text[pos] of VALID UTF-8 and advances pos past it.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  const auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i]) & 0x3F); };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | byte(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (byte(1) << 6) | byte(2);
    pos += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
    pos += 4;
  }
  return cp;
}

// Byte length of the UTF-8 sequence that starts with lead byte `b0` of valid UTF-8.
inline size_t utf8_length(unsigned char b0) { return b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4; }

void append_utf8(std::string& out, char32_t cp);
std::string utf8_of(char32_t cp);

// Length of the valid UTF-8 sequence starting at bytes[pos] (1 to 4), or 0 when the bytes there
// are not valid UTF-8 (overlong forms, surrogates and code points above U+10FFFF are invalid).
inline size_t valid_sequence_length(std::string_view bytes, size_t pos) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[pos + i]); };
  const unsigned char b0 = at(0);
  if (b0 < 0x80) return 1;
  const size_t left = bytes.size() - pos;
  if (b0 >= 0xC2 && b0 <= 0xDF) return left >= 2 && (at(1) & 0xC0) == 0x80 ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3) return 0;
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    return at(1) >= lo && at(1) <= hi && (at(2) & 0xC0) == 0x80 ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4) return 0;
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return at(1) >= lo && at(1) <= hi && (at(2) & 0xC0) == 0x80 && (at(3) & 0xC0) == 0x80 ? 4 : 0;
  }
  return 0;
}

// Length of the longest prefix of `bytes` that is valid UTF-8.
size_t valid_utf8_prefix(std::string_view bytes);
inline bool is_valid_utf8(std::string_view bytes) { return valid_utf8_prefix(bytes) == bytes.size(); }

// `bytes` with every maximal invalid subsequence replaced by U+FFFD (the Unicode "substitution of
// maximal subparts" practice: what Python's bytes.decode("utf-8", "replace"), Rust's
// String::from_utf8_lossy and WHATWG TextDecoder produce).
std::string to_valid_utf8(std::string_view bytes);

// Rust char::is_whitespace: the Unicode White_Space property.
bool is_whitespace(char32_t cp);
// Rust char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t cp);
// HF's Punctuation pre-tokenizer: ASCII punctuation (incl. symbols like $+<=>^`|~) or category P*.
bool is_punctuation(char32_t cp);
// Word character as in Rust regex \w: alphabetic, marks, Nd, Pc, ZWNJ/ZWJ. Alphabetic is
// approximated by L* and Nl (Other_Alphabetic is not in utf8proc; its members are mostly marks).
bool is_word_char(char32_t cp);
// Unicode combining marks (Mn, Mc, Me), as unicode-normalization's is_combining_mark.
bool is_combining_mark(char32_t cp);

// Rust str::to_lowercase applied per char (no context-dependent final sigma).
std::string to_lowercase(std::string_view text);

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization of valid UTF-8 through utf8proc.
std::string normalize_unicode(std::string_view text, NormalizationForm form);

}  // namespace lmx::text
