// Bounded JSON parsing for every JSON input lmx reads: files, flags' files, request bodies.
#include "lmx/io/json_input.h"

#include "lmx/core/error.h"

namespace lmx {
namespace {

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& source) {
  check_json_bounds(text, source);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: invalid JSON: {}", source, json_error_text(e)));
  }
}

}  // namespace

void check_json_bounds(std::string_view text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') throw FormatError(fmt::format("{}: invalid JSON: NUL byte at offset {}", source, i));
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
        if (i < text.size() && text[i] == '\0')
          throw FormatError(fmt::format("{}: invalid JSON: NUL byte at offset {}", source, i));
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw FormatError(fmt::format("{}: invalid JSON: nested deeper than {} levels at offset {}", source,
                                      kMaxJsonDepth, i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  return parse_bounded<nlohmann::json>(text, source);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source) {
  return parse_bounded<nlohmann::ordered_json>(text, source);
}

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (what.starts_with("[json.exception.")) {
    const size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

std::string json_preview(const nlohmann::json& value) {
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMaxChars = 60;
  return s.size() <= kMaxChars ? s : s.substr(0, kMaxChars) + "...";
}

nlohmann::json load_json_file(const std::string& path, InputKind kind) {
  return parse_json(read_input_file(path, kind), path);
}

}  // namespace lmx
