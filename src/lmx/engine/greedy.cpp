// Greedy generation for one sequence: prefill (optionally in chunks), then argmax decode.
#include "lmx/engine/greedy.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <chrono>

namespace lmx {

GreedyResult generate_greedy(LanguageModel& model, std::span<const int32_t> prompt,
                             const GreedyOptions& options) {
  LMX_REQUIRE(InvalidArgument, !prompt.empty(), "generate: the prompt is empty");
  LMX_REQUIRE(InvalidArgument, options.max_new_tokens >= 0, "generate: max tokens must be ≥ 0");
  using Clock = std::chrono::steady_clock;
  GreedyResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  if (options.max_new_tokens == 0) return result;
  auto seq = model.new_sequence();
  const size_t chunk =
      options.prefill_chunk_tokens > 0 ? static_cast<size_t>(options.prefill_chunk_tokens) : prompt.size();

  auto start = Clock::now();
  int32_t token = 0;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    StepRow row{seq.get(), prompt.subspan(begin, std::min(chunk, prompt.size() - begin))};
    token = model.forward_argmax({&row, 1})[0];
  }
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  auto decode_start = Clock::now();
  for (;;) {
    result.tokens.push_back(token);
    bool keep_going = !options.on_token || options.on_token(token);
    bool stop = std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token) !=
                options.stop_token_ids.end();
    if (!keep_going || stop || static_cast<int>(result.tokens.size()) >= options.max_new_tokens) break;
    StepRow row{seq.get(), {&result.tokens.back(), 1}};
    token = model.forward_argmax({&row, 1})[0];
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  result.kv_bytes = model.kv_bytes(*seq);
  return result;
}

}  // namespace lmx
