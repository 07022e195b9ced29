// The MLX "quantization" block of config.json: default bits/group and per-module overrides.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <map>
#include <optional>
#include <string>

namespace lmx {

struct QuantizationSpec {
  int bits = 0;
  int group_size = 0;
};

class QuantizationConfig {
 public:
  // Reads root["quantization"] (or root["quantization_config"]); absent → nothing quantized.
  // Errors name `source` and the offending key.
  static QuantizationConfig from_json(const nlohmann::json& root, const std::string& source);

  bool present() const { return default_.has_value(); }
  // The spec for a module path (a weight's name without ".weight"): its override, else the default;
  // nullopt when the module is listed as false or there is no quantization block.
  std::optional<QuantizationSpec> spec_for(const std::string& module) const;

 private:
  std::optional<QuantizationSpec> default_;
  std::map<std::string, std::optional<QuantizationSpec>> overrides_;
};

}  // namespace lmx
