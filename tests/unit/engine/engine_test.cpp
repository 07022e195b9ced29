// lmx::Engine on the tiny E2B-shaped model (sliding window 8, KV sharing; KV blocks of 4 tokens) and
// the demo model (a real tokenizer): many concurrent requests with different sampling settings each
// produce exactly their solo tokens (also when the pool is so small that sequences are preempted and
// recomputed), n > 1 forks the prompt's blocks, stop tokens and strings, logprobs, cancellation,
// conversations reusing their KV, and bad requests refused.
#include "lmx/engine/engine.h"
#include "lmx/core/error.h"
#include "lmx/engine/greedy.h"
#include "lmx/engine/json_constraint.h"
#include "lmx/engine/json_schema_constraint.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

namespace lmx {
namespace {

// One choice's outcome, gathered from its events.
struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
  int64_t reused = 0;
  int finish_events = 0;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = load(0); }
  static std::unique_ptr<LanguageModel> load(size_t budget_bytes) {
    ModelOptions options;
    options.kv_block_tokens = 4;
    options.kv_budget_bytes = budget_bytes;
    return test::load_model(test::tiny_model_dir("e2b"), Device::cpu(), options);
  }
  // Bytes of KV blocks sequences still hold: the pool's used bytes once the prefix cache let go of its own.
  static size_t sequence_bytes(LanguageModel& model) {
    model.kv_cache().clear_prefix_cache();
    return model.kv_cache().pool().used_bytes();
  }
  std::vector<int32_t> random_prompt(size_t n) {
    std::vector<int32_t> ids(n);
    for (auto& id : ids)
      id = static_cast<int32_t>(3 + test::rng()() % (model_->description().vocab_size - 3));
    ids[0] = 2;
    return ids;
  }
  // Submits `request` to `engine`, gathering its choices' events into `out` (one Outcome per choice).
  static RequestId submit(Engine& engine, GenerationRequest request, std::vector<Outcome>& out) {
    out.assign(static_cast<size_t>(request.n), {});
    return engine.submit(std::move(request), [&out](const RequestEvent& e) {
      Outcome& o = out.at(static_cast<size_t>(e.choice));
      EXPECT_FALSE(o.finish.has_value()) << "an event after the finishing one";
      o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
      o.text += e.text;
      o.logprobs.insert(o.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      o.reused = e.reused_tokens;
      EXPECT_EQ(e.generated_tokens, static_cast<int64_t>(o.tokens.size()));
      if (e.finish) {
        o.finish = e.finish;
        o.error = e.error;
        ++o.finish_events;
      }
    });
  }
  // The request run alone on a fresh engine over `model`.
  static std::vector<Outcome> solo(LanguageModel& model, const GenerationRequest& request,
                                   const EngineOptions& options, const Tokenizer* tokenizer = nullptr) {
    Engine engine(model, tokenizer, options);
    std::vector<Outcome> out;
    submit(engine, request, out);
    engine.run_until_idle();
    return out;
  }
  // A request with settings that vary with `i`: greedy, seeded sampling with filters and penalties.
  GenerationRequest varied_request(int i) {
    GenerationRequest r;
    r.prompt = random_prompt(1 + test::rng()() % 40);
    r.max_tokens = 1 + static_cast<int>(test::rng()() % 24);
    if (i % 3 != 0) {
      r.sampling.temperature = 0.5f + 0.25f * static_cast<float>(i % 4);
      r.sampling.seed = 1000 + static_cast<uint64_t>(i);
      if (i % 4 == 1) r.sampling.top_p = 0.9f;
      if (i % 5 == 2) r.sampling.top_k = 20;
      if (i % 7 == 3) r.sampling.min_p = 0.05f;
      if (i % 6 == 4) r.sampling.repetition_penalty = 1.3f;
      if (i % 8 == 5) r.sampling.presence_penalty = 0.5f, r.sampling.frequency_penalty = 0.25f;
      if (i % 9 == 6) r.sampling.logit_bias = {{7, 2.0f}, {11, -5.0f}};
    } else {
      r.sampling.temperature = 0;
    }
    if (i % 10 == 7) r.top_logprobs = 2;
    return r;
  }
  // Submits every request to `engine` at once and runs it until idle; one Outcome list per request.
  static std::vector<std::vector<Outcome>> run_together(Engine& engine,
                                                        const std::vector<GenerationRequest>& requests) {
    std::vector<std::vector<Outcome>> outcomes(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) submit(engine, requests[i], outcomes[i]);
    engine.run_until_idle();
    return outcomes;
  }
  // Each request's outcome equals its solo run on the test's model.
  void expect_all_solo(const std::vector<GenerationRequest>& requests,
                       const std::vector<std::vector<Outcome>>& outcomes, const EngineOptions& options) {
    for (size_t i = 0; i < requests.size(); ++i)
      expect_same(outcomes[i], solo(*model_, requests[i], options), "request " + std::to_string(i));
  }
  static void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want,
                          const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t c = 0; c < got.size(); ++c) {
      EXPECT_EQ(got[c].tokens, want[c].tokens) << what << " choice " << c;
      EXPECT_EQ(got[c].finish, want[c].finish) << what << " choice " << c;
      EXPECT_EQ(got[c].finish_events, 1) << what << " choice " << c;
      ASSERT_EQ(got[c].logprobs.size(), want[c].logprobs.size()) << what;
      for (size_t t = 0; t < got[c].logprobs.size(); ++t) {
        EXPECT_EQ(got[c].logprobs[t].logprob, want[c].logprobs[t].logprob) << what;
        EXPECT_EQ(got[c].logprobs[t].top, want[c].logprobs[t].top) << what;
      }
    }
  }

  std::unique_ptr<LanguageModel> model_;
};

