// lmx::ChatTemplate: renders a model's chat template (Jinja) exactly as transformers' apply_chat_template
// does.
#include "lmx/text/chat_template.h"

#include "lmx/core/error.h"
#include "lmx/text/jinja/json_convert.h"
#include "lmx/text/tokenizer.h"

namespace lmx {

ChatTemplate::ChatTemplate(const std::string& source, const jinja::RenderLimits& limits)
    : template_(source), limits_(limits) {}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  using jinja::Value;
  if (!inputs.messages.is_array()) throw TemplateError("chat messages must be a JSON array");
  if (!inputs.tools.is_null() && !inputs.tools.is_array())
    throw TemplateError("chat tools must be null or a JSON array");
  if (!inputs.extra.is_object()) throw TemplateError("extra template variables must be a JSON object");
  // transformers: render(messages=..., tools=..., documents=None, add_generation_prompt=...,
  // **special_tokens, **template_kwargs).
  std::vector<std::pair<std::string, Value>> vars;
  auto put = [&vars](const std::string& name, Value value) {
    for (auto& [key, existing] : vars) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  };
  put("messages", jinja::value_from_json(inputs.messages));
  put("tools", jinja::value_from_json(inputs.tools));
  put("documents", Value::none());
  put("add_generation_prompt", Value::boolean(inputs.add_generation_prompt));
  if (inputs.bos_token) put("bos_token", Value::string(*inputs.bos_token));
  if (inputs.eos_token) put("eos_token", Value::string(*inputs.eos_token));
  if (inputs.enable_thinking) put("enable_thinking", Value::boolean(*inputs.enable_thinking));
  for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it)
    put(it.key(), jinja::value_from_json(it.value()));
  return template_.render(std::move(vars), limits_);
}

std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        std::optional<bool> enable_thinking) {
  if (tokenizer.chat_template().empty())
    throw InvalidArgument("the model has no chat template (chat_template.jinja or tokenizer_config.json)");
  ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.tools = tools;
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.enable_thinking = enable_thinking;
  inputs.bos_token = tokenizer.bos_token();
  inputs.eos_token = tokenizer.eos_token();
  return ChatTemplate(tokenizer.chat_template()).render(inputs);
}

}  // namespace lmx
