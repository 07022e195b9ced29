// Gemma 4's tool-call argument syntax, constrained (JsonSyntax::kGemma4) against the parser
// the server reads calls with (parse_gemma4_arguments): every generated argument object is accepted byte by
// byte, complete exactly at its end, and parses back to the value it was written from; every random text the
// automaton accepts whole and complete, the parser parses — so a forced Gemma 4 call always parses. The
// schema automaton in Gemma 4's syntax against the parser and the reference validator on generated and
// mutated documents.
#include "lmx/core/error.h"
#include "lmx/engine/json_constraint.h"
#include "lmx/engine/json_schema_constraint.h"
#include "lmx/server/assistant_output.h"
#include "support/json_schema_reference.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>

namespace lmx {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::string_view kQuote = kGemma4Quote;

JsonObjectConstraint gemma4() {
  return JsonObjectConstraint(JsonSyntax::kGemma4);
}

bool whole_object(const std::string& text) {
  JsonObjectConstraint c = gemma4();
  return c.accept(text) && c.complete();
}

// A random value `depth` levels deep at most, and its text in Gemma 4's syntax.
struct Generated {
  Json value;
  std::string text;
};
Generated generate(std::mt19937& rng, int depth, bool object) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = object ? 0 : (depth == 0 ? 2 + pick(5) : pick(7));
  Generated g;
  switch (kind) {
    case 0:
    case 1: {
      const bool is_object = kind == 0;
      g.value = is_object ? Json::object() : Json::array();
      g.text = is_object ? "{" : "[";
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        if (i) g.text += ",";
        Generated item = generate(rng, depth - 1, false);
        if (is_object) {
          const std::string key =
              std::string(1, "abcxyz_"[pick(7)]) + std::to_string(i) + (pick(2) ? "_id" : "");
          g.text += key + ":";
          g.value[key] = item.value;
        } else {
          g.value.push_back(item.value);
        }
        g.text += item.text;
      }
      g.text += is_object ? "}" : "]";
      return g;
    }
    case 2: {  // a string holding the bytes a JSON string could not: quotes, backslashes, newlines, '<' and
               // '|'
      static const std::string pieces[] = {"Paris", "\"quoted\"", "a\\b", "line\nbreak", "<|", "x<",
                                           "|>",    "é",          " "};
      std::string s;
      for (int i = pick(4); i > 0; --i) s += pieces[pick(9)];
      g.value = s;
      g.text = std::string(kQuote) + s + std::string(kQuote);
      return g;
    }
    case 3:
      g.value = pick(2) == 1;
      g.text = g.value.get<bool>() ? "true" : "false";
      return g;
    case 4:
      g.value = nullptr;
      g.text = "null";
      return g;
    case 5:
      g.value = pick(2001) - 1000;
      g.text = g.value.dump();
      return g;
    default:
      g.text = std::to_string(pick(100)) + "." + std::to_string(pick(100)) + (pick(2) ? "e-2" : "");
      g.value = Json::parse(g.text);
      return g;
  }
}

TEST(Gemma4Arguments, GeneratedObjectsAreAcceptedAndParseBack) {
  std::mt19937 rng(5);
  for (int round = 0; round < 2000; ++round) {
    const Generated g = generate(rng, 3, true);
    SCOPED_TRACE(g.text);
    JsonObjectConstraint c = gemma4();
    for (size_t i = 0; i < g.text.size(); ++i) {
      ASSERT_TRUE(c.allows(g.text.substr(i, 1))) << "byte " << i;
      ASSERT_TRUE(c.accept(g.text.substr(i, 1)));
      ASSERT_EQ(c.complete(), i + 1 == g.text.size()) << "byte " << i;
    }
    EXPECT_EQ(parse_gemma4_arguments(g.text), g.value);
  }
}

TEST(Gemma4Arguments, RefusesWhatTheSyntaxHasNot) {
  const std::pair<std::string, size_t> cases[] = {
      {"[1]", 0},                  // the arguments are an object
      {"{\"a\":1}", 1},            // keys are bare
      {"{a:\"x\"}", 3},            // strings are between <|"|>, not '"'
      {"{1a:1}", 1},               // a key starts with a letter or '_'
      {"{a b:1}", 2},              // and has no spaces
      {"{a:<|'|>x}", 5},           // the delimiter whole
      {"{a:1,}", 5},               // a key after ','
      {"{a:tru}", 6},              // literals as in JSON
      {"{a:01}", 4},               // numbers as in JSON
      {"{a:<|\"|>x<|\"|>y}", 14},  // ',' or '}' after a value
      {" {", 0},                   // no whitespace outside strings
      {"{a: 1}", 3},
  };
  for (const auto& [text, at] : cases) {
    SCOPED_TRACE(text);
    JsonObjectConstraint c = gemma4();
    ASSERT_TRUE(c.accept(text.substr(0, at))) << "the prefix before byte " << at;
    EXPECT_FALSE(c.allows(text.substr(at, 1))) << "byte " << at;
  }
  // Inside a string everything is content but the delimiter, which ends it.
  JsonObjectConstraint c = gemma4();
  ASSERT_TRUE(c.accept("{a:<|\"|>{\"x\": [1]} \\ <| "));
  EXPECT_TRUE(c.in_string());
  ASSERT_TRUE(c.accept("<|\""));
  EXPECT_FALSE(c.in_string()) << "a text without '\"' (\"|>\") may close the string now";
  EXPECT_TRUE(c.allows("|>}"));
  EXPECT_FALSE(c.allows("|>x"));
  ASSERT_TRUE(c.accept("|>"));
  EXPECT_FALSE(c.in_string());
  EXPECT_FALSE(c.allows("x"));
  EXPECT_TRUE(c.accept("}"));
  EXPECT_TRUE(c.complete());
  // JSON's own automaton is unchanged: the delimiter is no JSON.
  EXPECT_FALSE(JsonObjectConstraint().allows("{\"a\":<|\"|>"));
}

