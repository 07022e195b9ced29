// The JSON object automaton (json_constraint.h).
#include "lmx/engine/json_constraint.h"

namespace lmx {
using json_bytes::is_digit;
using json_bytes::is_gemma4_key_byte;
using json_bytes::is_gemma4_key_start;
using json_bytes::is_hex;
using json_bytes::is_space;

bool JsonObjectConstraint::allows(std::string_view text) const {
  JsonObjectConstraint copy = *this;
  return json_bytes::accept_all(copy, text);
}

bool JsonObjectConstraint::accept(std::string_view text) {
  return json_bytes::accept_all(*this, text);
}

// Whitespace between tokens: JSON's, in runs of at most kMaxWhitespace bytes; none in Gemma 4's syntax (its
// template writes none, and a model should not pad).
bool JsonObjectConstraint::whitespace() {
  return syntax_ == JsonSyntax::kJson && ++whitespace_run_ <= kMaxWhitespace;
}

bool JsonObjectConstraint::start_value(uint8_t b) {
  if (is_space(b)) return whitespace();
  switch (b) {
    case '{':
    case '[':
      if (depth_ == kMaxDepth) return false;
      stack_[static_cast<size_t>(depth_++)] = static_cast<char>(b);
      state_ = b == '{' ? State::kObjectFirst : State::kArrayFirst;
      return true;
    case '"':
      if (syntax_ != JsonSyntax::kJson) return false;
      string_is_key_ = false;
      state_ = State::kString;
      return true;
    case '<':
      if (syntax_ != JsonSyntax::kGemma4) return false;
      string_is_key_ = false;
      quote_matched_ = 1;
      state_ = State::kQuoteOpen;
      return true;
    case '-':
      state_ = State::kNumberSign;
      return true;
    case '0':
      state_ = State::kNumberZero;
      return true;
    case 't':
      literal_ = "rue";
      state_ = State::kLiteral;
      return true;
    case 'f':
      literal_ = "alse";
      state_ = State::kLiteral;
      return true;
    case 'n':
      literal_ = "ull";
      state_ = State::kLiteral;
      return true;
    default:
      if (b >= '1' && b <= '9') {
        state_ = State::kNumberInt;
        return true;
      }
      return false;
  }
}

// A value just ended (state kAfterValue, or the byte right after a number): ',' or the container's close.
bool JsonObjectConstraint::after_value(uint8_t b) {
  state_ = State::kAfterValue;
  if (is_space(b)) return whitespace();
  const char open = stack_[static_cast<size_t>(depth_ - 1)];
  if (b == ',') {
    state_ = open == '{' ? State::kObjectKey : State::kValue;
    return true;
  }
  if ((b == '}' && open == '{') || (b == ']' && open == '[')) {
    --depth_;
    state_ = depth_ == 0 ? State::kDone : State::kAfterValue;
    return true;
  }
  return false;
}

bool JsonObjectConstraint::step(uint8_t b) {
  if (!is_space(b)) whitespace_run_ = 0;
  switch (state_) {
    case State::kStart:
      if (is_space(b)) return whitespace();
      if (b != '{') return false;
      stack_[0] = '{';
      depth_ = 1;
      state_ = State::kObjectFirst;
      return true;
    case State::kValue:
      return start_value(b);
    case State::kArrayFirst:
      if (b == ']') {
        --depth_;
        state_ = depth_ == 0 ? State::kDone : State::kAfterValue;
        return true;
      }
      return start_value(b);
    case State::kObjectFirst:
    case State::kObjectKey:
      if (is_space(b)) return whitespace();
      if (b == '}' && state_ == State::kObjectFirst) {
        --depth_;
        state_ = depth_ == 0 ? State::kDone : State::kAfterValue;
        return true;
      }
      if (syntax_ == JsonSyntax::kGemma4) {
        if (!is_gemma4_key_start(b)) return false;
        state_ = State::kBareKey;
        return true;
      }
      if (b != '"') return false;
      string_is_key_ = true;
      state_ = State::kString;
      return true;
    case State::kBareKey:
      if (b == ':') {
        state_ = State::kValue;
        return true;
      }
      return is_gemma4_key_byte(b);
    case State::kQuoteOpen:
      if (!json_bytes::gemma4_quote_opens(quote_matched_, b)) return false;
      if (quote_matched_ == 0) state_ = State::kString;
      return true;
    case State::kColon:
      if (is_space(b)) return whitespace();
      if (b != ':') return false;
      state_ = State::kValue;
      return true;
    case State::kAfterValue:
      return after_value(b);
    case State::kString:
      if (syntax_ == JsonSyntax::kGemma4) {
        if (json_bytes::gemma4_string_ends(quote_matched_, b)) state_ = State::kAfterValue;
        return true;
      }
      if (b == '"') {
        state_ = string_is_key_ ? State::kColon : State::kAfterValue;
        return true;
      }
      if (b == '\\') {
        state_ = State::kEscape;
        return true;
      }
      return b >= 0x20;  // control characters must be escaped; bytes >= 0x80 are UTF-8 inside strings
    case State::kEscape:
      if (b == 'u') {
        hex_left_ = 4;
        state_ = State::kUnicode;
        return true;
      }
      state_ = State::kString;
      return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't';
    case State::kUnicode:
      if (!is_hex(b)) return false;
      if (--hex_left_ == 0) state_ = State::kString;
      return true;
    case State::kNumberSign:
      if (b == '0') {
        state_ = State::kNumberZero;
        return true;
      }
      if (b >= '1' && b <= '9') {
        state_ = State::kNumberInt;
        return true;
      }
      return false;
    case State::kNumberZero:
    case State::kNumberInt:
      if (is_digit(b) && state_ == State::kNumberInt) return true;
      if (b == '.') {
        state_ = State::kNumberDot;
        return true;
      }
      if (b == 'e' || b == 'E') {
        state_ = State::kNumberExp;
        return true;
      }
      return after_value(b);
    case State::kNumberDot:
      if (!is_digit(b)) return false;
      state_ = State::kNumberFrac;
      return true;
    case State::kNumberFrac:
      if (is_digit(b)) return true;
      if (b == 'e' || b == 'E') {
        state_ = State::kNumberExp;
        return true;
      }
      return after_value(b);
    case State::kNumberExp:
      if (b == '+' || b == '-') {
        state_ = State::kNumberExpSign;
        return true;
      }
      [[fallthrough]];
    case State::kNumberExpSign:
      if (!is_digit(b)) return false;
      state_ = State::kNumberExpDigits;
      return true;
    case State::kNumberExpDigits:
      if (is_digit(b)) return true;
      return after_value(b);
    case State::kLiteral:
      if (static_cast<uint8_t>(*literal_) != b) return false;
      if (*++literal_ == '\0') state_ = State::kAfterValue;
      return true;
    case State::kDone:
      return is_space(b) && whitespace();
  }
  return false;
}

}  // namespace lmx
