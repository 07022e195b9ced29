// The JSON-schema automaton (json_schema_constraint.h).
#include "lmx/engine/json_schema_constraint.h"

#include "lmx/core/error.h"
#include "lmx/engine/json_constraint.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace lmx {
namespace {

using json_bytes::is_digit;
using json_bytes::is_hex;
using json_bytes::is_space;

constexpr const char* kTypeNames[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

// Object states.
constexpr uint8_t kObjFirst = 0, kObjColon = 1, kObjAfterValue = 2, kObjNextKey = 3;
// Array states.
constexpr uint8_t kArrFirst = 0, kArrAfterValue = 1;
// String states: 0 in text, 1 after a backslash, 2.. 5: \u hex digits left + 1.
// Number states.
constexpr uint8_t kNumSign = 0, kNumZero = 1, kNumInt = 2, kNumDot = 3, kNumFrac = 4, kNumExp = 5,
                  kNumExpSign = 6, kNumExpDigits = 7;

bool number_can_end(uint8_t state) {
  return state == kNumZero || state == kNumInt || state == kNumFrac || state == kNumExpDigits;
}

bool fits_some(const std::vector<std::string>& candidates, const std::string& text, bool* whole) {
  bool fits = false;
  *whole = false;
  for (const std::string& c : candidates)
    if (c.compare(0, text.size(), text) == 0 && c.size() >= text.size()) {
      fits = true;
      if (c.size() == text.size()) *whole = true;
    }
  return fits;
}

}  // namespace

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::json& schema) {
  auto out = std::make_shared<JsonSchema>();
  out->add(schema, "schema");
  LMX_REQUIRE(InvalidArgument, out->nodes_[0].types == kObject && !out->nodes_[0].enumerated,
              "schema: the root must be {{\"type\": \"object\", ...}}");
  return out;
}

