// The transformers-side tokenizer settings of a model directory: tokenizer_config.json,
// special_tokens_map.json and chat_template.jinja / chat_template.json.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace lmx::text {

struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
  // The default chat template ("" when the model has none) and every named one ("default" among them
  // when the config lists templates by name).
  std::string chat_template;
  std::map<std::string, std::string> chat_templates;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  bool clean_up_tokenization_spaces = false;

  // Reads the optional files of `model_dir`; missing files leave defaults. Special tokens may be a
  // string or an {"content": ...} object; special_tokens_map.json overrides tokenizer_config.json
  // (as transformers loads them). The chat template comes from chat_template.jinja if present,
  // else chat_template.json's "chat_template", else tokenizer_config.json's "chat_template" (a
  // string, or a list of {"name", "template"} whose "default" entry is the default). Throws
  // FormatError naming the file and field for malformed content.
  static TokenizerConfig load(const std::string& model_dir);
};

}  // namespace lmx::text