EngineOptions small_steps() {
  EngineOptions o;
  o.scheduler = {.step_tokens = 48, .prefill_chunk_tokens = 8, .max_rows = 16};
  return o;
}

TEST_F(EngineTest, ConcurrentRequestsGiveTheirSoloTokens) {
  const EngineOptions options = small_steps();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 64; ++i) requests.push_back(varied_request(i));
  Engine engine(*model_, nullptr, options);
  int max_rows = 0;
  engine.set_step_observer(
      [&](const StepRecord& r) { max_rows = std::max(max_rows, static_cast<int>(r.rows)); });
  const auto outcomes = run_together(engine, requests);
  EXPECT_EQ(max_rows, 16);  // the steps were shared
  EXPECT_EQ(engine.stats().requests_finished, 64);
  expect_all_solo(requests, outcomes, options);
  EXPECT_EQ(sequence_bytes(*model_), 0u);
}

// A quantized KV cache keeps batch invariance: each row attends over its own blocks only.
TEST_F(EngineTest, QuantizedKvRequestsGiveTheirSoloTokens) {
  ModelOptions quantized;
  quantized.kv_block_tokens = 4;
  quantized.kv_codec = KvCodec::parse("affine4:g32");  // head_dim 32 in the committed tiny E2B
  model_ = test::load_model(test::source_path("tests/data/models/tiny-e2b"), Device::cpu(), quantized);
  const EngineOptions options = small_steps();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) requests.push_back(varied_request(i));
  Engine engine(*model_, nullptr, options);
  const auto outcomes = run_together(engine, requests);
  EXPECT_EQ(engine.stats().requests_finished, 24);
  expect_all_solo(requests, outcomes, options);
}

// Under a KV quantization start, sequences on both sides of it alternate steps, prompts are chunked at it
// and rows convert there: each request still gives its solo tokens, and every sequence ends converted.
TEST_F(EngineTest, QuantStartRequestsGiveTheirSoloTokens) {
  ModelOptions quantized;
  quantized.kv_block_tokens = 4;
  quantized.kv_codec = KvCodec::parse("affine4:g32");
  quantized.kv_quant_start = 18;
  model_ = test::load_model(test::source_path("tests/data/models/tiny-e2b"), Device::cpu(), quantized);
  const EngineOptions options = small_steps();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) requests.push_back(varied_request(i));
  Engine engine(*model_, nullptr, options);
  int64_t mixed_steps = 0;
  engine.set_step_observer([&](const StepRecord&) {
    bool before = false, after = false;
    for (const ScheduledSequence* s : engine.scheduler().running())
      (s->kv->before_quant_start() ? before : after) = true;
    mixed_steps += before && after;
  });
  const auto outcomes = run_together(engine, requests);
  EXPECT_EQ(engine.stats().requests_finished, 24);
  EXPECT_GT(mixed_steps, 0);  // sequences on both sides ran in alternating steps
  expect_all_solo(requests, outcomes, options);
  EXPECT_EQ(sequence_bytes(*model_), 0u);
}

