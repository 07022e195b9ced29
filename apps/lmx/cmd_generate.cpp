// `lmx generate`: one continuation (greedy, or sampled with the sampling flags) of a prompt given as token
// ids, raw text or one chat turn, run on the engine; optionally starting from a saved KV snapshot
// (--load-kv) and saving the sequence's KV afterwards (--save-kv).
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/engine/engine.h"
#include "lmx/io/directory.h"
#include "lmx/io/fingerprint.h"
#include "lmx/io/model_dir.h"
#include "lmx/kv/snapshot.h"
#include "lmx/model/language_model.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

namespace lmx::cli {

Verb add_generate(CLI::App& app) {
  struct Options {
    std::string model, prompt_ids, prompt, chat, save_kv, load_kv;
    ModelFlags flags;
    SamplingFlags sampling;
    int max_tokens = 32, threads = 0, prefill_chunk = 0;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate from prompt token ids, text or a chat turn (greedy by default)");
  cmd->add_option("--model", opt->model,
                  "Model directory (config.json + safetensors [+ tokenizer]); "
                  "default: the bundled demo model")
      ->check(non_empty());
  auto* ids =
      cmd->add_option("--prompt-ids", opt->prompt_ids, "Comma-separated prompt token ids, e.g. 2,105,2364");
  auto* raw = cmd->add_option("--prompt", opt->prompt, "Raw prompt text (encoded with special tokens)");
  auto* chat = cmd->add_option("--chat", opt->chat, "One user turn, rendered through the chat template");
  ids->excludes(raw)->excludes(chat);
  raw->excludes(chat);
  cmd->add_option("--max-tokens", opt->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prefill-chunk", opt->prefill_chunk,
                  "Prefill the prompt in chunks of N tokens (0 = one step)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  cmd->add_option("--save-kv", opt->save_kv,
                  "Write the sequence's KV (the prompt and every generated token but the last) to FILE")
      ->check(non_empty());
  cmd->add_option("--load-kv", opt->load_kv,
                  "Start from the KV snapshot FILE (saved by --save-kv with this model, tokenizer and KV "
                  "flags): the prompt's longest common prefix with it is not recomputed; without a prompt "
                  "flag, continue its tokens")
      ->check(non_empty());
  add_sampling_options(cmd, opt->sampling, "0, greedy; the other filters off");
  add_model_options(cmd, opt->flags);
  cmd->add_flag(
      "--json", opt->json,
      "Print {\"tokens\", \"text\", \"finish_reason\", \"prompt_tok_s\", \"decode_tok_s\", \"kv_bytes\", "
      "\"reused_tokens\"} as JSON");
  return {
      cmd, [opt, ids, raw, chat] {
        if (!ids->count() && !raw->count() && !chat->count() && opt->load_kv.empty())
          throw InvalidArgument("generate needs --prompt-ids, --prompt, --chat or --load-kv");
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
        } else if (chat->count()) {
          nlohmann::ordered_json messages = {{{"role", "user"}, {"content", opt->chat}}};
          std::string rendered = render_chat(*tokenizer, messages, nullptr, true, std::nullopt);
          prompt = tokenizer->encode(rendered, /*add_special_tokens=*/false);  // the template wrote <bos>
        }
        // Greedy unless a flag asks for sampling (generation_config.json's defaults are chat's).
        SamplingParams greedy;
        greedy.temperature = 0;
        const SamplingParams sampling = sampling_params(opt->sampling, greedy, "the defaults");
        auto model = load_language_model(opt->model, opt->flags);
        // The conversation holds the loaded snapshot, and keeps the sequence's KV after the request (to
        // report its bytes, and for --save-kv).
        auto conversation = std::make_shared<Conversation>();
        std::optional<KvSnapshotIdentity> identity;
        if (!opt->load_kv.empty() || !opt->save_kv.empty())
          identity = KvSnapshotIdentity{model_fingerprint(opt->model), tokenizer_fingerprint(opt->model)};
        if (!opt->load_kv.empty()) {
          KvSnapshot snapshot = load_kv_snapshot(opt->load_kv, model->kv_cache(), *identity);
          for (int32_t t : snapshot.tokens)
            LMX_REQUIRE(InvalidArgument, t < model->description().vocab_size,
                        "KV snapshot {}: token id {} is outside this model's vocabulary", opt->load_kv, t);
          if (prompt.empty()) prompt = snapshot.tokens;
          conversation->tokens = std::move(snapshot.tokens);
          conversation->sequence = std::move(snapshot.sequence);
        }
        LMX_REQUIRE(InvalidArgument, !prompt.empty(), "the prompt is empty");
        require_within_context(
            *model, static_cast<int64_t>(prompt.size()) + opt->max_tokens,
            fmt::format("the prompt ({} tokens) and --max-tokens {}", prompt.size(), opt->max_tokens));
        GenerationRequest request;
        request.prompt = prompt;
        request.sampling = sampling;
        request.max_tokens = opt->max_tokens;
        request.stop_token_ids = load_generation_config(opt->model).eos_token_ids;
        if (request.stop_token_ids.empty())
          for (int id : model->description().eos_token_ids) request.stop_token_ids.push_back(id);
        request.conversation = conversation;
        EngineOptions engine_options;
        engine_options.scheduler.prefill_chunk_tokens =
            opt->prefill_chunk > 0 ? opt->prefill_chunk : static_cast<int64_t>(prompt.size());
        engine_options.scheduler.step_tokens = engine_options.scheduler.prefill_chunk_tokens;
        Engine engine(*model, tokenizer ? &*tokenizer : nullptr, engine_options);

        using Clock = std::chrono::steady_clock;
        const auto start = Clock::now();
        double first_token_s = 0;
        std::vector<int32_t> tokens;
        std::string text, error;
        FinishReason finish = FinishReason::kLength;
        int64_t reused = 0;
        engine.submit(std::move(request), [&](const RequestEvent& event) {
          reused = event.reused_tokens;
          if (tokens.empty() && !event.tokens.empty())
            first_token_s = std::chrono::duration<double>(Clock::now() - start).count();
          tokens.insert(tokens.end(), event.tokens.begin(), event.tokens.end());
          text += event.text;
          if (!opt->json) {
            if (tokenizer) {
              std::fwrite(event.text.data(), 1, event.text.size(), stdout);
            } else {
              for (int32_t t : event.tokens) std::printf("%d ", t);
            }
            std::fflush(stdout);
          }
          if (event.finish) {
            finish = *event.finish;
            error = event.error;
          }
        });
        engine.run_until_idle();
        LMX_REQUIRE(Error, finish != FinishReason::kError, "{}", error);
        if (!opt->save_kv.empty()) {
          LMX_REQUIRE(Error, conversation->sequence != nullptr, "--save-kv: the request left no KV to save");
          save_kv_snapshot(opt->save_kv, model->kv_cache(),
                           model->kv_cache().own(conversation->sequence.get()), conversation->tokens,
                           *identity);
        }
        const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
        const double prompt_tok_s =
            first_token_s > 0
                ? static_cast<double>(static_cast<int64_t>(prompt.size()) - reused) / first_token_s
                : 0;
        const double decode_tok_s = tokens.size() > 1 && total_s > first_token_s
                                        ? static_cast<double>(tokens.size() - 1) / (total_s - first_token_s)
                                        : 0;
        const size_t kv_bytes = conversation->sequence ? model->kv_bytes(*conversation->sequence) : 0;
        if (opt->json) {
          nlohmann::json out = {{"tokens", tokens},
                                {"finish_reason", finish_reason_name(finish)},
                                {"prompt_tok_s", prompt_tok_s},
                                {"decode_tok_s", decode_tok_s},
                                {"kv_bytes", kv_bytes},
                                {"reused_tokens", reused}};
          if (tokenizer) out["text"] = text;
          std::printf("%s\n", out.dump().c_str());
        } else {
          std::printf(
              "\nprompt: %zu tokens (%lld reused), %.1f tok/s; decode: %zu tokens, %.1f tok/s; KV: %s (%s)\n",
              prompt.size(), static_cast<long long>(reused), prompt_tok_s, tokens.size(), decode_tok_s,
              format_bytes(kv_bytes).c_str(), model->kv_cache().codec_description().c_str());
        }
        return 0;
      }};
}

}  // namespace lmx::cli
