// Bounded JSON parsing for every JSON input lmx reads: files, flags' files, request bodies.
#pragma once

#include "lmx/io/input_file.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace lmx {

// Deepest nesting of arrays and objects accepted. Real configs nest a handful of levels and chat
// requests with tool schemas a few dozen; the bound keeps every recursive walk over a parsed value
// (nlohmann's copy, comparison and dump, lmx's own converters) far from the end of the stack.
inline constexpr int kMaxJsonDepth = 128;

// Throws FormatError naming `source` and the byte offset when `text` nests arrays/objects deeper
// than kMaxJsonDepth or holds a NUL byte (which nlohmann would take for the end of the input).
// Only structure outside strings counts; text that is not JSON at all passes to the parser.
void check_json_bounds(std::string_view text, const std::string& source);

// Parses `text`, read from `source` (a path, "--messages file x.json", "request body"). Throws
// FormatError "<source>: invalid JSON: <what, where>" for a syntax error (without the library's
// "[json.exception...]" prefix) and for what check_json_bounds refuses.
nlohmann::json parse_json(std::string_view text, const std::string& source);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source);

// A JSON library exception's message without its "[json.exception.<kind>.<id>] " prefix.
std::string json_error_text(const nlohmann::json::exception& e);

// A short rendering of a value for error messages: compact JSON, cut after 60 characters, invalid
// UTF-8 replaced.
std::string json_preview(const nlohmann::json& value);

// read_input_file(path, kind) + parse_json(text, path).
nlohmann::json load_json_file(const std::string& path, InputKind kind = InputKind::kConfig);

}  // namespace lmx
