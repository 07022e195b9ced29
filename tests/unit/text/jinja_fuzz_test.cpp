// Fuzzing: random bytes and mutated real chat templates through parse and render never crash and end quickly.
#include "lmx/text/chat_template.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace lmx {
namespace {

using Json = nlohmann::ordered_json;

// Small budgets keep every fuzz render short; the point is that nothing crashes or hangs.
jinja::RenderLimits fuzz_limits() {
  jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_work_bytes = 16 << 20;
  limits.max_loop_iterations = 20000;
  limits.max_macro_depth = 40;
  return limits;
}

ChatTemplateInputs fuzz_inputs() {
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi {{ x }}"}, {"type": "image"}]},
    {"role": "assistant", "content": "<think>t</think>ok", "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null, {"b": "c"}]}}}]},
    {"role": "tool", "tool_call_id": "1", "content": "done"},
    {"role": "user", "content": "again"}])");
  inputs.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "description": "d",
    "parameters": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}},
    "required": ["a"]}}}])");
  inputs.bos_token = "<bos>";
  inputs.eos_token = "<eos>";
  inputs.enable_thinking = true;
  return inputs;
}

// Parse + render; only TemplateError may escape (anything else fails the test).
void exercise(const std::string& source, const ChatTemplateInputs& inputs, int* rendered, int* rejected) {
  try {
    ChatTemplate tpl(source, fuzz_limits());
    tpl.render(inputs);
    ++*rendered;
  } catch (const TemplateError&) {
    ++*rejected;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-TemplateError exception " << e.what() << " for source:\n" << source;
  }
}

const char* const kFragments[] = {
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "{%-",
    "-%}",
    "{{-",
    "-}}",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "|",
    ".",
    ",",
    ":",
    "'",
    "\"",
    "\\",
    "~",
    "+",
    "-",
    "*",
    "**",
    "//",
    "%",
    "==",
    "!=",
    "<",
    ">=",
    " is ",
    " not ",
    " in ",
    " and ",
    " or ",
    " if ",
    " else ",
    "for ",
    "endfor",
    "if ",
    "endif",
    "elif",
    "set ",
    "endset",
    "macro ",
    "endmacro",
    "call",
    "endcall",
    "filter ",
    "endfilter",
    "raw",
    "endraw",
    "namespace(",
    "range(",
    "loop.",
    "messages",
    "tools",
    "message['content']",
    "tojson",
    "trim",
    "dictsort",
    "map(",
    "select(",
    "caller()",
    "break",
    "continue",
    "0",
    "1",
    "-1",
    "1e309",
    "99999999999999999999",
    "none",
    "true",
    "\n",
    " ",
    "\t",
    "é",
    "\xff",
    "\xc3",
    "🙂",
    "generation",
    "endgeneration",
    "recursive",
    "with ",
    "endwith",
    "ns.x = ",
    "=",
};

std::string random_fragment_soup(std::mt19937_64& rng, size_t pieces) {
  std::string out;
  std::uniform_int_distribution<size_t> pick(0, std::size(kFragments) - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < pieces; ++i) {
    if (rng() % 8 == 0) {
      out.push_back(static_cast<char>(byte(rng)));
    } else {
      out += kFragments[pick(rng)];
    }
  }
  return out;
}

std::string mutate(const std::string& source, std::mt19937_64& rng) {
  std::string out = source;
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < edits && !out.empty(); ++k) {
    size_t pos = rng() % out.size();
    size_t len = 1 + rng() % 24;
    switch (rng() % 5) {
      case 0:
        out.erase(pos, len);
        break;  // delete a span
      case 1:
        out.insert(pos, out.substr(rng() % out.size(), len));
        break;  // duplicate a span
      case 2:
        out.insert(pos, kFragments[rng() % std::size(kFragments)]);
        break;  // insert syntax
      case 3:
        out[pos] = static_cast<char>(rng() % 256);
        break;  // flip a byte
      case 4:
        out.insert(pos, std::string(1 + rng() % 3, out[rng() % out.size()]));
        break;
    }
  }
  return out;
}

TEST(JinjaFuzz, RandomBytesAndFragmentsNeverCrash) {
  auto& rng = test::rng();
  ChatTemplateInputs inputs = fuzz_inputs();
  int rendered = 0, rejected = 0;
  auto start = std::chrono::steady_clock::now();
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 1500; ++i) {
    std::string raw(rng() % 200, '\0');
    for (char& c : raw) c = static_cast<char>(byte(rng));
    exercise(raw, inputs, &rendered, &rejected);
    exercise(random_fragment_soup(rng, rng() % 60), inputs, &rendered, &rejected);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "  " << rendered << " rendered, " << rejected << " rejected in " << seconds << " s\n";
  EXPECT_GT(rejected, 0);
}

TEST(JinjaFuzz, MutatedRealTemplatesNeverCrash) {
  auto& rng = test::rng();
  ChatTemplateInputs inputs = fuzz_inputs();
  int rendered = 0, rejected = 0;
  auto start = std::chrono::steady_clock::now();
  for (const char* file :
       {"gemma3.jinja", "llama3.jinja", "qwen3.jinja", "gemma4.jinja", "gemma4_31b.jinja"}) {
    std::ifstream in(test::source_path(std::string("tests/data/templates/") + file), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string source = buffer.str();
    for (int i = 0; i < 150; ++i) exercise(mutate(source, rng), inputs, &rendered, &rejected);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "  " << rendered << " rendered, " << rejected << " rejected in " << seconds << " s\n";
  EXPECT_GT(rendered, 0);
  EXPECT_GT(rejected, 0);
}

// Hostile but well-formed templates stop at their budgets instead of running for minutes.
TEST(JinjaFuzz, HostileTemplatesStopAtBudgets) {
  ChatTemplateInputs inputs = fuzz_inputs();
  const char* const hostile[] = {
      "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
      "{% macro f() %}{{ f() }}{{ f() }}{% endmacro %}{{ f() }}",
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% for i in range(100000) %}{{ messages | tojson }}{% endfor %}",
      "{{ 'ab' * 999999999 }}",
      "{% for i in range(100000) %}{{ range(100000) | join(',') }}{% endfor %}",
  };
  for (const char* source : hostile) {
    SCOPED_TRACE(source);
    EXPECT_THROW(ChatTemplate(source, fuzz_limits()).render(inputs), TemplateError);
  }
}

}  // namespace
}  // namespace lmx
