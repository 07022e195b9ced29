// Server-sent events as the OpenAI and Anthropic streams frame them.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace lmx {

// JSON as a response body or event payload: compact, invalid UTF-8 replaced (never throws).
inline std::string json_text(const nlohmann::json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// "data: {...}\n\n" (OpenAI).
inline std::string sse_data(const nlohmann::json& body) {
  return "data: " + json_text(body) + "\n\n";
}

// "event: NAME\ndata: {...}\n\n" (Anthropic).
inline std::string sse_event(const std::string& name, const nlohmann::json& body) {
  return "event: " + name + "\ndata: " + json_text(body) + "\n\n";
}

}  // namespace lmx
