// Conversions between JSON and interpreter values, and Python's json.dumps as transformers' tojson uses it.
#pragma once

#include "lmx/text/jinja/value.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>

namespace lmx::jinja {

// JSON to a value: objects become dicts in document order (ordered_json keeps the order of the
// request; nlohmann::json has already sorted the keys), arrays lists, integers int (unsigned
// values above INT64_MAX become float), floats float. Throws TemplateError past 512 levels.
Value value_from_json(const nlohmann::json& json);
Value value_from_json(const nlohmann::ordered_json& json);

// Python json.dumps options as transformers' tojson filter passes them.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // nullopt: single line; else the indent unit
  std::optional<std::string> item_separator;  // default ", " without indent, "," with
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// Byte-exact json.dumps(v, ...): floats as Python repr (NaN, Infinity), strings escaped like
// Python (only control characters, quote and backslash unless ensure_ascii), tuples as arrays,
// int/float/bool/None dict keys converted to strings. Throws TemplateError for values JSON cannot
// hold (undefined, namespaces, functions), as Python's TypeError.
std::string python_json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace lmx::jinja
