// ConstraintVocabulary: its indexed pass allows exactly the tokens a check of every text allows, for both
// JSON automata in both syntaxes at every prefix of some documents, over the demo model's real vocabulary
// (and, for Gemma 4's string delimiter, over texts that split it).
#include "lmx/engine/constraint_vocabulary.h"

#include "lmx/engine/json_constraint.h"
#include "lmx/engine/json_schema_constraint.h"
#include "lmx/text/tokenizer.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace lmx {
namespace {

template <class Automaton>
void expect_same_set(const ConstraintVocabulary& vocabulary, int64_t size, const Automaton& a,
                     const std::string& at) {
  std::vector<int32_t> fast, slow;
  vocabulary.for_each_allowed(a, [&](int32_t id) { fast.push_back(id); });
  for (int32_t id = 0; id < size; ++id)
    if (!vocabulary.text(id).empty() && a.allows(vocabulary.text(id))) slow.push_back(id);
  std::sort(fast.begin(), fast.end());
  EXPECT_EQ(fast, slow) << "after " << at;
}

TEST(ConstraintVocabulary, TheIndexedPassAllowsWhatEveryCheckAllows) {
  const Tokenizer tokenizer = Tokenizer::load(test::source_path("models/demo"));
  const int64_t size = 8192;
  const ConstraintVocabulary vocabulary(tokenizer, size);
  const auto schema = JsonSchema::compile(nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},
          "tags":{"type":"array","items":{"type":"string"}},"ok":{"enum":[true,null]}},"required":["name"]})"));
  const std::string doc = R"({ "name": "a \"b\" \u00e9 c", "n": -12, "tags": ["x", "y z"], "ok": null })";
  for (size_t cut = 0; cut <= doc.size(); ++cut) {
    const std::string prefix = doc.substr(0, cut);
    JsonObjectConstraint any;
    ASSERT_TRUE(any.accept(prefix)) << prefix;
    expect_same_set(vocabulary, size, any, prefix);
    JsonSchemaConstraint typed(schema);
    ASSERT_TRUE(typed.accept(prefix)) << prefix;
    expect_same_set(vocabulary, size, typed, prefix);
  }
}

TEST(ConstraintVocabulary, TheIndexedPassAllowsWhatEveryCheckAllowsInGemma4Syntax) {
  const Tokenizer tokenizer = Tokenizer::load(test::source_path("models/demo"));
  const int64_t size = 8192;
  const ConstraintVocabulary vocabulary(tokenizer, size);
  // Texts that open, close or split the delimiter, beside plain ones.
  std::vector<std::string> texts = {"<|\"",  "|>",  "|>,",  "|>}", ">", "<", "|", "\"",   "<|\"|>", "abc",
                                    "|>abc", "x<|", "\"|>", "{",   "}", ":", ",", "city", "1",      "true"};
  const ConstraintVocabulary split(texts);
  const auto schema = JsonSchema::compile(nlohmann::json::parse(
      R"({"type":"object","properties":{"city":{"type":"string"},"n":{"type":"integer"},
          "unit":{"enum":["c","f"]}},"required":["city"]})"));
  const std::string doc = "{city:<|\"|>Pa <|ri<|\"s\"|<|\"|>,n:-12,unit:<|\"|>f<|\"|>}";
  for (size_t cut = 0; cut <= doc.size(); ++cut) {
    const std::string prefix = doc.substr(0, cut);
    JsonObjectConstraint any(JsonSyntax::kGemma4);
    ASSERT_TRUE(any.accept(prefix)) << prefix;
    expect_same_set(vocabulary, size, any, prefix);
    expect_same_set(split, static_cast<int64_t>(texts.size()), any, prefix);
    JsonSchemaConstraint typed(schema, JsonSyntax::kGemma4);
    ASSERT_TRUE(typed.accept(prefix)) << prefix;
    expect_same_set(vocabulary, size, typed, prefix);
    expect_same_set(split, static_cast<int64_t>(texts.size()), typed, prefix);
  }
}

}  // namespace
}  // namespace lmx
