// lmx::ChatSession: one conversation's sequence on a model, reusing the KV of the tokens it already
// processed when the next prompt starts with them, and generate_turn() to answer one prompt.
#pragma once

#include "lmx/engine/sampler.h"
#include "lmx/model/language_model.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace lmx {

// Not thread-safe; the model must outlive the session.
class ChatSession {
 public:
  // `prefill_chunk_tokens` > 0 runs prompts in steps of at most that many tokens (0 = one step).
  explicit ChatSession(LanguageModel& model, int prefill_chunk_tokens = 0);

  // Makes the sequence hold exactly `prompt` (non-empty) and returns the f32 logits of its last
  // token (valid until the next call). The longest common prefix with tokens() is kept; the rest
  // of tokens() is rewound when every cache layer still stores what the next query needs, else the
  // sequence starts afresh. At least the last prompt token is always run. Token ids are validated
  // by the model (InvalidArgument); after an error the session is reset.
  std::span<const float> prefill(std::span<const int32_t> prompt);
  // Appends one token and returns the logits it gives (valid until the next call).
  std::span<const float> decode(int32_t token);
  // Drops all KV.
  void reset();

  // The tokens whose KV the sequence holds, in order.
  std::span<const int32_t> tokens() const { return tokens_; }
  // How many prompt tokens the last prefill() took from the KV instead of running them.
  int64_t reused_tokens() const { return reused_tokens_; }
  // Bytes of KV blocks the session's sequence holds (0 before the first prefill).
  size_t kv_bytes() const { return sequence_ ? model_.kv_bytes(*sequence_) : 0; }

 private:
  // Whether truncating to `length` leaves every sliding layer with the keys a query at `length`
  // attends to.
  bool can_rewind_to(int64_t length) const;
  std::span<const float> run(std::span<const int32_t> tokens);

  LanguageModel& model_;
  int prefill_chunk_tokens_;
  std::unique_ptr<Sequence> sequence_;
  std::vector<int32_t> tokens_;
  Tensor logits_;  // [1, V] of the last step
  int64_t reused_tokens_ = 0;
};

enum class FinishReason {
  kStop,       // a stop token was sampled (it ends tokens)
  kLength,     // max_new_tokens reached
  kCancelled,  // on_token returned false
};

struct TurnOptions {
  int max_new_tokens = 256;             // ≥ 0
  std::vector<int32_t> stop_token_ids;  // sampling one ends the turn
  // Called with each generated token that is not a stop token, as soon as it is sampled; return
  // false to end the turn after it.
  std::function<bool(int32_t)> on_token;
};

struct TurnResult {
  std::vector<int32_t> tokens;  // generated, the stop token included when finish is kStop
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;   // prompt tokens whose KV was reused
  double prefill_seconds = 0;  // through the first token's logits
  double decode_seconds = 0;   // every later step
  size_t kv_bytes = 0;         // KV blocks the session holds after the turn
};

// Prefills `prompt` (non-empty) in `session` and samples up to max_new_tokens with `sampler`, whose
// penalties see the prompt and the tokens generated so far. The session then holds the prompt and
// every generated token but the last (which was never fed back), so a next prompt that extends
// the conversation reuses all of it.
TurnResult generate_turn(ChatSession& session, Sampler& sampler, std::span<const int32_t> prompt,
                         const TurnOptions& options);

}  // namespace lmx
