// OpenAI request parsing and response bodies (openai_api.h).
#include "lmx/server/openai_api.h"

#include "lmx/engine/json_schema_constraint.h"

#include "lmx/core/error.h"
#include "lmx/server/request_fields.h"
#include "lmx/server/sse.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <climits>

namespace lmx {
namespace {

[[noreturn]] void bad_request(const std::string& message, const std::string& param = {}) {
  throw_bad_request(message, param);
}

// A message's content as text: a string, null, or text parts joined (other part types refused).
std::string content_text(const nlohmann::ordered_json& content, size_t index) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  const std::string where = "messages[" + std::to_string(index) + "].content";
  if (!content.is_array()) bad_request(where + " must be a string or an array of content parts", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_request(at + " must be an object with a \"type\"", at);
    if (part["type"] != "text") bad_request(at + ": only \"text\" parts are supported", at);
    if (!part.contains("text") || !part["text"].is_string()) bad_request(at + ".text must be a string", at);
    text += part["text"].get<std::string>();
  }
  return text;
}

// The request fields shared by both endpoints, over the parsed prompt.
void apply_common(const nlohmann::ordered_json& body, ApiRequest& r) {
  try {
    apply_request_fields(body, r.generation);
  } catch (const InvalidArgument& e) {
    bad_request(e.what());
  }
  if (body.contains("stream")) {
    if (!body["stream"].is_boolean()) bad_request("\"stream\" must be a boolean", "stream");
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const auto& f = body["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      bad_request("\"response_format\" must be an object with a \"type\"", "response_format");
    if (f["type"] == "json_object") {
      r.generation.json_object = true;
    } else if (f["type"] == "json_schema") {
      if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema"))
        bad_request("response_format json_schema needs \"json_schema\": {\"name\", \"schema\"}",
                    "response_format");
      try {
        r.generation.json_schema = JsonSchema::compile(f["json_schema"]["schema"]);
      } catch (const InvalidArgument& e) {
        bad_request(std::string("response_format.json_schema.") + e.what(), "response_format");
      }
    } else if (f["type"] != "text") {
      bad_request("\"response_format.type\" must be text, json_object or json_schema", "response_format");
    }
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const auto& o = body["stream_options"];
    if (!o.is_object()) bad_request("\"stream_options\" must be an object", "stream_options");
    if (o.contains("include_usage")) {
      if (!o["include_usage"].is_boolean())
        bad_request("\"stream_options.include_usage\" must be a boolean", "stream_options");
      r.include_usage = o["include_usage"].get<bool>();
    }
  }
}

void require_object(const nlohmann::ordered_json& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
}

std::vector<int32_t> token_ids(const nlohmann::ordered_json& ids, const Tokenizer& tokenizer) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 || ids[i].get<int64_t>() > INT32_MAX ||
        !tokenizer.is_valid_id(static_cast<int32_t>(ids[i].get<int64_t>())))
      bad_request("\"prompt\"[" + std::to_string(i) + "] is not a token id of this model", "prompt");
    out.push_back(static_cast<int32_t>(ids[i].get<int64_t>()));
  }
  return out;
}

}  // namespace

void throw_bad_request(const std::string& message, const std::string& param) {
  throw ApiError(400, "invalid_request_error", message, param);
}

const char* openai_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "server_error";
  }
}

nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param,
                          int code) {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (code != 0) e["code"] = code;
  return {{"error", e}};
}

ToolChoice forced_tool_choice(const nlohmann::ordered_json& tools, const std::string* name) {
  if (tools.empty())
    bad_request("tool_choice forces a tool call, but the request has no \"tools\"", "tool_choice");
  std::vector<std::string> names;
  for (const auto& t : tools) names.push_back(t["function"]["name"].get<std::string>());
  if (name == nullptr) return {true, names};
  if (std::find(names.begin(), names.end(), *name) == names.end())
    bad_request("tool_choice names \"" + *name + "\", which is not among the request's tools", "tool_choice");
  return {true, {*name}};
}

