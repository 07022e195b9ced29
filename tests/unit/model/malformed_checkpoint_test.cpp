// Malformed checkpoints and configs give a clear lmx::Error naming the problem, never a crash.
#include "lmx/io/output_file.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/gemma4_model.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace lmx {
namespace {

namespace fs = std::filesystem;

class MalformedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(test::tiny_model_dir("moe"), dir_.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    config_ = load_json_file(dir_.file("config.json"));
  }
  // Expects loading to fail with an lmx::Error whose message contains `needle`.
  void expect_load_error(const std::string& needle) {
    try {
      Gemma4Model::load(dir_.path());
      FAIL() << "load succeeded; expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  void write_config() { write_text_file(dir_.file("config.json"), config_.dump()); }
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

TEST_F(MalformedCheckpoint, LoadsWhenIntact) { EXPECT_NO_THROW(Gemma4Model::load(dir_.path())); }

TEST_F(MalformedCheckpoint, TruncatedFile) {
  auto size = fs::file_size(dir_.file("model.safetensors"));
  fs::resize_file(dir_.file("model.safetensors"), size - 100);
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
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& c) { c["num_attention_heads"] = -4; }, "num_attention_heads"},
      {[](auto& c) { c["hidden_size"] = "wide"; }, "hidden_size"},
      {[](auto& c) { c["hidden_size"] = 0; }, "hidden_size"},
      {[](auto& c) { c["layer_types"] = {"sliding_attention"}; }, "layer_types"},
      {[](auto& c) { c["layer_types"][0] = "chunked_attention"; }, "layer_types"},
      {[](auto& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }, "rope_type"},
      {[](auto& c) { c["top_k_experts"] = 99; }, "top_k_experts"},
      {[](auto& c) { c["num_key_value_heads"] = 3; }, "KV heads"},
      {[](auto& c) { c["final_logit_softcapping"] = -1.0; }, "final_logit_softcapping"},
      {[](auto& c) { c["per_layer_config"] = {{"99", {{"head_dim", 32}}}}; }, "per_layer_config"},
      {[](auto& c) { c["use_bidirectional_attention"] = "all"; }, "use_bidirectional_attention"},
  };
  const nlohmann::json original = config_;
  for (const auto& [edit, needle] : cases) {
    config_ = original;
    edit(config_);
    write_config();
    expect_load_error(needle);
  }
}

TEST_F(MalformedCheckpoint, ConfigNotJson) {
  write_text_file(dir_.file("config.json"), "{\"model_type\": \"gemma4_text\", ");
  expect_load_error("config.json");
}

TEST_F(MalformedCheckpoint, MissingWeights) {
  fs::remove(dir_.file("model.safetensors"));
  EXPECT_THROW(Gemma4Model::load(dir_.path()), Error);
}

}  // namespace
}  // namespace lmx
