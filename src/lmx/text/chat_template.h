// lmx::ChatTemplate: renders a model's chat template (Jinja) exactly as transformers' apply_chat_template
// does.
#pragma once

#include "lmx/text/jinja/budget.h"
#include "lmx/text/jinja/template.h"
#include "lmx/text/jinja/template_error.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace lmx {

// What apply_chat_template passes to a template. JSON is nlohmann::ordered_json so objects keep
// the request's key order, which tojson output depends on (parse requests with ordered_json).
struct ChatTemplateInputs {
  // [{"role": ..., "content": "text" or [{"type": "text", "text": ...}, ...], "tool_calls": ...}]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // JSON schemas of the tools, or null: the template then sees tools = None, as in transformers.
  nlohmann::ordered_json tools = nullptr;
  bool add_generation_prompt = true;
  // Passed as `enable_thinking` only when set (templates test `enable_thinking is defined`).
  std::optional<bool> enable_thinking;
  // Special tokens; a token left unset is undefined in the template (e.g. Qwen has no BOS).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // More variables (a JSON object); they override the fields above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// A chat template parsed once with transformers' Jinja settings (trim_blocks, lstrip_blocks,
// loop controls, its tojson, raise_exception and strftime_now) and rendered per request.
// render() is const and safe to call from several threads.
class ChatTemplate {
 public:
  // Throws TemplateError (line, column, source line) when the source does not parse.
  explicit ChatTemplate(const std::string& source, const jinja::RenderLimits& limits = {});

  // The prompt text. Throws TemplateError for raise_exception() in the template (reason() is its
  // message), for errors while rendering (naming the template line), for malformed inputs
  // (messages not an array, tools neither null nor an array, extra not an object), and when a
  // render exceeds the limits.
  std::string render(const ChatTemplateInputs& inputs) const;

 private:
  jinja::Template template_;
  jinja::RenderLimits limits_;
};

class Tokenizer;
// Renders messages (and tools) through the tokenizer's chat template with its BOS and EOS strings.
// InvalidArgument when the model has no chat template; template errors as ChatTemplate::render.
std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        std::optional<bool> enable_thinking);

}  // namespace lmx