ApiRequest render_chat_request(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               bool parse_tools, std::optional<bool> enable_thinking,
                               const GenerationRequest& defaults, const Tokenizer& tokenizer,
                               const std::vector<std::string>& forced_tools) {
  ApiRequest r;
  r.generation = defaults;
  try {
    r.generation.prompt =
        tokenizer.encode(render_chat(tokenizer, messages, tools.empty() ? nlohmann::ordered_json() : tools,
                                     true, enable_thinking),
                         /*add_special_tokens=*/false);
  } catch (const Error& e) {
    bad_request(std::string("the chat template could not render the messages: ") + e.what(), "messages");
  }
  r.output = output_format_of_template(tokenizer.chat_template());
  r.parse_tools = parse_tools && !tools.empty();
  r.generation.keep_special_tokens = r.output != OutputFormat::kPlain;
  // Gemma 4 opens the tool's response after its calls: the model's turn ends there.
  if (r.parse_tools && r.output == OutputFormat::kGemma4) {
    const int32_t response = tokenizer.token_to_id("<|tool_response>");
    if (response >= 0) r.generation.stop_token_ids.push_back(response);
  }
  if (!forced_tools.empty()) {
    try {
      ForcedToolCall forced = forced_tool_call(r.output, forced_tools);
      r.generation.forced_prefixes = std::move(forced.prefixes);
      r.generation.forced_arguments = forced.arguments;
      r.generation.forced_suffix = std::move(forced.suffix);
      // Arguments follow their tool's parameter schema when it is in the subset constrained decoding
      // enforces (json_schema_constraint.h) and, for Gemma 4, its syntax can write it; otherwise they are
      // any object.
      if (forced.arguments != ForcedArguments::kFree)
        for (const std::string& name : forced_tools) {
          std::shared_ptr<const JsonSchema> schema;
          for (const auto& t : tools)
            if (t["function"]["name"] == name && t["function"].contains("parameters")) {
              try {
                schema = JsonSchema::compile(t["function"]["parameters"]);
              } catch (const InvalidArgument&) {
                schema = nullptr;
              }
            }
          if (schema && forced.arguments == ForcedArguments::kGemma4 && !schema->gemma4_writable())
            schema = nullptr;
          r.generation.forced_schemas.push_back(std::move(schema));
        }
    } catch (const InvalidArgument& e) {
      bad_request(e.what(), "tool_choice");
    }
  }
  return r;
}

namespace {

// OpenAI "tools": [{"type": "function", "function": {"name", "description", "parameters"}}].
nlohmann::ordered_json openai_tools(const nlohmann::ordered_json& body) {
  if (!body.contains("tools") || body["tools"].is_null()) return nlohmann::ordered_json::array();
  const auto& tools = body["tools"];
  if (!tools.is_array()) bad_request("\"tools\" must be an array", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object())
      bad_request(at + " must be {\"type\": \"function\", \"function\": {...}}", at);
    if (!t["function"].contains("name") || !t["function"]["name"].is_string() ||
        t["function"]["name"].get<std::string>().empty())
      bad_request(at + ".function.name must be a non-empty string", at);
    if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object())
      bad_request(at + ".function.parameters must be a JSON schema object", at);
  }
  return tools;
}

// tool_choice: whether the tools are offered ("auto", the default; "none" offers none), and the tools a
// forced call may take ("required": any of them; {"type": "function", "function": {"name"}}: that one).
ToolChoice tool_choice(const nlohmann::ordered_json& body, const nlohmann::ordered_json& tools) {
  ToolChoice choice;
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return choice;
  const auto& c = body["tool_choice"];
  if (c == "auto") return choice;
  if (c == "none") return {false, {}};
  if (c != "required" && !c.is_object())
    bad_request("\"tool_choice\" must be \"auto\", \"none\", \"required\" or a named function",
                "tool_choice");
  if (c == "required") return forced_tool_choice(tools, nullptr);
  if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
      !c["function"]["name"].is_string())
    bad_request("a named tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tool_choice");
  const std::string name = c["function"]["name"].get<std::string>();
  return forced_tool_choice(tools, &name);
}

// An assistant message's "tool_calls" as the template wants them: arguments parsed into objects.
nlohmann::ordered_json template_tool_calls(const nlohmann::ordered_json& calls, const std::string& where) {
  if (!calls.is_array()) bad_request(where + " must be an array", where);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const auto& c = calls[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      bad_request(at + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                  at);
    nlohmann::ordered_json args = c["function"].value("arguments", nlohmann::ordered_json("{}"));
    if (args.is_string()) args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
    if (!args.is_object()) bad_request(at + ".function.arguments must be a JSON object (as a string)", at);
    out.push_back({{"id", c.value("id", "")},
                   {"type", "function"},
                   {"function", {{"name", c["function"]["name"]}, {"arguments", std::move(args)}}}});
  }
  return out;
}

std::optional<bool> enable_thinking(const nlohmann::ordered_json& body) {
  if (!body.contains("chat_template_kwargs") || body["chat_template_kwargs"].is_null()) return std::nullopt;
  const auto& kw = body["chat_template_kwargs"];
  if (!kw.is_object()) bad_request("\"chat_template_kwargs\" must be an object", "chat_template_kwargs");
  if (!kw.contains("enable_thinking")) return std::nullopt;
  if (!kw["enable_thinking"].is_boolean())
    bad_request("\"chat_template_kwargs.enable_thinking\" must be a boolean", "chat_template_kwargs");
  return kw["enable_thinking"].get<bool>();
}

}  // namespace

