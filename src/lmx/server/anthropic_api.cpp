// Anthropic Messages API parsing and response bodies (anthropic_api.h).
#include "lmx/server/anthropic_api.h"

#include "lmx/core/error.h"
#include "lmx/server/request_fields.h"
#include "lmx/server/sse.h"
#include "lmx/text/tokenizer.h"

namespace lmx {
namespace {

[[noreturn]] void bad_request(const std::string& message, const std::string& param = {}) {
  throw_bad_request(message, param);
}

// Text blocks (or a string) as one text; any other block type is refused.
std::string blocks_text(const nlohmann::ordered_json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) bad_request(where + " must be a string or an array of content blocks", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      bad_request(at + " must be an object with a \"type\"", at);
    if (b["type"] != "text") bad_request(at + ": only text blocks are supported here", at);
    if (!b.contains("text") || !b["text"].is_string()) bad_request(at + ".text must be a string", at);
    text += b["text"].get<std::string>();
  }
  return text;
}

// Anthropic messages → the chat template's OpenAI-shaped messages (tool results become tool messages
// before the user turn that carries them; tool_use blocks become the assistant's tool_calls).
nlohmann::ordered_json template_messages(const nlohmann::ordered_json& body) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (body.contains("system") && !body["system"].is_null())
    out.push_back({{"role", "system"}, {"content", blocks_text(body["system"], "system")}});
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad_request("\"messages\" must be a non-empty array of messages", "messages");
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const auto& m = body["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_request(where + " must be an object with a string \"role\"", where);
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant")
      bad_request(where + ".role \"" + role + "\" is not user or assistant", where);
    if (!m.contains("content")) bad_request(where + ".content is required", where);
    const auto& content = m["content"];
    if (content.is_string()) {
      out.push_back({{"role", role}, {"content", content}});
      continue;
    }
    if (!content.is_array()) bad_request(where + ".content must be a string or an array of blocks", where);
    std::string text, reasoning;
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (size_t k = 0; k < content.size(); ++k) {
      const auto& b = content[k];
      const std::string at = where + ".content[" + std::to_string(k) + "]";
      if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
        bad_request(at + " must be an object with a \"type\"", at);
      const std::string type = b["type"].get<std::string>();
      if (type == "text") {
        if (!b.contains("text") || !b["text"].is_string()) bad_request(at + ".text must be a string", at);
        text += b["text"].get<std::string>();
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string() || !b.contains("id") || !b["id"].is_string())
          bad_request(at + " needs a string \"id\" and \"name\"", at);
        const nlohmann::ordered_json input = b.value("input", nlohmann::ordered_json::object());
        if (!input.is_object()) bad_request(at + ".input must be an object", at);
        calls.push_back({{"id", b["id"]},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", input}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
          bad_request(at + ".tool_use_id must be a string", at);
        const std::string result =
            blocks_text(b.value("content", nlohmann::ordered_json("")), at + ".content");
        out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
      } else if (type == "thinking" && role == "assistant") {
        reasoning += b.value("thinking", "");
      } else if (type == "redacted_thinking") {
      } else {
        bad_request(at + ": \"" + type + "\" blocks are not supported in " + role +
                        " turns (text, tool_use, tool_result and thinking are)",
                    at);
      }
    }
    if (role == "user" && text.empty() && content.size() > 0 && out.back()["role"] == "tool") continue;
    nlohmann::ordered_json msg = {{"role", role}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    out.push_back(std::move(msg));
  }
  return out;
}

// Anthropic tools → the template's function tools.
nlohmann::ordered_json template_tools(const nlohmann::ordered_json& body) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!body.contains("tools") || body["tools"].is_null()) return out;
  if (!body["tools"].is_array()) bad_request("\"tools\" must be an array", "tools");
  for (size_t i = 0; i < body["tools"].size(); ++i) {
    const auto& t = body["tools"][i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        t["name"].get<std::string>().empty())
      bad_request(at + " must be an object with a non-empty string \"name\"", at);
    if (t.contains("type") && !t["type"].is_null() && t["type"] != "custom")
      bad_request(at + ": server tools (\"" + t["type"].dump() + "\") are not supported", at);
    nlohmann::ordered_json schema = t.value("input_schema", nlohmann::ordered_json::object());
    if (!schema.is_object()) bad_request(at + ".input_schema must be a JSON schema object", at);
    nlohmann::ordered_json function = {{"name", t["name"]}, {"description", t.value("description", "")}};
    function["parameters"] = std::move(schema);
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// tool_choice: whether the tools are offered ("auto", the default; "none" offers none), and the tools a
// forced call may take ("any": any of them; "tool" with "name": that one).
ToolChoice tool_choice(const nlohmann::ordered_json& body, const nlohmann::ordered_json& tools) {
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return {};
  const auto& c = body["tool_choice"];
  if (!c.is_object() || !c.contains("type") || !c["type"].is_string())
    bad_request("\"tool_choice\" must be an object with a \"type\"", "tool_choice");
  if (c["type"] == "auto") return {};
  if (c["type"] == "none") return {false, {}};
  if (c["type"] != "any" && c["type"] != "tool")
    bad_request("\"tool_choice.type\" must be auto, any, tool or none", "tool_choice");
  if (c["type"] == "any") return forced_tool_choice(tools, nullptr);
  if (!c.contains("name") || !c["name"].is_string())
    bad_request("tool_choice \"tool\" needs a \"name\"", "tool_choice");
  const std::string name = c["name"].get<std::string>();
  return forced_tool_choice(tools, &name);
}

std::optional<bool> thinking(const nlohmann::ordered_json& body) {
  if (!body.contains("thinking") || body["thinking"].is_null()) return std::nullopt;
  const auto& t = body["thinking"];
  if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
    bad_request("\"thinking\" must be an object with a \"type\"", "thinking");
  if (t["type"] == "enabled") return true;
  if (t["type"] == "disabled") return false;
  bad_request("\"thinking.type\" must be enabled or disabled", "thinking");
}

ApiRequest parse(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                 const Tokenizer& tokenizer) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  if (body.contains("model") && !body["model"].is_string())
    bad_request("\"model\" must be a string", "model");
  const nlohmann::ordered_json messages = template_messages(body);
  const nlohmann::ordered_json all_tools = template_tools(body);
  const ToolChoice choice = tool_choice(body, all_tools);
  const nlohmann::ordered_json tools = choice.offered ? all_tools : nlohmann::ordered_json::array();
  return render_chat_request(messages, tools, choice.offered, thinking(body), defaults, tokenizer,
                             choice.forced);
}