TEST_F(EngineTest, PreemptionUnderASmallPoolKeepsEveryTokenExact) {
  const EngineOptions options = small_steps();
  // Room for about three sequences of 64 tokens: 24 requests of up to 64 tokens must queue and preempt.
  const size_t budget = model_->kv_cache().layout().sequence_bytes(64, 8) * 3;
  auto small = load(budget);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) {
    GenerationRequest r = varied_request(i);
    r.max_tokens = 24;
    requests.push_back(std::move(r));
  }
  Engine engine(*small, nullptr, options);
  const auto outcomes = run_together(engine, requests);
  EXPECT_GT(engine.stats().preemptions, 0);
  expect_all_solo(requests, outcomes, options);
  EXPECT_EQ(sequence_bytes(*small), 0u);
}

// The prefix cache: requests that share a beginning (a system prompt, an earlier turn) reuse its KV
// blocks across sequences — also under preemption — and give bit for bit what a model without the cache
// gives (chunked prefill on the CPU equals one-shot prefill).
TEST_F(EngineTest, PrefixCacheReuseEqualsARunWithoutIt) {
  const EngineOptions options = small_steps();
  ModelOptions no_cache;
  no_cache.kv_block_tokens = 4;
  no_cache.kv_prefix_cache_bytes = 0;
  auto uncached = test::load_model(test::tiny_model_dir("e2b"), Device::cpu(), no_cache);
  const std::vector<int32_t> system = random_prompt(23);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = varied_request(i);
    const std::vector<int32_t> own = random_prompt(2 + static_cast<size_t>(i));
    r.prompt = system;
    r.prompt.insert(r.prompt.end(), own.begin() + 1, own.end());
    r.top_logprobs = 2;
    requests.push_back(std::move(r));
  }
  // The first alone fills the cache; the rest run together (a small pool preempts some of them).
  auto small = load(model_->kv_cache().layout().sequence_bytes(64, 8) * 4);
  std::vector<Outcome> first;
  Engine engine(*small, nullptr, options);
  submit(engine, requests[0], first);
  engine.run_until_idle();
  EXPECT_EQ(first[0].reused, 0);
  expect_same(first, solo(*uncached, requests[0], options), "request 0");
  const auto rest =
      run_together(engine, std::vector<GenerationRequest>(requests.begin() + 1, requests.end()));
  for (size_t i = 1; i < requests.size(); ++i) {
    EXPECT_GE(rest[i - 1][0].reused, 20) << "request " << i;  // the system prompt's whole blocks at least
    expect_same(rest[i - 1], solo(*uncached, requests[i], options), "request " + std::to_string(i));
  }
  const KvPrefixStats stats = small->kv_cache().prefix_stats();
  EXPECT_GE(stats.hits, 11);
  EXPECT_GE(stats.reused_tokens, 11 * 20);
  // The same request again reuses all of its prompt but the last token (the first run left its tail).
  std::vector<Outcome> again;
  submit(engine, requests[0], again);
  engine.run_until_idle();
  EXPECT_EQ(again[0].reused, static_cast<int64_t>(requests[0].prompt.size()) - 1);
  expect_same(again, first, "request 0 again");
  EXPECT_EQ(sequence_bytes(*small), 0u);
}

TEST_F(EngineTest, ChoicesForkThePromptAndMatchSeededSoloRuns) {
  const EngineOptions options = small_steps();
  GenerationRequest r;
  r.prompt = random_prompt(32);
  r.max_tokens = 10;
  r.n = 4;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 77;
  Engine engine(*model_, nullptr, options);
  std::vector<Outcome> out;
  submit(engine, r, out);
  // Step until every choice has a token: the forks then share the prompt's blocks.
  while (std::any_of(out.begin(), out.end(), [](const Outcome& o) { return o.tokens.empty(); }))
    engine.step();
  const KvLayout& layout = model_->kv_cache().layout();
  for (int g = 0; g < layout.num_groups(); ++g)
    if (layout.group(g).window == 0)
      EXPECT_EQ(model_->kv_cache().pool().used_blocks(g), 8);  // 32 tokens, once
  engine.run_until_idle();
  for (int c = 0; c < 4; ++c) {
    GenerationRequest single = r;
    single.n = 1;
    single.sampling.seed = 77 + static_cast<uint64_t>(c);
    expect_same({out[static_cast<size_t>(c)]}, solo(*model_, single, options), "choice " + std::to_string(c));
  }
  EXPECT_NE(out[0].tokens, out[1].tokens);
}

