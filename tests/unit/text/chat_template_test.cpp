// ChatTemplate API: the variables transformers passes, input validation, key order, thread safety, Gemma 4
// format.
#include "lmx/text/chat_template.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace lmx {
namespace {

using Json = nlohmann::ordered_json;

std::string read_template(const std::string& name) {
  std::ifstream in(test::source_path("tests/data/templates/" + name), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

ChatTemplateInputs user_says(const std::string& text) {
  ChatTemplateInputs inputs;
  inputs.messages = Json::array({{{"role", "user"}, {"content", text}}});
  return inputs;
}

TEST(ChatTemplate, PassesTransformersVariables) {
  ChatTemplate tpl(
      "{{ enable_thinking is defined }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt "
      "}}|"
      "{{ bos_token is defined }}|{{ messages | length }}");
  ChatTemplateInputs inputs = user_says("hi");
  EXPECT_EQ(tpl.render(inputs), "False|True|True|True|False|1");
  inputs.enable_thinking = false;
  inputs.tools = Json::array();
  inputs.add_generation_prompt = false;
  inputs.bos_token = "<bos>";
  EXPECT_EQ(tpl.render(inputs), "True|False|True|False|True|1");
}

TEST(ChatTemplate, ExtraVariablesOverride) {
  ChatTemplate tpl("{{ add_generation_prompt }} {{ custom }} {{ bos_token }}");
  ChatTemplateInputs inputs = user_says("hi");
  inputs.bos_token = "<s>";
  inputs.extra = {{"custom", Json::array({1, "a"})}, {"add_generation_prompt", "overridden"}};
  EXPECT_EQ(tpl.render(inputs), "overridden [1, 'a'] <s>");
}

TEST(ChatTemplate, StrftimeNowFormatsLocalTime) {
  ChatTemplate tpl("{{ strftime_now('%Y') }}|{{ strftime_now('%d %b %Y') | length }}");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  EXPECT_EQ(tpl.render(user_says("x")), std::to_string(1900 + local.tm_year) + "|11");
}

TEST(ChatTemplate, MalformedInputsAreErrors) {
  ChatTemplate tpl("{{ messages }}");
  ChatTemplateInputs inputs;
  inputs.messages = Json::object();
  EXPECT_THROW(tpl.render(inputs), TemplateError);
  inputs = user_says("x");
  inputs.tools = "not a list";
  EXPECT_THROW(tpl.render(inputs), TemplateError);
  inputs = user_says("x");
  inputs.extra = Json::array();
  EXPECT_THROW(tpl.render(inputs), TemplateError);
  EXPECT_THROW(ChatTemplate("{% for %}"), TemplateError);
}

TEST(ChatTemplate, KeepsRequestKeyOrderInToJson) {
  ChatTemplate tpl("{{ tools[0] | tojson }}");
  ChatTemplateInputs inputs = user_says("x");
  inputs.tools =
      Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2.50}}}])");
  EXPECT_EQ(tpl.render(inputs),
            R"({"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2.5}}})");
}

TEST(ChatTemplate, RenderIsThreadSafe) {
  ChatTemplate tpl(read_template("qwen3.jinja"));
  ChatTemplateInputs inputs = user_says("parallel");
  const std::string expected = tpl.render(inputs);
  std::vector<std::thread> threads;
  std::vector<std::string> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) results[static_cast<size_t>(t)] = tpl.render(inputs);
    });
  for (auto& thread : threads) thread.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

// REFERENCE.md 1.6: a prompt is <bos><|turn>user\n...<turn|>\n<|turn>model\n; assistant renders as
// model; <|think|> opens the system turn when thinking is on; tool calls use <|"|> quoting.
TEST(ChatTemplate, Gemma4PromptFormat) {
  ChatTemplate e2b(read_template("gemma4.jinja"));
  ChatTemplateInputs inputs = user_says("Hello");
  inputs.bos_token = "<bos>";
  EXPECT_EQ(e2b.render(inputs), "<bos><|turn>user\nHello<turn|>\n<|turn>model\n");

  inputs.messages =
      Json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"},
                                   {"role": "user", "content": "Bye"}])");
  inputs.enable_thinking = true;
  EXPECT_EQ(e2b.render(inputs),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHey<turn|>\n"
            "<|turn>user\nBye<turn|>\n<|turn>model\n");

  inputs = user_says("Weather?");
  inputs.bos_token = "<bos>";
  inputs.messages.push_back(Json::parse(
      R"({"role": "assistant", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 1}}}]})"));
  inputs.add_generation_prompt = false;
  EXPECT_NE(e2b.render(inputs).find("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,n:1}<tool_call|>"),
            std::string::npos);

  // The 26B/31B template closes an empty thought channel when thinking is off.
  ChatTemplate large(read_template("gemma4_31b.jinja"));
  inputs = user_says("Hello");
  inputs.bos_token = "<bos>";
  EXPECT_EQ(large.render(inputs),
            "<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
}

}  // namespace
}  // namespace lmx
