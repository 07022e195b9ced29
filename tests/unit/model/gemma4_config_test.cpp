// Gemma 4 config resolution: layer specs, KV-sharing donors, both full-layer override forms.
#include "lmx/model/gemma4/gemma4_config.h"

#include "lmx/core/error.h"

#include <fmt/format.h>
#include "lmx/model/synthetic.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <limits>

namespace lmx {
namespace {

TEST(Gemma4Config, E4BSharedLayersUseTheLastDonorOfTheirType) {
  nlohmann::json j = gemma4_preset_config("gemma4-e4b");
  Gemma4Config c = Gemma4Config::from_json(j, j, "e4b");
  ASSERT_EQ(c.layers.size(), 42u);
  for (int i = 24; i < 42; ++i) {
    const auto& s = c.layers[static_cast<size_t>(i)];
    EXPECT_EQ(s.kv_donor, s.sliding ? 22 : 23) << i;
  }
  EXPECT_EQ(c.num_cache_layers, 24);
  EXPECT_EQ(c.layers[23].head_dim, 512);
  EXPECT_EQ(c.layers[23].rope_rotated_pairs, 64);
  EXPECT_EQ(c.layers[22].rope_rotated_pairs, 128);
  EXPECT_EQ(c.layers[22].sliding_window, 512);
  EXPECT_EQ(c.layers[23].sliding_window, 0);
}

TEST(Gemma4Config, PresetCutToItsFirstLayers) {
  nlohmann::json moe = gemma4_preset_config("gemma4-26b-a4b", 6);
  Gemma4Config c = Gemma4Config::from_json(moe, moe, "26b cut");
  ASSERT_EQ(c.layers.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(c.layers[static_cast<size_t>(i)].sliding) << i;
  EXPECT_FALSE(c.layers[5].sliding);
  EXPECT_TRUE(c.layers[0].moe);
  EXPECT_EQ(c.layers[5].head_dim, 512);
  // An E-model keeps its shapes but loses KV sharing (a cut model would lack donors).
  nlohmann::json e4b = gemma4_preset_config("gemma4-e4b", 3);
  Gemma4Config e = Gemma4Config::from_json(e4b, e4b, "e4b cut");
  ASSERT_EQ(e.layers.size(), 3u);
  for (const auto& s : e.layers) EXPECT_LT(s.kv_donor, 0);
  EXPECT_FALSE(e.layers[2].sliding);
  EXPECT_EQ(gemma4_preset_config("gemma4-31b", 60), gemma4_preset_config("gemma4-31b"));
  EXPECT_THROW(gemma4_preset_config("gemma4-e2b", 0), InvalidArgument);
  EXPECT_THROW(gemma4_preset_config("gemma4-e2b", 36), InvalidArgument);
}

TEST(Gemma4Config, E2BDoubleWideMlpOnSharedLayers) {
  nlohmann::json j = gemma4_preset_config("gemma4-e2b");
  Gemma4Config c = Gemma4Config::from_json(j, j, "e2b");
  EXPECT_EQ(c.layers[14].intermediate_size, 6144);
  EXPECT_EQ(c.layers[15].intermediate_size, 12288);
  EXPECT_EQ(c.layers[34].intermediate_size, 12288);
}

TEST(Gemma4Config, PerLayerConfigFormEqualsGlobalForm) {
  nlohmann::json global = gemma4_preset_config("gemma4-26b-a4b");
  nlohmann::json per_layer = global;
  per_layer.erase("global_head_dim");
  per_layer.erase("num_global_key_value_heads");
  per_layer["per_layer_config"] = nlohmann::json::object();
  for (size_t i = 0; i < per_layer["layer_types"].size(); ++i)
    if (per_layer["layer_types"][i] == "full_attention")
      per_layer["per_layer_config"][fmt::format("{:02d}", i)] = {{"head_dim", 512}, {"num_key_value_heads", 2}};
  Gemma4Config a = Gemma4Config::from_json(global, global, "global");
  Gemma4Config b = Gemma4Config::from_json(per_layer, per_layer, "per_layer");
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].head_dim, b.layers[i].head_dim) << i;
    EXPECT_EQ(a.layers[i].num_kv_heads, b.layers[i].num_kv_heads) << i;
    EXPECT_EQ(a.layers[i].k_eq_v, b.layers[i].k_eq_v) << i;
  }
  EXPECT_EQ(a.layers[5].num_kv_heads, 2);
  EXPECT_EQ(a.layers[4].num_kv_heads, 8);
}

TEST(Gemma4Config, MultimodalTextConfigNesting) {
  nlohmann::json text = test::tiny_config("dense");
  nlohmann::json root = {{"model_type", "gemma4"}, {"text_config", text}};
  text.erase("model_type");
  Gemma4Config c = Gemma4Config::from_json(text, root, "mm");
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_FALSE(c.final_logit_softcapping.has_value());
}

}  // namespace
}  // namespace lmx

namespace lmx {
namespace {

TEST(Gemma4Config, ContextLengthFromConfigOrTransformersDefault) {
  for (const auto& [preset, context] : std::vector<std::pair<std::string, int>>{{"gemma4-e2b", 131072},
                                                                                {"gemma4-e4b", 131072},
                                                                                {"gemma4-26b-a4b", 262144},
                                                                                {"gemma4-31b", 262144}}) {
    nlohmann::json j = gemma4_preset_config(preset);
    EXPECT_EQ(Gemma4Config::from_json(j, j, preset).max_position_embeddings, context) << preset;
  }
  nlohmann::json j = test::tiny_config("dense");
  j.erase("max_position_embeddings");
  EXPECT_EQ(Gemma4Config::from_json(j, j, "tiny").max_position_embeddings, 131072);
  j["max_position_embeddings"] = 4096;
  EXPECT_EQ(Gemma4Config::from_json(j, j, "tiny").max_position_embeddings, 4096);
  j["max_position_embeddings"] = -1;
  EXPECT_THROW(Gemma4Config::from_json(j, j, "tiny"), ConfigError);
}

TEST(Gemma4Config, NumbersThatAreNotFiniteAreRefused) {
  for (const char* key : {"rms_norm_eps", "final_logit_softcapping"}) {
    nlohmann::json j = test::tiny_config("dense");
    j[key] = std::numeric_limits<double>::infinity();
    EXPECT_THROW(Gemma4Config::from_json(j, j, "tiny"), ConfigError) << key;
  }
  nlohmann::json j = test::tiny_config("dense");
  j["rope_parameters"]["full_attention"]["rope_theta"] = std::numeric_limits<double>::infinity();
  EXPECT_THROW(Gemma4Config::from_json(j, j, "tiny"), ConfigError);
}

}  // namespace
}  // namespace lmx
