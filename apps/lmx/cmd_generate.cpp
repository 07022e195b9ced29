// `lmx generate`: greedy continuation of a prompt given as token ids.
#include "commands.h"

#include "lmx/engine/greedy.h"
#include "lmx/io/model_dir.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace lmx::cli {

Verb add_generate(CLI::App& app) {
  struct Options {
    std::string model, prompt_ids;
    int max_tokens = 32, threads = 0, prefill_chunk = 0;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy generation from prompt token ids");
  cmd->add_option("--model", opt->model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--prompt-ids", opt->prompt_ids, "Comma-separated prompt token ids, e.g. 2,105,2364")->required();
  cmd->add_option("--max-tokens", opt->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prefill-chunk", opt->prefill_chunk, "Prefill the prompt in chunks of N tokens (0 = one step)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  cmd->add_flag("--json", opt->json, "Print {\"tokens\", \"prompt_tok_s\", \"decode_tok_s\"} as JSON");
  return {cmd, [opt] {
            apply_threads(opt->threads);
            std::vector<int32_t> prompt = parse_ids(opt->prompt_ids);
            auto model = Gemma4Model::load(opt->model);
            GenerationConfig generation = load_generation_config(opt->model);
            GreedyOptions options;
            options.max_new_tokens = opt->max_tokens;
            options.prefill_chunk_tokens = opt->prefill_chunk;
            options.stop_token_ids = generation.eos_token_ids;
            if (options.stop_token_ids.empty() && model->config().eos_token_id)
              options.stop_token_ids.push_back(*model->config().eos_token_id);
            if (!opt->json)
              options.on_token = [](int32_t t) {
                std::printf("%d ", t);
                std::fflush(stdout);
                return true;
              };
            GreedyResult r = generate_greedy(*model, prompt, options);
            double prompt_tok_s = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
            double decode_tok_s =
                r.tokens.size() > 1 && r.decode_seconds > 0 ? (r.tokens.size() - 1) / r.decode_seconds : 0;
            if (opt->json) {
              nlohmann::json out = {{"tokens", r.tokens}, {"prompt_tok_s", prompt_tok_s}, {"decode_tok_s", decode_tok_s}};
              std::printf("%s\n", out.dump().c_str());
            } else {
              std::printf("\nprompt: %d tokens, %.1f tok/s; decode: %zu tokens, %.1f tok/s\n", r.prompt_tokens,
                          prompt_tok_s, r.tokens.size(), decode_tok_s);
            }
            return 0;
          }};
}

}  // namespace lmx::cli
