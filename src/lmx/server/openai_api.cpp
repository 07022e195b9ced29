// OpenAI request parsing and response bodies (openai_api.h).
#include "lmx/server/openai_api.h"

#include "lmx/core/error.h"
#include "lmx/server/request_fields.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <climits>

namespace lmx {
namespace {

[[noreturn]] void bad_request(const std::string& message, const std::string& param = {}) {
  throw ApiError(400, "invalid_request_error", message, param);
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

nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param,
                          int code) {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (code != 0) e["code"] = code;
  return {{"error", e}};
}

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
    messages.push_back(std::move(out));
  }
  ApiRequest r;
  r.generation = defaults;
  try {
    r.generation.prompt = tokenizer.encode(render_chat(tokenizer, messages, nullptr, true, std::nullopt),
                                           /*add_special_tokens=*/false);
  } catch (const Error& e) {
    bad_request(std::string("the chat template could not render the messages: ") + e.what(), "messages");
  }
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

nlohmann::json chat_completion_json(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                                    const Usage& usage, bool logprobs, const Tokenizer& tokenizer) {
  nlohmann::json out = header_json(header, "chat.completion");
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    list.push_back({{"index", i},
                    {"message", {{"role", "assistant"}, {"content", c.text}}},
                    {"logprobs", logprobs ? chat_logprobs_json(c.logprobs, tokenizer) : nlohmann::json()},
                    {"finish_reason", openai_finish_reason(c.finish.value_or(FinishReason::kStop))}});
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

nlohmann::json models_json(const std::string& model_id, int64_t created) {
  return {
      {"object", "list"},
      {"data", nlohmann::json::array(
                   {{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "lmx"}}})}};
}

}  // namespace lmx