ApiRequest parse_chat_request(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                              const Tokenizer& tokenizer) {
  require_object(body);
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad_request("\"messages\" must be a non-empty array of messages", "messages");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const auto& m = body["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_request(where + " must be an object with a string \"role\"", where);
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_request(where + ".role \"" + role + "\" is not one of system, developer, user, assistant, tool",
                  where);
    nlohmann::ordered_json out = {{"role", role},
                                  {"content", content_text(m.value("content", nlohmann::ordered_json()), i)}};
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null())
      out["tool_calls"] = template_tool_calls(m["tool_calls"], where + ".tool_calls");
    if (role == "assistant" && m.contains("reasoning_content") && m["reasoning_content"].is_string())
      out["reasoning_content"] = m["reasoning_content"];
    if (role == "tool") {
      if (m.contains("tool_call_id") && !m["tool_call_id"].is_string())
        bad_request(where + ".tool_call_id must be a string", where);
      if (m.contains("tool_call_id")) out["tool_call_id"] = m["tool_call_id"];
      if (m.contains("name") && m["name"].is_string()) out["name"] = m["name"];
    }
    messages.push_back(std::move(out));
  }
  const nlohmann::ordered_json tools = openai_tools(body);
  const ToolChoice choice = tool_choice(body, tools);
  ApiRequest r =
      render_chat_request(messages, choice.offered ? tools : nlohmann::ordered_json::array(), choice.offered,
                          enable_thinking(body), defaults, tokenizer, choice.forced);
  apply_common(body, r);
  return r;
}

ApiRequest parse_completion_request(const nlohmann::ordered_json& body, const GenerationRequest& defaults,
                                    const Tokenizer& tokenizer) {
  require_object(body);
  if (!body.contains("prompt")) bad_request("\"prompt\" is required", "prompt");
  nlohmann::ordered_json prompt = body["prompt"];
  // A batch of one prompt is that prompt.
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array()))
    prompt = prompt[0];
  ApiRequest r;
  r.generation = defaults;
  if (prompt.is_string()) {
    r.prompt_text = prompt.get<std::string>();
    r.generation.prompt = tokenizer.encode(r.prompt_text, /*add_special_tokens=*/true);
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    r.generation.prompt = token_ids(prompt, tokenizer);
    r.prompt_text = tokenizer.decode(r.generation.prompt);
  } else {
    bad_request("\"prompt\" must be a string or an array of token ids (one prompt per request)", "prompt");
  }
  if (r.generation.prompt.empty()) bad_request("\"prompt\" is empty", "prompt");
  if (body.contains("echo")) {
    if (!body["echo"].is_boolean()) bad_request("\"echo\" must be a boolean", "echo");
    r.echo = body["echo"].get<bool>();
  }
  apply_common(body, r);
  return r;
}

void accumulate(ChoiceOutput& out, const RequestEvent& event) {
  out.text += event.text;
  out.tokens.insert(out.tokens.end(), event.tokens.begin(), event.tokens.end());
  out.logprobs.insert(out.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
  if (event.finish) {
    out.finish = event.finish;
    out.error = event.error;
    out.stop_string = event.stop_string;
  }
}

nlohmann::json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

const char* openai_finish_reason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer) {
  nlohmann::json content = nlohmann::json::array();
  auto entry = [&](int32_t id, float lp) {
    const std::string text = tokenizer.decode(std::span(&id, 1));
    return nlohmann::json{
        {"token", text}, {"logprob", lp}, {"bytes", std::vector<uint8_t>(text.begin(), text.end())}};
  };
  for (const TokenLogprob& t : logprobs) {
    nlohmann::json e = entry(t.token, t.logprob);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& logprobs,
                                        const Tokenizer& tokenizer) {
  nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array(),
                 top = nlohmann::json::array(), offsets = nlohmann::json::array();
  size_t offset = 0;
  for (const TokenLogprob& t : logprobs) {
    const std::string text = tokenizer.decode(std::span(&t.token, 1));
    tokens.push_back(text);
    values.push_back(t.logprob);
    offsets.push_back(offset);
    offset += text.size();
    nlohmann::json alternatives = nlohmann::json::object();
    for (const auto& [id, lp] : t.top) alternatives[tokenizer.decode(std::span(&id, 1))] = lp;
    top.push_back(std::move(alternatives));
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}, {"text_offset", offsets}};
}

