// Splitting generated text into content, reasoning and tool calls: each family's format whole, the same
// result however the text is cut into stream deltas, malformed calls kept as content, Gemma 4's argument
// syntax against JSON, and the format read off the real chat templates.
#include "lmx/server/assistant_output.h"

#include "lmx/core/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

// The pieces of `text` fed in deltas of `step` bytes, merged the way split_output merges them.
AssistantOutput split_in_steps(OutputFormat format, bool tools, const std::string& text, size_t step) {
  OutputSplitter splitter(format, tools);
  std::vector<OutputPiece> pieces;
  for (size_t i = 0; i < text.size(); i += step)
    for (OutputPiece& p : splitter.feed(text.substr(i, step))) pieces.push_back(std::move(p));
  for (OutputPiece& p : splitter.finish()) pieces.push_back(std::move(p));
  AssistantOutput out;
  for (const OutputPiece& p : pieces) {
    if (p.kind == OutputPiece::kContent) out.content += p.text;
    if (p.kind == OutputPiece::kReasoning) out.reasoning += p.text;
    if (p.kind == OutputPiece::kToolCall) out.tool_calls.push_back(p.call);
  }
  return out;
}

void expect_same_streamed(OutputFormat format, bool tools, const std::string& text) {
  const AssistantOutput whole = split_output(format, tools, text);
  for (size_t step = 1; step <= text.size(); ++step) {
    const AssistantOutput s = split_in_steps(format, tools, text, step);
    ASSERT_EQ(s.content, whole.content) << "step " << step;
    ASSERT_EQ(s.reasoning, whole.reasoning) << "step " << step;
    ASSERT_EQ(s.tool_calls.size(), whole.tool_calls.size()) << "step " << step;
    for (size_t i = 0; i < s.tool_calls.size(); ++i) {
      EXPECT_EQ(s.tool_calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(s.tool_calls[i].arguments, whole.tool_calls[i].arguments);
    }
  }
}

TEST(AssistantOutput, Gemma4ReasoningContentAndCalls) {
  const std::string text =
      "<|channel>thought\nThe user wants the weather.<channel|>Let me look.<|tool_call>call:get_weather{"
      "city:<|\"|>Paris, \"FR\"<|\"|>,days:3,metric:true,ratio:-0.5,tags:[<|\"|>a<|\"|>,1],opts:{deep:null}}"
      "<tool_call|><|tool_call>call:get_time{}<tool_call|>";
  const AssistantOutput out = split_output(OutputFormat::kGemma4, true, text);
  EXPECT_EQ(out.reasoning, "The user wants the weather.");
  EXPECT_EQ(out.content, "Let me look.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(
      out.tool_calls[0].arguments,
      nlohmann::ordered_json::parse(R"({"city": "Paris, \"FR\"", "days": 3, "metric": true, "ratio": -0.5,
                                              "tags": ["a", 1], "opts": {"deep": null}})"));
  EXPECT_EQ(out.tool_calls[1].name, "get_time");
  EXPECT_TRUE(out.tool_calls[1].arguments.empty());
  expect_same_streamed(OutputFormat::kGemma4, true, text);
}

TEST(AssistantOutput, MalformedAndUnfinishedCallsStayContent) {
  // A call that does not parse is content, markers and all; so is one cut off before it parses.
  const std::string bad = "a<|tool_call>call:f{x:}<tool_call|>b";
  EXPECT_EQ(split_output(OutputFormat::kGemma4, true, bad).content, bad);
  EXPECT_TRUE(split_output(OutputFormat::kGemma4, true, bad).tool_calls.empty());
  const std::string cut = "a<|tool_call>call:f{x:<|\"|>unterminated";
  EXPECT_EQ(split_output(OutputFormat::kGemma4, true, cut).content, cut);
  // A complete call whose end marker never came (the answer ran out right after it) still counts.
  const AssistantOutput ended = split_output(OutputFormat::kGemma4, true, "<|tool_call>call:f{x:1}");
  ASSERT_EQ(ended.tool_calls.size(), 1u);
  EXPECT_EQ(ended.tool_calls[0].arguments["x"], 1);
  // Without tools offered the markers are plain text; unclosed reasoning is reasoning.
  const std::string call = "<|tool_call>call:f{}<tool_call|>";
  EXPECT_EQ(split_output(OutputFormat::kGemma4, false, call).content, call);
  EXPECT_EQ(split_output(OutputFormat::kGemma4, true, "<|channel>thought\nhmm").reasoning, "hmm");
  // Text that only looks like a marker's beginning is released at the end.
  EXPECT_EQ(split_output(OutputFormat::kGemma4, true, "x <|tool").content, "x <|tool");
  expect_same_streamed(OutputFormat::kGemma4, true, bad);
  expect_same_streamed(OutputFormat::kGemma4, true, cut);
}

TEST(AssistantOutput, Qwen3ThinkAndHermesCalls) {
  const std::string text =
      "<think>\nPlan it.\n</think>\n\nSure.<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "
      "\"lmx\", "
      "\"n\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"noop\", \"arguments\": \"{}\"}\n</tool_call>";
  const AssistantOutput out = split_output(OutputFormat::kQwen3, true, text);
  EXPECT_EQ(out.reasoning, "Plan it.\n");
  EXPECT_EQ(out.content, "Sure.\n");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "search");
  EXPECT_EQ(out.tool_calls[0].arguments, nlohmann::ordered_json::parse(R"({"q": "lmx", "n": 2})"));
  EXPECT_EQ(out.tool_calls[1].name, "noop");
  expect_same_streamed(OutputFormat::kQwen3, true, text);
}

