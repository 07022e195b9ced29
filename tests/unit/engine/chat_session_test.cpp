// lmx::ChatSession prefix reuse (extend, rewind within the sliding window, fresh start beyond it)
// against a fresh one-shot prefill, and generate_turn against plain greedy generation.
#include "lmx/engine/chat_session.h"
#include "lmx/core/error.h"
#include "lmx/engine/greedy.h"
#include "lmx/model/language_model.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lmx {
namespace {

class ChatSessionTest : public ::testing::Test {
 protected:
  // e2b: sliding window 8, KV sharing, PLE; KV blocks of 4 tokens, so that the sliding layers release
  // blocks within a few steps.
  void SetUp() override {
    ModelOptions options;
    options.kv_block_tokens = 4;
    model_ = test::load_model(test::tiny_model_dir("e2b"), Device::cpu(), options);
  }

  std::vector<int32_t> random_tokens(size_t n) {
    std::vector<int32_t> ids(n);
    for (auto& id : ids)
      id = static_cast<int32_t>(3 + test::rng()() % (model_->description().vocab_size - 3));
    return ids;
  }
  static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  // Last-token logits of `prompt` on a fresh session.
  std::vector<float> fresh_logits(const std::vector<int32_t>& prompt) {
    ChatSession fresh(*model_);
    auto logits = fresh.prefill(prompt);
    return {logits.begin(), logits.end()};
  }
  static float max_diff(std::span<const float> a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
  }
  void expect_holds(const ChatSession& session, const std::vector<int32_t>& prompt) {
    EXPECT_EQ(std::vector<int32_t>(session.tokens().begin(), session.tokens().end()), prompt);
  }

