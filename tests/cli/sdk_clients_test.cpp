// The official OpenAI and Anthropic SDKs (npm `openai` and `@anthropic-ai/sdk`, unchanged) against `lmx
// serve` as a process: tests/fixtures/sdk_clients.mjs runs every check (chat and text completions whole and
// streamed, usage and cached tokens, tools and tool histories, the Messages API whole, streamed and counted,
// each SDK's errors) against the demo model served with Gemma 4's chat template and an API key.
#include "cli/serve_process.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace lmx {
namespace {

TEST(SdkClients, OfficialOpenAiAndAnthropicClientsWorkUnchanged) {
  const std::string sdks = test::source_path("tests/fixtures/node_modules");
  ASSERT_TRUE(test::exists(sdks + "/openai/package.json") &&
              test::exists(sdks + "/@anthropic-ai/sdk/package.json"))
      << "the SDKs are missing: run scripts/fetch_fixtures.sh";
  // The demo model with Gemma 4's own template, which renders tools.
  test::TempDir dir;
  const std::string demo = test::source_path("models/demo");
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json"})
    test::copy_path(demo + "/" + f, dir.file(f));
  ASSERT_EQ(::symlink((demo + "/model.safetensors").c_str(), dir.file("model.safetensors").c_str()), 0);
  test::copy_path(test::source_path("tests/data/templates/gemma4.jinja"), dir.file("chat_template.jinja"));

  ServeProcess serve = start_serve("--model " + dir.path() + " --api-key secret --max-tokens 16");
  ASSERT_GT(serve.port, 0) << "lmx serve printed no port";
  const std::string command = "node " + test::source_path("tests/fixtures/sdk_clients.mjs") +
                              " http://127.0.0.1:" + std::to_string(serve.port) + " secret 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("ok anthropicErrors"), std::string::npos) << output;
  EXPECT_EQ(finish(serve), 0);
}

}  // namespace
}  // namespace lmx
