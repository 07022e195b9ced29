// prefill_flops: the projections against the shapes of the weights a model binds (tiny MoE and PLE/KV-sharing
// models), the attention against a loop over positions, and the 26B-A4B and E4B presets against counts worked
// out by hand from their configs.
#include "lmx/model/gemma4/forward_flops.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/gemma4/gemma4_weights.h"
#include "lmx/model/synthetic.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace lmx {
namespace {

// 2 x the multiply-adds of one token through every matrix the model binds (the top-k share of each expert
// stack), the output head and embedding lookups aside.
struct BoundModel {
  Gemma4Config config;
  Checkpoint checkpoint;
  Gemma4Weights weights;
};

BoundModel bind_model(const std::string& dir) {
  ModelConfigFiles files = load_model_config(dir);
  Gemma4Config config = Gemma4Config::from_json(files.text, files.root, files.path);
  Checkpoint checkpoint = Checkpoint::open_dir(dir);
  Gemma4Weights weights =
      Gemma4Weights::bind(checkpoint, config, QuantizationConfig::from_json(files.root, files.path));
  return BoundModel{std::move(config), std::move(checkpoint), std::move(weights)};
}

double flops_per_token_from_weights(const BoundModel& model) {
  const Gemma4Config& c = model.config;
  auto macs = [](const Weight& w) { return w.defined() ? static_cast<double>(w.rows()) * w.cols() : 0.0; };
  double total = macs(model.weights.per_layer_model_projection);
  for (const Gemma4LayerWeights& l : model.weights.layers) {
    for (const Weight* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                            &l.router_proj, &l.per_layer_input_gate, &l.per_layer_projection})
      total += macs(*w);
    for (const Weight* w : {&l.experts_gate_up, &l.experts_gate, &l.experts_up, &l.experts_down})
      total += c.top_k_experts * macs(*w);
  }
  return 2 * total;
}

// The attention's FLOPs by a loop over layers, heads' positions and attended keys.
double attention_flops_by_loop(const Gemma4Config& c, int64_t tokens) {
  double macs = 0;
  for (const Gemma4LayerSpec& s : c.layers)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t keys = s.sliding ? std::min<int64_t>(t + 1, s.sliding_window) : t + 1;
      macs += 2.0 * c.num_attention_heads * s.head_dim * static_cast<double>(keys);  // q·kᵀ and p·v
    }
  return 2 * macs;
}

TEST(ForwardFlops, ProjectionsMatchTheBoundWeights) {
  for (const char* name : {"moe", "e2b", "dense", "moe-q4"}) {
    SCOPED_TRACE(name);
    const BoundModel model = bind_model(test::tiny_model_dir(name));
    const double per_token = flops_per_token_from_weights(model);
    ASSERT_GT(per_token, 0);
    for (int64_t tokens : {1, 7, 40}) {
      const ForwardFlops f = prefill_flops(model.config, tokens);
      EXPECT_DOUBLE_EQ(f.projections, per_token * static_cast<double>(tokens)) << tokens;
      EXPECT_DOUBLE_EQ(f.head, 2.0 * model.config.vocab_size * model.config.hidden_size);
      EXPECT_DOUBLE_EQ(f.total(), f.projections + f.attention + f.head);
    }
  }
}

TEST(ForwardFlops, AttentionCountsTheKeysEachPositionSees) {
  for (const char* name : {"moe", "e2b"}) {  // sliding windows of 12 and 8, full layers, two head sizes
    SCOPED_TRACE(name);
    nlohmann::json j = test::tiny_config(name);
    const Gemma4Config c = Gemma4Config::from_json(j, j, name);
    for (int64_t tokens : {0, 1, 5, 8, 12, 13, 100})
      EXPECT_DOUBLE_EQ(prefill_flops(c, tokens).attention, attention_flops_by_loop(c, tokens)) << tokens;
  }
}

TEST(ForwardFlops, PresetsMatchCountsByHand) {
  // 26B-A4B, per token: attention projections 25 sliding layers x 2816 x (4096 + 2 x 2048 + 4096) and 5 full
  // layers x 2816 x (8192 + 1024 + 8192) (k = v); dense MLP 30 x 3 x 2816 x 2112; experts 30 x 8 x 3 x 2816 x 704;
  // router 30 x 2816 x 128: 3 083 632 640 multiply-adds.
  nlohmann::json j = gemma4_preset_config("gemma4-26b-a4b");
  ForwardFlops f = prefill_flops(Gemma4Config::from_json(j, j, "26b"), 2048);
  EXPECT_DOUBLE_EQ(f.projections / 2048, 2 * 3083632640.0);
  // Attention at 2048: sliding layers see (1024 x 1025 / 2 + 1024 x 1024) keys summed over positions, full
  // layers 2048 x 2049 / 2; x 16 heads x head_dim (256, 512) x 2 (q·kᵀ, p·v).
  EXPECT_DOUBLE_EQ(f.attention,
                   2 * 2 * 16 * (25 * 256 * (1024.0 * 1025 / 2 + 1024.0 * 1024) + 5 * 512 * (2048.0 * 2049 / 2)));
  EXPECT_DOUBLE_EQ(f.head, 2 * 262144.0 * 2816);

  // E4B: 18 of 42 layers share KV (no k/v projections); PLE 256 wide: 3 972 792 320 multiply-adds per token.
  j = gemma4_preset_config("gemma4-e4b");
  f = prefill_flops(Gemma4Config::from_json(j, j, "e4b"), 1);
  EXPECT_DOUBLE_EQ(f.projections, 2 * 3972792320.0);
}

TEST(ForwardFlops, RejectsANegativeLength) {
  nlohmann::json j = test::tiny_config("moe");
  EXPECT_THROW(prefill_flops(Gemma4Config::from_json(j, j, "moe"), -1), InvalidArgument);
}

}  // namespace
}  // namespace lmx
