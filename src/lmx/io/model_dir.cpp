// Model directory files (config.json, generation_config.json) and typed accessors for JSON configs.
#include "lmx/io/model_dir.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"

#include <cmath>
#include <limits>

namespace lmx {

namespace {

const char* kind_name(const nlohmann::json& value) {
  return value.type_name();
}

// The value at `key`, or nullptr when `obj` lacks it. Throws when `obj` is not an object.
const nlohmann::json* find_key(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  LMX_REQUIRE(ConfigError, obj.is_object(), "{}: expected a JSON object to read '{}' from, got {}", context, key,
                       kind_name(obj));
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}

const nlohmann::json& required_key(const nlohmann::json& obj, std::string_view key,
                                   std::string_view context) {
  const nlohmann::json* value = find_key(obj, key, context);
  LMX_REQUIRE(ConfigError, value != nullptr, "{}: missing required key '{}'", context, key);
  return *value;
}

// Converts an integer-valued JSON number; nullopt when `value` is not one.
std::optional<int64_t> as_int64(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    double d = value.get<double>();
    // [-2^63, 2^63) is exactly representable at both ends.
    if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

int64_t int_value(const nlohmann::json& value, std::string_view key, std::string_view context) {
  std::optional<int64_t> v = as_int64(value);
  if (!v)
    throw ConfigError(fmt::format("{}: key '{}' must be an integer, got {} {}", context, key,
                                  kind_name(value), json_preview(value)));
  return *v;
}

double number_value(const nlohmann::json& value, std::string_view key, std::string_view context) {
  if (!value.is_number())
    throw ConfigError(fmt::format("{}: key '{}' must be a number, got {} {}", context, key, kind_name(value),
                                  json_preview(value)));
  return value.get<double>();
}

bool bool_value(const nlohmann::json& value, std::string_view key, std::string_view context) {
  if (!value.is_boolean())
    throw ConfigError(fmt::format("{}: key '{}' must be true or false, got {} {}", context, key,
                                  kind_name(value), json_preview(value)));
  return value.get<bool>();
}

std::string string_value(const nlohmann::json& value, std::string_view key, std::string_view context) {
  if (!value.is_string())
    throw ConfigError(fmt::format("{}: key '{}' must be a string, got {} {}", context, key, kind_name(value),
                                  json_preview(value)));
  return value.get<std::string>();
}

std::optional<int32_t> opt_token_id(const nlohmann::json& obj, std::string_view key,
                                    std::string_view context) {
  std::optional<int64_t> v = json_opt_int(obj, key, context);
  if (!v) return std::nullopt;
  LMX_REQUIRE(ConfigError, *v >= 0 && *v <= std::numeric_limits<int32_t>::max(),
                       "{}: key '{}' = {} is not a valid token id", context, key, *v);
  return static_cast<int32_t>(*v);
}

std::optional<int32_t> opt_int32(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  std::optional<int64_t> v = json_opt_int(obj, key, context);
  if (!v) return std::nullopt;
  LMX_REQUIRE(ConfigError, *v >= std::numeric_limits<int32_t>::min() && *v <= std::numeric_limits<int32_t>::max(),
                       "{}: key '{}' = {} does not fit a 32-bit integer", context, key, *v);
  return static_cast<int32_t>(*v);
}

std::optional<float> opt_float(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  std::optional<double> v = json_opt_number(obj, key, context);
  if (!v) return std::nullopt;
  return static_cast<float>(*v);
}

}  // namespace

ModelConfigFiles load_model_config(const std::string& dir) {
  const std::string path = join_path(dir, "config.json");
  require_directory(dir, "model directory");
  std::optional<std::string> text = read_input_file_if_exists(path, InputKind::kConfig);
  LMX_REQUIRE(IoError, text.has_value(), "{}: model config not found (no config.json in {})", path, dir);
  return parse_model_config(*text, dir, path);
}

ModelConfigFiles parse_model_config(std::string_view text, const std::string& dir, const std::string& path) {
  ModelConfigFiles files;
  files.dir = dir;
  files.path = path;
  files.root = parse_json(text, files.path);
  LMX_REQUIRE(ConfigError, files.root.is_object(), "{}: expected a JSON object, got {}", files.path,
                       kind_name(files.root));
  auto text_config = files.root.find("text_config");
  if (text_config != files.root.end() && !text_config->is_null()) {
    LMX_REQUIRE(ConfigError, text_config->is_object(), "{}: 'text_config' must be an object, got {}",
                files.path, kind_name(*text_config));
    files.text = *text_config;
  } else {
    files.text = files.root;
  }
  return files;
}

GenerationConfig load_generation_config(const std::string& dir) {
  GenerationConfig config;
  const std::string path = join_path(dir, "generation_config.json");
  std::optional<std::string> text = read_input_file_if_exists(path, InputKind::kConfig);
  if (!text) return config;
  nlohmann::json root = parse_json(*text, path);
  LMX_REQUIRE(ConfigError, root.is_object(), "{}: expected a JSON object, got {}", path, kind_name(root));
  auto eos = root.find("eos_token_id");
  if (eos != root.end() && !eos->is_null()) {
    for (int64_t id : json_int_list(root, "eos_token_id", path)) {
      LMX_REQUIRE(ConfigError, id >= 0 && id <= std::numeric_limits<int32_t>::max(),
                           "{}: key 'eos_token_id' holds {}, which is not a valid token id", path, id);
      config.eos_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  config.bos_token_id = opt_token_id(root, "bos_token_id", path);
  config.pad_token_id = opt_token_id(root, "pad_token_id", path);
  config.temperature = opt_float(root, "temperature", path);
  config.top_p = opt_float(root, "top_p", path);
  config.min_p = opt_float(root, "min_p", path);
  config.top_k = opt_int32(root, "top_k", path);
  config.do_sample = json_opt_bool(root, "do_sample", path);
  config.repetition_penalty = opt_float(root, "repetition_penalty", path);
  config.max_new_tokens = opt_int32(root, "max_new_tokens", path);
  return config;
}

int64_t json_int(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  return int_value(required_key(obj, key, context), key, context);
}

std::optional<int64_t> json_opt_int(const nlohmann::json& obj, std::string_view key,
                                    std::string_view context) {
  const nlohmann::json* value = find_key(obj, key, context);
  if (!value || value->is_null()) return std::nullopt;
  return int_value(*value, key, context);
}

double json_number(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  return number_value(required_key(obj, key, context), key, context);
}

std::optional<double> json_opt_number(const nlohmann::json& obj, std::string_view key,
                                      std::string_view context) {
  const nlohmann::json* value = find_key(obj, key, context);
  if (!value || value->is_null()) return std::nullopt;
  return number_value(*value, key, context);
}

bool json_bool(const nlohmann::json& obj, std::string_view key, std::string_view context,
               bool default_value) {
  return json_opt_bool(obj, key, context).value_or(default_value);
}

std::optional<bool> json_opt_bool(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  const nlohmann::json* value = find_key(obj, key, context);
  if (!value || value->is_null()) return std::nullopt;
  return bool_value(*value, key, context);
}

std::string json_string(const nlohmann::json& obj, std::string_view key, std::string_view context) {
  return string_value(required_key(obj, key, context), key, context);
}

std::optional<std::string> json_opt_string(const nlohmann::json& obj, std::string_view key,
                                           std::string_view context) {
  const nlohmann::json* value = find_key(obj, key, context);
  if (!value || value->is_null()) return std::nullopt;
  return string_value(*value, key, context);
}

std::vector<int64_t> json_int_list(const nlohmann::json& obj, std::string_view key,
                                   std::string_view context) {
  const nlohmann::json& value = required_key(obj, key, context);
  if (!value.is_array()) return {int_value(value, key, context)};
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (const auto& element : value) {
    std::optional<int64_t> v = as_int64(element);
    if (!v)
      throw ConfigError(fmt::format("{}: key '{}' must be a list of integers, but holds {} {}", context, key,
                                    kind_name(element), json_preview(element)));
    out.push_back(*v);
  }
  return out;
}

std::vector<std::string> json_string_list(const nlohmann::json& obj, std::string_view key,
                                          std::string_view context) {
  const nlohmann::json& value = required_key(obj, key, context);
  LMX_REQUIRE(ConfigError, value.is_array(), "{}: key '{}' must be a list of strings, got {}", context, key,
                       kind_name(value));
  std::vector<std::string> out;
  out.reserve(value.size());
  for (const auto& element : value) {
    if (!element.is_string())
      throw ConfigError(fmt::format("{}: key '{}' must be a list of strings, but holds {} {}", context, key,
                                    kind_name(element), json_preview(element)));
    out.push_back(element.get<std::string>());
  }
  return out;
}

}  // namespace lmx
