// A reference validator for the JSON-schema subset constrained decoding supports (json_schema_constraint.h),
// written separately from the automaton: does `v` satisfy `s`?
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace lmx::test {

inline bool valid_for_schema(const nlohmann::json& v, const nlohmann::json& s) {
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (e == v) return true;
    return false;
  }
  std::vector<std::string> types;
  if (s["type"].is_string())
    types = {s["type"].get<std::string>()};
  else
    types = s["type"].get<std::vector<std::string>>();
  for (const std::string& t : types) {
    if (t == "string" && v.is_string()) return true;
    if (t == "integer" && v.is_number_integer()) return true;
    if (t == "number" && v.is_number()) return true;
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "null" && v.is_null()) return true;
    if (t == "array" && v.is_array()) {
      bool all = true;
      for (const auto& e : v) all = all && valid_for_schema(e, s["items"]);
      if (all) return true;
    }
    if (t == "object" && v.is_object()) {
      bool ok = true;
      for (const auto& [k, e] : v.items())
        ok = ok && s["properties"].contains(k) && valid_for_schema(e, s["properties"][k]);
      if (s.contains("required"))
        for (const auto& r : s["required"]) ok = ok && v.contains(r.get<std::string>());
      if (ok) return true;
    }
  }
  return false;
}

}  // namespace lmx::test
