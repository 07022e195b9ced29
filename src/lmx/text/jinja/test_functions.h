// Jinja tests (`value is name(args)`): defined, none, string, mapping, equalto, ... as Jinja2 defines them.
#pragma once

#include "lmx/text/jinja/value.h"

#include <string_view>
#include <vector>

namespace lmx::jinja {

using TestFunction = bool (*)(const Value& input, const CallArgs& args, Renderer& renderer);

struct TestSpec {
  const char* name;
  TestFunction function;
};

// The test called `name`, or nullptr (templates naming an unknown test fail to parse).
const TestSpec* find_test(std::string_view name);
std::vector<std::string_view> test_names();

}  // namespace lmx::jinja