TEST_F(EngineTest, GreedyMatchesGreedyGenerationAndLogprobsAreTheModels) {
  const std::vector<int32_t> prompt = random_prompt(12);
  GreedyOptions greedy;
  greedy.max_new_tokens = 8;
  const GreedyResult reference = generate_greedy(*model_, prompt, greedy);
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 8;
  r.sampling.temperature = 0;
  r.top_logprobs = 3;
  EngineOptions options;  // the prompt runs in one step, as generate_greedy's
  const auto out = solo(*model_, r, options);
  EXPECT_EQ(out[0].tokens, reference.tokens);
  EXPECT_EQ(out[0].finish, FinishReason::kLength);
  // The first token's logprobs: log_softmax of the prompt's last logits.
  auto seq = model_->new_sequence();
  StepRow row{seq.get(), prompt};
  const Tensor logits = model_->forward({&row, 1});
  std::vector<float> logprobs(static_cast<size_t>(logits.dim(1)));
  sampling::log_softmax({logits.data<float>(), logprobs.size()}, logprobs);
  ASSERT_EQ(out[0].logprobs.size(), 8u);
  const TokenLogprob& first = out[0].logprobs[0];
  EXPECT_EQ(first.logprob, logprobs[static_cast<size_t>(reference.tokens[0])]);
  ASSERT_EQ(first.top.size(), 3u);
  EXPECT_EQ(first.top[0].first, reference.tokens[0]);
  for (const auto& [id, lp] : first.top) EXPECT_EQ(lp, logprobs[static_cast<size_t>(id)]);
  EXPECT_GE(first.top[0].second, first.top[1].second);
  EXPECT_GE(first.top[1].second, first.top[2].second);
}

TEST_F(EngineTest, StopTokenEndsAChoiceAndZeroMaxTokensRunsNothing) {
  GenerationRequest r;
  r.prompt = random_prompt(6);
  r.max_tokens = 8;
  r.sampling.temperature = 0;
  const auto free_run = solo(*model_, r, {});
  r.stop_token_ids = {free_run[0].tokens[3]};
  const auto stopped = solo(*model_, r, {});
  const auto first = std::find(free_run[0].tokens.begin(), free_run[0].tokens.end(), r.stop_token_ids[0]);
  EXPECT_EQ(stopped[0].tokens, std::vector<int32_t>(free_run[0].tokens.begin(), first + 1));
  EXPECT_EQ(stopped[0].finish, FinishReason::kStop);

  r.max_tokens = 0;
  const auto none = solo(*model_, r, {});
  EXPECT_TRUE(none[0].tokens.empty());
  EXPECT_EQ(none[0].finish, FinishReason::kLength);
}

TEST_F(EngineTest, CancellationFreesBlocksWithinOneStep) {
  Engine engine(*model_, nullptr, small_steps());
  GenerationRequest r;
  r.prompt = random_prompt(20);
  r.max_tokens = 100;
  std::vector<Outcome> out;
  const RequestId id = submit(engine, r, out);
  for (int i = 0; i < 5; ++i) engine.step();
  EXPECT_GT(model_->kv_cache().pool().used_bytes(), 0u);
  const size_t tokens_before = out[0].tokens.size();
  engine.cancel(id);
  engine.step();
  EXPECT_EQ(out[0].finish, FinishReason::kCancelled);
  EXPECT_EQ(out[0].tokens.size(), tokens_before);
  EXPECT_EQ(sequence_bytes(*model_), 0u);
  EXPECT_TRUE(engine.idle());
  engine.cancel(id);  // finished: ignored
  engine.cancel(12345);
  EXPECT_FALSE(engine.step());
}