TEST(AssistantOutput, Llama3WholeAnswerCalls) {
  const std::string call = R"({"name": "get_weather", "parameters": {"city": "Oslo"}})";
  for (const std::string& text : {call, "  " + call, "<|python_tag|>" + call}) {
    const AssistantOutput out = split_output(OutputFormat::kLlama3, true, text);
    ASSERT_EQ(out.tool_calls.size(), 1u) << text;
    EXPECT_EQ(out.tool_calls[0].arguments["city"], "Oslo");
    EXPECT_EQ(out.content, "");
    expect_same_streamed(OutputFormat::kLlama3, true, text);
  }
  EXPECT_EQ(split_output(OutputFormat::kLlama3, true, "{not json").content, "{not json");
  EXPECT_EQ(split_output(OutputFormat::kLlama3, true, "Hello {x}").content, "Hello {x}");
  EXPECT_EQ(split_output(OutputFormat::kLlama3, false, call).content, call);
  expect_same_streamed(OutputFormat::kLlama3, true, "Hello {x}");
}

TEST(AssistantOutput, Gemma4ArgumentErrorsNameThePlace) {
  for (const char* bad : {"", "[1]", "{x 1}", "{x:<|\"|>open}", "{x:1", "{x:1} extra", "{:1}", "{x:nope}"}) {
    try {
      parse_gemma4_arguments(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("tool-call arguments"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_gemma4_arguments("{<|\"|>quoted key<|\"|>:[],n:1e3}"),
            nlohmann::ordered_json::parse(R"({"quoted key": [], "n": 1000.0})"));
}

TEST(AssistantOutput, FormatOfTheRealTemplates) {
  auto of = [](const std::string& path) {
    return output_format_of_template(test::read_file(test::source_path(path)));
  };
  EXPECT_EQ(of("tests/data/templates/gemma4.jinja"), OutputFormat::kGemma4);
  EXPECT_EQ(of("tests/data/templates/gemma4_31b.jinja"), OutputFormat::kGemma4);
  EXPECT_EQ(of("tests/data/templates/qwen3.jinja"), OutputFormat::kQwen3);
  EXPECT_EQ(of("tests/data/templates/llama3.jinja"), OutputFormat::kLlama3);
  EXPECT_EQ(of("tests/data/templates/gemma3.jinja"), OutputFormat::kPlain);
  EXPECT_EQ(of("models/demo/chat_template.jinja"), OutputFormat::kGemma4);
  EXPECT_EQ(new_tool_call_id().size(), 29u);
  EXPECT_NE(new_tool_call_id(), new_tool_call_id());
}

}  // namespace
}  // namespace lmx