int JsonSchema::add(const nlohmann::json& s, const std::string& at) {
  LMX_REQUIRE(InvalidArgument, s.is_object(), "{} must be a JSON schema object", at);
  static const char* const kIgnored[] = {"description",          "title",  "default",  "$schema",
                                         "additionalProperties", "strict", "examples", "$comment"};
  for (const auto& [key, value] : s.items()) {
    const bool known = key == "type" || key == "properties" || key == "required" || key == "items" ||
                       key == "enum" || key == "const" ||
                       std::find(std::begin(kIgnored), std::end(kIgnored), key) != std::end(kIgnored);
    LMX_REQUIRE(InvalidArgument, known, "{}: the keyword \"{}\" is not supported by constrained decoding", at,
                key);
  }
  const int index = static_cast<int>(nodes_.size());
  nodes_.emplace_back();
  Node n;
  if (s.contains("type")) {
    const nlohmann::json& t = s["type"];
    std::vector<std::string> names;
    if (t.is_string())
      names.push_back(t.get<std::string>());
    else if (t.is_array())
      for (const auto& e : t) {
        LMX_REQUIRE(InvalidArgument, e.is_string(), "{}.type: a list of type names", at);
        names.push_back(e.get<std::string>());
      }
    LMX_REQUIRE(InvalidArgument, !names.empty(), "{}.type must be a type name or a list of them", at);
    for (const std::string& name : names) {
      const auto* found = std::find(std::begin(kTypeNames), std::end(kTypeNames), name);
      LMX_REQUIRE(InvalidArgument, found != std::end(kTypeNames), "{}.type: unknown type \"{}\"", at, name);
      n.types |= static_cast<uint8_t>(1u << (found - std::begin(kTypeNames)));
    }
  }
  auto literal = [&](const nlohmann::json& v, const std::string& where) {
    LMX_REQUIRE(InvalidArgument, v.is_string() || v.is_boolean() || v.is_null(),
                "{}: only strings, booleans and null are supported as enum or const values", where);
    n.literals.push_back(v.dump());
    if (v.is_string()) {
      const std::string text = v.get<std::string>();
      if (text.find(kGemma4Quote) != std::string::npos) gemma4_writable_ = false;
      n.gemma4_literals.push_back(std::string(kGemma4Quote) + text + std::string(kGemma4Quote));
    } else {
      n.gemma4_literals.push_back(v.dump());
    }
  };
  if (s.contains("enum")) {
    LMX_REQUIRE(InvalidArgument, s["enum"].is_array() && !s["enum"].empty(),
                "{}.enum must be a non-empty array", at);
    for (const auto& v : s["enum"]) literal(v, at + ".enum");
  }
  if (s.contains("const")) literal(s["const"], at + ".const");
  n.enumerated = !n.literals.empty();
  LMX_REQUIRE(InvalidArgument, n.types != 0 || n.enumerated, "{} needs a \"type\" (or an enum or const)", at);
  if (!n.enumerated) {
    if (n.types & kBoolean) n.literals = {"true", "false"};
    if (n.types & kNull) n.literals.push_back("null");
    n.gemma4_literals = n.literals;
  }
  if (n.types & kObject) {
    if (s.contains("properties")) {
      LMX_REQUIRE(InvalidArgument, s["properties"].is_object(), "{}.properties must be an object", at);
      LMX_REQUIRE(InvalidArgument, s["properties"].size() <= 64, "{}: more than 64 properties", at);
      for (const auto& [name, sub] : s["properties"].items()) {
        for (char c : name)
          LMX_REQUIRE(InvalidArgument, c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20,
                      "{}: property name \"{}\" needs escaping, which constrained decoding does not write",
                      at, name);
        if (!json_bytes::is_gemma4_key(name)) gemma4_writable_ = false;
        n.property_names.push_back(name);
        n.property_nodes.push_back(add(sub, at + ".properties." + name));
      }
    }
    if (s.contains("required")) {
      LMX_REQUIRE(InvalidArgument, s["required"].is_array(), "{}.required must be an array", at);
      for (const auto& r : s["required"]) {
        LMX_REQUIRE(InvalidArgument, r.is_string(), "{}.required: property names", at);
        const auto it = std::find(n.property_names.begin(), n.property_names.end(), r.get<std::string>());
        LMX_REQUIRE(InvalidArgument, it != n.property_names.end(),
                    "{}.required names \"{}\", which is not a property", at, r.get<std::string>());
        n.required |= uint64_t{1} << (it - n.property_names.begin());
      }
    }
  }
  if (n.types & kArray) {
    LMX_REQUIRE(InvalidArgument, s.contains("items"), "{}: an array needs \"items\"", at);
    n.items = add(s["items"], at + ".items");
  }
  nodes_[static_cast<size_t>(index)] = std::move(n);
  return index;
}

JsonSchemaConstraint::JsonSchemaConstraint(std::shared_ptr<const JsonSchema> schema, JsonSyntax syntax)
    : schema_(std::move(schema)), syntax_(syntax) {
  LMX_REQUIRE(InvalidArgument, schema_ != nullptr, "a JSON schema constraint needs a schema");
  LMX_REQUIRE(InvalidArgument, syntax_ == JsonSyntax::kJson || schema_->gemma4_writable(),
              "schema: Gemma 4's argument syntax cannot write it (a property name that is not a bare key "
              "[A-Za-z_][A-Za-z0-9_.-]*, or a string value holding <|\"|>)");
  stack_.push_back(make(Kind::kValue, 0));
}

bool JsonSchemaConstraint::allows(std::string_view text) const {
  JsonSchemaConstraint copy = *this;
  return json_bytes::accept_all(copy, text);
}

bool JsonSchemaConstraint::accept(std::string_view text) {
  return json_bytes::accept_all(*this, text);
}

// None in Gemma 4's syntax.
bool JsonSchemaConstraint::whitespace() {
  return syntax_ == JsonSyntax::kJson && ++whitespace_run_ <= kMaxWhitespace;
}

