// `lmx bench`: prefill and decode throughput, weight bytes per token, the prefill's FLOP rate and peak RSS
// for a model.
#include "commands.h"

#include "lmx/core/thread_pool.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/ops.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>

namespace lmx::cli {

Verb add_bench(CLI::App& app) {
  struct Options {
    std::string model;
    ModelFlags flags;
    int prompt_tokens = 128, gen_tokens = 32, threads = 0;
    bool json = false, no_warmup = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed on random prompt tokens");
  cmd->add_option("--model", opt->model, "Model directory")->required()->check(non_empty());
  cmd->add_option("--prompt-tokens", opt->prompt_tokens, "Prompt length")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gen-tokens", opt->gen_tokens, "Tokens to decode")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  cmd->add_flag("--json", opt->json, "Print results as JSON");
  cmd->add_flag("--no-warmup", opt->no_warmup,
                "Time the process's first prefill and decode steps (by default an untimed prefill of the same length "
                "and a few decode steps on a throwaway sequence come first)");
  add_model_options(cmd, opt->flags);
  return {cmd, [opt] {
            using Clock = std::chrono::steady_clock;
            apply_threads(opt->threads);
            auto load_start = Clock::now();
            auto model = load_language_model(opt->model, opt->flags);
            double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
            require_within_context(
                *model, int64_t{opt->prompt_tokens} + opt->gen_tokens,
                fmt::format("--prompt-tokens {} and --gen-tokens {}", opt->prompt_tokens, opt->gen_tokens));
            const int vocab = model->description().vocab_size;
            std::mt19937 rng(1234);
            std::vector<int32_t> prompt(static_cast<size_t>(opt->prompt_tokens));
            // Random ids past the first special tokens (0-2: pad, eos, bos) when the vocabulary has more.
            const uint32_t first = vocab > 3 ? 3 : 0;
            for (auto& t : prompt)
              t = static_cast<int32_t>(first + rng() % (static_cast<uint32_t>(vocab) - first));

            // One run on a fresh sequence: the prompt in one step, then `steps` greedy decode steps; the
            // seconds of each part.
            size_t kv_bytes = 0;
            auto run = [&](int steps) {
              auto seq = model->new_sequence();
              auto start = Clock::now();
              StepRow row{seq.get(), prompt};
              int32_t token = model->forward_argmax({&row, 1})[0];
              const double prefill = std::chrono::duration<double>(Clock::now() - start).count();
              start = Clock::now();
              for (int i = 0; i < steps; ++i) {
                StepRow step{seq.get(), {&token, 1}};
                token = model->forward_argmax({&step, 1})[0];
              }
              const double decode = std::chrono::duration<double>(Clock::now() - start).count();
              kv_bytes = model->kv_bytes(*seq);
              return std::pair{prefill, decode};
            };
            // Warm-up: the first forward of a process pays one-time costs the timed run should not (lazily
            // loaded GPU kernels, scratch and cache growth, graph captures, first touches of mmapped weights).
            if (!opt->no_warmup) run(std::min(opt->gen_tokens, 4));
            const auto [prefill_s, decode_s] = run(opt->gen_tokens);

            struct rusage usage {};
            getrusage(RUSAGE_SELF, &usage);
            const double peak_rss_mb = usage.ru_maxrss / 1024.0;
            const double bytes_per_token = static_cast<double>(model->weight_bytes_per_token());
            const double prefill_tok_s = opt->prompt_tokens / prefill_s, decode_tok_s = opt->gen_tokens / decode_s;
            // The prefill's useful work (forward_flops.h: matmuls and attention) per second.
            const double prefill_tflop_s = model->prefill_flops(opt->prompt_tokens) / prefill_s / 1e12;
            nlohmann::json out = {{"model", opt->model},
                                  {"device", model->device_description()},
                                  {"threads", default_pool().threads()},
                                  {"load_s", load_s},
                                  {"prompt_tokens", opt->prompt_tokens},
                                  {"gen_tokens", opt->gen_tokens},
                                  {"warmup", !opt->no_warmup},
                                  {"prefill_tok_s", prefill_tok_s},
                                  {"prefill_tflop_s", prefill_tflop_s},
                                  {"decode_tok_s", decode_tok_s},
                                  {"weight_bytes_per_token", bytes_per_token},
                                  {"decode_weight_gb_s", bytes_per_token * decode_tok_s / 1e9},
                                  {"kv_cache", model->kv_cache().layout().codec().name()},
                                  {"kv_bytes", kv_bytes},
                                  {"peak_rss_mb", peak_rss_mb}};
            if (opt->json) {
              std::printf("%s\n", out.dump().c_str());
            } else {
              std::printf("model            %s\ndevice           %s\nthreads          %d\nload             %.2f s\n",
                          opt->model.c_str(), model->device_description().c_str(), default_pool().threads(), load_s);
              std::printf("prefill          %d tokens, %.2f tok/s (%.2f TFLOP/s)\n", opt->prompt_tokens,
                          prefill_tok_s, prefill_tflop_s);
              std::printf("decode           %d tokens, %.2f tok/s\n", opt->gen_tokens, decode_tok_s);
              std::printf("weights/token    %.3f GB (%.2f GB/s at the decode rate)\n", bytes_per_token / 1e9,
                          bytes_per_token * decode_tok_s / 1e9);
              std::printf("KV cache         %s, %s held after %d + %d tokens\n",
                          std::string(model->kv_cache().layout().codec().name()).c_str(),
                          format_bytes(kv_bytes).c_str(), opt->prompt_tokens, opt->gen_tokens);
              std::printf("peak RSS         %.0f MB\n", peak_rss_mb);
            }
            return 0;
          }};
}

}  // namespace lmx::cli