  std::unique_ptr<LanguageModel> model_;
  static constexpr float kTolerance = 1e-4f;
};

TEST_F(ChatSessionTest, ExtendingPromptReusesEverything) {
  ChatSession session(*model_);
  std::vector<int32_t> first = concat({2}, random_tokens(20));
  session.prefill(first);
  EXPECT_EQ(session.reused_tokens(), 0);
  std::vector<int32_t> second = concat(first, random_tokens(7));
  auto logits = session.prefill(second);
  EXPECT_EQ(session.reused_tokens(), 21);
  EXPECT_LE(max_diff(logits, fresh_logits(second)), kTolerance);
  expect_holds(session, second);
}

TEST_F(ChatSessionTest, DivergingPromptRewindsWithinWindow) {
  ChatSession session(*model_);
  std::vector<int32_t> base = concat({2}, random_tokens(5));
  session.prefill(concat(base, random_tokens(2)));  // 8 tokens: nothing left the window of 8 yet
  std::vector<int32_t> other = concat(base, random_tokens(4));
  auto logits = session.prefill(other);
  EXPECT_EQ(session.reused_tokens(), 6);
  EXPECT_LE(max_diff(logits, fresh_logits(other)), kTolerance);
  expect_holds(session, other);
}

TEST_F(ChatSessionTest, DivergingBeyondWindowStartsAfresh) {
  ChatSession session(*model_);
  std::vector<int32_t> base = concat({2}, random_tokens(15));
  // A one-step prefill keeps all its tokens, so rewinding into it is still exact.
  session.prefill(concat(base, random_tokens(10)));
  std::vector<int32_t> other = concat(base, random_tokens(3));
  auto logits = session.prefill(other);
  EXPECT_EQ(session.reused_tokens(), 16);
  EXPECT_LE(max_diff(logits, fresh_logits(other)), kTolerance);
  // A decode step makes the sliding layers (window 8) release blocks 0-3 (positions 0-15), which a query at
  // 16 would need from position 9 on.
  session.prefill(concat(base, random_tokens(10)));
  session.decode(5);
  logits = session.prefill(other);
  EXPECT_EQ(session.reused_tokens(), 0);
  EXPECT_LE(max_diff(logits, fresh_logits(other)), kTolerance);
  expect_holds(session, other);
}

TEST_F(ChatSessionTest, SamePromptRerunsOnlyItsLastToken) {
  ChatSession session(*model_);
  std::vector<int32_t> prompt = concat({2}, random_tokens(6));
  std::vector<float> first;
  {
    auto logits = session.prefill(prompt);
    first.assign(logits.begin(), logits.end());
  }
  auto again = session.prefill(prompt);
  EXPECT_EQ(session.reused_tokens(), 6);
  EXPECT_LE(max_diff(again, first), kTolerance);
  // A prompt that is a strict prefix of what the session holds.
  std::vector<int32_t> shorter(prompt.begin(), prompt.begin() + 4);
  auto logits = session.prefill(shorter);
  EXPECT_EQ(session.reused_tokens(), 3);
  EXPECT_LE(max_diff(logits, fresh_logits(shorter)), kTolerance);
}

TEST_F(ChatSessionTest, GreedyTurnMatchesGreedyGenerationAndNextTurnReuses) {
  std::vector<int32_t> prompt = concat({2}, random_tokens(9));
  GreedyOptions greedy_options;
  greedy_options.max_new_tokens = 12;
  GreedyResult reference = generate_greedy(*model_, prompt, greedy_options);

  ChatSession session(*model_);
  Sampler sampler(SamplingParams{.temperature = 0});
  TurnOptions options;
  options.max_new_tokens = 12;
  std::vector<int32_t> streamed;
  options.on_token = [&](int32_t t) {
    streamed.push_back(t);
    return true;
  };
  TurnResult turn = generate_turn(session, sampler, prompt, options);
  EXPECT_EQ(turn.tokens, reference.tokens);
  EXPECT_EQ(streamed, reference.tokens);
  EXPECT_EQ(turn.finish, FinishReason::kLength);
  EXPECT_EQ(turn.prompt_tokens, 10);
  // The session holds the prompt and every generated token but the last.
  std::vector<int32_t> held =
      concat(prompt, std::vector<int32_t>(turn.tokens.begin(), turn.tokens.end() - 1));
  expect_holds(session, held);

  std::vector<int32_t> next = concat(concat(prompt, turn.tokens), random_tokens(4));
  TurnResult second = generate_turn(session, sampler, next, options);
  EXPECT_EQ(second.reused_tokens, static_cast<int64_t>(held.size()));
  GreedyResult second_reference = generate_greedy(*model_, next, greedy_options);
  EXPECT_EQ(second.tokens, second_reference.tokens);
}

TEST_F(ChatSessionTest, StopTokenAndCancellation) {
  std::vector<int32_t> prompt = concat({2}, random_tokens(5));
  GreedyOptions greedy_options;
  greedy_options.max_new_tokens = 6;
  GreedyResult reference = generate_greedy(*model_, prompt, greedy_options);

  ChatSession session(*model_);
  Sampler sampler(SamplingParams{.temperature = 0});
  TurnOptions options;
  options.max_new_tokens = 6;
  options.stop_token_ids = {reference.tokens[2]};
  std::vector<int32_t> streamed;
  options.on_token = [&](int32_t t) {
    streamed.push_back(t);
    return true;
  };
  TurnResult stopped = generate_turn(session, sampler, prompt, options);
  const size_t first_stop = std::find(reference.tokens.begin(), reference.tokens.end(), reference.tokens[2]) -
                            reference.tokens.begin();
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.tokens.size(), first_stop + 1);
  EXPECT_EQ(streamed.size(), first_stop);  // the stop token is not streamed

  options.stop_token_ids.clear();
  int seen = 0;
  options.on_token = [&](int32_t) { return ++seen < 2; };
  TurnResult cancelled = generate_turn(session, sampler, prompt, options);
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  EXPECT_EQ(cancelled.tokens.size(), 2u);
  EXPECT_EQ(cancelled.reused_tokens, 5);  // same prompt: all but its last token
}

TEST_F(ChatSessionTest, BadTokenResetsAndSessionStaysUsable) {
  ChatSession session(*model_);
  std::vector<int32_t> prompt = concat({2}, random_tokens(5));
  session.prefill(prompt);
  std::vector<int32_t> bad = concat(prompt, {model_->description().vocab_size + 5});
  EXPECT_THROW(session.prefill(bad), InvalidArgument);
  EXPECT_TRUE(session.tokens().empty());
  EXPECT_THROW(session.prefill(std::vector<int32_t>{}), InvalidArgument);
  auto logits = session.prefill(prompt);
  EXPECT_EQ(session.reused_tokens(), 0);
  EXPECT_LE(max_diff(logits, fresh_logits(prompt)), kTolerance);
  EXPECT_THROW(ChatSession(*model_).decode(3), InvalidArgument);
}

}  // namespace
}  // namespace lmx
