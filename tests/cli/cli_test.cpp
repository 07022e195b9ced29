// The lmx CLI's exact interfaces (generate, logits, synth, bench) run as a real process, and its
// errors on bad input: a message on stderr and a non-zero exit, never a crash.
#include "cli/run_lmx.h"
#include "lmx/io/safetensors.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace lmx {
namespace {

using test::run_lmx;
using test::RunResult;

std::string tiny(const std::string& name) {
  return test::source_path("tests/data/models/" + name);
}

TEST(Cli, GenerateJsonMatchesGolden) {
  // The golden greedy continuation of the 7-token prompt of tiny-31b.
  auto goldens = SafetensorsFile::open(tiny("tiny-31b") + "/goldens.safetensors");
  Tensor prompt = goldens->tensor("prompt_1").contiguous(), greedy = goldens->tensor("greedy_1").contiguous();
  std::string ids;
  for (int32_t id : prompt.span<int32_t>()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  RunResult r =
      run_lmx("generate --model " + tiny("tiny-31b") + " --prompt-ids " + ids + " --max-tokens 20 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(r.output);
  auto span = greedy.span<int32_t>();
  EXPECT_EQ(json["tokens"].get<std::vector<int32_t>>(), std::vector<int32_t>(span.begin(), span.end()));
  EXPECT_GT(json["prompt_tok_s"].get<double>(), 0);
  EXPECT_GT(json["decode_tok_s"].get<double>(), 0);
}

TEST(Cli, GeneratePlainPrintsTokensAndTiming) {
  RunResult r = run_lmx("generate --model " + tiny("tiny-e2b") + " --prompt-ids 2,105,7 --max-tokens 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos) << r.output;
}

TEST(Cli, LogitsNpyMatchesGoldenAndChunking) {
  test::TempDir dir;
  auto goldens = SafetensorsFile::open(tiny("tiny-e2b") + "/goldens.safetensors");
  Tensor prompt = goldens->tensor("prompt_3").contiguous(),
         expected = goldens->tensor("logits_3").contiguous();
  std::string ids;
  for (int32_t id : prompt.span<int32_t>()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  for (const std::string chunk : {"0", "5"}) {
    std::string out = dir.file("logits" + chunk + ".npy");
    RunResult r = run_lmx("logits --model " + tiny("tiny-e2b") + " --prompt-ids " + ids + " --out " + out +
                          " --prefill-chunk " + chunk);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.substr(0, 6), "\x93NUMPY");
    uint16_t header_len = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
    EXPECT_EQ((10 + header_len) % 64, 0);
    std::string header = bytes.substr(10, header_len);
    EXPECT_NE(header.find("'shape': (33, 512)"), std::string::npos) << header;
    ASSERT_EQ(bytes.size(), 10 + header_len + expected.nbytes());
    const auto* values = reinterpret_cast<const float*>(bytes.data() + 10 + header_len);
    float worst = 0;
    for (int64_t i = 0; i < expected.numel(); ++i)
      worst = std::max(worst, std::fabs(values[i] - expected.data<float>()[i]));
    EXPECT_LE(worst, 1e-3f) << "chunk " << chunk;
  }
}

TEST(Cli, SynthThenBench) {
  test::TempDir dir;
  std::string config = dir.file("config.json");
  std::ofstream(config) << std::ifstream(tiny("tiny-26b-moe") + "/config.json").rdbuf();
  RunResult synth = run_lmx("synth --config " + config + " --out " + dir.file("model") + " --seed 3");
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  RunResult bench =
      run_lmx("bench --model " + dir.file("model") + " --prompt-tokens 16 --gen-tokens 4 --threads 1 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  auto json = nlohmann::json::parse(bench.output);
  for (const char* key :
       {"prefill_tok_s", "prefill_tflop_s", "decode_tok_s", "weight_bytes_per_token", "peak_rss_mb"})
    EXPECT_GT(json[key].get<double>(), 0) << key;
  EXPECT_EQ(json["threads"], 1);
  EXPECT_EQ(json["warmup"], true);
  RunResult cold = run_lmx("bench --model " + dir.file("model") +
                           " --prompt-tokens 16 --gen-tokens 2 --threads 1 --json --no-warmup");
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  EXPECT_EQ(nlohmann::json::parse(cold.output)["warmup"], false);
  // The same seed gives the same weights.
  RunResult again = run_lmx("synth --config " + config + " --out " + dir.file("model2") + " --seed 3");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto a = SafetensorsFile::open(dir.file("model/model.safetensors"));
  auto b = SafetensorsFile::open(dir.file("model2/model.safetensors"));
  Tensor ta = a->tensor("model.layers.0.experts.down_proj"),
         tb = b->tensor("model.layers.0.experts.down_proj");
  EXPECT_EQ(std::memcmp(ta.raw_data(), tb.raw_data(), ta.nbytes()), 0);
}

TEST(Cli, BadInputGivesClearErrors) {
  const std::string m = " --model " + tiny("tiny-e2b");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate" + m + " --prompt-ids 2,abc", "'abc'"},
      {"generate" + m + " --prompt-ids 2,,3", "not a non-negative integer"},
      {"generate" + m + " --prompt-ids 2,99999", "out of range"},
      {"generate --model /nonexistent/dir --prompt-ids 2", "/nonexistent/dir"},
      {"generate" + m + " --prompt-ids 2 --max-tokens -3", "max-tokens"},
      {"logits" + m + " --prompt-ids 2 --out /nonexistent/dir/x.npy", "/nonexistent/dir/x.npy"},
      {"synth --preset gemma4-7b --out /tmp/never", "unknown preset"},
      {"synth --preset gemma4-e4b --layers 99 --out /tmp/never", "cannot keep 99"},
      {"synth --config /tmp/never.json --layers 2 --out /tmp/never", "--preset"},
      {"bench --model " + test::source_path("tests") + " --gen-tokens 1", "config"},
      {"frobnicate", "frobnicate"},
  };
  for (const auto& [args, needle] : cases) {
    RunResult r = run_lmx(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_LT(r.exit_code, 128) << args << " crashed: " << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace lmx

namespace lmx {
namespace {

// `lmx info` names the backends and SIMD targets; --device picks a backend or fails clearly.
TEST(Cli, InfoAndDeviceSelection) {
  test::RunResult info = test::run_lmx("info --json");
  ASSERT_EQ(info.exit_code, 0) << info.output;
  auto json = nlohmann::json::parse(info.output);
  EXPECT_EQ(json["backends"][0], "cpu");
  EXPECT_FALSE(json["cpu"]["simd_target"].get<std::string>().empty());
  EXPECT_TRUE(json["devices"].is_array());
  const bool gpu = !json["devices"].empty();

  const std::string generate = "generate --prompt-ids 2,105 --max-tokens 2 --json ";
  test::RunResult cpu = test::run_lmx(generate + "--device cpu");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  test::RunResult bad = test::run_lmx(generate + "--device tpu");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("--device tpu: expected cpu, cuda or cuda:N"), std::string::npos) << bad.output;
  test::RunResult bad_index = test::run_lmx(generate + "--device cuda:x");
  EXPECT_EQ(bad_index.exit_code, 1);
  EXPECT_NE(bad_index.output.find("cuda:x"), std::string::npos) << bad_index.output;
  if (!gpu) {  // CUDA missing from the build, or no GPU: an error naming which
    test::RunResult cuda = test::run_lmx(generate + "--device cuda");
    EXPECT_EQ(cuda.exit_code, 1);
    EXPECT_TRUE(cuda.output.find("no CUDA device is visible") != std::string::npos ||
                cuda.output.find("built without the CUDA backend") != std::string::npos)
        << cuda.output;
  }
}

// --tuning FILE (or LMX_TUNING) overrides the kernel tuning tables, checked before any verb runs; `lmx info`
// prints the tables in use and what the file changed.
TEST(Cli, TuningFileIsCheckedAndPrinted) {
  test::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  };
  const std::string good = write("good.json", R"({"cpu": {"quantized": {"integer_kernels": false}},
                                                  "cuda": {"q4_gemv": {"stages": 4}}})");
  const std::string bad = write("bad.json", R"({"cpu": {"quantized": {"integer_kernel": false}}})");
  const std::string bad_cuda = write("bad_cuda.json", R"({"cuda": {"q4_gemv": {"stages": 3}}})");

  RunResult plain = run_lmx("info --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto json = nlohmann::json::parse(plain.output);
  EXPECT_EQ(json["tuning"]["source"], "built-in");
  EXPECT_EQ(json["tuning"]["cpu"]["table"]["quantized"]["integer_kernels"], true);
  EXPECT_TRUE(json["tuning"]["cpu"]["overridden"].empty());
  const bool cuda = json["backends"].size() > 1;

  RunResult tuned = run_lmx("--tuning " + test::shell_quote(good) + " info --json");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  json = nlohmann::json::parse(tuned.output);
  EXPECT_EQ(json["tuning"]["source"], good);
  EXPECT_EQ(json["tuning"]["cpu"]["table"]["quantized"]["integer_kernels"], false);
  EXPECT_EQ(json["tuning"]["cpu"]["overridden"], nlohmann::json::array({"quantized.integer_kernels"}));
  if (cuda) {
    for (const char* table : {"sm_90", "generic"}) {
      EXPECT_EQ(json["tuning"]["cuda"][table]["table"]["q4_gemv"]["stages"], 4) << table;
      EXPECT_EQ(json["tuning"]["cuda"][table]["overridden"], nlohmann::json::array({"q4_gemv.stages"}))
          << table;
    }
    RunResult rejected = run_lmx("--tuning " + test::shell_quote(bad_cuda) + " info");
    EXPECT_EQ(rejected.exit_code, 1);
    EXPECT_NE(
        rejected.output.find("tuning file " + bad_cuda + ": cuda.q4_gemv.stages: 3 is not one of 0, 2, 4"),
        std::string::npos)
        << rejected.output;
  } else {
    EXPECT_FALSE(json["tuning"].contains("cuda"));
  }
  RunResult text = run_lmx("info --tuning " + test::shell_quote(good));  // (after the verb too)
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("quantized.integer_kernels"), std::string::npos) << text.output;

  // A bad file stops every verb before it runs, naming the file and the key.
  RunResult rejected =
      run_lmx("--tuning " + test::shell_quote(bad) + " generate --prompt-ids 2,105 --max-tokens 1");
  EXPECT_EQ(rejected.exit_code, 1);
  EXPECT_NE(rejected.output.find("tuning file " + bad + ": cpu.quantized.integer_kernel: unknown key"),
            std::string::npos)
      << rejected.output;
  RunResult missing = run_lmx("--tuning " + test::shell_quote(dir.file("missing.json")) + " info");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("cannot be read"), std::string::npos) << missing.output;

  // LMX_TUNING names the file when --tuning does not; the flag wins.
  ::setenv("LMX_TUNING", bad.c_str(), 1);
  RunResult from_env = run_lmx("info --json");
  RunResult flag_wins = run_lmx("--tuning " + test::shell_quote(good) + " info --json");
  ::unsetenv("LMX_TUNING");
  EXPECT_EQ(from_env.exit_code, 1);
  EXPECT_NE(from_env.output.find("tuning file " + bad), std::string::npos) << from_env.output;
  ASSERT_EQ(flag_wins.exit_code, 0) << flag_wins.output;
  EXPECT_EQ(nlohmann::json::parse(flag_wins.output)["tuning"]["source"], good);
}

}  // namespace
}  // namespace lmx

namespace lmx {
namespace {

// The KV cache flags: codecs and block sizes run and report the bytes they hold; bad values and a budget
// too small for the prompt are clear errors, not crashes.
// KV snapshots: a generation saved with --save-kv and continued with --load-kv gives what one longer
// generation gives, reusing the saved tokens; a file from other KV flags or a damaged one is refused.
TEST(Cli, SaveAndLoadKvSnapshots) {
  test::TempDir dir;
  const std::string demo = "generate --model " + test::source_path("models/demo") + " --json";
  const std::string snapshot = dir.file("turn.lmxkv");
  const test::RunResult whole = test::run_lmx(demo + " --prompt-ids 2,397,729,4924 --max-tokens 8");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto whole_tokens = nlohmann::json::parse(whole.output)["tokens"].get<std::vector<int>>();
  const test::RunResult first =
      test::run_lmx(demo + " --prompt-ids 2,397,729,4924 --max-tokens 4 --save-kv " + snapshot);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto first_tokens = nlohmann::json::parse(first.output)["tokens"].get<std::vector<int>>();
  ASSERT_EQ(first_tokens, std::vector<int>(whole_tokens.begin(), whole_tokens.begin() + 4));
  // Continue from the snapshot: its tokens (the prompt and the answer but its last token) plus that token.
  std::string ids = "2,397,729,4924";
  for (int t : first_tokens) ids += "," + std::to_string(t);
  const test::RunResult next =
      test::run_lmx(demo + " --prompt-ids " + ids + " --max-tokens 4 --load-kv " + snapshot);
  ASSERT_EQ(next.exit_code, 0) << next.output;
  const auto next_json = nlohmann::json::parse(next.output);
  EXPECT_EQ(next_json["reused_tokens"].get<int>(), 7);
  EXPECT_EQ(next_json["tokens"].get<std::vector<int>>(),
            std::vector<int>(whole_tokens.begin() + 4, whole_tokens.end()));
  // Without a prompt flag the snapshot's own tokens are the prompt.
  const test::RunResult resumed = test::run_lmx(demo + " --max-tokens 5 --load-kv " + snapshot);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(nlohmann::json::parse(resumed.output)["tokens"].get<std::vector<int>>(),
            std::vector<int>(whole_tokens.begin() + 3, whole_tokens.end()));
  // Other KV flags, a damaged file, a missing one.
  const test::RunResult codec = test::run_lmx(demo + " --kv-cache bf16 --max-tokens 2 --load-kv " + snapshot);
  EXPECT_EQ(codec.exit_code, 1);
  EXPECT_NE(codec.output.find("was saved as kv:f32"), std::string::npos) << codec.output;
  std::fstream file(snapshot, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(-3, std::ios::end);
  file.put('\x7f');
  file.close();
  const test::RunResult damaged = test::run_lmx(demo + " --max-tokens 2 --load-kv " + snapshot);
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_NE(damaged.output.find("is corrupted (checksum mismatch)"), std::string::npos) << damaged.output;
  const test::RunResult missing = test::run_lmx(demo + " --max-tokens 2 --load-kv " + dir.file("none"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("none"), std::string::npos) << missing.output;
}

// A model directory's kv_config.json sets per-layer affine codecs (reported, fewer bytes) unless a KV
// codec flag chooses for every layer; a malformed one is an error naming the entry.
// A directory of links to the demo model's files (so that tests may add files beside them).
void link_demo_model(const test::TempDir& dir) {
  const std::string demo = test::source_path("models/demo");
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
    std::error_code error;
    std::filesystem::create_symlink(demo + "/" + file, dir.file(file), error);
    ASSERT_FALSE(error) << error.message();
  }
}

TEST(Cli, KvConfigJsonSetsLayerCodecs) {
  test::TempDir dir;
  link_demo_model(dir);
  const std::string run = "generate --model " + dir.path() + " --prompt-ids 2,397,729,4924 --max-tokens 4";
  const test::RunResult plain = test::run_lmx(run + " --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  std::ofstream(dir.file("kv_config.json"))
      << R"([{"layer_idx": 4, "bits": 8, "group_size": 64}, {"layer_idx": 5, "bits": 4, "group_size": 32}])";
  const test::RunResult config = test::run_lmx(run);
  ASSERT_EQ(config.exit_code, 0) << config.output;
  EXPECT_NE(config.output.find("(f32; layer 5 affine4:g32; layer 4 affine8:g64)"), std::string::npos)
      << config.output;
  const test::RunResult config_json = test::run_lmx(run + " --json");
  ASSERT_EQ(config_json.exit_code, 0) << config_json.output;
  EXPECT_LT(nlohmann::json::parse(config_json.output)["kv_bytes"].get<int64_t>(),
            nlohmann::json::parse(plain.output)["kv_bytes"].get<int64_t>());
  const test::RunResult flag = test::run_lmx(run + " --kv-cache bf16");
  ASSERT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_NE(flag.output.find("(bf16)"), std::string::npos) << flag.output;
  std::ofstream(dir.file("kv_config.json"), std::ios::trunc)
      << R"([{"layer_idx": 4, "bits": 2, "group_size": 64}])";
  const test::RunResult bad = test::run_lmx(run);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("kv_config.json entry 0: bits 2 with group_size 64"), std::string::npos)
      << bad.output;
}

TEST(Cli, KvCacheFlags) {
  const std::string base =
      "generate --model " + tiny("tiny-e2b") + " --prompt-ids 2,105,7,9,11 --max-tokens 4 --json";
  test::RunResult f32 = test::run_lmx(base);
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  const auto f32_json = nlohmann::json::parse(f32.output);
  EXPECT_GT(f32_json["kv_bytes"].get<int64_t>(), 0);
  test::RunResult bf16 = test::run_lmx(base + " --kv-cache bf16 --kv-block-tokens 16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  const auto bf16_json = nlohmann::json::parse(bf16.output);
  EXPECT_GT(bf16_json["kv_bytes"].get<int64_t>(), 0);
  EXPECT_LT(bf16_json["kv_bytes"].get<int64_t>(), f32_json["kv_bytes"].get<int64_t>());
  test::RunResult blocks = test::run_lmx(base + " --kv-block-tokens 1");
  ASSERT_EQ(blocks.exit_code, 0) << blocks.output;
  EXPECT_EQ(nlohmann::json::parse(blocks.output)["tokens"], f32_json["tokens"]);

  // The affine codecs on a model whose head_dim (64) their groups divide: fewer bytes, the same greedy start.
  const std::string demo = "generate --model " + test::source_path("models/demo") +
                           " --prompt-ids 2,397,729,4924 --max-tokens 6 --json";
  const test::RunResult demo_bf16 = test::run_lmx(demo + " --kv-cache bf16");
  ASSERT_EQ(demo_bf16.exit_code, 0) << demo_bf16.output;
  const int64_t bf16_bytes = nlohmann::json::parse(demo_bf16.output)["kv_bytes"].get<int64_t>();
  int64_t previous = bf16_bytes;
  for (const char* spec : {"affine8:g32", "affine8", "affine4:g32", "affine4"}) {
    const test::RunResult r = test::run_lmx(demo + " --kv-cache " + spec);
    ASSERT_EQ(r.exit_code, 0) << spec << ": " << r.output;
    const auto json = nlohmann::json::parse(r.output);
    EXPECT_LT(json["kv_bytes"].get<int64_t>(), previous) << spec;
    previous = json["kv_bytes"].get<int64_t>();
    EXPECT_EQ(json["tokens"].size(), 6u) << spec;
  }
  // Sliding layers (8 of the demo's 10) in their own codec: fewer bytes than bf16, more than affine4 alone.
  const test::RunResult mixed = test::run_lmx(demo + " --kv-cache bf16 --kv-cache-sliding affine4");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  const int64_t mixed_bytes = nlohmann::json::parse(mixed.output)["kv_bytes"].get<int64_t>();
  EXPECT_LT(mixed_bytes, bf16_bytes);
  EXPECT_GT(mixed_bytes, previous);
  for (const char* spec : {"turbo", "turbo:k8v4", "turbo:k4v2"}) {
    const test::RunResult r = test::run_lmx(demo + " --kv-cache " + spec);
    ASSERT_EQ(r.exit_code, 0) << spec << ": " << r.output;
    EXPECT_LT(nlohmann::json::parse(r.output)["kv_bytes"].get<int64_t>(), bf16_bytes) << spec;
  }
  // A quantization start past everything generated keeps the whole run in bf16: the bf16 tokens exactly.
  const test::RunResult late = test::run_lmx(demo + " --kv-cache affine4 --kv-quant-start 64");
  ASSERT_EQ(late.exit_code, 0) << late.output;
  EXPECT_EQ(nlohmann::json::parse(late.output)["tokens"], nlohmann::json::parse(demo_bf16.output)["tokens"]);
  const test::RunResult early = test::run_lmx(demo + " --kv-cache affine4 --kv-quant-start 3");
  ASSERT_EQ(early.exit_code, 0) << early.output;
  EXPECT_EQ(nlohmann::json::parse(early.output)["tokens"].size(), 6u);

  struct Bad {
    std::string flags, message;
  };
  for (const Bad& bad :
       {Bad{"--kv-cache fp8", "--kv-cache: unknown KV cache codec 'fp8'"},
        Bad{"--kv-cache affine3", "unknown KV cache codec 'affine3'"},
        Bad{"--kv-cache turbo:k8v5", "unknown KV cache codec 'turbo:k8v5'"},
        Bad{"--kv-cache-sliding q4", "--kv-cache-sliding: unknown KV cache codec 'q4'"},
        Bad{"--kv-cache affine4", "head_dim 32 is not a multiple of the group 64"},
        Bad{"--kv-budget lots", "--kv-budget 'lots'"}, Bad{"--kv-budget 0", "--kv-budget '0'"},
        Bad{"--kv-budget 1K", "more than the whole KV budget of 1024 bytes"},
        Bad{"--kv-block-tokens 0", "--kv-block-tokens"},
        Bad{"--kv-quant-start 8", "a KV quantization start (8 tokens) needs a quantized KV codec"},
        Bad{"--kv-quant-start -1", "--kv-quant-start"}}) {
    test::RunResult r = test::run_lmx(base + " " + bad.flags);
    EXPECT_NE(r.exit_code, 0) << bad.flags;
    EXPECT_NE(r.output.find(bad.message), std::string::npos) << bad.flags << ": " << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  }
}

// lmx kv-fit measures every layer's candidates on calibration text, writes kv_fit.json within the budget, and
// the model-running verbs then apply it; --reuse plans again from the recorded measurements; a budget no
// assignment meets is an error saying so.
TEST(Cli, KvFitWritesACodecPerLayerThatGenerateApplies) {
  test::TempDir dir;
  link_demo_model(dir);
  std::ofstream(dir.file("calibration.txt")) << "The cache keeps keys and values of every layer in blocks. "
                                                "Attention reads them back at every step of decoding.";
  const std::string fit = "kv-fit --model " + dir.path() + " --text-file " + dir.file("calibration.txt") +
                          " --tokens 32 --codecs bf16,turbo:k8v4,turbo:k4v3";
  const test::RunResult measured = test::run_lmx(fit + " --ratio 2");
  ASSERT_EQ(measured.exit_code, 0) << measured.output;
  EXPECT_NE(measured.output.find("wrote " + dir.file("kv_fit.json")), std::string::npos) << measured.output;
  EXPECT_NE(measured.output.find("kv-fit: 18/18 layer"), std::string::npos) << "6 layers x 3 codecs measured";
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(dir.file("kv_fit.json")));
  EXPECT_EQ(written["layers"].size(), 6u);
  EXPECT_EQ(written["measurements"].size(), 18u);
  EXPECT_LE(written["bytes_per_token"].get<int>(), 1792 / 2);

  const test::RunResult run =
      test::run_lmx("generate --model " + dir.path() + " --prompt-ids 2,397,729,4924 --max-tokens 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("turbo:k"), std::string::npos) << run.output;

  const test::RunResult again = test::run_lmx(fit + " --ratio 3 --reuse " + dir.file("kv_fit.json") +
                                              " --out " + dir.file("fit3.json"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("kv-fit: 1/"), std::string::npos) << "--reuse measures nothing";
  EXPECT_LE(nlohmann::json::parse(std::ifstream(dir.file("fit3.json")))["bytes_per_token"].get<int>(),
            1792 / 3);

  const test::RunResult impossible = test::run_lmx(fit + " --ratio 20 --reuse " + dir.file("kv_fit.json") +
                                                   " --out " + dir.file("never.json"));
  EXPECT_EQ(impossible.exit_code, 1);
  EXPECT_NE(impossible.output.find("no assignment of the candidate codecs fits"), std::string::npos)
      << impossible.output;
}

}  // namespace
}  // namespace lmx
