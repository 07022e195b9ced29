// libFuzzer target: config.json text resolved as a model load does (text_config, Gemma 4 config,
// quantization).
#include "fuzz_support.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/gemma4/gemma4_config.h"
#include "lmx/model/quantization_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lmx::fuzz::expect_only_lmx_errors([&] {
    lmx::ModelConfigFiles files =
        lmx::parse_model_config(lmx::fuzz::as_text(data, size), "fuzz", "fuzz/config.json");
    lmx::Gemma4Config config = lmx::Gemma4Config::from_json(files.text, files.root, files.path);
    lmx::QuantizationConfig quantization = lmx::QuantizationConfig::from_json(files.root, files.path);
    for (const auto& layer : config.layers)
      (void)quantization.spec_for("model.layers." + std::to_string(layer.cache_index));
  });
  return 0;
}
