// `lmx synth`: a checkpoint with real Gemma 4 shapes and seeded random weights.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/io/json_input.h"
#include "lmx/model/convert.h"
#include "lmx/model/synthetic.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

namespace lmx::cli {

Verb add_synth(CLI::App& app) {
  struct Options {
    std::string preset, config, out, quantize, tokenizer;
    uint64_t seed = 0;
    int layers = 0;
    bool force = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("synth", "Write a synthetic checkpoint (real shapes, random bf16 weights)");
  auto* preset =
      cmd->add_option("--preset", opt->preset, "gemma4-e2b | gemma4-e4b | gemma4-26b-a4b | gemma4-31b");
  auto* config = cmd->add_option("--config", opt->config, "A config.json to take the shapes from instead")
                     ->check(non_empty());
  preset->excludes(config);
  cmd->add_option("--out", opt->out, "Output directory (absent or empty, unless --force)")
      ->required()
      ->check(non_empty());
  cmd->add_flag("--force", opt->force, "Replace a non-empty --out directory whole");
  cmd->add_option("--seed", opt->seed, "Random seed");
  cmd->add_option("--quantize", opt->quantize, "MLX affine-quantize matrices: BITS[:GROUP] (e.g. 4 or 4:32)")
      ->check(non_empty());
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "Copy this directory's tokenizer in (vocabulary padded to the model's), so the checkpoint "
                  "can be served on text")
      ->check(non_empty());
  auto* layers =
      cmd->add_option("--layers", opt->layers,
                      "Keep the preset's first N layers (a quick benchmark proxy; KV sharing dropped)")
          ->needs(preset);
  return {cmd, [opt, preset, layers] {
            LMX_REQUIRE(InvalidArgument, preset->count() || !opt->config.empty(),
                        "synth needs --preset or --config");
            nlohmann::json config = preset->count()
                                        ? (layers->count() ? gemma4_preset_config(opt->preset, opt->layers)
                                                           : gemma4_preset_config(opt->preset))
                                        : load_json_file(opt->config, InputKind::kUserData);
            if (config.is_object() && config.contains("text_config")) config = config["text_config"];
            auto start = std::chrono::steady_clock::now();
            std::optional<QuantizeOptions> quantize;
            if (!opt->quantize.empty()) quantize = parse_quantize_spec(opt->quantize);
            write_synthetic_gemma4(config, opt->out, opt->seed, quantize ? &*quantize : nullptr,
                                   size_t{2} << 30, opt->force, opt->tokenizer);
            double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::printf("wrote %s in %.1f s\n", opt->out.c_str(), seconds);
            return 0;
          }};
}

}  // namespace lmx::cli
