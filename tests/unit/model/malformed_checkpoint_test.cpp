// Malformed checkpoints and configs give a clear lmx::Error naming the problem, never a crash.
#include "lmx/io/model_dir.h"
#include "lmx/io/output_file.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/language_model.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

class MalformedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { use_model("moe"); }
  // Replaces the directory's contents by a copy of tiny model `name`.
  void use_model(const std::string& name) {
    for (const char* file : {"config.json", "generation_config.json", "model.safetensors"})
      test::remove_path(dir_.file(file));
    test::copy_path(test::tiny_model_dir(name), dir_.path());
    config_ = load_json_file(dir_.file("config.json"));
  }
  // Expects loading to fail with an lmx::Error whose message contains `needle`.
  void expect_load_error(const std::string& needle) {
    try {
      test::load_model(dir_.path());
      FAIL() << "load succeeded; expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  void write_config() { write_text_file(dir_.file("config.json"), config_.dump()); }
  // For each (edit, needle): the config edited so, loading fails with a message holding needle.
  // The config is restored afterwards.
  void expect_config_errors(
      const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>& cases) {
    const nlohmann::json original = config_;
    for (const auto& [edit, needle] : cases) {
      config_ = original;
      edit(config_);
      write_config();
      expect_load_error(needle);
    }
    config_ = original;
    write_config();
  }
  // Rewrites the weights through `edit`, which may drop or replace tensors.
  void rewrite_weights(const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      auto file = SafetensorsFile::open(dir_.file("model.safetensors"));
      for (const auto& name : file->names()) tensors.emplace_back(name, file->tensor(name).contiguous());
    }
    edit(tensors);
    write_safetensors(dir_.file("model.safetensors"), tensors);
  }
  test::TempDir dir_;
  nlohmann::json config_;
};

TEST_F(MalformedCheckpoint, LoadsWhenIntact) {
  EXPECT_NO_THROW(test::load_model(dir_.path()));
}

TEST_F(MalformedCheckpoint, TruncatedFile) {
  auto size = test::file_size(dir_.file("model.safetensors"));
  test::resize_file(dir_.file("model.safetensors"), size - 100);
  expect_load_error("model.safetensors");
}

TEST_F(MalformedCheckpoint, BadHeader) {
  std::string bytes = test::read_file(dir_.file("model.safetensors"));
  bytes[8] = 'X';  // the header's opening brace
  write_text_file(dir_.file("model.safetensors"), bytes);
  expect_load_error("model.safetensors");
}

TEST_F(MalformedCheckpoint, WrongShape) {
  rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "model.layers.1.self_attn.q_proj.weight") t = Tensor::zeros({t.dim(0), t.dim(1) - 1}, DType::kBF16);
  });
  expect_load_error("model.layers.1.self_attn.q_proj.weight");
}

TEST_F(MalformedCheckpoint, MissingTensor) {
  rewrite_weights([](auto& tensors) {
    std::erase_if(tensors, [](const auto& p) { return p.first == "model.layers.3.mlp.down_proj.weight"; });
  });
  expect_load_error("missing tensor 'model.layers.3.mlp.down_proj.weight'");
}

TEST_F(MalformedCheckpoint, WrongDtype) {
  rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "model.norm.weight") t = Tensor::zeros(t.shape(), DType::kI32);
  });
  expect_load_error("model.norm.weight");
}

TEST_F(MalformedCheckpoint, UnknownArchitecture) {
  config_["model_type"] = "llama";
  write_config();
  expect_load_error("unknown architecture");
}

TEST_F(MalformedCheckpoint, BadConfigValues) {
  expect_config_errors({
      {[](auto& c) { c["num_attention_heads"] = -4; }, "num_attention_heads"},
      {[](auto& c) { c["hidden_size"] = "wide"; }, "hidden_size"},
      {[](auto& c) { c["hidden_size"] = 0; }, "hidden_size"},
      {[](auto& c) { c["layer_types"] = {"sliding_attention"}; }, "layer_types"},
      {[](auto& c) { c["layer_types"][0] = "chunked_attention"; }, "layer_types"},
      {[](auto& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }, "rope_type"},
      {[](auto& c) { c["top_k_experts"] = 99; }, "top_k_experts"},
      {[](auto& c) { c["num_key_value_heads"] = 3; }, "KV heads"},
      {[](auto& c) { c["final_logit_softcapping"] = -1.0; }, "final_logit_softcapping"},
      {[](auto& c) {
         c["per_layer_config"] = {{"99", {{"head_dim", 32}}}};
       },
       "per_layer_config"},
      {[](auto& c) { c["use_bidirectional_attention"] = "all"; }, "use_bidirectional_attention"},
  });
}

