#include "lmx/model/decode_skips.h"

#include "lmx/core/error.h"

#include <cstdlib>
#include <utility>

namespace lmx {
namespace {

// (name, member) of every part, in describe() order.
constexpr std::pair<std::string_view, bool DecodeSkips::*> kParts[] = {
    {"rn", &DecodeSkips::residual},         {"qkv", &DecodeSkips::qkv},  {"inputs", &DecodeSkips::inputs},
    {"attention", &DecodeSkips::attention}, {"o", &DecodeSkips::o_proj}, {"mlp", &DecodeSkips::mlp},
    {"experts", &DecodeSkips::experts},     {"ple", &DecodeSkips::ple},  {"layers", &DecodeSkips::layers},
};

// Every part's name, comma-separated (for the error message).
std::string known_parts() {
  DecodeSkips all;
  for (const auto& [part, member] : kParts) all.*member = true;
  return all.describe();
}

}  // namespace

DecodeSkips DecodeSkips::parse(std::string_view list) {
  DecodeSkips skips;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (name.empty()) continue;
    bool known = false;
    for (const auto& [part, member] : kParts)
      if (part == name) skips.*member = known = true;
    LMX_REQUIRE(InvalidArgument, known, "LMX_DEBUG_SKIP: unknown part '{}' (known: {})", name, known_parts());
  }
  return skips;
}

DecodeSkips DecodeSkips::from_env() {
  const char* list = std::getenv("LMX_DEBUG_SKIP");
  return list == nullptr ? DecodeSkips{} : parse(list);
}

std::string DecodeSkips::describe() const {
  std::string out;
  for (const auto& [part, member] : kParts)
    if (this->*member) {
      if (!out.empty()) out += ',';
      out += part;
    }
  return out;
}

}  // namespace lmx
