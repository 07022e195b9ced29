// Reading tokenizer_config.json, special_tokens_map.json and chat template files.
#include "lmx/text/tokenizer_config.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/io/json_input.h"
#include "lmx/text/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <set>

namespace lmx::text {

namespace {

// The top-level fields of a JSON object file that lmx reads (others, like the large
// added_tokens_decoder, are skipped unparsed), or nullopt when the file does not exist. A file that
// exists but cannot be read throws IoError naming it and the reason.
std::optional<nlohmann::json> read_json_file(const std::string& path) {
  static const std::set<std::string, std::less<>> kFields = {
      "bos_token", "eos_token", "unk_token", "pad_token", "add_bos_token", "add_eos_token",
      "clean_up_tokenization_spaces", "chat_template"};
  const std::optional<std::string> text = read_input_file_if_exists(path, InputKind::kConfig);
  if (!text) return std::nullopt;
  JsonScanner json(*text, path);
  LMX_REQUIRE(FormatError, json.peek() == '{', "{}: must be a JSON object", path);
  nlohmann::json fields = nlohmann::json::object();
  std::string scratch;
  std::string_view key;
  json.begin_object();
  while (json.next_member(key, scratch)) {
    const std::string name(key);
    const std::string_view raw = json.skip_value();
    if (kFields.count(name) == 0) continue;
    fields[name] = parse_json(raw, fmt::format("{} field '{}'", path, name));
  }
  json.expect_end();
  return fields;
}

// A special token given as "text", {"content": "text", ...} or null.
std::optional<std::string> token_text(const nlohmann::json& config, const char* field, const std::string& path) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    LMX_REQUIRE(FormatError, content != it->end() && content->is_string(), "{}: field '{}' has no string \"content\"", path, field);
    return content->get<std::string>();
  }
  throw FormatError(fmt::format("{}: field '{}' must be a string or an object with \"content\"", path, field));
}

std::optional<bool> optional_bool(const nlohmann::json& config, const char* field, const std::string& path) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  LMX_REQUIRE(FormatError, it->is_boolean(), "{}: field '{}' must be a boolean", path, field);
  return it->get<bool>();
}

// Fills the templates from a "chat_template" value (string or list of {name, template}).
void read_templates(const nlohmann::json& value, const std::string& path, TokenizerConfig& config) {
  if (value.is_null()) return;
  if (value.is_string()) {
    config.chat_template = value.get<std::string>();
    config.chat_templates["default"] = config.chat_template;
    return;
  }
  LMX_REQUIRE(FormatError, value.is_array(), "{}: field 'chat_template' must be a string or a list of {{name, template}}", path);
  config.chat_templates.clear();
  for (size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& entry = value[i];
    LMX_REQUIRE(FormatError, entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                             entry.contains("template") && entry["template"].is_string(),
                         "{}: chat_template[{}] must be an object with string \"name\" and \"template\"", path, i);
    config.chat_templates[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
  }
  const auto def = config.chat_templates.find("default");
  config.chat_template = def != config.chat_templates.end() ? def->second : std::string();
}

}  // namespace

TokenizerConfig TokenizerConfig::load(const std::string& model_dir) {
  TokenizerConfig config;
  const std::string config_path = join_path(model_dir, "tokenizer_config.json");
  if (const auto j = read_json_file(config_path)) {
    config.bos_token = token_text(*j, "bos_token", config_path);
    config.eos_token = token_text(*j, "eos_token", config_path);
    config.unk_token = token_text(*j, "unk_token", config_path);
    config.pad_token = token_text(*j, "pad_token", config_path);
    config.add_bos_token = optional_bool(*j, "add_bos_token", config_path);
    config.add_eos_token = optional_bool(*j, "add_eos_token", config_path);
    config.clean_up_tokenization_spaces = optional_bool(*j, "clean_up_tokenization_spaces", config_path).value_or(false);
    if (const auto it = j->find("chat_template"); it != j->end()) read_templates(*it, config_path, config);
  }
  const std::string map_path = join_path(model_dir, "special_tokens_map.json");
  if (const auto j = read_json_file(map_path)) {
    if (auto v = token_text(*j, "bos_token", map_path)) config.bos_token = v;
    if (auto v = token_text(*j, "eos_token", map_path)) config.eos_token = v;
    if (auto v = token_text(*j, "unk_token", map_path)) config.unk_token = v;
    if (auto v = token_text(*j, "pad_token", map_path)) config.pad_token = v;
  }
  const std::string template_json_path = join_path(model_dir, "chat_template.json");
  if (const auto j = read_json_file(template_json_path)) {
    if (const auto it = j->find("chat_template"); it != j->end()) read_templates(*it, template_json_path, config);
  }
  const std::string jinja_path = join_path(model_dir, "chat_template.jinja");
  if (std::optional<std::string> source = read_input_file_if_exists(jinja_path, InputKind::kTemplate)) {
    config.chat_template = std::move(*source);
    config.chat_templates["default"] = config.chat_template;
  }
  return config;
}

}  // namespace lmx::text
