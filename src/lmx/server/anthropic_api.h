// The Anthropic Messages API bodies the HTTP server speaks (POST /v1/messages and /v1/messages/count_tokens):
// requests turned into the chat template's terms and parsed into GenerationRequests, engine results turned
// into Message objects and the event stream Anthropic sends. Pure functions: http_server.cpp does the I/O.
#pragma once

#include "lmx/server/openai_api.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace lmx {

class Tokenizer;

// {"type": "error", "error": {"type", "message"}} as Anthropic sends it.
nlohmann::json anthropic_error_body(const std::string& message, const std::string& type);
// Anthropic's error type for an HTTP status (400 invalid_request_error, 401 authentication_error, 404
// not_found_error, 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, else api_error).
const char* anthropic_error_type(int status);

// POST /v1/messages: "messages" (user and assistant turns; content a string or blocks: text, tool_use,
// tool_result, thinking), "system" (a string or text blocks), "tools" ({"name", "description",
// "input_schema"}), "tool_choice" ({"type": "auto"} or "none"; "any" and "tool" force a call and are refused:
// they need constrained decoding), "thinking" ({"type": "enabled"|"disabled"}), "max_tokens" (required),
// "stop_sequences", "temperature", "top_p", "top_k", "stream". Throws ApiError (400) naming the field.
ApiRequest parse_messages_request(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                                  const Tokenizer& tokenizer);
// POST /v1/messages/count_tokens: the same body without max_tokens; {"input_tokens": N}.
nlohmann::json count_tokens_json(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                                 const Tokenizer& tokenizer);

// The whole Message: content blocks (thinking, text, tool_use in the order the model wrote them),
// stop_reason (end_turn, max_tokens, stop_sequence with the sequence, tool_use) and usage (input_tokens not
// counting cache_read_input_tokens, as Anthropic counts them).
nlohmann::json message_json(const ResponseHeader& header, const ChoiceOutput& choice, const Usage& usage,
                            const ApiRequest& request);

// message_start, content_block_start / content_block_delta (text_delta, thinking_delta, input_json_delta) /
// content_block_stop per block, message_delta (stop_reason, usage), message_stop; an error event when the
// request fails.
std::unique_ptr<EventStream> messages_event_stream(const ApiRequest& request, ResponseHeader header);

}  // namespace lmx