// Anthropic's content pieces in the order the model wrote them.
std::vector<OutputPiece> pieces_of(const ApiRequest& request, const std::string& text) {
  OutputSplitter splitter(request.output, request.parse_tools);
  std::vector<OutputPiece> pieces = splitter.feed(text);
  for (OutputPiece& p : splitter.finish()) {
    if (!pieces.empty() && p.kind != OutputPiece::kToolCall && pieces.back().kind == p.kind)
      pieces.back().text += p.text;
    else
      pieces.push_back(std::move(p));
  }
  return pieces;
}

nlohmann::json tool_use_block(const ToolCall& call, bool with_input) {
  return {{"type", "tool_use"},
          {"id", "toolu_" + new_tool_call_id().substr(5)},
          {"name", call.name},
          {"input", with_input ? nlohmann::json(call.arguments) : nlohmann::json::object()}};
}

struct StopInfo {
  const char* reason;
  nlohmann::json sequence;
};
StopInfo stop_info(std::optional<FinishReason> finish, int stop_string, bool called,
                   const std::vector<std::string>& stop) {
  if (called) return {"tool_use", nullptr};
  if (finish == FinishReason::kLength) return {"max_tokens", nullptr};
  if (stop_string >= 0 && static_cast<size_t>(stop_string) < stop.size())
    return {"stop_sequence", stop[static_cast<size_t>(stop_string)]};
  return {"end_turn", nullptr};
}

nlohmann::json usage_body(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens", u.completion_tokens}};
}

nlohmann::json message_shell(const ResponseHeader& h) {
  return {{"id", h.id}, {"type", "message"}, {"role", "assistant"}, {"model", h.model}};
}

}  // namespace

nlohmann::json anthropic_error_body(const std::string& message, const std::string& type) {
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

const char* anthropic_error_type(int status) {
  // The same names as OpenAI's, but Anthropic calls a server failure api_error.
  const std::string_view type = openai_error_type(status);
  return type == "server_error" ? "api_error" : type.data();
}

ApiRequest parse_messages_request(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                                  const Tokenizer& tokenizer) {
  ApiRequest r = parse(body, defaults, tokenizer);
  if (!body.contains("max_tokens")) bad_request("\"max_tokens\" is required", "max_tokens");
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  for (const char* f : {"max_tokens", "temperature", "top_p", "top_k"})
    if (body.contains(f)) fields[f] = body[f];
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    if (!body["stop_sequences"].is_array())
      bad_request("\"stop_sequences\" must be an array of strings", "stop_sequences");
    fields["stop"] = body["stop_sequences"];
  }
  try {
    apply_request_fields(fields, r.generation);
  } catch (const InvalidArgument& e) {
    bad_request(e.what());
  }
  if (body.contains("stream")) {
    if (!body["stream"].is_boolean()) bad_request("\"stream\" must be a boolean", "stream");
    r.stream = body["stream"].get<bool>();
  }
  return r;
}

