// Malformed and hostile templates: clear TemplateErrors with positions, and bounded recursion, loops, output
// and work.
#include "lmx/text/jinja/template.h"
#include "lmx/text/jinja/template_error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace lmx::jinja {
namespace {

// Parses and renders `source`; returns the TemplateError it must throw.
TemplateError error_of(const std::string& source, const RenderLimits& limits = {},
                       const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  try {
    Template(source).render_json(vars, limits);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no TemplateError for: " << source.substr(0, 200);
  return TemplateError("none");
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(JinjaErrors, SyntaxErrorHasLineColumnAndSnippet) {
  TemplateError e = error_of("Hello\n{% if x %}\n  {{ x + }}\n{% endif %}");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 10);  // the "}}" that ended the expression early
  EXPECT_EQ(e.reason(), "unexpected 'end of print statement'");
  EXPECT_TRUE(contains(e.what(), "line 3, column 10")) << e.what();
  EXPECT_TRUE(contains(e.what(), "  {{ x + }}\n")) << e.what();
  EXPECT_TRUE(contains(e.what(), "         ^")) << e.what();
}

TEST(JinjaErrors, UnclosedBlocksNameTheMissingTag) {
  TemplateError e = error_of("{% for m in messages %}\n{% if m %}x{% endif %}\n");
  EXPECT_TRUE(contains(e.reason(), "'endfor' or 'else'")) << e.reason();
  EXPECT_TRUE(contains(e.reason(), "innermost block that needs to be closed is 'for'")) << e.reason();
  EXPECT_TRUE(contains(error_of("{% if a %}{% endfor %}").reason(), "Encountered unknown tag 'endfor'"));
  EXPECT_EQ(error_of("{{ a ").reason(), "unexpected end of template, expected 'end of print statement'.");
  EXPECT_EQ(error_of("ok\n{# open comment").line(), 2);
  EXPECT_EQ(error_of("{% raw %}never closed").reason(), "Missing end of raw directive");
}

TEST(JinjaErrors, UnknownFilterAndTestFailAtParseTime) {
  TemplateError filter = error_of("line one\n{{ messages | shout }}");
  EXPECT_EQ(filter.reason(), "No filter named 'shout'.");
  EXPECT_EQ(filter.line(), 2);
  EXPECT_EQ(filter.column(), 15);
  EXPECT_EQ(error_of("{% if x is frobbed %}{% endif %}").reason(), "No test named 'frobbed'.");
}

TEST(JinjaErrors, UnsupportedFeaturesAreNamed) {
  EXPECT_TRUE(contains(error_of("{% include 'x.jinja' %}").reason(), "'include' tag is not supported"));
  EXPECT_TRUE(contains(error_of("{% extends 'base' %}").reason(), "'extends' tag is not supported"));
  EXPECT_TRUE(contains(error_of("{% block b %}{% endblock %}").reason(), "'block' tag is not supported"));
  EXPECT_TRUE(contains(error_of("{% for x in y recursive %}{% endfor %}").reason(), "recursive for loops"));
  EXPECT_TRUE(contains(error_of("{{ f(*args) }}").reason(), "*args"));
  EXPECT_EQ(error_of("{% do x %}").reason(), "Encountered unknown tag 'do'.");  // transformers has no `do`
  EXPECT_EQ(error_of("{% break %}").reason(), "'break' outside of a loop");
  EXPECT_EQ(error_of("{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}").reason(),
            "'continue' outside of a loop");
}

TEST(JinjaErrors, RaiseExceptionKeepsMessageAndNamesLine) {
  TemplateError e = error_of(
      "{% for m in messages %}\n{% if m.role == 'bad' %}\n{{ raise_exception('Role ' ~ m.role ~ ' is not "
      "supported') }}\n{% endif %}{% endfor %}",
      {}, {{"messages", {{{"role", "bad"}}}}});
  EXPECT_EQ(e.reason(), "Role bad is not supported");
  EXPECT_EQ(e.line(), 3);
  EXPECT_TRUE(contains(e.what(), "line 3")) << e.what();
}

TEST(JinjaErrors, RenderErrorsNameTheLine) {
  TemplateError e = error_of("a\nb\n{{ 1 // 0 }}");
  EXPECT_EQ(e.reason(), "integer division or modulo by zero");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(error_of("{{ messages[0].content.upper() }}", {}, {{"messages", nlohmann::ordered_json::array()}})
                .reason(),
            "list object has no element 0");
  EXPECT_EQ(error_of("{{ tools.function.name }}").reason(), "'tools' is undefined");
  EXPECT_TRUE(contains(error_of("{{ 2 ** 64 }}").reason(), "64-bit"));
  EXPECT_EQ(error_of("{{ range(200000) | length }}").reason(),
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(JinjaErrors, DeepNestingIsAnErrorNotACrash) {
  EXPECT_TRUE(
      contains(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").reason(),
               "nested too deeply"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}").reason(),
                       "nested too deeply"));
  EXPECT_EQ(error_of("{{ [[[ }}").reason(), "unexpected '}', expected ']'");
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_TRUE(contains(error_of(ifs).reason(), "nested too deeply"));
  std::string nots = "{{ " + std::string(1, ' ');
  for (int i = 0; i < 2000; ++i) nots += "not ";
  EXPECT_TRUE(contains(error_of(nots + "x }}").reason(), "nested too deeply"));
}

TEST(JinjaErrors, MacroRecursionIsBounded) {
  TemplateError e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(e.reason(), "macro calls nested too deeply");
  // Legitimate recursion below the limit works.
  std::string out =
      Template(
          "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(50) | length }}")
          .render({});
  EXPECT_EQ(out, "92");
}

TEST(JinjaErrors, LoopOutputAndWorkBudgetsEndHostileTemplates) {
  RenderLimits limits;
  limits.max_loop_iterations = 100000;
  EXPECT_EQ(
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", limits)
          .reason(),
      "template exceeded its loop iteration budget");
  limits = {};
  limits.max_output_bytes = 1 << 20;
  EXPECT_TRUE(contains(error_of("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", limits).reason(),
                       "template output exceeds 1048576 bytes"));
  limits = {};
  limits.max_work_bytes = 64 << 20;
  EXPECT_TRUE(contains(
      error_of("{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{% set t = s ~ s %}{% endfor %}", limits)
          .reason(),
      "work budget"));
  EXPECT_TRUE(contains(error_of("{{ 'x' * 1000000000000 }}").reason(), "value too large"));
  EXPECT_TRUE(contains(
      error_of(
          "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
          .reason(),
      "too large"));
}

// Values nested thousands deep (built in a loop) would make printing, comparing and freeing them
// recurse without bound; building them is an error instead.
TEST(JinjaErrors, DeeplyNestedValuesAreRefused) {
  const char* const builders[] = {
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}",
      "{% set ns = namespace(x={}) %}{% for i in range(5000) %}{% set ns.x = {'k': ns.x} %}{% endfor %}",
      "{% set ns = namespace(x=[1]) %}{% for i in range(5000) %}{% set ns.x = ns.x | map('string') %}{% "
      "endfor %}",
      "{% set ns = namespace(x=[1]) %}{% for i in range(5000) %}{% set ns.x = [ns.x | select] %}{% endfor %}",
      "{% set ns = namespace(x={}) %}{% for i in range(5000) %}{% set ns.x = {'f': ns.x.get} %}{% endfor %}",
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% for y in [ns.x] %}{% set ns.x = [loop] "
      "%}{% endfor %}{% endfor %}",
  };
  for (const char* source : builders) {
    SCOPED_TRACE(source);
    EXPECT_EQ(error_of(source).reason(), "value nested too deeply (limit 1000 levels)");
  }
  EXPECT_EQ(
      Template("{% set ns = namespace(x=[]) %}{% for i in range(900) %}{% set ns.x = [ns.x] %}{% endfor %}"
               "{{ (ns.x | string | length) }}")
          .render({}),
      "1802");
}

TEST(JinjaErrors, NamespaceCyclesDoNotBreakRendering) {
  // A namespace holding itself (and a macro holding its frame) form reference cycles that the
  // renderer releases afterwards; printing the cycle is an error, not a stack overflow.
  EXPECT_EQ(Template("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}").render({}),
            "True");
  EXPECT_TRUE(contains(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").reason(),
                       "nested too deeply"));
}

}  // namespace
}  // namespace lmx::jinja
