// The MLX "quantization" block of config.json: default bits/group and per-module overrides.
#include "lmx/model/quantization_config.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"
#include "lmx/quant/affine.h"

#include <nlohmann/json.hpp>

namespace lmx {
namespace {
QuantizationSpec read_spec(const nlohmann::json& obj, const std::string& context) {
  QuantizationSpec s;
  s.bits = static_cast<int>(json_int(obj, "bits", context));
  s.group_size = static_cast<int>(json_int(obj, "group_size", context));
  if (!quant::valid_affine_params(s.bits, s.group_size))
    throw ConfigError(fmt::format("{}: bits {} with group_size {} is not a supported affine quantization "
                                  "(bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128)",
                                  context, s.bits, s.group_size));
  return s;
}
}  // namespace

QuantizationConfig QuantizationConfig::from_json(const nlohmann::json& root, const std::string& source) {
  QuantizationConfig q;
  const char* key = root.contains("quantization") ? "quantization"
                    : root.contains("quantization_config") ? "quantization_config" : nullptr;
  if (!key || root[key].is_null()) return q;
  const auto& block = root[key];
  const std::string context = source + ": " + key;
  if (!block.is_object()) throw ConfigError(fmt::format("{} must be an object", context));
  if (block.contains("mode")) {
    std::string mode = json_string(block, "mode", context);
    if (mode != "affine") throw Unsupported(fmt::format("{}: mode '{}' is not supported (affine only)", context, mode));
  }
  q.default_ = read_spec(block, context);
  for (const auto& [name, value] : block.items()) {
    if (name == "bits" || name == "group_size" || name == "mode" || name == "quant_method") continue;
    if (value.is_boolean() && !value.get<bool>()) {
      q.overrides_[name] = std::nullopt;
    } else if (value.is_object()) {
      q.overrides_[name] = read_spec(value, context + "." + name);
    } else if (value.is_boolean()) {
      q.overrides_[name] = q.default_;
    } else {
      throw ConfigError(fmt::format("{}: entry '{}' must be an object with bits/group_size or false", context, name));
    }
  }
  return q;
}

std::optional<QuantizationSpec> QuantizationConfig::spec_for(const std::string& module) const {
  if (!default_) return std::nullopt;
  if (auto it = overrides_.find(module); it != overrides_.end()) return it->second;
  return default_;
}

}  // namespace lmx
