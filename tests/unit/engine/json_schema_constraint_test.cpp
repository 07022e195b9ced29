// JsonSchemaConstraint against a reference validator written separately (support/json_schema_reference.h): on
// documents generated from a schema and mutated at random, the automaton accepts a whole document exactly
// when it parses and the validator accepts it; every prefix of an accepted document is accepted byte by byte;
// schemas outside the subset are refused.
#include "lmx/engine/json_schema_constraint.h"

#include "lmx/core/error.h"
#include "support/json_schema_reference.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

namespace lmx {
namespace {

const nlohmann::json kSchema = nlohmann::json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "kind": {"enum": ["cat", "dog", null]},
    "ok": {"type": "boolean"},
    "note": {"type": ["string", "null"]},
    "pos": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"], "additionalProperties": false}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

bool accepts_whole(const std::shared_ptr<const JsonSchema>& schema, const std::string& text) {
  JsonSchemaConstraint c(schema);
  return c.accept(text) && c.complete();
}

TEST(JsonSchemaConstraint, AcceptsWhatTheSchemaAcceptsAndRefusesTheRest) {
  const auto schema = JsonSchema::compile(kSchema);
  const char* accepted[] = {
      R"({"name":"Tom","age":3})",
      R"({ "age": -12 , "name" : "a\"b\\u00e9" })",
      R"({"name":"x","age":0,"score":-1.5e+3,"tags":["a","b"],"kind":"dog","ok":false,"note":null,"pos":{"x":1,"y":2.5}})",
      R"({"name":"x","age":1,"tags":[],"kind":null,"note":"n"})",
  };
  for (const char* doc : accepted) EXPECT_TRUE(accepts_whole(schema, doc)) << doc;
  const char* refused[] = {
      R"({"name":"Tom"})",                        // age required
      R"({"name":"Tom","age":3.5})",              // not an integer
      R"({"name":"Tom","age":"3"})",              // not a number
      R"({"name":"Tom","age":3,"color":"red"})",  // not a property
      R"({"name":"Tom","age":3,"age":4})",        // twice
      R"({"name":"Tom","age":3,"kind":"cow"})",   // not in the enum
      R"({"name":"Tom","age":3,"tags":[1]})",     // items are strings
      R"({"name":"Tom","age":3,"pos":{"x":1}})",  // y required
      R"({"name":"Tom","age":3,"ok":null})",      // not null
      R"({"name":"Tom","age":3,})",               // trailing comma
      R"([{"name":"Tom","age":3}])",              // the root is an object
      R"({"name":"Tom","age":03})",               // a leading zero
  };
  for (const char* doc : refused) EXPECT_FALSE(accepts_whole(schema, doc)) << doc;
}

// Random documents: valid ones generated from the schema, then mutated (a byte dropped, replaced or
// inserted).
std::string generate(const nlohmann::json& s, std::mt19937& rng) {
  static const test::DocumentSyntax json{"ab\"\\", [](const nlohmann::json& v) { return v.dump(); },
                                         [](const std::string& k) { return nlohmann::json(k).dump(); },
                                         /*random_spaces=*/true};
  return test::generate_document(s, rng, json);
}

TEST(JsonSchemaConstraint, AgreesWithTheReferenceOnRandomDocuments) {
  const auto schema = JsonSchema::compile(kSchema);
  std::mt19937 rng(5);
  int valid_docs = 0, invalid_docs = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string doc = generate(kSchema, rng);
    if (i % 2) test::mutate(doc, rng, "{}[],:\" 1a.-ntf");
    const auto parsed = nlohmann::json::parse(doc, nullptr, false);
    const bool expected =
        !parsed.is_discarded() && parsed.is_object() && test::valid_for_schema(parsed, kSchema);
    // A repeated key: nlohmann keeps one, the automaton refuses the document (the generated strings cannot
    // spell a property name, so a name quoted twice is a key twice).
    bool duplicate = false;
    for (const auto& [k, v] : kSchema["properties"].items()) {
      const std::string quoted = "\"" + k + "\"";
      const size_t first = doc.find(quoted);
      duplicate =
          duplicate || (first != std::string::npos && doc.find(quoted, first + 1) != std::string::npos);
    }
    const bool want = expected && !duplicate;
    EXPECT_EQ(accepts_whole(schema, doc), want) << doc;
    (want ? valid_docs : invalid_docs)++;
    if (want) {
      JsonSchemaConstraint c(schema);
      for (size_t b = 0; b < doc.size(); ++b) ASSERT_TRUE(c.accept(doc.substr(b, 1))) << doc << " at " << b;
    }
  }
  EXPECT_GT(valid_docs, 5000);
  EXPECT_GT(invalid_docs, 2000);
}

TEST(JsonSchemaConstraint, RefusesSchemasOutsideTheSubset) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"a":{"$ref":"#/x"}}})", "\"$ref\""},
      {R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}})", "\"anyOf\""},
      {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})", "\"pattern\""},
      {R"({"type":"object","properties":{"a":{"enum":[1,2]}}})", "only strings, booleans and null"},
      {R"({"type":"array","items":{"type":"string"}})", "the root must be"},
      {R"({"type":"object","required":["b"]})", "not a property"},
      {R"({"type":"object","properties":{"a":{}}})", "needs a \"type\""},
      {R"({"type":"object","properties":{"a":{"type":"array"}}})", "needs \"items\""},
      // Malformed schemas.
      {R"("object")", "must be a JSON schema object"},
      {R"({"type":5})", "must be a type name or a list of them"},
      {R"({"type":"obj"})", "unknown type \"obj\""},
      {R"({"type":"object","properties":[]})", "properties must be an object"},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"required":"a"})",
       "required must be an array"},
      {R"({"type":"object","properties":{"a":{"enum":[]}}})", "enum must be a non-empty array"},
      {R"({"type":"object","properties":{"a\"b":{"type":"string"}}})", "needs escaping"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      JsonSchema::compile(nlohmann::json::parse(text));
      ADD_FAILURE() << "compiled: " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lmx
