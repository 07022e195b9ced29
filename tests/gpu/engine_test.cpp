// The engine on the CUDA backend: 32 concurrent requests (greedy and seeded sampling with filters,
// penalties, bias and logprobs, which the device samples; prompts of 1-60 tokens) each produce exactly the
// tokens and logprobs they produce alone, also under a pool small enough to preempt.
// Skips without a GPU.
#include "lmx/engine/engine.h"
#include "lmx/ops/cuda/device_memory.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

// A request's tokens, and the logprobs and top alternatives of each when it asked for them.
struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> top_ids;
  bool operator==(const Output&) const = default;
};

void record(Output& out, const RequestEvent& e) {
  out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
  for (const TokenLogprob& lp : e.logprobs) {
    out.logprobs.push_back(lp.logprob);
    for (const auto& [id, value] : lp.top) {
      out.top_ids.push_back(id);
      out.logprobs.push_back(value);
    }
  }
}

Output run_alone(LanguageModel& model, const GenerationRequest& r, const EngineOptions& options) {
  Engine engine(model, nullptr, options);
  Output out;
  engine.submit(r, [&](const RequestEvent& e) { record(out, e); });
  engine.run_until_idle();
  return out;
}

class CudaEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngine, ConcurrentRequestsGiveTheirSoloTokens) {
  SKIP_WITHOUT_GPU();
  auto model = test::load_model(test::tiny_model_dir(GetParam()), Device::cuda(0));
  const int vocab = model->description().vocab_size;
  EngineOptions options;
  options.scheduler = {.step_tokens = 96, .prefill_chunk_tokens = 16, .max_rows = 24};
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 32; ++i) {
    GenerationRequest r;
    r.prompt.resize(1 + test::rng()() % 60);
    for (auto& id : r.prompt) id = static_cast<int32_t>(3 + test::rng()() % static_cast<uint64_t>(vocab - 3));
    r.max_tokens = 4 + static_cast<int>(test::rng()() % 20);
    r.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.sampling.seed = static_cast<uint64_t>(i);
    if (i % 4 == 1) r.sampling.top_k = 30;
    // Penalties, bias, the other filters and logprobs: sampled on the device.
    if (i % 8 == 3) {
      r.sampling.repetition_penalty = 1.3f;
      r.top_logprobs = 3;
    }
    if (i % 8 == 5) {
      r.sampling.top_p = 0.8f;
      r.sampling.min_p = 0.05f;
      r.sampling.presence_penalty = 0.5f;
    }
    if (i % 8 == 7) {
      r.sampling.frequency_penalty = 0.3f;
      r.sampling.logit_bias = {{5, 2.0f}};
      r.top_logprobs = 0;
    }
    requests.push_back(std::move(r));
  }
  for (size_t budget_sequences : {size_t{0}, size_t{4}}) {
    const size_t budget =
        budget_sequences ? model->kv_cache().layout().sequence_bytes(84, 16) * budget_sequences : 0;
    ModelOptions model_options;
    model_options.kv_budget_bytes = budget;
    auto engine_model =
        budget ? test::load_model(test::tiny_model_dir(GetParam()), Device::cuda(0), model_options) : nullptr;
    LanguageModel& m = engine_model ? *engine_model : *model;
    Engine engine(m, nullptr, options);
    std::vector<Output> outputs(requests.size());
    for (size_t i = 0; i < requests.size(); ++i)
      engine.submit(requests[i], [&outputs, i](const RequestEvent& e) { record(outputs[i], e); });
    engine.run_until_idle();
    if (budget) {
      EXPECT_GT(engine.stats().preemptions, 0);
    }
    for (size_t i = 0; i < requests.size(); ++i)
      EXPECT_TRUE(outputs[i] == run_alone(*model, requests[i], options))
          << "request " << i << (budget ? " (small pool)" : "");
  }
}