namespace {
nlohmann::json header_json(const ResponseHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}
}  // namespace

namespace {
const char* chat_finish_reason(const ChoiceOutput& c, bool called) {
  const FinishReason f = c.finish.value_or(FinishReason::kStop);
  return called && f == FinishReason::kStop ? "tool_calls" : openai_finish_reason(f);
}

nlohmann::json tool_call_json(const ToolCall& call, const std::string& id) {
  return {{"id", id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments.dump()}}}};
}
}  // namespace

nlohmann::json chat_completion_json(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                                    const Usage& usage, const ApiRequest& request,
                                    const Tokenizer& tokenizer) {
  const bool logprobs = request.generation.top_logprobs >= 0;
  nlohmann::json out = header_json(header, "chat.completion");
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    const AssistantOutput split = split_output(request.output, request.parse_tools, c.text);
    nlohmann::json message = {{"role", "assistant"}, {"content", split.content}};
    if (!split.reasoning.empty()) message["reasoning_content"] = split.reasoning;
    if (!split.tool_calls.empty()) {
      if (split.content.empty()) message["content"] = nullptr;
      nlohmann::json calls = nlohmann::json::array();
      for (const ToolCall& call : split.tool_calls) calls.push_back(tool_call_json(call, new_tool_call_id()));
      message["tool_calls"] = std::move(calls);
    }
    list.push_back({{"index", i},
                    {"message", std::move(message)},
                    {"logprobs", logprobs ? chat_logprobs_json(c.logprobs, tokenizer) : nlohmann::json()},
                    {"finish_reason", chat_finish_reason(c, !split.tool_calls.empty())}});
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

nlohmann::json text_completion_json(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                                    const Usage& usage, bool logprobs, const std::string& echo_prefix,
                                    const Tokenizer& tokenizer) {
  nlohmann::json out = header_json(header, "text_completion");
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    list.push_back(
        {{"index", i},
         {"text", echo_prefix + c.text},
         {"logprobs", logprobs ? completion_logprobs_json(c.logprobs, tokenizer) : nlohmann::json()},
         {"finish_reason", openai_finish_reason(c.finish.value_or(FinishReason::kStop))}});
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

nlohmann::json chat_chunk_json(const ResponseHeader& header, int choice, const nlohmann::json& delta,
                               const char* finish_reason, const nlohmann::json& logprobs) {
  nlohmann::json out = header_json(header, "chat.completion.chunk");
  out["choices"] = nlohmann::json::array(
      {{{"index", choice},
        {"delta", delta},
        {"logprobs", logprobs},
        {"finish_reason", finish_reason ? nlohmann::json(finish_reason) : nlohmann::json()}}});
  return out;
}

namespace {
nlohmann::json usage_chunk_json(const ResponseHeader& header, const char* object, const Usage& usage) {
  nlohmann::json out = header_json(header, object);
  out["choices"] = nlohmann::json::array();
  out["usage"] = usage_json(usage);
  return out;
}
}  // namespace

nlohmann::json chat_usage_chunk_json(const ResponseHeader& header, const Usage& usage) {
  return usage_chunk_json(header, "chat.completion.chunk", usage);
}

nlohmann::json text_usage_chunk_json(const ResponseHeader& header, const Usage& usage) {
  return usage_chunk_json(header, "text_completion", usage);
}

nlohmann::json text_chunk_json(const ResponseHeader& header, int choice, const std::string& text,
                               const char* finish_reason, const nlohmann::json& logprobs) {
  nlohmann::json out = header_json(header, "text_completion");
  out["choices"] = nlohmann::json::array(
      {{{"index", choice},
        {"text", text},
        {"logprobs", logprobs},
        {"finish_reason", finish_reason ? nlohmann::json(finish_reason) : nlohmann::json()}}});
  return out;
}

namespace {

class ChatStream final : public EventStream {
 public:
  ChatStream(const ApiRequest& r, ResponseHeader h, const Tokenizer& t)
      : header_(std::move(h)),
        tokenizer_(t),
        logprobs_(r.generation.top_logprobs >= 0),
        include_usage_(r.include_usage) {
    for (int i = 0; i < r.generation.n; ++i) choices_.push_back({OutputSplitter(r.output, r.parse_tools)});
  }

  std::string event(const RequestEvent& e, const Usage&) override {
    Choice& c = choices_.at(static_cast<size_t>(e.choice));
    std::string out;
    if (!c.started) {
      out += sse_data(chat_chunk_json(header_, e.choice, {{"role", "assistant"}, {"content", ""}}, nullptr));
      c.started = true;
    }
    std::vector<OutputPiece> pieces = c.splitter.feed(e.text);
    if (e.finish)
      for (OutputPiece& p : c.splitter.finish()) pieces.push_back(std::move(p));
    nlohmann::json lp =
        logprobs_ && !e.logprobs.empty() ? chat_logprobs_json(e.logprobs, tokenizer_) : nullptr;
    for (const OutputPiece& p : pieces) {
      out += sse_data(chat_chunk_json(header_, e.choice, delta(p, c), nullptr, lp));
      lp = nullptr;
    }
    if (!lp.is_null()) out += sse_data(chat_chunk_json(header_, e.choice, {{"content", ""}}, nullptr, lp));
    if (!e.finish) return out;
    if (*e.finish == FinishReason::kError || *e.finish == FinishReason::kCancelled)
      return out +
             sse_data(error_body(e.error.empty() ? "the request was cancelled" : e.error, "server_error"));
    const char* reason =
        c.calls > 0 && *e.finish == FinishReason::kStop ? "tool_calls" : openai_finish_reason(*e.finish);
    return out + sse_data(chat_chunk_json(header_, e.choice, nlohmann::json::object(), reason));
  }

  std::string end(const Usage& usage) override {
    return (include_usage_ ? sse_data(chat_usage_chunk_json(header_, usage)) : std::string()) +
           "data: [DONE]\n\n";
  }

 private:
  struct Choice {
    OutputSplitter splitter;
    bool started = false;
    int calls = 0;
  };
  static nlohmann::json delta(const OutputPiece& p, Choice& c) {
    if (p.kind == OutputPiece::kContent) return {{"content", p.text}};
    if (p.kind == OutputPiece::kReasoning) return {{"reasoning_content", p.text}};
    nlohmann::json call = tool_call_json(p.call, new_tool_call_id());
    call["index"] = c.calls++;
    return {{"tool_calls", nlohmann::json::array({std::move(call)})}};
  }

  ResponseHeader header_;
  const Tokenizer& tokenizer_;
  bool logprobs_, include_usage_;
  std::vector<Choice> choices_;
};

class TextStream final : public EventStream {
 public:
  TextStream(const ApiRequest& r, ResponseHeader h, const Tokenizer& t)
      : header_(std::move(h)),
        tokenizer_(t),
        logprobs_(r.generation.top_logprobs >= 0),
        include_usage_(r.include_usage),
        echo_(r.echo ? r.prompt_text : std::string()),
        started_(static_cast<size_t>(r.generation.n), false) {}

  std::string event(const RequestEvent& e, const Usage&) override {
    std::string out;
    if (!started_.at(static_cast<size_t>(e.choice)) && !echo_.empty())
      out += sse_data(text_chunk_json(header_, e.choice, echo_, nullptr));
    started_[static_cast<size_t>(e.choice)] = true;
    if (!e.text.empty() || (logprobs_ && !e.logprobs.empty()))
      out +=
          sse_data(text_chunk_json(header_, e.choice, e.text, nullptr,
                                   logprobs_ ? completion_logprobs_json(e.logprobs, tokenizer_) : nullptr));
    if (!e.finish) return out;
    if (*e.finish == FinishReason::kError || *e.finish == FinishReason::kCancelled)
      return out +
             sse_data(error_body(e.error.empty() ? "the request was cancelled" : e.error, "server_error"));
    return out + sse_data(text_chunk_json(header_, e.choice, "", openai_finish_reason(*e.finish)));
  }

  std::string end(const Usage& usage) override {
    return (include_usage_ ? sse_data(text_usage_chunk_json(header_, usage)) : std::string()) +
           "data: [DONE]\n\n";
  }

 private:
  ResponseHeader header_;
  const Tokenizer& tokenizer_;
  bool logprobs_, include_usage_;
  std::string echo_;
  std::vector<bool> started_;
};

}  // namespace

std::unique_ptr<EventStream> chat_event_stream(const ApiRequest& request, ResponseHeader header,
                                               const Tokenizer& tokenizer) {
  return std::make_unique<ChatStream>(request, std::move(header), tokenizer);
}

std::unique_ptr<EventStream> text_event_stream(const ApiRequest& request, ResponseHeader header,
                                               const Tokenizer& tokenizer) {
  return std::make_unique<TextStream>(request, std::move(header), tokenizer);
}

nlohmann::json models_json(const std::string& model_id, int64_t created) {
  return {
      {"object", "list"},
      {"data", nlohmann::json::array(
                   {{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "lmx"}}})}};
}

}  // namespace lmx