// Random texts over the syntax's alphabet: whatever the automaton accepts whole and complete parses.
TEST(Gemma4Arguments, EveryAcceptedTextParses) {
  const std::vector<std::string> alphabet = {"{", "}", "[",  "]",    ":",    ",", std::string(kQuote),
                                             "<", "|", "\"", "a",    "b_",   "1", "0",
                                             "-", ".", "e",  "true", "null", " ", "\n"};
  std::mt19937 rng(9);
  int accepted = 0;
  for (int round = 0; round < 200000; ++round) {
    std::string text = "{";
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    if (!whole_object(text)) continue;
    ++accepted;
    SCOPED_TRACE(text);
    EXPECT_NO_THROW(parse_gemma4_arguments(text));
  }
  EXPECT_GT(accepted, 100) << "the random texts should reach whole objects";
}

const nlohmann::json kSchema = nlohmann::json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string"},
    "days": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "unit": {"enum": ["celsius", "fahrenheit", null]},
    "ok": {"type": "boolean"},
    "note": {"type": ["string", "null"]},
    "pos": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"]}
  },
  "required": ["city", "days"]
})");

// A document the schema accepts, in Gemma 4's syntax.
std::string generate_for_schema(const nlohmann::json& s, std::mt19937& rng) {
  static const test::DocumentSyntax gemma4{
      "ab\"<|:,}",
      [](const nlohmann::json& v) {
        return v.is_string() ? std::string(kQuote) + v.get<std::string>() + std::string(kQuote) : v.dump();
      },
      [](const std::string& k) { return k; }};
  return test::generate_document(s, rng, gemma4);
}

bool schema_accepts_whole(const std::shared_ptr<const JsonSchema>& schema, const std::string& text) {
  JsonSchemaConstraint c(schema, JsonSyntax::kGemma4);
  return c.accept(text) && c.complete();
}

// Generated documents are accepted byte by byte; mutated ones (a byte dropped, replaced or inserted) are
// accepted exactly when the parser parses them, the validator accepts the result and no key repeats.
TEST(Gemma4Arguments, SchemaConstraintAgreesWithTheParserAndTheReference) {
  const auto schema = JsonSchema::compile(kSchema);
  ASSERT_TRUE(schema->gemma4_writable());
  std::mt19937 rng(3);
  int valid_docs = 0, invalid_docs = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string doc = generate_for_schema(kSchema, rng);
    if (i % 2) test::mutate(doc, rng, "{}[],:<|\">1a.-ntfc");
    bool parses = true;
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(parse_gemma4_arguments(doc).dump());
    } catch (const InvalidArgument&) {
      parses = false;
    }
    // A repeated key: the parser keeps the last, the automaton refuses the document.
    bool duplicate = false;
    for (const char* key :
         {"city:", "days:", "score:", "tags:", "unit:", "ok:", "note:", "pos:", "lat:", "lon:"}) {
      const size_t first = doc.find(key);
      duplicate = duplicate || (first != std::string::npos && doc.find(key, first + 1) != std::string::npos);
    }
    const bool want = parses && test::valid_for_schema(parsed, kSchema) && !duplicate;
    ASSERT_EQ(schema_accepts_whole(schema, doc), want) << doc;
    (want ? valid_docs : invalid_docs)++;
    if (want) {
      JsonSchemaConstraint c(schema, JsonSyntax::kGemma4);
      for (size_t b = 0; b < doc.size(); ++b) ASSERT_TRUE(c.accept(doc.substr(b, 1))) << doc << " at " << b;
    }
  }
  EXPECT_GT(valid_docs, 5000);
  EXPECT_GT(invalid_docs, 2000);
}

TEST(Gemma4Arguments, SchemasItsSyntaxCannotWriteAreRefused) {
  const auto spaced = JsonSchema::compile(
      nlohmann::json::parse(R"({"type": "object", "properties": {"a b": {"type": "string"}}})"));
  EXPECT_FALSE(spaced->gemma4_writable());
  EXPECT_THROW(JsonSchemaConstraint(spaced, JsonSyntax::kGemma4), InvalidArgument);
  EXPECT_NO_THROW(JsonSchemaConstraint(spaced, JsonSyntax::kJson));
  const auto quote = JsonSchema::compile(
      nlohmann::json::parse(R"({"type": "object", "properties": {"a": {"enum": ["x<|\"|>y"]}}})"));
  EXPECT_FALSE(quote->gemma4_writable());
}

}  // namespace
}  // namespace lmx