nlohmann::json count_tokens_json(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                                 const Tokenizer& tokenizer) {
  return {{"input_tokens", parse(body, defaults, tokenizer).generation.prompt.size()}};
}

nlohmann::json message_json(const ResponseHeader& header, const ChoiceOutput& choice, const Usage& usage,
                            const ApiRequest& request) {
  nlohmann::json content = nlohmann::json::array();
  bool called = false;
  for (const OutputPiece& p : pieces_of(request, choice.text)) {
    if (p.kind == OutputPiece::kContent) content.push_back({{"type", "text"}, {"text", p.text}});
    if (p.kind == OutputPiece::kReasoning)
      content.push_back({{"type", "thinking"}, {"thinking", p.text}, {"signature", ""}});
    if (p.kind == OutputPiece::kToolCall) {
      content.push_back(tool_use_block(p.call, true));
      called = true;
    }
  }
  const StopInfo stop = stop_info(choice.finish, choice.stop_string, called, request.generation.stop);
  nlohmann::json out = message_shell(header);
  out["content"] = std::move(content);
  out["stop_reason"] = stop.reason;
  out["stop_sequence"] = stop.sequence;
  out["usage"] = usage_body(usage);
  return out;
}

namespace {

class MessagesStream final : public EventStream {
 public:
  MessagesStream(const ApiRequest& r, ResponseHeader h)
      : stop_(r.generation.stop), header_(std::move(h)), splitter_(r.output, r.parse_tools) {}

  std::string event(const RequestEvent& e, const Usage& usage) override {
    std::string out;
    if (!started_) {
      nlohmann::json message = message_shell(header_);
      message["content"] = nlohmann::json::array();
      message["stop_reason"] = nullptr;
      message["stop_sequence"] = nullptr;
      message["usage"] = usage_body(usage);
      out += sse_event("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
      started_ = true;
    }
    std::vector<OutputPiece> pieces = splitter_.feed(e.text);
    if (e.finish)
      for (OutputPiece& p : splitter_.finish()) pieces.push_back(std::move(p));
    for (const OutputPiece& p : pieces) out += piece(p);
    if (!e.finish) return out;
    if (*e.finish == FinishReason::kError || *e.finish == FinishReason::kCancelled)
      return out +
             sse_event("error", anthropic_error_body(e.error.empty() ? "the request was cancelled" : e.error,
                                                     "api_error"));
    out += close_block();
    finish_ = e.finish;
    stop_string_ = e.stop_string;
    return out;
  }

  std::string end(const Usage& usage) override {
    const StopInfo stop = stop_info(finish_, stop_string_, called_, stop_);
    return sse_event("message_delta",
                     {{"type", "message_delta"},
                      {"delta", {{"stop_reason", stop.reason}, {"stop_sequence", stop.sequence}}},
                      {"usage", {{"output_tokens", usage.completion_tokens}}}}) +
           sse_event("message_stop", {{"type", "message_stop"}});
  }

 private:
  std::string close_block() {
    if (open_ < 0) return {};
    std::string out = sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", open_}});
    open_ = -1;
    return out;
  }
  std::string open_block(const nlohmann::json& block, OutputPiece::Kind kind) {
    std::string out = close_block();
    open_ = next_++;
    open_kind_ = kind;
    return out + sse_event("content_block_start",
                           {{"type", "content_block_start"}, {"index", open_}, {"content_block", block}});
  }
  std::string delta(const nlohmann::json& d) {
    return sse_event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", open_}, {"delta", d}});
  }
  std::string piece(const OutputPiece& p) {
    std::string out;
    if (p.kind == OutputPiece::kToolCall) {
      called_ = true;
      out += open_block(tool_use_block(p.call, false), p.kind);
      out += delta({{"type", "input_json_delta"}, {"partial_json", nlohmann::json(p.call.arguments).dump()}});
      return out + close_block();
    }
    const bool text = p.kind == OutputPiece::kContent;
    if (open_ < 0 || open_kind_ != p.kind)
      out += open_block(text ? nlohmann::json{{"type", "text"}, {"text", ""}}
                             : nlohmann::json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}},
                        p.kind);
    return out + delta(text ? nlohmann::json{{"type", "text_delta"}, {"text", p.text}}
                            : nlohmann::json{{"type", "thinking_delta"}, {"thinking", p.text}});
  }

  std::vector<std::string> stop_;
  ResponseHeader header_;
  OutputSplitter splitter_;
  bool started_ = false, called_ = false;
  int open_ = -1, next_ = 0;
  OutputPiece::Kind open_kind_ = OutputPiece::kContent;
  std::optional<FinishReason> finish_;
  int stop_string_ = -1;
};

}  // namespace

std::unique_ptr<EventStream> messages_event_stream(const ApiRequest& request, ResponseHeader header) {
  return std::make_unique<MessagesStream>(request, std::move(header));
}

}  // namespace lmx
