// lmx::ChatSession: prefix reuse of one conversation's KV across turns, and one turn's generation.
#include "lmx/engine/chat_session.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <chrono>

namespace lmx {

ChatSession::ChatSession(LanguageModel& model, int prefill_chunk_tokens)
    : model_(model), prefill_chunk_tokens_(prefill_chunk_tokens) {
  LMX_REQUIRE(InvalidArgument, prefill_chunk_tokens >= 0, "chat session: prefill chunk must be ≥ 0, got {}",
                           prefill_chunk_tokens);
}

void ChatSession::reset() {
  sequence_.reset();
  tokens_.clear();
  logits_ = Tensor();
  reused_tokens_ = 0;
}

bool ChatSession::can_rewind_to(int64_t length) const { return sequence_->can_truncate(length); }

std::span<const float> ChatSession::run(std::span<const int32_t> tokens) {
  const size_t chunk = prefill_chunk_tokens_ > 0 ? static_cast<size_t>(prefill_chunk_tokens_) : tokens.size();
  try {
    for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
      StepRow row{sequence_.get(), tokens.subspan(begin, std::min(chunk, tokens.size() - begin))};
      logits_ = model_.forward({&row, 1});
      tokens_.insert(tokens_.end(), row.tokens.begin(), row.tokens.end());
    }
  } catch (...) {
    reset();  // the KV may hold part of the failed step
    throw;
  }
  return {logits_.data<float>(), static_cast<size_t>(logits_.dim(1))};
}

std::span<const float> ChatSession::prefill(std::span<const int32_t> prompt) {
  LMX_REQUIRE(InvalidArgument, !prompt.empty(), "chat session: the prompt is empty");
  size_t common = 0;
  if (sequence_) {
    const size_t limit = std::min(prompt.size(), tokens_.size());
    while (common < limit && prompt[common] == tokens_[common]) ++common;
    common = std::min(common, prompt.size() - 1);  // the last prompt token must run for its logits
    if (common < tokens_.size()) {
      if (common > 0 && can_rewind_to(static_cast<int64_t>(common))) {
        sequence_->truncate(static_cast<int64_t>(common));
        tokens_.resize(common);
      } else {
        common = 0;
      }
    }
  }
  if (common == 0) {
    sequence_ = model_.new_sequence();
    tokens_.clear();
  }
  reused_tokens_ = static_cast<int64_t>(common);
  return run(prompt.subspan(common));
}

std::span<const float> ChatSession::decode(int32_t token) {
  LMX_REQUIRE(InvalidArgument, sequence_ != nullptr, "chat session: decode before prefill");
  return run({&token, 1});
}

TurnResult generate_turn(ChatSession& session, Sampler& sampler, std::span<const int32_t> prompt,
                         const TurnOptions& options) {
  LMX_REQUIRE(InvalidArgument, options.max_new_tokens >= 0, "generate: max tokens must be ≥ 0, got {}",
                           options.max_new_tokens);
  using Clock = std::chrono::steady_clock;
  TurnResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  const auto start = Clock::now();
  std::span<const float> logits = session.prefill(prompt);
  result.reused_tokens = session.reused_tokens();
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  if (options.max_new_tokens == 0) {
    result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.kv_bytes = session.kv_bytes();
    return result;
  }
  int32_t token = sampler.sample(logits, history);
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const auto decode_start = Clock::now();
  for (;;) {
    result.tokens.push_back(token);
    history.push_back(token);
    if (std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token) !=
        options.stop_token_ids.end()) {
      result.finish = FinishReason::kStop;
      break;
    }
    if (options.on_token && !options.on_token(token)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (static_cast<int>(result.tokens.size()) >= options.max_new_tokens) {
      result.finish = FinishReason::kLength;
      break;
    }
    token = sampler.sample(session.decode(token), history);
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  result.kv_bytes = session.kv_bytes();
  return result;
}

}  // namespace lmx
