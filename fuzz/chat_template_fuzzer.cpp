// libFuzzer target: chat templates parsed and rendered, and chat messages rendered through a real template.
#include "fuzz_support.h"
#include "lmx/io/json_input.h"
#include "lmx/text/chat_template.h"

#include <memory>

namespace {

std::unique_ptr<lmx::ChatTemplate> g_gemma;
lmx::ChatTemplateInputs g_inputs;

// Tight limits keep each run short; the limits themselves are what a hostile template must hit.
lmx::jinja::RenderLimits fuzz_limits() {
  lmx::jinja::RenderLimits limits;
  limits.max_output_bytes = size_t{256} << 10;
  limits.max_work_bytes = int64_t{4} << 20;
  limits.max_loop_iterations = 20'000;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_gemma = std::make_unique<lmx::ChatTemplate>(lmx::fuzz::source_file("tests/data/templates/gemma4.jinja"),
                                                fuzz_limits());
  g_inputs.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi <b>there</b>"}]},
    {"role": "assistant", "content": "Hello", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": "And?"}])");
  g_inputs.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
    "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])");
  g_inputs.bos_token = "<bos>";
  g_inputs.eos_token = "<eos>";
  return 0;
}

// The first byte picks the mode: even, the rest is a template rendered with fixed messages and
// tools; odd, the rest is a messages JSON document rendered by the Gemma 4 template.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = lmx::fuzz::as_text(data + 1, size - 1);
  lmx::fuzz::expect_only_lmx_errors([&] {
    if (data[0] % 2 == 0) {
      const lmx::ChatTemplate parsed{std::string(rest), fuzz_limits()};
      (void)parsed.render(g_inputs);
    } else {
      lmx::ChatTemplateInputs inputs = g_inputs;
      inputs.messages = lmx::parse_ordered_json(rest, "fuzz messages");
      inputs.enable_thinking = data[0] % 4 == 1;
      (void)g_gemma->render(inputs);
    }
  });
  return 0;
}
