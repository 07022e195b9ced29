// `lmx convert`: a dense HF/MLX checkpoint to an MLX affine-quantized one.
#include "commands.h"

#include "lmx/model/convert.h"

#include <chrono>
#include <cstdio>
#include <memory>

namespace lmx::cli {

Verb add_convert(CLI::App& app) {
  struct Options {
    std::string model, out, quantize;
    std::vector<std::string> keep_dense, bits_for;
    bool force = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("convert", "Write an MLX affine-quantized copy of a bf16/f32 checkpoint");
  cmd->add_option("--model", opt->model, "Input model directory")->required()->check(non_empty());
  cmd->add_option("--out", opt->out, "Output directory (absent or empty, unless --force)")
      ->required()
      ->check(non_empty());
  cmd->add_flag("--force", opt->force, "Replace a non-empty --out directory whole");
  cmd->add_option("--quantize", opt->quantize, "BITS[:GROUP], bits 2/3/4/5/6/8, group 32/64/128 (default 64)")
      ->required();
  cmd->add_option("--keep-bf16", opt->keep_dense,
                  "Leave modules matching this glob/substring unquantized (repeatable)");
  cmd->add_option("--bits-for", opt->bits_for, "PATTERN=BITS: other bits for matching modules (repeatable)");
  return {cmd, [opt] {
            QuantizeOptions options = parse_quantize_spec(opt->quantize);
            options.keep_dense = opt->keep_dense;
            for (const auto& spec : opt->bits_for) options.bits_for.push_back(parse_bits_for(spec));
            auto start = std::chrono::steady_clock::now();
            check_text_files(opt->model);  // the tokenizer and template are copied: they must load
            convert_checkpoint(opt->model, opt->out, options, opt->force);
            double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::printf("wrote %s (%d-bit, group %d) in %.1f s\n", opt->out.c_str(), options.bits,
                        options.group_size, seconds);
            return 0;
          }};
}

}  // namespace lmx::cli
