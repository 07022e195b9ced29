// libFuzzer target: the MLX "quantization" block of config.json and its per-module lookups.
#include "fuzz_support.h"
#include "lmx/io/json_input.h"
#include "lmx/model/quantization_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lmx::fuzz::expect_only_lmx_errors([&] {
    const nlohmann::json root = lmx::parse_json(lmx::fuzz::as_text(data, size), "fuzz/config.json");
    lmx::QuantizationConfig q = lmx::QuantizationConfig::from_json(root, "fuzz/config.json");
    for (const char* module : {"model.embed_tokens", "model.layers.0.self_attn.q_proj", "lm_head", ""})
      if (auto spec = q.spec_for(module)) (void)(spec->bits + spec->group_size);
    // Every key of the block is a module name an override may name.
    for (const char* key : {"quantization", "quantization_config"})
      if (root.is_object() && root.contains(key) && root[key].is_object())
        for (const auto& [name, value] : root[key].items()) (void)q.spec_for(name);
  });
  return 0;
}
