// A reference validator for the JSON-schema subset constrained decoding supports (json_schema_constraint.h),
// written separately from the automaton, and what the tests that generate documents from a schema share.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::test {

// Does `v` satisfy `s`?
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

// One of the types `s` allows (its "type" a name or a list), at random.
inline std::string random_type(const nlohmann::json& s, std::mt19937& rng) {
  std::vector<std::string> types;
  if (s["type"].is_string())
    types = {s["type"].get<std::string>()};
  else
    types = s["type"].get<std::vector<std::string>>();
  return types[rng() % types.size()];
}

// Whether property `k` of object schema `s` is required.
inline bool required_property(const nlohmann::json& s, const std::string& k) {
  return s.contains("required") &&
         std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end();
}

// `doc` with one byte dropped, replaced or inserted (the new byte one of `bytes`), at random.
inline void mutate(std::string& doc, std::mt19937& rng, std::string_view bytes) {
  const size_t at = rng() % doc.size();
  switch (rng() % 3) {
    case 0:
      doc.erase(at, 1);
      break;
    case 1:
      doc[at] = bytes[rng() % bytes.size()];
      break;
    default:
      doc.insert(at, 1, bytes[rng() % bytes.size()]);
  }
}

}  // namespace lmx::test
