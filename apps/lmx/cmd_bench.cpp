// `lmx bench`: prefill and decode throughput, weight bytes per token, the prefill's FLOP rate and peak RSS
// for a model; with --concurrency, aggregate throughput and latency of many sequences on the engine.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/ops.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>

namespace lmx::cli {
namespace {

struct BenchOptions {
  std::string model;
  ModelFlags flags;
  EngineFlags engine;
  SamplingFlags sampling;
  int prompt_tokens = 128, gen_tokens = 32, threads = 0, concurrency = 0;
  bool json = false, no_warmup = false;
};

// `count` random ids past the first special tokens (0-2: pad, eos, bos) when the vocabulary has more.
std::vector<int32_t> random_prompt(std::mt19937& rng, int vocab, int count) {
  std::vector<int32_t> prompt(static_cast<size_t>(count));
  const uint32_t first = vocab > 3 ? 3 : 0;
  for (auto& t : prompt) t = static_cast<int32_t>(first + rng() % (static_cast<uint32_t>(vocab) - first));
  return prompt;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto i = static_cast<size_t>(std::min<double>(static_cast<double>(values.size() - 1),
                                                      std::ceil(p * static_cast<double>(values.size())) - 1));
  return values[i];
}

// --concurrency N: N sequences of --prompt-tokens random ids, each generating --gen-tokens (greedy unless the
// sampling flags say otherwise; no stop tokens), submitted at once and scheduled by the engine. Decode tok/s
// counts the tokens of steps without prefill rows over their time; prefill tok/s the prompt tokens over the
// time of steps with prefill rows.
int run_concurrent(const BenchOptions& o, LanguageModel& model, double load_s) {
  using Clock = std::chrono::steady_clock;
  std::mt19937 rng(1234);
  const int vocab = model.description().vocab_size;
  const EngineOptions engine_opts = engine_options(o.engine);
  // Greedy unless the sampling flags ask otherwise; request i of a seeded run samples with seed + i.
  SamplingParams greedy;
  greedy.temperature = 0;
  const SamplingParams sampling = sampling_params(o.sampling, greedy, "the defaults");
  struct Timeline {
    Clock::time_point submitted;
    std::vector<Clock::time_point> tokens;
  };
  // One round: every request at once; returns the per-request token times and fills the step totals.
  double prefill_s = 0, decode_s = 0, total_s = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0, preemptions = 0;
  size_t peak_kv = 0;
  auto round = [&](int prompt_tokens, int gen_tokens) {
    Engine engine(model, nullptr, engine_opts);
    prefill_s = decode_s = 0;
    prefill_tokens = decode_tokens = 0;
    peak_kv = 0;
    engine.set_step_observer([&](const StepRecord& r) {
      if (r.prefill_tokens > 0) {
        prefill_s += r.seconds;
        prefill_tokens += r.prefill_tokens;
      } else {
        decode_s += r.seconds;
        decode_tokens += r.sampled;
      }
      peak_kv = std::max(peak_kv, model.kv_cache().pool().used_bytes());
    });
    std::vector<Timeline> timelines(static_cast<size_t>(o.concurrency));
    std::string error;
    const auto start = Clock::now();
    for (int i = 0; i < o.concurrency; ++i) {
      GenerationRequest r;
      r.prompt = random_prompt(rng, vocab, prompt_tokens);
      r.max_tokens = gen_tokens;
      r.sampling = sampling;
      if (r.sampling.seed) *r.sampling.seed += static_cast<uint64_t>(i);
      Timeline& t = timelines[static_cast<size_t>(i)];
      t.submitted = Clock::now();
      engine.submit(std::move(r), [&t, &error](const RequestEvent& e) {
        if (e.finish == FinishReason::kError) error = e.error;
        for (size_t k = 0; k < e.tokens.size(); ++k) t.tokens.push_back(Clock::now());
      });
    }
    engine.run_until_idle();
    LMX_REQUIRE(Error, error.empty(), "bench: a request failed: {}", error);
    total_s = std::chrono::duration<double>(Clock::now() - start).count();
    preemptions = engine.stats().preemptions;
    return timelines;
  };
  // Warm-up: the same round with at most 4 generated tokens, so that the timed round's prefill and decode
  // shapes (their kernels' first launches, scratch sizes and graphs) have each run once.
  if (!o.no_warmup) round(o.prompt_tokens, std::min(o.gen_tokens, 4));
  const std::vector<Timeline> timelines = round(o.prompt_tokens, o.gen_tokens);

  std::vector<double> ttft, inter_token;
  for (const Timeline& t : timelines) {
    if (t.tokens.empty()) continue;
    ttft.push_back(std::chrono::duration<double>(t.tokens.front() - t.submitted).count());
    for (size_t k = 1; k < t.tokens.size(); ++k)
      inter_token.push_back(std::chrono::duration<double>(t.tokens[k] - t.tokens[k - 1]).count());
  }
  const int64_t generated = int64_t{o.concurrency} * o.gen_tokens;
  const double prefill_tok_s = prefill_s > 0 ? static_cast<double>(prefill_tokens) / prefill_s : 0;
  const double decode_tok_s = decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0;

  nlohmann::json out = {{"model", o.model},
                        {"device", model.device_description()},
                        {"threads", default_pool().threads()},
                        {"load_s", load_s},
                        {"concurrency", o.concurrency},
                        {"prompt_tokens", o.prompt_tokens},
                        {"gen_tokens", o.gen_tokens},
                        {"step_tokens", engine_opts.scheduler.step_tokens},
                        {"prefill_chunk", engine_opts.scheduler.prefill_chunk_tokens},
                        {"max_rows", engine_opts.scheduler.max_rows},
                        {"warmup", !o.no_warmup},
                        {"temperature", sampling.temperature},
                        {"top_p", sampling.top_p},
                        {"top_k", sampling.top_k},
                        {"total_s", total_s},
                        {"prefill_tok_s", prefill_tok_s},
                        {"decode_tok_s", decode_tok_s},
                        {"overall_tok_s", static_cast<double>(generated) / total_s},
                        {"ttft_p50_s", percentile(ttft, 0.5)},
                        {"ttft_p99_s", percentile(ttft, 0.99)},
                        {"token_latency_p50_s", percentile(inter_token, 0.5)},
                        {"token_latency_p99_s", percentile(inter_token, 0.99)},
                        {"weight_bytes_per_token", model.weight_bytes_per_token()},
                        {"kv_cache", model.kv_cache().codec_description()},
                        {"kv_peak_bytes", peak_kv},
                        {"kv_budget_bytes", model.kv_cache().pool().budget_bytes()},
                        {"preemptions", preemptions}};
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("model            %s\ndevice           %s\nthreads          %d\nload             %.2f s\n",
              o.model.c_str(), model.device_description().c_str(), default_pool().threads(), load_s);
  std::printf(
      "requests         %d × (%d prompt + %d generated tokens), steps of %lld tokens, chunks of %lld, %d "
      "rows\n",
      o.concurrency, o.prompt_tokens, o.gen_tokens, static_cast<long long>(engine_opts.scheduler.step_tokens),
      static_cast<long long>(engine_opts.scheduler.prefill_chunk_tokens), engine_opts.scheduler.max_rows);
  std::printf("prefill          %.2f tok/s (aggregate, steps with prompt rows)\n", prefill_tok_s);
  std::printf("decode           %.2f tok/s (aggregate, steps of decode rows only)\n", decode_tok_s);
  std::printf("overall          %.2f generated tok/s over %.2f s\n", static_cast<double>(generated) / total_s,
              total_s);
  std::printf("first token      p50 %.1f ms, p99 %.1f ms\n", percentile(ttft, 0.5) * 1e3,
              percentile(ttft, 0.99) * 1e3);
  std::printf("per token        p50 %.1f ms, p99 %.1f ms\n", percentile(inter_token, 0.5) * 1e3,
              percentile(inter_token, 0.99) * 1e3);
  std::printf("KV cache         %s, peak %s of %s (%lld preemptions)\n",
              model.kv_cache().codec_description().c_str(), format_bytes(peak_kv).c_str(),
              format_bytes(model.kv_cache().pool().budget_bytes()).c_str(),
              static_cast<long long>(preemptions));
  return 0;
}

}  // namespace

Verb add_bench(CLI::App& app) {
  using Options = BenchOptions;
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed on random prompt tokens");
  cmd->add_option("--model", opt->model, "Model directory")->required()->check(non_empty());
  cmd->add_option("--prompt-tokens", opt->prompt_tokens, "Prompt length")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gen-tokens", opt->gen_tokens, "Tokens to decode")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  cmd->add_option("--concurrency", opt->concurrency,
                  "Run N sequences at once through the engine (continuous batching) and report aggregate "
                  "throughput and latency percentiles; 0 = one sequence, one step at a time")
      ->check(CLI::Range(0, 1 << 16));
  add_engine_options(cmd, opt->engine);
  add_sampling_options(cmd, opt->sampling, "0, greedy; --concurrency only");
  cmd->add_flag("--json", opt->json, "Print results as JSON");
  cmd->add_flag(
      "--no-warmup", opt->no_warmup,
      "Time the process's first prefill and decode steps (by default an untimed prefill of the same length "
      "and a few decode steps on a throwaway sequence come first; with --concurrency, the same round with at "
      "most 4 generated tokens)");
  add_model_options(cmd, opt->flags);
  return {cmd, [opt] {
            using Clock = std::chrono::steady_clock;
            const SamplingFlags& f = opt->sampling;
            for (const CLI::Option* flag : {f.temperature_flag, f.top_p_flag, f.top_k_flag, f.min_p_flag,
                                            f.repetition_penalty_flag, f.seed_flag})
              LMX_REQUIRE(InvalidArgument, opt->concurrency > 0 || flag->count() == 0,
                          "{} applies to --concurrency runs (the single-sequence bench decodes greedily)",
                          flag->get_name());
            apply_threads(opt->threads);
            auto load_start = Clock::now();
            auto model = load_language_model(opt->model, opt->flags);
            double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
            require_within_context(
                *model, int64_t{opt->prompt_tokens} + opt->gen_tokens,
                fmt::format("--prompt-tokens {} and --gen-tokens {}", opt->prompt_tokens, opt->gen_tokens));
            if (opt->concurrency > 0) return run_concurrent(*opt, *model, load_s);
            std::mt19937 rng(1234);
            const std::vector<int32_t> prompt =
                random_prompt(rng, model->description().vocab_size, opt->prompt_tokens);

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
            // loaded GPU kernels, scratch and cache growth, graph captures, first touches of mmapped
            // weights).
            if (!opt->no_warmup) run(std::min(opt->gen_tokens, 4));
            const auto [prefill_s, decode_s] = run(opt->gen_tokens);

            struct rusage usage {};
            getrusage(RUSAGE_SELF, &usage);
            const double peak_rss_mb = usage.ru_maxrss / 1024.0;
            const double bytes_per_token = static_cast<double>(model->weight_bytes_per_token());
            const double prefill_tok_s = opt->prompt_tokens / prefill_s,
                         decode_tok_s = opt->gen_tokens / decode_s;
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
                                  {"kv_cache", model->kv_cache().codec_description()},
                                  {"kv_bytes", kv_bytes},
                                  {"peak_rss_mb", peak_rss_mb}};
            if (opt->json) {
              std::printf("%s\n", out.dump().c_str());
            } else {
              std::printf(
                  "model            %s\ndevice           %s\nthreads          %d\nload             %.2f s\n",
                  opt->model.c_str(), model->device_description().c_str(), default_pool().threads(), load_s);
              std::printf("prefill          %d tokens, %.2f tok/s (%.2f TFLOP/s)\n", opt->prompt_tokens,
                          prefill_tok_s, prefill_tflop_s);
              std::printf("decode           %d tokens, %.2f tok/s\n", opt->gen_tokens, decode_tok_s);
              std::printf("weights/token    %.3f GB (%.2f GB/s at the decode rate)\n", bytes_per_token / 1e9,
                          bytes_per_token * decode_tok_s / 1e9);
              std::printf("KV cache         %s, %s held after %d + %d tokens\n",
                          model->kv_cache().codec_description().c_str(), format_bytes(kv_bytes).c_str(),
                          opt->prompt_tokens, opt->gen_tokens);
              std::printf("peak RSS         %.0f MB\n", peak_rss_mb);
            }
            return 0;
          }};
}

}  // namespace lmx::cli