TEST_F(EngineTest, SubmitAndCancelFromAnotherThreadWhileStepping) {
  const EngineOptions options = small_steps();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) requests.push_back(varied_request(i));
  Engine engine(*model_, nullptr, options);
  std::vector<std::vector<Outcome>> outcomes(requests.size());
  std::atomic<int> finished{0};
  std::thread client([&] {
    std::vector<RequestId> ids;
    for (size_t i = 0; i < requests.size(); ++i) {
      outcomes[i].assign(1, {});
      ids.push_back(engine.submit(requests[i], [&, i](const RequestEvent& e) {
        Outcome& o = outcomes[i][0];
        o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
        if (e.finish) {
          o.finish = e.finish;
          ++o.finish_events;
          ++finished;
        }
      }));
      if (i % 8 == 7) engine.cancel(ids[i - 3]);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  // The stepping thread waits for work, steps, and stops once every request has finished.
  while (finished.load() < static_cast<int>(requests.size()))
    if (engine.wait_for_work(std::chrono::milliseconds(50))) engine.step();
  client.join();
  EXPECT_TRUE(engine.idle());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Outcome& o = outcomes[i][0];
    EXPECT_EQ(o.finish_events, 1) << i;
    if (o.finish == FinishReason::kCancelled) {
      const auto alone = solo(*model_, requests[i], options)[0].tokens;
      EXPECT_EQ(o.tokens, std::vector<int32_t>(alone.begin(),
                                               alone.begin() + static_cast<std::ptrdiff_t>(o.tokens.size())))
          << "request " << i << " (cancelled)";
    } else {
      EXPECT_EQ(o.tokens, solo(*model_, requests[i], options)[0].tokens) << "request " << i;
    }
  }
  EXPECT_EQ(sequence_bytes(*model_), 0u);
}

TEST_F(EngineTest, RefusesBadRequestsWithTheField) {
  Engine engine(*model_, nullptr);
  auto expect_refused = [&](GenerationRequest r, const std::string& needle) {
    try {
      engine.submit(std::move(r), nullptr);
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GenerationRequest good;
  good.prompt = random_prompt(4);
  GenerationRequest r = good;
  r.prompt.clear();
  expect_refused(r, "prompt is empty");
  r = good;
  r.prompt[1] = model_->description().vocab_size;
  expect_refused(r, "out of range");
  r = good;
  r.prompt[1] = -1;
  expect_refused(r, "out of range");
  r = good;
  r.n = 0;
  expect_refused(r, "n must be");
  r = good;
  r.top_logprobs = 21;
  expect_refused(r, "top_logprobs");
  r = good;
  r.max_tokens = -1;
  expect_refused(r, "max_tokens");
  r = good;
  r.sampling.top_p = 0;
  expect_refused(r, "top_p");
  r = good;
  r.sampling.logit_bias = {{-4, 1.0f}};
  expect_refused(r, "logit_bias");
  r = good;
  r.stop = {"x"};
  expect_refused(r, "need a tokenizer");
  r = good;
  r.n = 2;
  r.conversation = std::make_shared<Conversation>();
  expect_refused(r, "conversation");
  r = good;
  r.forced_prefixes = {"<|tool_call>"};
  expect_refused(r, "forced tool call needs a tokenizer");
  r = good;
  r.json_schema = JsonSchema::compile(nlohmann::json{{"type", "object"}});
  expect_refused(r, "JSON output needs a tokenizer");
  r = good;
  r.max_tokens = 1 << 30;
  expect_refused(r, "context length");
  auto tiny_pool = load(model_->kv_cache().layout().sequence_bytes(16, 512));
  Engine small(*tiny_pool, nullptr);
  r = good;
  r.max_tokens = 200;
  try {
    small.submit(r, nullptr);
    ADD_FAILURE() << "a request larger than the pool was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KV budget"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(engine.idle());
}

// Conversations: the KV a request leaves is reused by the next one with the same beginning.
class ConversationTest : public EngineTest {
 protected:
  std::vector<Outcome> turn(const std::vector<int32_t>& prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.conversation = conversation_;
    Engine engine(*model_, nullptr);
    std::vector<Outcome> out;
    submit(engine, r, out);
    engine.run_until_idle();
    return out;
  }
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int max_tokens) {
    GreedyOptions options;
    options.max_new_tokens = max_tokens;
    return generate_greedy(*model_, prompt, options).tokens;
  }
  static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  // n random tokens to append (random_prompt's first token is always BOS).
  std::vector<int32_t> more(size_t n) {
    std::vector<int32_t> ids = random_prompt(n + 1);
    return {ids.begin() + 1, ids.end()};
  }
  std::shared_ptr<Conversation> conversation_ = std::make_shared<Conversation>();
};

TEST_F(ConversationTest, NextTurnReusesThePromptAndAnswer) {
  const std::vector<int32_t> prompt = random_prompt(10);
  const auto first = turn(prompt, 6);
  EXPECT_EQ(first[0].reused, 0);
  EXPECT_EQ(first[0].tokens, greedy(prompt, 6));
  // The conversation holds the prompt and every generated token but the last.
  const std::vector<int32_t> held =
      concat(prompt, std::vector<int32_t>(first[0].tokens.begin(), first[0].tokens.end() - 1));
  EXPECT_EQ(conversation_->tokens, held);
  ASSERT_NE(conversation_->sequence, nullptr);
  EXPECT_EQ(conversation_->sequence->length(), static_cast<int64_t>(held.size()));
  const std::vector<int32_t> next = concat(concat(prompt, first[0].tokens), more(5));
  const auto second = turn(next, 6);
  EXPECT_EQ(second[0].reused, static_cast<int64_t>(held.size()));
  EXPECT_EQ(second[0].tokens, greedy(next, 6));
}

TEST_F(ConversationTest, RewindsWithinTheWindowAndStartsAfreshBeyondIt) {
  const std::vector<int32_t> base = random_prompt(5);
  turn(concat(base, more(2)), 1);  // holds 7 tokens; nothing left the window of 8
  const std::vector<int32_t> other = concat(base, more(4));
  auto out = turn(other, 3);
  EXPECT_EQ(out[0].reused, 5);
  EXPECT_EQ(out[0].tokens, greedy(other, 3));
  // 30 more tokens: the sliding layers released the blocks a query at position 5 needs.
  turn(concat(base, more(30)), 4);
  model_->kv_cache().clear_prefix_cache();  // else the prefix cache gives back `other`'s earlier blocks
  out = turn(other, 3);
  EXPECT_EQ(out[0].reused, 0);
  EXPECT_EQ(out[0].tokens, greedy(other, 3));
  // The same prompt again: all but its last token is reused.
  const std::vector<int32_t> held = conversation_->tokens;
  out = turn(std::vector<int32_t>(held.begin(), held.end()), 2);
  EXPECT_EQ(out[0].reused, static_cast<int64_t>(held.size()) - 1);
}

TEST_F(ConversationTest, OneRequestAtATime) {
  Engine engine(*model_, nullptr);
  GenerationRequest r;
  r.prompt = random_prompt(4);
  r.conversation = conversation_;
  engine.submit(r, nullptr);
  EXPECT_THROW(engine.submit(r, nullptr), InvalidArgument);
  engine.run_until_idle();
  engine.submit(r, nullptr);  // free again
  engine.run_until_idle();
}

// Stop strings on the demo model's real tokenizer: the text ends before the first stop string, even one
// spanning tokens, and matches the text of a free run cut there.
TEST(EngineText, StopStringsCutTheDecodedText) {
  auto model = test::load_model(test::source_path("models/demo"));
  const Tokenizer tokenizer = Tokenizer::load(test::source_path("models/demo"));
  GenerationRequest r;
  r.prompt = tokenizer.encode("Once upon a time", true);
  r.max_tokens = 40;
  r.sampling.temperature = 0;
  EngineOptions options;
  auto run = [&](const GenerationRequest& req) {
    Engine engine(*model, &tokenizer, options);
    std::vector<Outcome> out(1);
    engine.submit(req, [&](const RequestEvent& e) {
      out[0].tokens.insert(out[0].tokens.end(), e.tokens.begin(), e.tokens.end());
      out[0].text += e.text;
      if (e.finish) out[0].finish = e.finish;
    });
    engine.run_until_idle();
    return out[0];
  };
  const Outcome free_run = run(r);
  ASSERT_EQ(free_run.text, tokenizer.decode(free_run.tokens, true));
  ASSERT_GE(free_run.text.size(), 20u);
  // A stop string across the boundary of the 3rd and 4th tokens' text.
  const size_t boundary =
      tokenizer.decode(std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + 3), true)
          .size();
  ASSERT_GE(boundary, 2u);
  const std::string stop = free_run.text.substr(boundary - 2, 4);
  r.stop = {"never appears \x01", stop};
  const Outcome stopped = run(r);
  EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(stop)));
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_LE(stopped.tokens.size(), 5u);
  EXPECT_EQ(stopped.tokens,
            std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + stopped.tokens.size()));
}

