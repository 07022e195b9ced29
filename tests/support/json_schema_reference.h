// A reference validator for the JSON-schema subset constrained decoding supports (json_schema_constraint.h),
// written separately from the automaton, and what the tests that generate documents from a schema share.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
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

// How generate_document writes a document: JSON or Gemma 4's tool-call argument syntax.
struct DocumentSyntax {
  std::string string_bytes;                                  // what generated strings are made of
  std::function<std::string(const nlohmann::json&)> scalar;  // a string, boolean or null written
  std::function<std::string(const std::string&)> key;        // a property name written
  bool random_spaces = false;                                // ", " or "," between properties
};

// A document that schema `s` accepts, written in `syntax`, at random.
inline std::string generate_document(const nlohmann::json& s, std::mt19937& rng,
                                     const DocumentSyntax& syntax) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  if (s.contains("enum"))
    return syntax.scalar(s["enum"][static_cast<size_t>(pick(static_cast<int>(s["enum"].size())))]);
  std::vector<std::string> types;
  if (s["type"].is_string())
    types = {s["type"].get<std::string>()};
  else
    types = s["type"].get<std::vector<std::string>>();
  const std::string t = types[static_cast<size_t>(pick(static_cast<int>(types.size())))];
  const int alphabet = static_cast<int>(syntax.string_bytes.size());
  if (t == "string")
    return syntax.scalar(
        nlohmann::json(std::string(static_cast<size_t>(pick(4)), syntax.string_bytes[pick(alphabet)])));
  if (t == "integer") return std::to_string(pick(2000) - 1000);
  if (t == "number") return pick(2) ? std::to_string(pick(100)) + "." + std::to_string(pick(100)) : "-2e5";
  if (t == "boolean") return pick(2) ? "true" : "false";
  if (t == "null") return "null";
  if (t == "array") {
    std::string out = "[";
    for (int i = 0, n = pick(3); i < n; ++i)
      out += (i ? "," : "") + generate_document(s["items"], rng, syntax);
    return out + "]";
  }
  std::string out = "{";
  bool first = true;
  for (const auto& [k, sub] : s["properties"].items()) {
    const bool required = s.contains("required") &&
                          std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end();
    if (!required && pick(2)) continue;
    const std::string separator = first ? "" : syntax.random_spaces && pick(2) ? ", " : ",";
    out += separator + syntax.key(k) + ":" + generate_document(sub, rng, syntax);
    first = false;
  }
  return out + "}";
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
