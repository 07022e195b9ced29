// Invariant 1: lmx's f32 path against transformers' f32 logits and greedy continuations on the tiny
// reference models (tests/data/models/*, written by tools/make_reference_models.py).
#include "lmx/engine/greedy.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/output_file.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/language_model.h"
#include "support/goldens.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

constexpr float kLogitTolerance = 1e-3f;

using test::Golden;
using test::load_goldens;

std::string model_dir(const std::string& name) { return test::reference_model_dir(name); }

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, LogitsAtEveryPosition) {
  const std::string dir = model_dir(GetParam());
  ASSERT_TRUE(test::exists(dir + "/goldens.safetensors")) << dir << " has no goldens";
  auto model = test::load_model(dir);
  auto goldens = load_goldens(dir);
  ASSERT_GE(goldens.size(), 3u);
  float worst = 0;
  for (const auto& g : goldens) {
    auto seq = model->new_sequence();
    StepRow row{seq.get(), g.prompt};
    Tensor logits = model->forward({&row, 1}, true);
    ASSERT_EQ(logits.shape(), g.logits.shape());
    const float diff = test::max_abs_diff(logits, g.logits);
    EXPECT_LE(diff, kLogitTolerance) << "prompt of " << g.prompt.size() << " tokens";
    worst = std::max(worst, diff);
  }
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
  std::printf("%s: max |Δlogit| = %.3g over %zu prompts\n", GetParam().c_str(), worst, goldens.size());
}

TEST_P(Parity, GreedyContinuations) {
  const std::string dir = model_dir(GetParam());
  auto model = test::load_model(dir);
  for (const auto& g : load_goldens(dir)) {
    GreedyOptions options;
    options.max_new_tokens = static_cast<int>(g.greedy.size());
    GreedyResult r = generate_greedy(*model, g.prompt, options);
    EXPECT_EQ(r.tokens, g.greedy) << "prompt of " << g.prompt.size() << " tokens";
  }
}

// The same weights under multimodal (model.language_model.*) and MLX (language_model.model.*)
// names give bit-identical logits.
TEST_P(Parity, OtherCheckpointNamings) {
  const std::string dir = model_dir(GetParam());
  auto reference_model = test::load_model(dir);
  const std::vector<int32_t> prompt = load_goldens(dir).back().prompt;
  auto run = [&](LanguageModel& m) {
    auto seq = m.new_sequence();
    StepRow row{seq.get(), prompt};
    return m.forward({&row, 1}, true);
  };
  Tensor expected = run(*reference_model);
  for (const std::string prefix : {"model.language_model.", "language_model.model."}) {
    test::TempDir out;
    auto file = SafetensorsFile::open(dir + "/model.safetensors");
    std::vector<std::pair<std::string, Tensor>> renamed;
    for (const auto& name : file->names()) {
      ASSERT_EQ(name.rfind("model.", 0), 0u) << name;
      renamed.emplace_back(prefix + name.substr(6), file->tensor(name));
    }
    renamed.emplace_back("vision_tower.encoder.layers.0.weight", Tensor::zeros({4, 4}, DType::kF32));
    write_safetensors(out.file("model.safetensors"), renamed);
    nlohmann::json text = load_json_file(dir + "/config.json");
    nlohmann::json root = {{"model_type", "gemma4"}, {"architectures", {"Gemma4ForConditionalGeneration"}},
                           {"text_config", text}, {"vision_config", {{"hidden_size", 4}}}};
    if (text.contains("quantization")) {  // module paths in the quantization block follow the names
      nlohmann::json block;
      for (const auto& [key, value] : text["quantization"].items())
        block[key.rfind("model.", 0) == 0 ? prefix + key.substr(6) : key] = value;
      root["quantization"] = block;
      root["text_config"].erase("quantization");
      root["text_config"].erase("quantization_config");
    }
    write_text_file(out.file("config.json"), root.dump(2));
    auto model = test::load_model(out.path());
    Tensor got = run(*model);
    EXPECT_EQ(test::max_abs_diff(got, expected), 0.0f) << prefix;
  }
}

// The quantized models (lmx convert --quantize 4:32 with 8-bit down projections and embeddings, one
// module left bf16) against transformers run on their dequantized weights.
INSTANTIATE_TEST_SUITE_P(ReferenceModels, Parity,
                         ::testing::Values("tiny-e2b", "tiny-26b-moe", "tiny-31b", "tiny-e2b-q4", "tiny-26b-moe-q4",
                                           "tiny-31b-q4", "models/demo"),
                         test::ParamName());

}  // namespace
}  // namespace lmx
