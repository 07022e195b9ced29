// The verbs that run on the engine as real processes: `lmx batch` (JSONL in, JSONL out in input order, bad
// lines reported by line number without stopping the others), `lmx bench --concurrency`, and
// `lmx generate` with sampling flags.
#include "cli/run_lmx.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace lmx {
namespace {

using test::run_lmx;
using test::RunResult;

std::string demo() {
  return test::source_path("models/demo");
}
std::string tiny(const std::string& name) {
  return test::source_path("tests/data/models/" + name);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(test::read_file(path));
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(EngineCli, BatchWritesEveryLineInOrderAndReportsBadOnes) {
  test::TempDir dir;
  const std::string input = dir.file("in.jsonl"), output = dir.file("out.jsonl");
  test::write_file(
      input,
      R"({"prompt_ids": [2, 818, 5279, 529], "max_tokens": 6, "temperature": 0})"
      "\n"
      R"({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": true, "top_logprobs": 2})"
      "\n\n"
      R"({"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4, "n": 2, "seed": 5, "temperature": 1.0})"
      "\n"
      R"({"prompt": "x", "prompt_ids": [2]})"
      "\n"
      "{not json\n"
      R"({"prompt_ids": [2, 99999999]})"
      "\n"
      R"({"prompt": "Stop here", "max_tokens": 8, "temperature": 0, "stop": [" "]})"
      "\n");
  RunResult r = run_lmx("batch --model " + demo() + " --input " + input + " --output " + output);
  EXPECT_EQ(r.exit_code, 1) << r.output;  // some lines were bad
  EXPECT_NE(r.output.find("line 6:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("line 7:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("line 5:"), std::string::npos) << r.output;
  const auto lines = read_jsonl(output);
  ASSERT_EQ(lines.size(), 8u);  // 1 + 1 + 2 choices + 3 errors + 1
  std::vector<int64_t> indices;
  for (const auto& l : lines) indices.push_back(l["index"].get<int64_t>());
  EXPECT_EQ(indices, (std::vector<int64_t>{0, 1, 2, 2, 3, 4, 5, 6}));

  // The greedy ids line gives what `lmx generate` gives.
  RunResult g = run_lmx("generate --model " + demo() + " --prompt-ids 2,818,5279,529 --max-tokens 6 --json");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const auto generated = nlohmann::json::parse(g.output);
  EXPECT_EQ(lines[0]["tokens"], generated["tokens"]);
  EXPECT_EQ(lines[0]["text"], generated["text"]);
  EXPECT_EQ(lines[0]["finish_reason"], generated["finish_reason"]);

  ASSERT_TRUE(lines[1].contains("logprobs"));
  EXPECT_EQ(lines[1]["logprobs"].size(), lines[1]["tokens"].size());
  EXPECT_EQ(lines[1]["logprobs"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lines[2]["choice"], 0);
  EXPECT_EQ(lines[3]["choice"], 1);
  EXPECT_NE(lines[4]["error"].get<std::string>().find("exactly one of"), std::string::npos);
  EXPECT_NE(lines[5]["error"].get<std::string>().find("invalid JSON"), std::string::npos);
  EXPECT_NE(lines[6]["error"].get<std::string>().find("out of range"), std::string::npos);
  EXPECT_EQ(lines[7]["finish_reason"], "stop");
  EXPECT_EQ(lines[7]["text"].get<std::string>().find(' '), std::string::npos);
}

TEST(EngineCli, BatchRefusesMissingFilesAndFlags) {
  test::TempDir dir;
  RunResult r = run_lmx("batch --model " + demo() + " --input " + dir.file("absent.jsonl") + " --output " +
                        dir.file("out.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("absent.jsonl"), std::string::npos) << r.output;
  EXPECT_FALSE(test::exists(dir.file("out.jsonl")));
  test::write_file(dir.file("in.jsonl"), "{\"prompt_ids\": [2]}\n");
  r = run_lmx("batch --model " + demo() + " --input " + dir.file("in.jsonl") + " --output " + dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_lmx("batch --model " + demo() + " --input " + dir.file("in.jsonl") + " --output " +
              dir.file("o.jsonl") + " --max-rows 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(EngineCli, BenchConcurrencyReportsAggregates) {
  RunResult r = run_lmx("bench --model " + tiny("tiny-e2b") +
                        " --concurrency 4 --prompt-tokens 9 --gen-tokens 5 --prefill-chunk 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto json = nlohmann::json::parse(r.output);
  EXPECT_EQ(json["concurrency"], 4);
  EXPECT_EQ(json["prefill_chunk"], 4);
  for (const char* key :
       {"prefill_tok_s", "decode_tok_s", "overall_tok_s", "ttft_p50_s", "token_latency_p99_s"})
    EXPECT_GT(json[key].get<double>(), 0) << key;
  EXPECT_GE(json["ttft_p99_s"].get<double>(), json["ttft_p50_s"].get<double>());
  EXPECT_GT(json["kv_peak_bytes"].get<double>(), 0);
  r = run_lmx("bench --model " + tiny("tiny-e2b") + " --concurrency 2 --prompt-tokens 4 --gen-tokens 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("first token"), std::string::npos) << r.output;
  // Sampled sequences; sampling flags without --concurrency are refused.
  r = run_lmx(
      "bench --model " + tiny("tiny-e2b") +
      " --concurrency 3 --prompt-tokens 4 --gen-tokens 3 --temperature 0.8 --top-p 0.9 --seed 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FLOAT_EQ(nlohmann::json::parse(r.output)["top_p"].get<float>(), 0.9f);
  r = run_lmx("bench --model " + tiny("tiny-e2b") + " --prompt-tokens 4 --gen-tokens 3 --temperature 0.8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--temperature applies to --concurrency runs"), std::string::npos) << r.output;
}

TEST(EngineCli, GenerateSamplesReproduciblyWithASeed) {
  const std::string args = "generate --model " + demo() + " --prompt \"The weather\" --max-tokens 12 --json";
  RunResult a = run_lmx(args + " --temperature 1.2 --seed 9"),
            b = run_lmx(args + " --temperature 1.2 --seed 9");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(nlohmann::json::parse(a.output)["tokens"], nlohmann::json::parse(b.output)["tokens"]);
  RunResult bad = run_lmx(args + " --top-p 0");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("top_p"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace lmx
