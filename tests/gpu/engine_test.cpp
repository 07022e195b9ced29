// The engine on the CUDA backend: 32 concurrent requests (greedy and seeded sampling, prompts of 1-60
// tokens) each produce exactly the tokens they produce alone, also under a pool small enough to preempt.
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

std::vector<int32_t> run_alone(LanguageModel& model, const GenerationRequest& r,
                               const EngineOptions& options) {
  Engine engine(model, nullptr, options);
  std::vector<int32_t> tokens;
  engine.submit(
      r, [&](const RequestEvent& e) { tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end()); });
  engine.run_until_idle();
  return tokens;
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
    std::vector<std::vector<int32_t>> tokens(requests.size());
    for (size_t i = 0; i < requests.size(); ++i)
      engine.submit(requests[i], [&tokens, i](const RequestEvent& e) {
        tokens[i].insert(tokens[i].end(), e.tokens.begin(), e.tokens.end());
      });
    engine.run_until_idle();
    if (budget) EXPECT_GT(engine.stats().preemptions, 0);
    for (size_t i = 0; i < requests.size(); ++i)
      EXPECT_EQ(tokens[i], run_alone(*model, requests[i], options))
          << "request " << i << (budget ? " (small pool)" : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEngine, ::testing::ValuesIn(test::gpu_tiny_config_names()),
                         test::ParamName{});

}  // namespace
}  // namespace lmx
