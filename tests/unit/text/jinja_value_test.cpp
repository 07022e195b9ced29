// Value printing and conversions against Python: float repr, str repr, json.dumps, str methods, UTF-8
// helpers.
#include "lmx/text/jinja/json_convert.h"
#include "lmx/text/jinja/methods.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"
#include "lmx/text/jinja/value_ops.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace lmx::jinja {
namespace {

// Expected strings are Python 3.11's repr(float).
TEST(JinjaValue, FloatReprMatchesPython) {
  const std::pair<double, const char*> cases[] = {
      {0.1, "0.1"},
      {1.0 / 3, "0.3333333333333333"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1.2345678901234568e+17, "1.2345678901234568e+17"},
      {0.0001, "0.0001"},
      {1e-05, "1e-05"},
      {4.9406564584124654e-324, "5e-324"},
      {1.7976931348623157e+308, "1.7976931348623157e+308"},
      {-2.5, "-2.5"},
      {100, "100.0"},
      {5e-11, "5e-11"},
      {1.152921504606847e+18, "1.152921504606847e+18"},
      {1e+22, "1e+22"},
      {9007199254740992, "9007199254740992.0"},
      {3.14159, "3.14159"},
      {-0.0, "-0.0"},
      {1e+100, "1e+100"},
      {INFINITY, "inf"},
      {-INFINITY, "-inf"},
      {NAN, "nan"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(float_repr(value), expected);
}

TEST(JinjaValue, StrAndReprMatchPython) {
  EXPECT_EQ(to_str(Value::none()), "None");
  EXPECT_EQ(to_str(Value::boolean(true)), "True");
  EXPECT_EQ(to_str(Value()), "");
  EXPECT_EQ(to_repr(Value()), "Undefined");
  std::vector<Value> items = {Value::string(std::string("a\0b", 3)), Value::string("\u2028"),
                              Value::string("x\U0001F642"), Value::string("\u00ad")};
  EXPECT_EQ(to_repr(Value::list(items)), "['a\\x00b', '\\u2028', 'x\U0001F642', '\\xad']");
  EXPECT_EQ(to_repr(Value::list({Value::integer(1)}, true)), "(1,)");
  EXPECT_EQ(string_repr("it's \"q\""), "'it\\'s \"q\"'");
}

// Expected strings are Python's json.dumps with transformers' tojson arguments.
TEST(JinjaValue, JsonDumpsMatchesPython) {
  auto v = value_from_json(nlohmann::ordered_json::parse(
      "{\"k\": [1, 2.5, null, true, \"\u00e9\u2028\\u001f\"], \"e\": {}, \"l\": []}"));
  JsonDumpOptions pretty;
  pretty.indent = "  ";
  EXPECT_EQ(python_json_dumps(v, pretty),
            "{\n  \"k\": [\n    1,\n    2.5,\n    null,\n    true,\n    \"\u00e9\u2028\\u001f\"\n  ],\n  "
            "\"e\": {},\n  \"l\": []\n}");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(python_json_dumps(v, ascii),
            "{\"k\": [1, 2.5, null, true, \"\\u00e9\\u2028\\u001f\"], \"e\": {}, \"l\": []}");
  EXPECT_THROW(python_json_dumps(Value(), {}), TemplateError);
  // nlohmann::json sorts keys; ordered_json keeps document order.
  EXPECT_EQ(python_json_dumps(value_from_json(nlohmann::json::parse("{\"b\":1,\"a\":2}")), {}),
            "{\"a\": 2, \"b\": 1}");
  EXPECT_EQ(python_json_dumps(value_from_json(nlohmann::ordered_json::parse("{\"b\":1,\"a\":2}")), {}),
            "{\"b\": 1, \"a\": 2}");
}

TEST(JinjaValue, PythonStringMethods) {
  std::string sep = ",";
  EXPECT_EQ(python_split("a,,b", &sep, -1, false), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(python_split("  a  b  ", nullptr, 1, false), (std::vector<std::string>{"a", "b  "}));
  EXPECT_EQ(python_split("  a  b  ", nullptr, 1, true), (std::vector<std::string>{"  a", "b"}));
  EXPECT_EQ(python_replace("héé", "", "-", -1), "-h-é-é-");
  EXPECT_EQ(python_title("hello wORLD 2nd"), "Hello World 2Nd");
  EXPECT_EQ(python_capitalize("éCOLE"), "École");
}

TEST(JinjaValue, Utf8RoundTripsInvalidBytes) {
  std::string bytes = "ok\xff\xc3(\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82";
  std::u32string cps = unicode::decode(bytes);
  EXPECT_EQ(unicode::encode(cps), bytes);
  EXPECT_EQ(unicode::length("h\u00e9\U0001F642"), 3u);
  EXPECT_TRUE(unicode::is_space(0x3000));
  EXPECT_FALSE(unicode::is_space(0x200B));
  EXPECT_EQ(unicode::strip("\u3000 x\u00a0", nullptr, true, true), "x");
}

TEST(JinjaValue, EqualityAndOrderingFollowPython) {
  EXPECT_TRUE(equals(Value::integer(1), Value::number(1.0)));
  EXPECT_TRUE(equals(Value::boolean(true), Value::integer(1)));
  EXPECT_FALSE(equals(Value::list({}, true), Value::list({})));
  EXPECT_TRUE(less_than(Value::string("B"), Value::string("a")));
  EXPECT_TRUE(less_than(Value::string("z"), Value::string("\u00e9")));  // code point order
  EXPECT_THROW(less_than(Value::string("a"), Value::integer(1)), TemplateError);
  EXPECT_EQ(binary_op(BinaryOp::kFloorDiv, Value::integer(-7), Value::integer(2)).as_int(), -4);
  EXPECT_EQ(binary_op(BinaryOp::kMod, Value::number(-7.5), Value::integer(2)).as_double(), 0.5);
  EXPECT_THROW(binary_op(BinaryOp::kMul, Value::integer(INT64_MAX), Value::integer(2)), TemplateError);
}

}  // namespace
}  // namespace lmx::jinja