// Sampling on the device picks the tokens the host Sampler picks from the full logits (the same uniform
// draws); logprobs agree up to the log-sum-exp's rounding.
TEST_P(CudaEngine, DeviceSamplingMatchesHostSampling) {
  SKIP_WITHOUT_GPU();
  auto model = test::load_model(test::tiny_model_dir(GetParam()), Device::cuda(0));
  ASSERT_TRUE(model->samples_on_backend());
  const int vocab = model->description().vocab_size;
  EngineOptions device_options;
  device_options.scheduler = {.step_tokens = 64, .prefill_chunk_tokens = 16, .max_rows = 16};
  EngineOptions host_options = device_options;
  host_options.backend_sampling = false;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest r;
    r.prompt.resize(1 + test::rng()() % 40);
    for (auto& id : r.prompt) id = static_cast<int32_t>(3 + test::rng()() % static_cast<uint64_t>(vocab - 3));
    r.max_tokens = 12;
    r.sampling.temperature = i % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(i % 3);
    r.sampling.seed = static_cast<uint64_t>(100 + i);
    r.sampling.top_k = i % 3 == 1 ? 20 : 0;
    r.sampling.top_p = i % 5 == 2 ? 0.7f : 1.0f;
    r.sampling.min_p = i % 7 == 3 ? 0.02f : 0.0f;
    r.sampling.repetition_penalty = i % 2 ? 1.2f : 1.0f;
    r.n = i % 6 == 5 ? 3 : 1;
    r.top_logprobs = i % 3 == 0 ? 2 : -1;
    const Output device = run_alone(*model, r, device_options);
    const Output host = run_alone(*model, r, host_options);
    EXPECT_EQ(device.tokens, host.tokens) << "request " << i;
    EXPECT_EQ(device.top_ids, host.top_ids) << "request " << i;
    ASSERT_EQ(device.logprobs.size(), host.logprobs.size()) << "request " << i;
    for (size_t k = 0; k < host.logprobs.size(); ++k)
      EXPECT_NEAR(device.logprobs[k], host.logprobs[k], 2e-5f) << "request " << i << " logprob " << k;
  }
}

// The prefix cache on the device: requests sharing a system prompt reuse its blocks (copy-on-write of a
// partly used block is a device copy) and give the tokens and logprobs of a model without the cache.
TEST_P(CudaEngine, PrefixCacheReuseMatchesARunWithoutIt) {
  SKIP_WITHOUT_GPU();
  auto model = test::load_model(test::tiny_model_dir(GetParam()), Device::cuda(0));
  ModelOptions no_cache;
  no_cache.kv_prefix_cache_bytes = 0;
  auto uncached = test::load_model(test::tiny_model_dir(GetParam()), Device::cuda(0), no_cache);
  const int vocab = model->description().vocab_size;
  EngineOptions options;
  options.scheduler = {.step_tokens = 256, .prefill_chunk_tokens = 64, .max_rows = 16};
  std::vector<int32_t> system(150);
  for (auto& id : system) id = static_cast<int32_t>(3 + test::rng()() % static_cast<uint64_t>(vocab - 3));
  Engine engine(*model, nullptr, options);
  for (int i = 0; i < 10; ++i) {
    GenerationRequest r;
    r.prompt = system;
    for (int k = 0; k < 3 + i * 5; ++k)
      r.prompt.push_back(static_cast<int32_t>(3 + test::rng()() % static_cast<uint64_t>(vocab - 3)));
    r.max_tokens = 8;
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = static_cast<uint64_t>(i);
    r.top_logprobs = 2;
    Output out;
    int64_t reused = 0;
    engine.submit(r, [&](const RequestEvent& e) {
      record(out, e);
      reused = e.reused_tokens;
    });
    engine.run_until_idle();
    if (i > 0) EXPECT_GE(reused, 128) << "request " << i;
    EXPECT_TRUE(out == run_alone(*uncached, r, options)) << "request " << i << " (reused " << reused << ")";
  }
  EXPECT_GE(model->kv_cache().prefix_stats().hits, 9);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEngine, ::testing::ValuesIn(test::gpu_tiny_config_names()),
                         test::ParamName{});

}  // namespace
}  // namespace lmx
