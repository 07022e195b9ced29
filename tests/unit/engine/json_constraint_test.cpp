// The JSON object automaton against a JSON parser (nlohmann::json::accept): every valid object is accepted
// byte by byte and complete exactly at its end; random byte strings over JSON's alphabet are accepted whole
// and complete only when the parser accepts them as an object; each refusal happens at the first byte that no
// object could continue with.
#include "lmx/engine/json_constraint.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace lmx {
namespace {

// Whether the automaton takes all of `text` and ends complete.
bool whole_object(const std::string& text) {
  JsonObjectConstraint c;
  return c.accept(text) && c.complete();
}

TEST(JsonConstraint, AcceptsObjectsAndCompletesAtTheirEnd) {
  for (const char* doc :
       {R"({})", R"( {"a": 1} )", R"({"a":[1,-2.5e+3,0.25,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"]})",
        R"({"nested": {"deeper": [[], {}, [{"k": "v"}]]}, "z": -0})",
        "{\"utf8\": \"h\xC3\xA9llo \xE2\x82\xAC\"}"}) {
    SCOPED_TRACE(doc);
    ASSERT_TRUE(nlohmann::json::accept(doc));
    JsonObjectConstraint c;
    const std::string text = doc;
    const size_t end = text.find_last_of("}");
    for (size_t i = 0; i < text.size(); ++i) {
      ASSERT_TRUE(c.allows(text.substr(i, 1))) << "byte " << i;
      ASSERT_TRUE(c.accept(text.substr(i, 1)));
      EXPECT_EQ(c.complete(), i >= end) << "byte " << i;
    }
  }
}

TEST(JsonConstraint, RefusesAtTheFirstImpossibleByte) {
  const std::pair<std::string, size_t> cases[] = {
      {"[1]", 0},
      {"\"s\"", 0},
      {"{a:1}", 1},
      {"{\"a\" 1}", 5},
      {"{\"a\":01}", 6},
      {"{\"a\":1.}", 7},
      {"{\"a\":tru}", 8},
      {"{\"a\":1,}", 7},
      {"{\"a\":\"\x01\"}", 6},
      {"{\"a\":\"\\x\"}", 7},
      {"{\"a\":\"\\u12g4\"}", 10},
      {"{\"a\":[1 2]}", 8},
      {"{}}", 2},
      {"{} x", 3},
      {"{\"a\":-}", 6},
      {"{\"a\":1e}", 7},
      {"{\"a\":]}", 5},
      {"{\"a\":[}", 6},
  };
  for (const auto& [text, at] : cases) {
    SCOPED_TRACE(text);
    JsonObjectConstraint c;
    ASSERT_TRUE(c.accept(text.substr(0, at))) << "the prefix before byte " << at;
    EXPECT_FALSE(c.allows(text.substr(at, 1))) << "byte " << at;
    EXPECT_FALSE(c.accept(text.substr(at))) << "a refused text leaves the state as it was";
    EXPECT_FALSE(whole_object(text));
  }
  // Endless whitespace and nesting are bounded.
  EXPECT_FALSE(
      JsonObjectConstraint().allows("{" + std::string(JsonObjectConstraint::kMaxWhitespace + 1, ' ')));
  EXPECT_TRUE(JsonObjectConstraint().allows("{" + std::string(JsonObjectConstraint::kMaxWhitespace, ' ')));
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonObjectConstraint::kMaxDepth; ++i) deep += "[";
  EXPECT_TRUE(JsonObjectConstraint().allows(deep));
  EXPECT_FALSE(JsonObjectConstraint().allows(deep + "["));
}

TEST(JsonConstraint, RandomStringsAgreeWithAParser) {
  const std::string alphabet = "{}[]:,\"\\ 0123456789-+.eEtrufalsn\nax";
  int accepted = 0;
  for (int n = 0; n < 200000; ++n) {
    std::string text;
    const size_t len = 1 + test::rng()() % 14;
    text += '{';
    for (size_t i = 1; i < len; ++i) text += alphabet[test::rng()() % alphabet.size()];
    const auto parsed = nlohmann::json::parse(text, nullptr, false);
    const bool object = !parsed.is_discarded() && parsed.is_object();
    ASSERT_EQ(whole_object(text), object) << text;
    accepted += object;
  }
  EXPECT_GT(accepted, 100) << "the alphabet makes enough valid objects to mean something";
}

}  // namespace
}  // namespace lmx