// Keys that change the computation are checked; keys lmx does not read are metadata.
TEST_F(MalformedCheckpoint, ComputationKeysAreValidatedAndMetadataAccepted) {
  expect_config_errors({
      {[](auto& c) { c["hidden_activation"] = "gelu"; }, "'hidden_activation' 'gelu' is not supported"},
      {[](auto& c) { c["hidden_activation"] = 3; }, "'hidden_activation' must be a string"},
      {[](auto& c) { c["attention_bias"] = true; }, "'attention_bias'"},
      {[](auto& c) { c["attention_k_eq_v"] = "yes"; }, "'attention_k_eq_v' must be true or false"},
      {[](auto& c) { c["tie_word_embeddings"] = 1; }, "'tie_word_embeddings' must be true or false"},
      {[](auto& c) { c["eos_token_id"] = "</s>"; }, "'eos_token_id' must be an integer"},
      {[](auto& c) {
         c["eos_token_id"] = {1, -2};
       },
       "not a token id"},
      {[](auto& c) { c["max_position_embeddings"] = 0; }, "'max_position_embeddings' must be positive"},
      {[](auto& c) { c["max_position_embeddings"] = "long"; },
       "'max_position_embeddings' must be an integer"},
      {[](auto& c) { c["rms_norm_eps"] = "tiny"; }, "'rms_norm_eps' must be a number"},
      {[](auto& c) { c["num_hidden_layers"] = 2000000000; }, "exceeds the limit of 1024"},
  });
  config_["some_future_key"] = {{"nested", {1, 2, 3}}};
  config_["transformers_version"] = "9.9";
  config_["eos_token_id"] = {1, 106};
  write_config();
  EXPECT_NO_THROW(test::load_model(dir_.path()));
}

// A tensor in the text model's namespace that the config gives no place is refused, naming it and
// the key it contradicts; tensors outside it (vision towers) stay accepted.
TEST_F(MalformedCheckpoint, ExtraModelWeightsContradictingTheConfig) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.embed_tokens_per_layer.weight", "hidden_size_per_layer_input 0"},
      {"model.layers.0.per_layer_input_gate.weight", "hidden_size_per_layer_input 0"},
      {"model.layers.6.mlp.up_proj.weight", "num_hidden_layers 6"},
      {"lm_head.weight", "tie_word_embeddings"},
      {"model.layers.2.self_attn.v_proj.weight", "attention_k_eq_v"},
      {"model.layers.0.self_attn.q_proj.bias", "attention_bias"},
      {"model.layers.0.mlp.extra_proj.weight", "has no such weight"},
  };
  for (const auto& [name, needle] : cases) {
    use_model("moe");
    rewrite_weights([&](auto& tensors) { tensors.emplace_back(name, Tensor::zeros({4, 4}, DType::kBF16)); });
    expect_load_error("'" + name + "'");
    expect_load_error(needle);
  }
  use_model("moe");
  rewrite_weights([](auto& tensors) {
    tensors.emplace_back("model.vision_tower.encoder.weight", Tensor::zeros({4}, DType::kBF16));
    tensors.emplace_back("model.embed_vision.weight", Tensor::zeros({4}, DType::kBF16));
  });
  EXPECT_NO_THROW(test::load_model(dir_.path()));
}

TEST_F(MalformedCheckpoint, MoeWeightsWithoutTheMoeBlock) {
  use_model("dense");
  rewrite_weights([](auto& tensors) {
    tensors.emplace_back("model.layers.0.router.scale", Tensor::zeros({64}, DType::kBF16));
  });
  expect_load_error("enable_moe_block");
}

// transformers ignores K/V projections and norms stored for KV-shared layers; so does lmx.
TEST_F(MalformedCheckpoint, KvSharedLayersMayCarryUnusedKeyValueWeights) {
  use_model("e2b");
  rewrite_weights([](auto& tensors) {
    tensors.emplace_back("model.layers.6.self_attn.k_proj.weight", Tensor::zeros({32, 64}, DType::kBF16));
    tensors.emplace_back("model.layers.6.self_attn.k_norm.weight", Tensor::zeros({32}, DType::kBF16));
  });
  EXPECT_NO_THROW(test::load_model(dir_.path()));
}

TEST_F(MalformedCheckpoint, QuantizedWeightMissingItsScales) {
  use_model("moe-q4");
  rewrite_weights([](auto& tensors) {
    std::erase_if(tensors, [](const auto& p) { return p.first == "model.layers.1.self_attn.q_proj.scales"; });
  });
  expect_load_error(
      "quantized module 'model.layers.1.self_attn.q_proj' lacks 'model.layers.1.self_attn.q_proj.scales'");
}

TEST_F(MalformedCheckpoint, ConfigNotJson) {
  write_text_file(dir_.file("config.json"), "{\"model_type\": \"gemma4_text\", ");
  expect_load_error("config.json: invalid JSON");
  expect_load_error("unexpected end of input");
  // Nesting that would overflow the stack when the config is copied.
  write_text_file(dir_.file("config.json"), "{\"model_type\": \"gemma4_text\", \"x\": " +
                                                std::string(150000, '[') + std::string(150000, ']') + "}");
  expect_load_error("nested deeper than 128 levels");
}

TEST_F(MalformedCheckpoint, MissingWeights) {
  test::remove_path(dir_.file("model.safetensors"));
  EXPECT_THROW(test::load_model(dir_.path()), Error);
}

}  // namespace
}  // namespace lmx
