// JsonScanner: strict, allocation-free scanning of JSON text for the tokenizer loader.
#include "lmx/text/tokenizer_json.h"

#include "lmx/core/error.h"
#include "lmx/text/tokenizer_unicode.h"

#include <cstring>

namespace lmx::text {

void JsonScanner::fail(std::string_view what) const {
  throw FormatError(fmt::format("{}: invalid JSON at byte {}: {}", file_, pos_, what));
}

void JsonScanner::skip_whitespace() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
    ++pos_;
  }
}

char JsonScanner::peek() {
  skip_whitespace();
  // Every caller expects more input: at the end the text was cut short, which is what to report
  // (not that the value that should follow has the wrong type).
  if (pos_ >= text_.size()) fail("unexpected end of input (truncated file?)");
  return text_[pos_];
}

void JsonScanner::expect(char c) {
  if (peek() != c) fail(fmt::format("expected '{}'", c));
  ++pos_;
}

bool JsonScanner::consume_null() {
  if (peek() == 'n' && text_.substr(pos_, 4) == "null") {
    pos_ += 4;
    return true;
  }
  return false;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string_view JsonScanner::read_string(std::string& scratch) {
  if (peek() != '"') fail("expected a string");
  const size_t start = ++pos_;
  // Fast path: no escapes. Skips 8 plain ASCII bytes at a time (none of '"', '\\', < 0x20, >= 0x80).
  while (true) {
    while (pos_ + 8 <= text_.size()) {
      uint64_t w;
      std::memcpy(&w, text_.data() + pos_, 8);
      constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
      const auto has_zero = [](uint64_t x) { return (x - kOnes) & ~x & kHigh; };
      const uint64_t special = has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\')) | ((w - kOnes * 0x20) & ~w & kHigh) | (w & kHigh);
      if (special) break;
      pos_ += 8;
    }
    if (pos_ >= text_.size()) break;
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return text_.substr(start, pos_ - 1 - start);
    }
    if (c == '\\') break;
    if (c < 0x20) fail("control character in string");
    if (c < 0x80) {
      ++pos_;
      continue;
    }
    const size_t len = valid_sequence_length(text_, pos_);
    if (len == 0) fail("invalid UTF-8 in string");
    pos_ += len;
  }
  if (pos_ >= text_.size()) fail("unterminated string");
  scratch.assign(text_.data() + start, pos_ - start);
  while (true) {
    if (pos_ >= text_.size()) fail("unterminated string");
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return scratch;
    }
    if (c < 0x20) fail("control character in string");
    if (c != '\\') {
      const size_t len = c < 0x80 ? 1 : valid_sequence_length(text_, pos_);
      if (len == 0) fail("invalid UTF-8 in string");
      scratch.append(text_.data() + pos_, len);
      pos_ += len;
      continue;
    }
    if (pos_ + 1 >= text_.size()) fail("unterminated escape");
    const char e = text_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case '"': scratch.push_back('"'); break;
      case '\\': scratch.push_back('\\'); break;
      case '/': scratch.push_back('/'); break;
      case 'b': scratch.push_back('\b'); break;
      case 'f': scratch.push_back('\f'); break;
      case 'n': scratch.push_back('\n'); break;
      case 'r': scratch.push_back('\r'); break;
      case 't': scratch.push_back('\t'); break;
      case 'u': {
        const auto read_hex4 = [&]() -> char32_t {
          if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
          char32_t v = 0;
          for (int i = 0; i < 4; ++i) {
            const int h = hex_value(text_[pos_ + i]);
            if (h < 0) fail("bad hex digit in \\u escape");
            v = (v << 4) | static_cast<char32_t>(h);
          }
          pos_ += 4;
          return v;
        };
        char32_t cp = read_hex4();
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (text_.substr(pos_, 2) != "\\u") fail("lone leading surrogate in \\u escape");
          pos_ += 2;
          const char32_t low = read_hex4();
          if (low < 0xDC00 || low > 0xDFFF) fail("invalid trailing surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail("lone trailing surrogate in \\u escape");
        }
        append_utf8(scratch, cp);
        break;
      }
      default:
        fail("invalid escape");
    }
  }
}

int64_t JsonScanner::read_integer(int64_t min, int64_t max) {
  skip_whitespace();
  const size_t start = pos_;
  bool negative = false;
  if (pos_ < text_.size() && text_[pos_] == '-') {
    negative = true;
    ++pos_;
  }
  int64_t value = 0;
  size_t digits = 0;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    if (digits++ > 17) fail("integer out of range");
    value = value * 10 + (text_[pos_] - '0');
    ++pos_;
  }
  if (digits == 0) {
    pos_ = start;
    fail("expected an integer");
  }
  if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
    pos_ = start;
    fail("expected an integer, got a fraction");
  }
  if (negative) value = -value;
  if (value < min || value > max) {
    pos_ = start;
    fail(fmt::format("integer {} out of range [{}, {}]", value, min, max));
  }
  return value;
}

void JsonScanner::skip_string() {
  ++pos_;  // opening quote
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      return;
    }
    pos_ += c == '\\' ? 2 : 1;
  }
  fail("unterminated string");
}

std::string_view JsonScanner::skip_value() {
  const char first = peek();
  const size_t start = pos_;
  if (first == '"') {
    skip_string();
  } else if (first == '{' || first == '[') {
    int depth = 0;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated object or array");
      const char c = text_[pos_];
      if (c == '"') {
        skip_string();
        continue;
      }
      ++pos_;
      if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) break;
      }
    }
  } else if (first == '\0') {
    fail("expected a value");
  } else {
    // A literal or number: up to the next delimiter.
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t') break;
      ++pos_;
    }
    if (pos_ == start) fail("expected a value");
  }
  return text_.substr(start, pos_ - start);
}

void JsonScanner::begin_object() {
  expect('{');
  first_ = true;
}

bool JsonScanner::next_member(std::string_view& key, std::string& scratch) {
  const char c = peek();
  if (c == '}') {
    ++pos_;
    first_ = false;
    return false;
  }
  if (!first_) {
    if (c != ',') fail("expected ',' or '}'");
    ++pos_;
  }
  first_ = false;
  key = read_string(scratch);
  expect(':');
  return true;
}

void JsonScanner::begin_array() {
  expect('[');
  first_ = true;
}

bool JsonScanner::next_element() {
  const char c = peek();
  if (c == ']') {
    ++pos_;
    first_ = false;
    return false;
  }
  if (!first_) {
    if (c != ',') fail("expected ',' or ']'");
    ++pos_;
  }
  first_ = false;
  return true;
}

void JsonScanner::expect_end() {
  skip_whitespace();
  if (pos_ != text_.size()) fail("unexpected data after the JSON value");
}

}  // namespace lmx::text
