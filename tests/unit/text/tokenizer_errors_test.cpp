// Malformed tokenizer.json / config files are refused with errors that name the file, the
// component and what is wrong.
#include "lmx/core/error.h"
#include "lmx/io/output_file.h"
#include "lmx/text/tokenizer.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

// Runs `load` and returns the message of the error of type E it throws (fails otherwise).
template <typename E, typename F>
std::string error_of(F&& load) {
  try {
    load();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

void expect_contains(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nshould contain: " << part;
}

std::string with(const std::string& path, const nlohmann::json& value) {
  nlohmann::json j = test::empty_tokenizer_json();
  j[nlohmann::json::json_pointer(path)] = value;
  return j.dump();
}

TEST(TokenizerErrors, NotJson) {
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json("this is not json"); }), "tokenizer.json");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(""); }), "tokenizer.json");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json("[1, 2]"); }), "not a JSON object");
  const std::string truncated = test::empty_tokenizer_json().dump().substr(0, 120);
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(truncated); }), "invalid JSON");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}} x"); }),
                  "unexpected data");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json("{\"model\": {\"vocab\": {\"\xff\": 0}, \"merges\": []}}"); }),
                  "UTF-8");
}

TEST(TokenizerErrors, MissingModel) {
  nlohmann::json j = test::empty_tokenizer_json();
  j.erase("model");
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "missing 'model'");
  j = test::empty_tokenizer_json();
  j["model"].erase("vocab");
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "no vocab");
  j = test::empty_tokenizer_json();
  j["model"].erase("merges");
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "no merges");
}

TEST(TokenizerErrors, UnknownComponentTypesAreNamed) {
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/normalizer", {{"type", "Frobnicate"}})); }),
                  "unknown normalizer type 'Frobnicate'");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/pre_tokenizer", {{"type", "Shred"}})); }),
                  "unknown pre-tokenizer type 'Shred'");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/decoder", {{"type", "Garble"}})); }),
                  "unknown decoder type 'Garble'");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/post_processor", {{"type", "Wrap"}})); }),
                  "unknown post-processor type 'Wrap'");
  // Nested in a sequence: the path says where.
  const nlohmann::json seq = nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Nope"}]})");
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(with("/normalizer", seq)); }), "normalizer.normalizers[1]");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/model/type", "Mystery")); }),
                  "unknown model type 'Mystery'");
  expect_contains(error_of<Unsupported>([] { Tokenizer::from_json(with("/model/type", "Unigram")); }), "Unigram");
  expect_contains(error_of<Unsupported>([] { Tokenizer::from_json(with("/normalizer", {{"type", "Precompiled"}})); }),
                  "Precompiled");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/normalizer", {{"kind", "NFC"}})); }), "no \"type\"");
}

TEST(TokenizerErrors, BadFields) {
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/normalizer", {{"type", "Strip"}, {"strip_left", true}})); }),
                  "missing field 'strip_right'");
  expect_contains(error_of<FormatError>([] {
                    Tokenizer::from_json(with("/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}, {"invert", false}}));
                  }),
                  "unknown split behavior 'Sideways'");
  expect_contains(error_of<FormatError>([] {
                    Tokenizer::from_json(with("/decoder", {{"type", "Metaspace"}, {"replacement", "ab"}, {"prepend_scheme", "always"}}));
                  }),
                  "exactly one character");
  expect_contains(error_of<Unsupported>([] { Tokenizer::from_json(with("/model/dropout", 0.1)); }), "dropout");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/model/vocab", {{"a", -1}})); }), "out of range");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/model/vocab", {{"a", "zero"}})); }), "integer");
  expect_contains(error_of<FormatError>([] {
                    nlohmann::json post = nlohmann::json::object();
                    post["type"] = "TemplateProcessing";
                    post["single"] = nlohmann::json::parse(R"([{"SpecialToken": {"id": "<s>", "type_id": 0}}])");
                    post["pair"] = nlohmann::json::array();
                    post["special_tokens"] = nlohmann::json::object();
                    Tokenizer::from_json(with("/post_processor", post));
                  }),
                  "missing from special_tokens");
  expect_contains(error_of<FormatError>([] { Tokenizer::from_json(with("/added_tokens", nlohmann::json::parse(R"([{"id": 0}])"))); }),
                  "added_tokens[0]: missing field 'content'");
}

TEST(TokenizerErrors, BadMerges) {
  nlohmann::json j = test::empty_tokenizer_json();
  j["model"]["vocab"] = {{"a", 0}, {"b", 1}, {"ab", 2}};
  j["model"]["merges"] = nlohmann::json::array({"a b", "a c"});
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "merges[1]: token 'c' is not in the vocab");
  j["model"]["merges"] = nlohmann::json::array({"a b", "b a"});
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "merges[1]: merged token 'ba' is not in the vocab");
  j["model"]["merges"] = nlohmann::json::array({"a b c"});
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "merges[0]");
  using J = nlohmann::json;
  j["model"]["merges"] = J::array({J::array({"a"})});
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "pair of tokens");
  j["model"]["merges"] = J::array({J::array({"a", "b", "c"})});
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "pair of tokens");
  j["model"]["merges"] = J::array({42});
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "merges[0]");
  j["model"]["merges"] = "a b";
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(j.dump()); }), "must be an array");
}

TEST(TokenizerErrors, BadRegexNamesThePattern) {
  const nlohmann::json split = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed[a-"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const std::string message = error_of<FormatError>([&] { Tokenizer::from_json(with("/pre_tokenizer", split)); });
  expect_contains(message, "(unclosed[a-");
  expect_contains(message, "pre_tokenizer");
  const nlohmann::json replace = {{"type", "Replace"}, {"pattern", {{"Regex", "*"}}}, {"content", ""}};
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(with("/normalizer", replace)); }), "invalid regex '*'");
  const nlohmann::json bad_kind = {{"type", "Replace"}, {"pattern", {{"Glob", "*"}}}, {"content", ""}};
  expect_contains(error_of<FormatError>([&] { Tokenizer::from_json(with("/normalizer", bad_kind)); }), "unknown pattern kind 'Glob'");
}

TEST(TokenizerErrors, LoadNamesTheFile) {
  test::TempDir dir;
  expect_contains(error_of<IoError>([&] { Tokenizer::load(dir.path()); }), dir.file("tokenizer.json"));
  write_text_file(dir.file("tokenizer.json"), with("/normalizer", {{"type", "Frobnicate"}}));
  expect_contains(error_of<FormatError>([&] { Tokenizer::load(dir.path()); }), dir.file("tokenizer.json") + ": normalizer");
  write_text_file(dir.file("tokenizer.json"), "{\"model\": [}");
  expect_contains(error_of<FormatError>([&] { Tokenizer::load(dir.path()); }), dir.file("tokenizer.json"));
  write_text_file(dir.file("tokenizer.json"), test::empty_tokenizer_json().dump());
  write_text_file(dir.file("tokenizer_config.json"), "{\"bos_token\": 42}");
  expect_contains(error_of<FormatError>([&] { Tokenizer::load(dir.path()); }), dir.file("tokenizer_config.json") + ": field 'bos_token'");
  write_text_file(dir.file("tokenizer_config.json"), "{\"chat_template\": [{\"name\": 1}]}");
  expect_contains(error_of<FormatError>([&] { Tokenizer::load(dir.path()); }), "chat_template[0]");
  write_text_file(dir.file("tokenizer_config.json"), "not json");
  expect_contains(error_of<FormatError>([&] { Tokenizer::load(dir.path()); }), dir.file("tokenizer_config.json"));
}

}  // namespace
}  // namespace lmx
