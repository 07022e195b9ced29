// lmx::JsonObjectConstraint: the byte-level automaton behind constrained decoding of one JSON object
// (OpenAI's response_format json_object). It reads output bytes one at a time and refuses the first byte
// that no JSON object could continue with (RFC 8259 syntax; the top-level value must be an object; bytes >=
// 0x80 are allowed inside strings only). The engine masks every token whose text it would refuse, and ends
// the choice when the object closes.
//
// The same automaton reads Gemma 4's tool-call argument syntax ({key:<|"|>text<|"|>,n:1,list:[…],obj:{…}}):
// keys bare ([A-Za-z_][A-Za-z0-9_.-]*), strings between <|"|> delimiters (the special token's text; any
// bytes inside but the delimiter, no escapes), numbers, true, false and null as in JSON, no whitespace
// outside strings. Every object it accepts whole, parse_gemma4_arguments (server/) parses.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace lmx {

// The syntax a JSON automaton reads: JSON, or Gemma 4's tool-call argument syntax (above), whose strings are
// delimited by kGemma4Quote.
enum class JsonSyntax : uint8_t { kJson, kGemma4 };
inline constexpr std::string_view kGemma4Quote = "<|\"|>";
// The bytes of kGemma4Quote read once its '"' is: from there a text without '"' can complete it.
inline constexpr int kGemma4QuoteQuoted = 3;

// What the JSON automata share: JSON's byte classes, and feeding a text byte by byte with the automaton's
// state restored when a byte is refused.
namespace json_bytes {
inline bool is_space(uint8_t b) {
  return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}
inline bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}
inline bool is_hex(uint8_t b) {
  return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
// Gemma 4's bare keys: [A-Za-z_][A-Za-z0-9_.-]*.
inline bool is_gemma4_key_start(uint8_t b) {
  return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_';
}
inline bool is_gemma4_key_byte(uint8_t b) {
  return is_gemma4_key_start(b) || is_digit(b) || b == '.' || b == '-';
}
inline bool is_gemma4_key(std::string_view key) {
  if (key.empty() || !is_gemma4_key_start(static_cast<uint8_t>(key[0]))) return false;
  for (char c : key)
    if (!is_gemma4_key_byte(static_cast<uint8_t>(c))) return false;
  return true;
}
// Gemma 4's string delimiter read byte by byte. `matched`: the bytes of kGemma4Quote just read. Opening a
// string: false when `b` is not the delimiter's next byte. Inside one: every byte is content, and the result
// says whether `b` completed the delimiter, which ends the string ('<' opens the delimiter and appears
// nowhere else in it, so the count of bytes matched is all the state there is). Both reset `matched` when
// done.
inline bool gemma4_quote_opens(int& matched, uint8_t b) {
  if (b != static_cast<uint8_t>(kGemma4Quote[static_cast<size_t>(matched)])) return false;
  if (++matched == static_cast<int>(kGemma4Quote.size())) matched = 0;
  return true;
}
inline bool gemma4_string_ends(int& matched, uint8_t b) {
  if (b != static_cast<uint8_t>(kGemma4Quote[static_cast<size_t>(matched)])) {
    matched = b == '<' ? 1 : 0;
    return false;
  }
  if (++matched < static_cast<int>(kGemma4Quote.size())) return false;
  matched = 0;
  return true;
}
// `automaton.step(byte)` over `text`; false, with the automaton as it was, when a byte is refused.
template <class Automaton>
bool accept_all(Automaton& automaton, std::string_view text) {
  const Automaton saved = automaton;
  for (char c : text)
    if (!automaton.step(static_cast<uint8_t>(c))) {
      automaton = saved;
      return false;
    }
  return true;
}
}  // namespace json_bytes

class JsonObjectConstraint {
 public:
  explicit JsonObjectConstraint(JsonSyntax syntax = JsonSyntax::kJson) : syntax_(syntax) {}

  // Containers nest at most this deep; runs of whitespace between tokens are at most kMaxWhitespace bytes
  // long (so a model cannot pad forever).
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxWhitespace = 16;

  // Whether every byte of `text` is accepted from the current state (the state does not change).
  bool allows(std::string_view text) const;
  // Advances over `text`; false (state unchanged) when some byte is refused.
  bool accept(std::string_view text);
  JsonSyntax syntax() const { return syntax_; }
  // Whether the object has closed (only whitespace may follow).
  bool complete() const { return state_ == State::kDone; }
  // Whether it is inside a string where any text without '"', '\' or control bytes is accepted (in Gemma 4's
  // syntax: not right after "<|\"", where such a text could complete the delimiter with "|>").
  bool in_string() const { return state_ == State::kString && quote_matched_ < kGemma4QuoteQuoted; }

 private:
  template <class Automaton>
  friend bool json_bytes::accept_all(Automaton&, std::string_view);
  enum class State : uint8_t {
    kStart,            // before the top-level object
    kValue,            // a value must start (after ':' or ',' in an array)
    kArrayFirst,       // after '[': a value or ']'
    kObjectFirst,      // after '{': a key or '}'
    kObjectKey,        // after ',' in an object: a key
    kColon,            // after a key
    kAfterValue,       // after a value inside a container: ',' or the container's close
    kString,           // inside a string
    kBareKey,          // Gemma 4: inside a bare key
    kQuoteOpen,        // Gemma 4: inside an opening <|"|> (quote_matched_ bytes of it read)
    kEscape,           // after a backslash
    kUnicode,          // inside \uXXXX (hex_left_ more digits)
    kNumberSign,       // after '-'
    kNumberZero,       // after a leading 0
    kNumberInt,        // in integer digits
    kNumberDot,        // after '.'
    kNumberFrac,       // in fraction digits
    kNumberExp,        // after 'e'
    kNumberExpSign,    // after the exponent's sign
    kNumberExpDigits,  // in exponent digits
    kLiteral,          // inside true, false or null
    kDone,             // after the top-level object
  };
  bool step(uint8_t byte);
  bool start_value(uint8_t byte);
  bool after_value(uint8_t byte);  // a byte that ends a number (or follows a value) inside a container
  bool whitespace();

  JsonSyntax syntax_;

  State state_ = State::kStart;
  std::array<char, kMaxDepth> stack_{};  // '{' or '[' per open container (a copy is cheap: allows())
  int depth_ = 0;
  bool string_is_key_ = false;
  int hex_left_ = 0;
  const char* literal_ = nullptr;  // the rest of the literal being read
  int whitespace_run_ = 0;
  int quote_matched_ = 0;  // Gemma 4: bytes of <|"|> just read (opening it, or inside a string)
};

}  // namespace lmx
