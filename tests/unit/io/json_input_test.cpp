// Bounded JSON parsing: nesting limits checked before parsing, NUL bytes refused, messages without
// the library's prefix.
#include "lmx/io/json_input.h"
#include "io_test_helpers.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

using test::expect_error;

std::string nested(int depth, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(depth), open) + std::string(static_cast<size_t>(depth), close);
}

TEST(JsonInput, NestingUpToTheLimitParses) {
  const nlohmann::json value = parse_json(nested(kMaxJsonDepth), "x.json");
  const nlohmann::json* inner = &value;
  int depth = 0;
  while (inner->is_array() && !inner->empty()) inner = &(*inner)[0], ++depth;
  EXPECT_EQ(depth, kMaxJsonDepth - 1);
  // Brackets inside strings are text, not structure.
  EXPECT_EQ(parse_json("[\"" + nested(1000) + "\\\"[[\"]", "x.json")[0].get<std::string>().size(), 2003u);
}

TEST(JsonInput, DeeperNestingIsRefusedBeforeParsing) {
  expect_error<FormatError>([] { parse_json(nested(kMaxJsonDepth + 1), "x.json"); },
                            {"x.json: invalid JSON: nested deeper than 128 levels at offset 128"});
  // Deep enough to overflow the stack in any recursive walk (copy, dump, destruction).
  expect_error<FormatError>([] { parse_ordered_json(nested(150000, '{', '}'), "m.json"); },
                            {"m.json", "nested"});
  std::string objects;
  for (int i = 0; i < 200; ++i) objects += "{\"a\":";
  expect_error<FormatError>([&] { parse_json(objects + "1" + std::string(200, '}'), "o.json"); }, {"nested"});
}

TEST(JsonInput, SyntaxErrorsNameSourceAndPositionWithoutLibraryPrefix) {
  try {
    parse_json("{\"a\": 1,\n \"b\": }", "cfg.json");
    FAIL() << "parsed";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cfg.json: invalid JSON: parse error at line 2", 0), 0u) << what;
    EXPECT_EQ(what.find("[json.exception"), std::string::npos) << what;
  }
  // Truncated input says so (not "missing key").
  expect_error<FormatError>([] { parse_json("{\"model_type\": \"gemma4_text\", ", "t.json"); },
                            {"t.json", "unexpected end of input"});
  expect_error<FormatError>([] { parse_json(std::string("{}\0{}", 5), "n.json"); }, {"NUL byte at offset 2"});
  expect_error<FormatError>([] { parse_json(std::string("[\"\\\0\"]", 6), "n.json"); }, {"NUL byte"});
  expect_error<FormatError>([] { parse_json("", "e.json"); }, {"e.json: invalid JSON"});
}

TEST(JsonInput, PreviewIsShort) {
  EXPECT_EQ(json_preview(nlohmann::json{{"k", std::string(200, 'x')}}).size(), 63u);
  EXPECT_EQ(json_preview(nlohmann::json(3)), "3");
}

}  // namespace
}  // namespace lmx
