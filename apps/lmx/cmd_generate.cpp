// `lmx generate`: greedy continuation of a prompt given as token ids, raw text or one chat turn.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/engine/greedy.h"
#include "lmx/io/directory.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/language_model.h"
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace lmx::cli {

Verb add_generate(CLI::App& app) {
  struct Options {
    std::string model, prompt_ids, prompt, chat;
    ModelFlags flags;
    int max_tokens = 32, threads = 0, prefill_chunk = 0;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy generation from prompt token ids, text or a chat turn");
  cmd->add_option("--model", opt->model,
                  "Model directory (config.json + safetensors [+ tokenizer]); "
                  "default: the bundled demo model")
      ->check(non_empty());
  auto* ids = cmd->add_option("--prompt-ids", opt->prompt_ids, "Comma-separated prompt token ids, e.g. 2,105,2364");
  auto* raw = cmd->add_option("--prompt", opt->prompt, "Raw prompt text (encoded with special tokens)");
  auto* chat = cmd->add_option("--chat", opt->chat, "One user turn, rendered through the chat template");
  ids->excludes(raw)->excludes(chat);
  raw->excludes(chat);
  cmd->add_option("--max-tokens", opt->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prefill-chunk", opt->prefill_chunk, "Prefill the prompt in chunks of N tokens (0 = one step)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  add_model_options(cmd, opt->flags);
  cmd->add_flag("--json", opt->json,
                "Print {\"tokens\", \"text\", \"prompt_tok_s\", \"decode_tok_s\", \"kv_bytes\"} as JSON");
  return {cmd, [opt, ids, raw, chat] {
            if (!ids->count() && !raw->count() && !chat->count())
              throw InvalidArgument("generate needs --prompt-ids, --prompt or --chat");
            apply_threads(opt->threads);
            opt->model = model_or_default(opt->model);
            std::optional<Tokenizer> tokenizer;
            if (raw->count() || chat->count() || path_exists(join_path(opt->model, "tokenizer.json")))
              tokenizer = Tokenizer::load(opt->model);
            std::vector<int32_t> prompt;
            if (ids->count()) {
              prompt = parse_ids(opt->prompt_ids);
            } else if (raw->count()) {
              prompt = tokenizer->encode(opt->prompt, /*add_special_tokens=*/true);
            } else {
              nlohmann::ordered_json messages = {{{"role", "user"}, {"content", opt->chat}}};
              std::string rendered = render_chat(*tokenizer, messages, nullptr, true, std::nullopt);
              prompt = tokenizer->encode(rendered, /*add_special_tokens=*/false);  // the template wrote <bos>
            }
            LMX_REQUIRE(InvalidArgument, !prompt.empty(), "the prompt is empty");
            auto model = load_language_model(opt->model, opt->flags);
            require_within_context(
                *model, static_cast<int64_t>(prompt.size()) + opt->max_tokens,
                fmt::format("the prompt ({} tokens) and --max-tokens {}", prompt.size(), opt->max_tokens));
            GenerationConfig generation = load_generation_config(opt->model);
            GreedyOptions options;
            options.max_new_tokens = opt->max_tokens;
            options.prefill_chunk_tokens = opt->prefill_chunk;
            options.stop_token_ids = generation.eos_token_ids;
            if (options.stop_token_ids.empty())
              for (int id : model->description().eos_token_ids) options.stop_token_ids.push_back(id);
            std::optional<StreamingDetokenizer> stream;
            if (tokenizer) stream.emplace(*tokenizer, /*skip_special_tokens=*/true);
            if (!opt->json)
              options.on_token = [&stream](int32_t t) {
                if (stream) {
                  std::string piece = stream->feed(t);
                  std::fwrite(piece.data(), 1, piece.size(), stdout);
                } else {
                  std::printf("%d ", t);
                }
                std::fflush(stdout);
                return true;
              };
            GreedyResult r = generate_greedy(*model, prompt, options);
            double prompt_tok_s = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
            double decode_tok_s =
                r.tokens.size() > 1 && r.decode_seconds > 0 ? (r.tokens.size() - 1) / r.decode_seconds : 0;
            if (opt->json) {
              nlohmann::json out = {{"tokens", r.tokens},
                                    {"prompt_tok_s", prompt_tok_s},
                                    {"decode_tok_s", decode_tok_s},
                                    {"kv_bytes", r.kv_bytes}};
              if (tokenizer) out["text"] = tokenizer->decode(r.tokens, /*skip_special_tokens=*/true);
              std::printf("%s\n", out.dump().c_str());
            } else {
              if (stream) {
                std::string rest = stream->flush();
                std::fwrite(rest.data(), 1, rest.size(), stdout);
              }
              std::printf("\nprompt: %d tokens, %.1f tok/s; decode: %zu tokens, %.1f tok/s; KV: %s (%s)\n",
                          r.prompt_tokens, prompt_tok_s, r.tokens.size(), decode_tok_s,
                          format_bytes(r.kv_bytes).c_str(),
                          std::string(model->kv_cache().layout().codec().name()).c_str());
            }
            return 0;
          }};
}

}  // namespace lmx::cli