// Runs `requests` together on a fresh engine over `model` with `tokenizer`: each choice's tokens, text and
// finish.
std::vector<std::vector<Outcome>> run_with_text(LanguageModel& model, const Tokenizer& tokenizer,
                                                const std::vector<GenerationRequest>& requests) {
  Engine engine(model, &tokenizer);
  std::vector<std::vector<Outcome>> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    out[i].resize(static_cast<size_t>(requests[i].n));
    engine.submit(requests[i], [&out, i](const RequestEvent& e) {
      Outcome& o = out[i][static_cast<size_t>(e.choice)];
      o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
      o.text += e.text;
      if (e.finish) o.finish = e.finish, o.error = e.error;
    });
  }
  engine.run_until_idle();
  return out;
}

// JSON output on the demo model (not trained on JSON): greedy and sampled choices are each one JSON object —
// complete and parseable when the choice stopped, an accepted prefix when max_tokens cut it — beside an
// unconstrained request in the same steps, whose tokens are its solo ones.
TEST(EngineText, JsonObjectOutputIsOneJsonObject) {
  auto model = test::load_model(test::source_path("models/demo"));
  const Tokenizer tokenizer = Tokenizer::load(test::source_path("models/demo"));
  GenerationRequest json;
  json.prompt = tokenizer.encode("Describe a cat as JSON:", true);
  json.max_tokens = 160;
  json.json_object = true;
  json.n = 3;
  json.sampling.temperature = 0.8f;
  json.sampling.seed = 7;
  GenerationRequest plain;
  plain.prompt = tokenizer.encode("Once upon a time", true);
  plain.max_tokens = 24;
  plain.sampling.temperature = 0;
  auto run = [&](std::vector<GenerationRequest> requests) {
    return run_with_text(*model, tokenizer, requests);
  };
  const auto together = run({json, plain});
  int closed = 0;
  for (const Outcome& o : together[0]) {
    ASSERT_TRUE(o.finish == FinishReason::kStop || o.finish == FinishReason::kLength) << o.error;
    JsonObjectConstraint c;
    EXPECT_TRUE(c.accept(o.text)) << o.text;
    if (o.finish == FinishReason::kStop) {
      ++closed;
      const auto parsed = nlohmann::json::parse(o.text, nullptr, false);
      EXPECT_TRUE(parsed.is_object()) << o.text;
    }
  }
  std::printf("JSON choices closed: %d of 3; first: %s\n", closed, together[0][0].text.c_str());
  const auto solo = run({plain});
  EXPECT_EQ(together[1][0].tokens, solo[0][0].tokens) << "a constrained neighbour changes nothing";
  // Greedy JSON: the same object every time.
  json.n = 1;
  json.sampling.temperature = 0;
  EXPECT_EQ(run({json})[0][0].text, run({json, plain})[0][0].text);
}

