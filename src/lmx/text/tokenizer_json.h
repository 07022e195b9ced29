// A fast forward-only JSON reader for the large parts of tokenizer.json (the BPE vocab and merges),
// which a DOM parser would take far too long to build; small parts are handed to nlohmann::json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmx::text {

// Reads one JSON text in place. Every error throws FormatError naming the file, the byte offset
// and what was expected. Strings are returned unescaped; the input must be valid UTF-8.
class JsonScanner {
 public:
  JsonScanner(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

  // Next non-whitespace character without consuming it. At the end of the text it throws
  // FormatError "unexpected end of input": every caller expects more.
  char peek();
  void expect(char c);
  // Consumes `null` if it comes next.
  bool consume_null();

  // Reads a string value. The view points into the input when the string has no escapes, else
  // into `scratch`; it is valid until the next call that uses the same scratch.
  std::string_view read_string(std::string& scratch);
  // Reads an integer value (no fraction or exponent) in [min, max].
  int64_t read_integer(int64_t min, int64_t max);
  // Skips one value of any kind and returns its raw JSON text.
  std::string_view skip_value();

  // Object members: call begin_object, then next_member until it returns false (at '}'); after it
  // returns true, `key` holds the member name and the value is next.
  void begin_object();
  bool next_member(std::string_view& key, std::string& scratch);
  // Array elements: begin_array, then next_element until false (at ']').
  void begin_array();
  bool next_element();
  // Requires that only whitespace is left.
  void expect_end();

  size_t offset() const { return pos_; }
  const std::string& file() const { return file_; }
  [[noreturn]] void fail(std::string_view what) const;

 private:
  void skip_whitespace();
  void skip_string();

  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  bool first_ = false;  // no member/element read yet in the innermost container being iterated
};

}  // namespace lmx::text
