// What a chat model writes, taken apart: content, reasoning and tool calls, in the formats of the model
// families lmx serves — Gemma 4 (<|channel>thought\n…<channel|> and <|tool_call>call:NAME{…}<tool_call|>),
// Qwen 3 (<think>…</think> and <tool_call>{"name", "arguments"}</tool_call>) and Llama 3 (a whole answer that
// is {"name", "parameters"}, optionally after <|python_tag|>). The format is read off the chat template.
// Pure functions and a small streaming state machine; the API layers (OpenAI, Anthropic) shape the results.
#pragma once

#include "lmx/engine/request.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace lmx {

enum class OutputFormat {
  kPlain,   // no reasoning or tool-call markers: everything is content
  kGemma4,  // <|channel>…<channel|>, <|tool_call>…<tool_call|> (special tokens: kept in the text)
  kQwen3,   // <think>…</think>, <tool_call>…</tool_call> (Hermes style JSON calls)
  kLlama3,  // the whole answer one JSON call {"name", "parameters"} (after an optional <|python_tag|>)
};

// The format a chat template's model writes: Gemma 4's when the template knows <|tool_call> or <|channel>,
// Qwen 3's when it knows <tool_call> or <think>, Llama 3's when it knows <|python_tag|>, the ipython role or
// <|start_header_id|>; else plain.
OutputFormat output_format_of_template(const std::string& chat_template);
// "gemma4", "qwen3", "llama3", "plain".
const char* output_format_name(OutputFormat format);

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();  // a JSON object
};

// One piece of a streamed answer: content or reasoning text, or one whole tool call.
struct OutputPiece {
  enum Kind { kContent, kReasoning, kToolCall } kind = kContent;
  std::string text;  // kContent, kReasoning
  ToolCall call;     // kToolCall
};

// Splits generated text as it streams in. feed() returns the pieces that are certain now, holding back text
// that may still begin a marker; finish() returns the rest. A tool call is returned whole once its end marker
// (or, for Llama 3, the end of the answer) arrives; one that does not parse is returned as content, so no
// text is ever lost. With `parse_tools` false, tool-call markers are plain content.
class OutputSplitter {
 public:
  OutputSplitter(OutputFormat format, bool parse_tools);
  std::vector<OutputPiece> feed(const std::string& text);
  std::vector<OutputPiece> finish();

 private:
  enum class State { kStart, kContent, kReasoning, kToolCall, kWholeCall };
  void run(bool final, std::vector<OutputPiece>& out);
  void emit(OutputPiece::Kind kind, std::string text, std::vector<OutputPiece>& out);

  OutputFormat format_;
  bool parse_tools_;
  State state_ = State::kStart;
  std::string pending_;
  bool trim_newlines_ = false;  // drop the newlines that open the next text (Qwen 3's around <think>)
};

// The whole answer at once (OutputSplitter over all of it, pieces of one kind merged in order).
struct AssistantOutput {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;
};
AssistantOutput split_output(OutputFormat format, bool parse_tools, const std::string& text);

// Gemma 4's argument syntax ({key:<|"|>text<|"|>,n:1,flag:true,list:[…],obj:{…}}, keys bare or quoted with
// <|"|>) as JSON. InvalidArgument naming the position for anything else.
nlohmann::ordered_json parse_gemma4_arguments(const std::string& text);

// How `format` is made to call one of `names` (a forced tool call: GenerationRequest's forced_prefixes,
// forced_arguments, forced_suffix): per name the call's opening up to its arguments, then one object of
// arguments constrained to the format's syntax — JSON for Qwen 3 and Llama 3, Gemma 4's own for Gemma 4 —
// and the call's close appended. InvalidArgument for kPlain (the template has no tool-call syntax) or no
// names.
struct ForcedToolCall {
  std::vector<std::string> prefixes;
  ForcedArguments arguments = ForcedArguments::kFree;
  std::string suffix;
};
ForcedToolCall forced_tool_call(OutputFormat format, const std::vector<std::string>& names);

// A fresh tool-call id ("call_" and 24 random hex digits).
std::string new_tool_call_id();

}  // namespace lmx