bool JsonSchemaConstraint::property_value() {
  Frame& object = stack_.back();
  object.seen |= uint64_t{1} << object.key;
  object.state = kObjAfterValue;
  const int node = schema_->node(object.node).property_nodes[static_cast<size_t>(object.key)];
  stack_.push_back(make(Kind::kValue, node));
  return true;
}

// A Gemma 4 string's bytes: the opening delimiter's, then content up to the closing one (json_bytes).
bool JsonSchemaConstraint::gemma4_string(Frame& f, uint8_t b) {
  const bool opening = f.state >= kGemma4Opening;
  int matched = opening ? f.state - kGemma4Opening : f.state;
  if (opening) {
    if (!json_bytes::gemma4_quote_opens(matched, b)) return false;
    f.state = static_cast<uint8_t>(matched == 0 ? 0 : kGemma4Opening + matched);
    return true;
  }
  if (json_bytes::gemma4_string_ends(matched, b)) return value_done();
  f.state = static_cast<uint8_t>(matched);
  return true;
}

bool JsonSchemaConstraint::value_done() {
  stack_.pop_back();
  if (stack_.empty()) {
    done_ = true;
    return true;
  }
  Frame& parent = stack_.back();
  if (parent.kind == Kind::kArray) parent.state = kArrAfterValue;
  return true;  // an object parent already waits in kObjAfterValue
}

bool JsonSchemaConstraint::start_value(Frame& f, uint8_t b) {
  const JsonSchema::Node& n = schema_->node(f.node);
  if (n.enumerated || b == 't' || b == 'f' || b == 'n') {
    const std::string first(1, static_cast<char>(b));
    bool whole = false;
    if (!fits_some(literals(n), first, &whole)) return false;
    f.kind = Kind::kLiteral;
    f.text = first;
    return true;
  }
  if (b == '{' && (n.types & JsonSchema::kObject)) {
    if (stack_.size() >= static_cast<size_t>(kMaxDepth)) return false;
    f.kind = Kind::kObject;
    f.state = kObjFirst;
    f.seen = 0;
    return true;
  }
  if (b == '[' && (n.types & JsonSchema::kArray)) {
    if (stack_.size() >= static_cast<size_t>(kMaxDepth)) return false;
    f.kind = Kind::kArray;
    f.state = kArrFirst;
    return true;
  }
  if (b == '"' && (n.types & JsonSchema::kString) && syntax_ == JsonSyntax::kJson) {
    f.kind = Kind::kString;
    f.state = 0;
    return true;
  }
  if (b == '<' && (n.types & JsonSchema::kString) && syntax_ == JsonSyntax::kGemma4) {
    f.kind = Kind::kString;
    f.state = kGemma4Opening + 1;
    return true;
  }
  if ((b == '-' || is_digit(b)) && (n.types & (JsonSchema::kNumber | JsonSchema::kInteger))) {
    f.kind = Kind::kNumber;
    f.state = b == '-' ? kNumSign : b == '0' ? kNumZero : kNumInt;
    return true;
  }
  return false;
}

