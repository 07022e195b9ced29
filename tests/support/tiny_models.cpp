// Tiny Gemma 4 configs for tests, written as synthetic checkpoints.
#include "support/tiny_models.h"

#include "lmx/model/convert.h"
#include "lmx/model/synthetic.h"
#include "lmx/ops/backends.h"
#include "support/test_support.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace lmx::test {

std::vector<std::string> tiny_config_names() { return {"e2b", "moe", "dense", "e2b-q4", "moe-q4"}; }

std::vector<std::string> gpu_tiny_config_names() {
  std::vector<std::string> names = tiny_config_names();
  names.push_back("ple-q4");
  return names;
}

nlohmann::json tiny_config(const std::string& requested) {
  const std::string name = requested.substr(0, requested.find("-q4"));
  nlohmann::json c = {
      {"model_type", "gemma4_text"}, {"vocab_size", 300}, {"hidden_size", 64}, {"intermediate_size", 96},
      {"num_attention_heads", 4}, {"head_dim", 16}, {"global_head_dim", 32}, {"rms_norm_eps", 1e-6},
      {"final_logit_softcapping", 30.0}, {"tie_word_embeddings", true},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
      {"hidden_size_per_layer_input", 0}, {"num_kv_shared_layers", 0}};
  if (name == "e2b") {
    c.update({{"num_hidden_layers", 7}, {"num_key_value_heads", 1}, {"sliding_window", 8}, {"num_kv_shared_layers", 3},
              {"hidden_size_per_layer_input", 8}, {"vocab_size_per_layer_input", 300}, {"use_double_wide_mlp", true}});
    c["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                        "sliding_attention", "sliding_attention", "full_attention"};
  } else if (name == "ple") {
    c.update({{"hidden_size", 256},
              {"intermediate_size", 512},
              {"num_hidden_layers", 4},
              {"num_key_value_heads", 1},
              {"sliding_window", 8},
              {"num_kv_shared_layers", 1},
              {"hidden_size_per_layer_input", 128},
              {"vocab_size_per_layer_input", 300}});
    c["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  } else if (name == "moe") {
    c.update({{"num_hidden_layers", 6}, {"num_key_value_heads", 2}, {"num_global_key_value_heads", 1},
              {"attention_k_eq_v", true}, {"sliding_window", 12}, {"enable_moe_block", true}, {"num_experts", 8},
              {"top_k_experts", 2}, {"moe_intermediate_size", 32}});
    c["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "full_attention"};
  } else {
    c.update({{"num_hidden_layers", 6}, {"num_key_value_heads", 2}, {"num_global_key_value_heads", 1},
              {"attention_k_eq_v", true}, {"sliding_window", 16}, {"final_logit_softcapping", nullptr}});
    c["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "full_attention"};
  }
  return c;
}

std::string tiny_model_dir(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<TempDir>> dirs;
  std::lock_guard lock(mutex);
  auto& dir = dirs[name];
  if (!dir) {
    dir = std::make_unique<TempDir>();
    std::optional<QuantizeOptions> quantize;
    if (name.size() > 3 && name.substr(name.size() - 3) == "-q4") quantize = parse_quantize_spec("4:32");
    write_synthetic_gemma4(tiny_config(name), dir->path(), /*seed=*/17, quantize ? &*quantize : nullptr);
  }
  return dir->path();
}

std::unique_ptr<LanguageModel> load_model(const std::string& dir, const Device& device,
                                          const ModelOptions& options) {
  return LanguageModel::load(dir, make_backend(device), options);
}

}  // namespace lmx::test
