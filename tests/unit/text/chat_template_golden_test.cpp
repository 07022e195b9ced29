// Golden parity: real chat templates rendered by lmx byte-identical to Python Jinja2 with transformers'
// settings.
#include "lmx/text/chat_template.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

using Json = nlohmann::ordered_json;

Json read_json(const std::string& relative) {
  return Json::parse(test::read_file(test::source_path("tests/data/templates/" + relative)));
}

ChatTemplateInputs inputs_for(const Json& spec, const Json& c) {
  ChatTemplateInputs inputs;
  inputs.messages = c.at("messages");
  if (c.contains("tools")) inputs.tools = c.at("tools");
  inputs.add_generation_prompt = c.value("add_generation_prompt", true);
  if (c.contains("enable_thinking")) inputs.enable_thinking = c.at("enable_thinking").get<bool>();
  if (spec.contains("bos_token") && !spec.at("bos_token").is_null())
    inputs.bos_token = spec.at("bos_token").get<std::string>();
  if (spec.contains("eos_token") && !spec.at("eos_token").is_null())
    inputs.eos_token = spec.at("eos_token").get<std::string>();
  if (c.contains("extra")) inputs.extra = c.at("extra");
  return inputs;
}

// Every template x case of tests/data/templates/cases.json against goldens.json
// (regenerate with tools/make_template_goldens.py).
TEST(ChatTemplateGolden, MatchesPythonJinja2ByteForByte) {
  const Json config = read_json("cases.json");
  const Json goldens = read_json("goldens.json");
  int compared = 0;
  for (const auto& [name, spec] : config.at("templates").items()) {
    SCOPED_TRACE("template " + name);
    ChatTemplate tpl(
        test::read_file(test::source_path("tests/data/templates/" + spec.at("file").get<std::string>())));
    ASSERT_TRUE(goldens.contains(name)) << "goldens.json lacks template " << name;
    for (const Json& c : config.at("cases")) {
      const std::string case_name = c.at("name").get<std::string>();
      if (!goldens.at(name).contains(case_name)) continue;  // case restricted to other templates
      SCOPED_TRACE("case " + case_name);
      const Json& expected = goldens.at(name).at(case_name);
      ChatTemplateInputs inputs = inputs_for(spec, c);
      ++compared;
      if (expected.contains("output")) {
        try {
          EXPECT_EQ(tpl.render(inputs), expected.at("output").get<std::string>());
        } catch (const TemplateError& e) {
          ADD_FAILURE() << "unexpected error: " << e.what();
        }
      } else {
        const std::string error = expected.at("error").get<std::string>();
        try {
          std::string out = tpl.render(inputs);
          ADD_FAILURE() << "expected error '" << error << "' but rendered:\n" << out;
        } catch (const TemplateError& e) {
          // raise_exception() messages are the template's own: they must match exactly. Python's
          // TypeError/UndefinedError texts are matched where lmx reproduces them, else only logged.
          if (expected.at("error_type") == "TemplateError") {
            EXPECT_EQ(e.reason(), error);
          } else if (e.reason() != error) {
            std::cout << "  [" << name << "/" << case_name << "] Python: " << error
                      << " | lmx: " << e.reason() << "\n";
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 100);
}

// The committed templates are the files the README names (guards accidental edits).
TEST(ChatTemplateGolden, TemplatesParse) {
  for (const char* file :
       {"gemma3.jinja", "llama3.jinja", "qwen3.jinja", "gemma4.jinja", "gemma4_31b.jinja"}) {
    SCOPED_TRACE(file);
    EXPECT_NO_THROW(
        ChatTemplate(test::read_file(test::source_path(std::string("tests/data/templates/") + file))));
  }
}

}  // namespace
}  // namespace lmx