// A forced tool call: the text opens with one of the forced prefixes, written as the tokenizer encodes them
// (Gemma 4's call opening: its special token first), then holds one object of arguments — Gemma 4's syntax
// or JSON (the Qwen 3 shape) — and the appended close. A plain neighbour is unchanged.
TEST(EngineText, ForcedToolCallsOpenWithTheirPrefix) {
  auto model = test::load_model(test::source_path("models/demo"));
  const Tokenizer tokenizer = Tokenizer::load(test::source_path("models/demo"));
  GenerationRequest gemma;
  gemma.prompt = tokenizer.encode("What is the weather in Paris?", true);
  gemma.max_tokens = 160;
  gemma.keep_special_tokens = true;
  gemma.forced_prefixes = {"<|tool_call>call:get_weather", "<|tool_call>call:get_time"};
  gemma.forced_arguments = ForcedArguments::kGemma4;
  // get_weather's arguments: what the schema accepts; get_time's: any object. (A second request: any object
  // for both.)
  gemma.forced_schemas = {JsonSchema::compile(nlohmann::json::parse(
                              R"({"type": "object", "properties": {"metric": {"type": "boolean"}},
                                  "required": ["metric"]})")),
                          nullptr};
  gemma.forced_suffix = "<tool_call|>";
  gemma.n = 3;
  gemma.sampling.temperature = 0.8f;
  gemma.sampling.seed = 5;
  GenerationRequest qwen = gemma;
  qwen.forced_schemas.clear();
  qwen.max_tokens = 160;
  qwen.n = 3;
  qwen.sampling.temperature = 0.8f;
  qwen.sampling.seed = 11;
  const std::vector<std::string> opens = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
                                          "<tool_call>\n{\"name\": \"lookup\", \"arguments\": "};
  qwen.forced_prefixes = opens;
  qwen.forced_arguments = ForcedArguments::kJson;
  qwen.forced_suffix = "}\n</tool_call>";
  GenerationRequest plain;
  plain.prompt = tokenizer.encode("Once upon a time", true);
  plain.max_tokens = 16;
  plain.sampling.temperature = 0;
  auto run = [&](std::vector<GenerationRequest> requests) {
    return run_with_text(*model, tokenizer, requests);
  };
  GenerationRequest gemma_free = gemma;
  gemma_free.forced_schemas.clear();
  const auto together = run({gemma, qwen, plain, gemma_free});
  int gemma_closed = 0;
  for (int which : {0, 3})
    for (const Outcome& o : together[static_cast<size_t>(which)]) {
      ASSERT_TRUE(o.finish == FinishReason::kStop || o.finish == FinishReason::kLength) << o.error;
      EXPECT_EQ(o.tokens[0], tokenizer.token_to_id("<|tool_call>")) << "the special token itself";
      const auto open = std::find_if(gemma.forced_prefixes.begin(), gemma.forced_prefixes.end(),
                                     [&](const std::string& p) { return o.text.rfind(p, 0) == 0; });
      ASSERT_NE(open, gemma.forced_prefixes.end()) << o.text;
      // The arguments: an object of Gemma 4's syntax, whole when the choice stopped (then the close follows).
      std::string arguments = o.text.substr(open->size());
      if (o.finish == FinishReason::kStop) {
        ++gemma_closed;
        ASSERT_GE(arguments.size(), gemma.forced_suffix.size());
        EXPECT_EQ(arguments.substr(arguments.size() - gemma.forced_suffix.size()), gemma.forced_suffix);
        arguments.resize(arguments.size() - gemma.forced_suffix.size());
      }
      const auto schema =
          which == 0 ? gemma.forced_schemas[static_cast<size_t>(open - gemma.forced_prefixes.begin())]
                     : nullptr;
      if (schema) {
        JsonSchemaConstraint c(schema, JsonSyntax::kGemma4);
        EXPECT_TRUE(c.accept(arguments)) << o.text;
        EXPECT_EQ(c.complete(), o.finish == FinishReason::kStop) << o.text;
      } else {
        JsonObjectConstraint c(JsonSyntax::kGemma4);
        EXPECT_TRUE(c.accept(arguments)) << o.text;
        EXPECT_EQ(c.complete(), o.finish == FinishReason::kStop) << o.text;
      }
    }
  EXPECT_GT(gemma_closed, 0) << "no forced Gemma 4 call closed its arguments within 160 tokens";
  std::printf("Gemma 4 forced calls closed: %d of 6; the first of each request: %s, %s\n", gemma_closed,
              together[0][0].text.c_str(), together[3][0].text.c_str());
  int closed = 0;
  for (const Outcome& o : together[1]) {
    ASSERT_TRUE(o.finish == FinishReason::kStop || o.finish == FinishReason::kLength) << o.error;
    const auto open = std::find_if(opens.begin(), opens.end(),
                                   [&](const std::string& p) { return o.text.rfind(p, 0) == 0; });
    ASSERT_NE(open, opens.end()) << o.text;
    if (o.finish != FinishReason::kStop) continue;
    ++closed;
    ASSERT_GT(o.text.size(), open->size() + qwen.forced_suffix.size());
    EXPECT_EQ(o.text.substr(o.text.size() - qwen.forced_suffix.size()), qwen.forced_suffix);
    // The whole call is one JSON object after the tag.
    const std::string body = o.text.substr(11, o.text.size() - 11 - 12);
    const auto call = nlohmann::json::parse(body, nullptr, false);
    ASSERT_TRUE(call.is_object()) << body;
    EXPECT_TRUE(call["arguments"].is_object()) << body;
  }
  EXPECT_GT(closed, 0) << "no forced call closed its arguments within 160 tokens";
  EXPECT_EQ(together[2][0].tokens, run({plain})[0][0].tokens) << "a constrained neighbour changes nothing";
}

}  // namespace
}  // namespace lmx
