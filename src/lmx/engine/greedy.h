// Greedy generation for one sequence: prefill (optionally in chunks), then argmax decode.
#pragma once

#include "lmx/model/language_model.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace lmx {

struct GreedyOptions {
  int max_new_tokens = 32;
  int prefill_chunk_tokens = 0;         // 0 = the whole prompt in one step
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
  // Called with each new token as it is produced; return false to stop early.
  std::function<bool(int32_t)> on_token;
};

struct GreedyResult {
  std::vector<int32_t> tokens;  // generated tokens (stop token included when hit)
  double prefill_seconds = 0;   // prompt forward(s), through the first token's logits
  double decode_seconds = 0;    // every later step
  int prompt_tokens = 0;
  size_t kv_bytes = 0;  // KV blocks the sequence held at the end
};

// Runs the prompt through a fresh sequence of `model` and decodes greedily. The prompt must be
// non-empty; token ids are validated by the model.
GreedyResult generate_greedy(LanguageModel& model, std::span<const int32_t> prompt,
                             const GreedyOptions& options);

}  // namespace lmx
