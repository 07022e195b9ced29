// Jinja filters (`value | name(args)`): Jinja2's builtins that chat templates use, plus transformers' tojson.
#pragma once

#include "lmx/text/jinja/value.h"

#include <string_view>
#include <vector>

namespace lmx::jinja {

using FilterFunction = Value (*)(const Value& input, const CallArgs& args, Renderer& renderer);

struct FilterSpec {
  const char* name;
  FilterFunction function;
};

// The filter called `name`, or nullptr (templates naming an unknown filter fail to parse).
const FilterSpec* find_filter(std::string_view name);
// Names of all filters, for documentation and tests.
std::vector<std::string_view> filter_names();

}  // namespace lmx::jinja
