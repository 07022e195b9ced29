// Model directory files (config.json, generation_config.json) and typed accessors for JSON configs.
#pragma once

#include "lmx/io/json_input.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmx {

// A model's config.json. `root` is the whole file (quantization / quantization_config blocks stay
// there); `text` is root["text_config"] when present (multimodal exports such as
// Gemma4ForConditionalGeneration), else a copy of root. `path` names config.json for errors.
struct ModelConfigFiles {
  nlohmann::json root;
  nlohmann::json text;
  std::string dir;
  std::string path;
};

// Reads dir/config.json (a config file: json_input.h's bounds). Throws IoError naming the directory
// or file and the OS reason when it is missing or unreadable, FormatError when it is not JSON,
// ConfigError when it (or text_config) is not an object.
ModelConfigFiles load_model_config(const std::string& dir);
// The same from config.json's text (read from `path` in `dir`).
ModelConfigFiles parse_model_config(std::string_view text, const std::string& dir, const std::string& path);

// Sampling defaults and special tokens from generation_config.json. Every field is empty when the
// file or the key is absent (or null).
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // "eos_token_id": an int or a list of ints
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<int32_t> top_k;
  std::optional<bool> do_sample;
  std::optional<float> repetition_penalty;
  std::optional<int32_t> max_new_tokens;
};

// Reads dir/generation_config.json when it exists. Throws IoError when it exists but cannot be
// read (naming the file and the reason), FormatError for invalid JSON and
// ConfigError naming the file and key for a value of the wrong type or a token id that is
// negative or does not fit int32.
GenerationConfig load_generation_config(const std::string& dir);

// Typed accessors. `obj` must be a JSON object; `context` names where it came from (e.g.
// "models/x/config.json text_config") and starts every error message. All throw ConfigError
// naming the key and context when the key is missing (required forms) or has the wrong type.
// Integers accept JSON integers and floats with an exact int64 value (1.0); range checks are the
// caller's. The json_opt_* forms return nullopt for a missing key or null.
int64_t json_int(const nlohmann::json& obj, std::string_view key, std::string_view context);
std::optional<int64_t> json_opt_int(const nlohmann::json& obj, std::string_view key,
                                    std::string_view context);
double json_number(const nlohmann::json& obj, std::string_view key, std::string_view context);
std::optional<double> json_opt_number(const nlohmann::json& obj, std::string_view key,
                                      std::string_view context);
// A missing key or null gives `default_value`.
bool json_bool(const nlohmann::json& obj, std::string_view key, std::string_view context, bool default_value);
std::optional<bool> json_opt_bool(const nlohmann::json& obj, std::string_view key, std::string_view context);
std::string json_string(const nlohmann::json& obj, std::string_view key, std::string_view context);
std::optional<std::string> json_opt_string(const nlohmann::json& obj, std::string_view key,
                                           std::string_view context);
// A list of integers (a lone integer counts as a list of one); missing -> ConfigError.
std::vector<int64_t> json_int_list(const nlohmann::json& obj, std::string_view key, std::string_view context);
// A list of strings; missing -> ConfigError.
std::vector<std::string> json_string_list(const nlohmann::json& obj, std::string_view key,
                                          std::string_view context);

}  // namespace lmx
