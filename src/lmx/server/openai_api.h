// The OpenAI-compatible request and response bodies the HTTP server speaks (POST /v1/chat/completions and
// /v1/completions, GET /v1/models): requests parsed into GenerationRequests, engine results and events turned
// into the JSON objects and stream chunks OpenAI sends. Pure functions: http_server.cpp does the I/O.
#pragma once

#include "lmx/engine/request.h"
#include "lmx/server/assistant_output.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lmx {

class Tokenizer;

// A request the server refuses: the HTTP status and OpenAI's error object fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}
  int http_status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string type_, param_;
};

// Throws ApiError(400, invalid_request_error, message, param): how the request parsers refuse a field.
[[noreturn]] void throw_bad_request(const std::string& message, const std::string& param = {});

// OpenAI's error type for an HTTP status (400 invalid_request_error, 401 authentication_error, 404
// not_found_error, 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, else server_error).
const char* openai_error_type(int status);

// {"error": {"message", "type", "param", "code"}} as OpenAI sends it.
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = {},
                          int code = 0);

// A parsed completion request: what the engine runs and how the answer is sent.
struct ApiRequest {
  GenerationRequest generation;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool echo = false;           // completions: the prompt text before each choice's text
  std::string prompt_text;     // completions with echo: the prompt as text
  // Chat: how the answer's text splits into content, reasoning and tool calls.
  OutputFormat output = OutputFormat::kPlain;
  bool parse_tools = false;  // tools were offered (and tool_choice is not "none")
};

// A chat in the chat template's terms (OpenAI-shaped messages, tool_calls arguments as objects, tools as
// {"type": "function", "function": {...}}), rendered and tokenized with the model's template: what the OpenAI
// and Anthropic parsers share. Sets the output format from the template; special tokens stay in the text when
// the format has markers. `forced_tools` non-empty: the answer must call one of these tools (forced_tool_call
// in the template's format). Throws ApiError (400) when the template refuses the chat, or has no tool-call
// syntax to force.
// What a request's tool_choice asks (both APIs): whether the tools are offered, and the tools a forced call
// may take.
struct ToolChoice {
  bool offered = true;
  std::vector<std::string> forced;
};
// A forced call's names among `tools` (template-shaped: {"function": {"name"}}): every tool's when `name` is
// null, else `name` itself. ApiError (400) when there are no tools or `name` is not among them.
ToolChoice forced_tool_choice(const nlohmann::ordered_json& tools, const std::string* name);

ApiRequest render_chat_request(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               bool parse_tools, std::optional<bool> enable_thinking,
                               const GenerationRequest& defaults, const Tokenizer& tokenizer,
                               const std::vector<std::string>& forced_tools = {});

// POST /v1/chat/completions: "messages" (role system, developer — taken as system —, user, assistant with
// optional "tool_calls" and "reasoning_content", tool with "tool_call_id"; content a string, null or an array
// of {"type": "text", "text"} parts), "tools" (function tools) and "tool_choice" ("auto", "none", "required"
// or
// {"type": "function", "function": {"name"}}: a forced call, render_chat_request), "chat_template_kwargs.
// enable_thinking", rendered by the
// model's chat template, then the request fields (request_fields.h) over `defaults`, "stream" and
// "stream_options". Throws ApiError (400, invalid_request_error) naming the field for anything malformed.
ApiRequest parse_chat_request(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                              const Tokenizer& tokenizer);
// POST /v1/completions: "prompt" a string, or an array of token ids (or one such string or array in an
// array), "echo", then as above.
ApiRequest parse_completion_request(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                                    const Tokenizer& tokenizer);

// One choice's results as the engine's events accumulate them.
struct ChoiceOutput {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
  int stop_string = -1;  // the stop string that ended it (RequestEvent::stop_string)
};
// Adds one event to its choice's output.
void accumulate(ChoiceOutput& out, const RequestEvent& event);

// Usage: prompt, completion and total tokens, and prompt_tokens_details.cached_tokens (prompt tokens whose KV
// was reused).
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};
nlohmann::json usage_json(const Usage& usage);

// "stop", "length" (cancelled and failed choices are not answered with a body).
const char* openai_finish_reason(FinishReason reason);

// Logprobs of tokens as the chat API nests them ({"content": [{"token", "logprob", "bytes",
// "top_logprobs"}]}) and as the completions API lists them ({"tokens", "token_logprobs", "top_logprobs",
// "text_offset"}).
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer);
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& logprobs,
                                        const Tokenizer& tokenizer);

// Whole responses.
struct ResponseHeader {
  std::string id, model;
  int64_t created = 0;
};
// A chat choice's message splits its text by the request's output format: "content" (null when empty beside
// tool calls), "reasoning_content" when there is reasoning, "tool_calls" ({"id", "type": "function",
// "function": {"name", "arguments" as a JSON string}}); finish_reason "tool_calls" when it called a tool.
nlohmann::json chat_completion_json(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                                    const Usage& usage, const ApiRequest& request,
                                    const Tokenizer& tokenizer);
nlohmann::json text_completion_json(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                                    const Usage& usage, bool logprobs, const std::string& echo_prefix,
                                    const Tokenizer& tokenizer);

// Stream chunks ("chat.completion.chunk" / "text_completion"): a choice's first chunk (the assistant role),
// a content delta (with its tokens' logprobs when asked), a choice's last chunk (finish_reason, empty
// delta), and the usage chunk (no choices).
nlohmann::json chat_chunk_json(const ResponseHeader& header, int choice, const nlohmann::json& delta,
                               const char* finish_reason, const nlohmann::json& logprobs = nullptr);
nlohmann::json chat_usage_chunk_json(const ResponseHeader& header, const Usage& usage);
nlohmann::json text_chunk_json(const ResponseHeader& header, int choice, const std::string& text,
                               const char* finish_reason, const nlohmann::json& logprobs = nullptr);
nlohmann::json text_usage_chunk_json(const ResponseHeader& header, const Usage& usage);

// One request's engine events as the server-sent events its API streams. The server calls event() for each
// event in order and end() once every choice has finished; both return the bytes to send (maybe none).
class EventStream {
 public:
  virtual ~EventStream() = default;
  virtual std::string event(const RequestEvent& event, const Usage& usage_so_far) = 0;
  virtual std::string end(const Usage& usage) = 0;
};

// OpenAI's chat stream (a role chunk per choice, content / reasoning_content / tool_calls deltas, a finish
// chunk, the usage chunk when asked, data: [DONE]) and its completions stream.
std::unique_ptr<EventStream> chat_event_stream(const ApiRequest& request, ResponseHeader header,
                                               const Tokenizer& tokenizer);
std::unique_ptr<EventStream> text_event_stream(const ApiRequest& request, ResponseHeader header,
                                               const Tokenizer& tokenizer);

// GET /v1/models: one model.
nlohmann::json models_json(const std::string& model_id, int64_t created);

}  // namespace lmx
