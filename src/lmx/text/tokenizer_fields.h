// Typed access to fields of tokenizer.json components, with errors that name the component path
// (e.g. "tokenizer.json: pre_tokenizer.pretokenizers[0]: field 'behavior' ...").
#pragma once

#include "lmx/core/error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lmx::text {

// The component's "type" string. Throws FormatError when the component is not an object with one.
inline std::string component_type(const nlohmann::json& j, std::string_view context) {
  LMX_REQUIRE(FormatError, j.is_object(), "tokenizer.json: {} must be an object", context);
  const auto it = j.find("type");
  LMX_REQUIRE(FormatError, it != j.end() && it->is_string(), "tokenizer.json: {} has no \"type\"", context);
  return it->get<std::string>();
}

inline const nlohmann::json& required_field(const nlohmann::json& j, std::string_view name, std::string_view context) {
  const auto it = j.find(name);
  LMX_REQUIRE(FormatError, it != j.end(), "tokenizer.json: {}: missing field '{}'", context, name);
  return *it;
}

inline std::string string_field(const nlohmann::json& j, std::string_view name, std::string_view context,
                                std::optional<std::string> fallback = std::nullopt) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    LMX_REQUIRE(FormatError, fallback.has_value(), "tokenizer.json: {}: missing field '{}'", context, name);
    return *fallback;
  }
  LMX_REQUIRE(FormatError, it->is_string(), "tokenizer.json: {}: field '{}' must be a string", context, name);
  return it->get<std::string>();
}

inline bool bool_field(const nlohmann::json& j, std::string_view name, std::string_view context,
                       std::optional<bool> fallback = std::nullopt) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    LMX_REQUIRE(FormatError, fallback.has_value(), "tokenizer.json: {}: missing field '{}'", context, name);
    return *fallback;
  }
  LMX_REQUIRE(FormatError, it->is_boolean(), "tokenizer.json: {}: field '{}' must be a boolean", context, name);
  return it->get<bool>();
}

inline int64_t int_field(const nlohmann::json& j, std::string_view name, std::string_view context, int64_t min,
                         int64_t max, std::optional<int64_t> fallback = std::nullopt) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    LMX_REQUIRE(FormatError, fallback.has_value(), "tokenizer.json: {}: missing field '{}'", context, name);
    return *fallback;
  }
  LMX_REQUIRE(FormatError, it->is_number_integer(), "tokenizer.json: {}: field '{}' must be an integer", context, name);
  const auto v = it->get<int64_t>();
  LMX_REQUIRE(FormatError, v >= min && v <= max, "tokenizer.json: {}: field '{}' = {} out of range [{}, {}]", context, name,
                       v, min, max);
  return v;
}

// A field holding exactly one Unicode character (Rust `char`), e.g. Metaspace's replacement.
std::string char_field(const nlohmann::json& j, std::string_view name, std::string_view context);

inline const nlohmann::json& array_field(const nlohmann::json& j, std::string_view name, std::string_view context) {
  const nlohmann::json& v = required_field(j, name, context);
  LMX_REQUIRE(FormatError, v.is_array(), "tokenizer.json: {}: field '{}' must be an array", context, name);
  return v;
}

}  // namespace lmx::text