bool JsonSchemaConstraint::step(uint8_t b) {
  if (done_) return is_space(b) && whitespace();
  if (!is_space(b)) whitespace_run_ = 0;
  Frame& f = stack_.back();
  const JsonSchema::Node& n = schema_->node(f.node);
  switch (f.kind) {
    case Kind::kValue:
      if (is_space(b)) return whitespace();
      return start_value(f, b);
    case Kind::kLiteral: {
      const std::string text = f.text + static_cast<char>(b);
      bool whole = false;
      if (!fits_some(literals(n), text, &whole)) return false;
      f.text = text;
      return whole ? value_done() : true;
    }
    case Kind::kString:
      if (syntax_ == JsonSyntax::kGemma4) return gemma4_string(f, b);
      if (f.state == 0) {
        if (b == '"') return value_done();
        if (b == '\\') f.state = 1;
        return b >= 0x20;
      }
      if (f.state == 1) {
        if (b == 'u') {
          f.state = 5;
          return true;
        }
        f.state = 0;
        return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't';
      }
      if (!is_hex(b)) return false;
      f.state = f.state == 2 ? 0 : static_cast<uint8_t>(f.state - 1);
      return true;
    case Kind::kNumber: {
      const bool integer = !(n.types & JsonSchema::kNumber);
      switch (f.state) {
        case kNumSign:
          if (!is_digit(b)) return false;
          f.state = b == '0' ? kNumZero : kNumInt;
          return true;
        case kNumInt:
          if (is_digit(b)) return true;
          [[fallthrough]];
        case kNumZero:
          if (b == '.' && !integer) return f.state = kNumDot, true;
          if ((b == 'e' || b == 'E') && !integer) return f.state = kNumExp, true;
          break;
        case kNumDot:
          if (!is_digit(b)) return false;
          f.state = kNumFrac;
          return true;
        case kNumFrac:
          if (is_digit(b)) return true;
          if (b == 'e' || b == 'E') return f.state = kNumExp, true;
          break;
        case kNumExp:
          if (b == '+' || b == '-') return f.state = kNumExpSign, true;
          [[fallthrough]];
        case kNumExpSign:
          if (!is_digit(b)) return false;
          f.state = kNumExpDigits;
          return true;
        case kNumExpDigits:
          if (is_digit(b)) return true;
          break;
      }
      // The byte ends the number; the parent reads it.
      if (!number_can_end(f.state)) return false;
      value_done();
      return step(b);
    }
    case Kind::kKey: {
      const JsonSchema::Node& object = n;  // a key frame carries its object's node and seen set
      // A key ends at its closing '"' (JSON; the ':' follows) or at the ':' (Gemma 4; the value follows).
      if (b == (syntax_ == JsonSyntax::kJson ? '"' : ':')) {
        for (size_t i = 0; i < object.property_names.size(); ++i)
          if (!(f.seen >> i & 1) && object.property_names[i] == f.text) {
            stack_.pop_back();
            stack_.back().key = static_cast<int>(i);
            if (syntax_ == JsonSyntax::kGemma4) return property_value();
            stack_.back().state = kObjColon;
            return true;
          }
        return false;
      }
      const std::string text = f.text + static_cast<char>(b);
      for (size_t i = 0; i < object.property_names.size(); ++i)
        if (!(f.seen >> i & 1) && object.property_names[i].compare(0, text.size(), text) == 0 &&
            object.property_names[i].size() >= text.size()) {
          f.text = text;
          return true;
        }
      return false;
    }
    case Kind::kObject: {
      if (is_space(b)) return whitespace();
      const uint64_t all =
          n.property_names.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << n.property_names.size()) - 1;
      const bool can_close = (n.required & ~f.seen) == 0;
      const bool keys_left = (f.seen & all) != all;
      switch (f.state) {
        case kObjFirst:
        case kObjNextKey:
          if (b == '}' && f.state == kObjFirst && can_close) return value_done();
          if (keys_left && syntax_ == JsonSyntax::kJson && b == '"') {
            stack_.push_back(make(Kind::kKey, f.node, f.seen));
            return true;
          }
          if (keys_left && syntax_ == JsonSyntax::kGemma4 && b != '}') {  // a bare key starts with this byte
            stack_.push_back(make(Kind::kKey, f.node, f.seen));
            return step(b);
          }
          return false;
        case kObjColon:
          if (b != ':') return false;
          return property_value();
        case kObjAfterValue:
          if (b == ',' && keys_left) return f.state = kObjNextKey, true;
          if (b == '}' && can_close) return value_done();
          return false;
      }
      return false;
    }
    case Kind::kArray: {
      if (is_space(b)) return whitespace();
      if (b == ']') return value_done();
      if (f.state == kArrAfterValue) {
        if (b != ',') return false;
        stack_.push_back(make(Kind::kValue, n.items));
        return true;
      }
      // The first item starts with this byte.
      if (stack_.size() >= static_cast<size_t>(kMaxDepth)) return false;
      stack_.push_back(make(Kind::kValue, n.items));
      return step(b);
    }
  }
  return false;
}

}  // namespace lmx
