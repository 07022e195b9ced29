// lmx::JsonSchemaConstraint: constrained decoding to JSON that a JSON schema accepts (OpenAI's
// response_format json_schema). A byte-level pushdown automaton like JsonObjectConstraint's, driven by a
// compiled schema: it refuses the first byte that no document the schema accepts could continue with, so keys
// are only the schema's properties (each once), every required property comes before the object closes, and
// each value has its property's type.
//
// The schema subset (what structured-output schemas use): the root an object; "type" one of object (with
// "properties", "required"; properties not listed are refused, as "additionalProperties": false says), array
// (with "items"), string, number, integer, boolean, null, or a list of them; "enum" of strings, booleans and
// null; "const" likewise; "description", "title", "default", "$schema", "additionalProperties": false,
// "strict" are ignored. Anything else — "$ref", "anyOf", "pattern", numeric enums, more than 64 properties —
// is refused by compile() with InvalidArgument naming the keyword, so a schema is never silently enforced in
// part.
//
// With JsonSyntax::kGemma4 it reads Gemma 4's tool-call argument syntax instead (json_constraint.h): the same
// schema, keys bare, strings and string enum values between <|"|> delimiters, no whitespace. Only schemas
// whose property names are bare keys and whose string literals hold no delimiter can be written so
// (JsonSchema::gemma4_writable).
#pragma once

#include "lmx/engine/json_constraint.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmx {

class JsonSchema {
 public:
  // Types a value may have (bits).
  enum Type : uint8_t {
    kObject = 1,
    kArray = 2,
    kString = 4,
    kNumber = 8,
    kInteger = 16,
    kBoolean = 32,
    kNull = 64
  };
  struct Node {
    uint8_t types = 0;
    std::vector<std::string> property_names;  // kObject
    std::vector<int> property_nodes;
    uint64_t required = 0;    // bit i: property_names[i] is required
    int items = -1;           // kArray: the items' node (-1: any value is refused)
    bool enumerated = false;  // "enum"/"const": the value is one of `literals`
    // The values written as fixed text: the enum/const values as JSON text, else true/false/null as `types`
    // allow (strings and numbers are not fixed).
    std::vector<std::string> literals;
    std::vector<std::string> gemma4_literals;  // the same values in Gemma 4's syntax
  };
  // Compiles `schema`; InvalidArgument naming what is outside the subset.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::json& schema);
  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  // Whether Gemma 4's syntax can write every document the schema accepts: its property names are bare keys
  // and its string literals hold no <|"|>.
  bool gemma4_writable() const { return gemma4_writable_; }

 private:
  int add(const nlohmann::json& schema, const std::string& at);
  std::vector<Node> nodes_;
  bool gemma4_writable_ = true;
};

class JsonSchemaConstraint {
 public:
  static constexpr int kMaxWhitespace = 16;
  static constexpr int kMaxDepth = 64;

  // InvalidArgument for a kGemma4 syntax over a schema that is not gemma4_writable().
  explicit JsonSchemaConstraint(std::shared_ptr<const JsonSchema> schema,
                                JsonSyntax syntax = JsonSyntax::kJson);
  // Whether every byte of `text` is accepted from the current state (the state does not change).
  bool allows(std::string_view text) const;
  // Advances over `text`; false (state unchanged) when some byte is refused.
  bool accept(std::string_view text);
  // Whether the root object has closed (only whitespace may follow).
  bool complete() const { return done_; }
  // Whether it is inside a string value where any text without '"', '\' or control bytes is accepted (in
  // Gemma 4's syntax: not right after "<|\"", where such a text could complete the delimiter with "|>").
  bool in_string() const {
    if (stack_.empty() || stack_.back().kind != Kind::kString) return false;
    return syntax_ == JsonSyntax::kJson ? stack_.back().state == 0 : stack_.back().state < kGemma4QuoteQuoted;
  }
  JsonSyntax syntax() const { return syntax_; }

 private:
  enum class Kind : uint8_t { kValue, kObject, kArray, kString, kKey, kNumber, kLiteral };
  // A Gemma 4 string's state: inside it, the bytes of the delimiter just read (0-4); opening it,
  // kGemma4Opening + the bytes of the opening delimiter read.
  static constexpr uint8_t kGemma4Opening = 8;
  struct Frame {
    Kind kind = Kind::kValue;
    int node = 0;
    uint8_t state = 0;  // per kind
    uint64_t seen = 0;  // kObject: properties written
    int key = -1;       // kObject: the property whose value comes next; kKey/kLiteral: candidates' progress
    std::string text;   // kKey: the key so far; kLiteral: the literal so far
  };
  template <class Automaton>
  friend bool json_bytes::accept_all(Automaton&, std::string_view);
  static Frame make(Kind kind, int node, uint64_t seen = 0) {
    Frame f;
    f.kind = kind;
    f.node = node;
    f.seen = seen;
    return f;
  }
  bool step(uint8_t byte);
  bool start_value(Frame& frame, uint8_t byte);  // frame: the kValue frame being replaced
  bool value_done();                             // pops a finished value; its parent goes on
  bool property_value();                         // the key of the object on top is written: its value next
  bool gemma4_string(Frame& frame, uint8_t byte);
  const std::vector<std::string>& literals(const JsonSchema::Node& node) const {
    return syntax_ == JsonSyntax::kJson ? node.literals : node.gemma4_literals;
  }
  bool whitespace();

  std::shared_ptr<const JsonSchema> schema_;
  JsonSyntax syntax_;
  std::vector<Frame> stack_;
  bool done_ = false;
  int whitespace_run_ = 0;
};

}  // namespace lmx
