// Flags of the verbs that generate: sampling (generate, chat; each overrides a default only when given) and
// the engine's step shape (batch, bench --concurrency).
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"

namespace lmx::cli {

void add_sampling_options(CLI::App* cmd, SamplingFlags& flags, const std::string& default_note) {
  flags.temperature_flag = cmd->add_option("--temperature", flags.temperature,
                                           "Sampling temperature, 0 = greedy (default: " + default_note + ")")
                               ->check(CLI::Range(0.0f, 100.0f));
  flags.top_p_flag = cmd->add_option("--top-p", flags.top_p, "Nucleus sampling mass in (0, 1], 1 = off")
                         ->check(CLI::Range(0.0f, 1.0f));
  flags.top_k_flag = cmd->add_option("--top-k", flags.top_k, "Keep the K most likely tokens, 0 = off")
                         ->check(CLI::Range(0, 1 << 30));
  flags.min_p_flag =
      cmd->add_option("--min-p", flags.min_p, "Keep tokens with p ≥ min_p · p_max, in [0, 1), 0 = off")
          ->check(CLI::Range(0.0f, 1.0f));
  flags.repetition_penalty_flag = cmd->add_option("--repetition-penalty", flags.repetition_penalty,
                                                  "Penalty > 0 on the last 20 tokens, 1 = off");
  flags.seed_flag = cmd->add_option("--seed", flags.seed, "Random seed (reproducible answers)");
}

SamplingParams sampling_params(const SamplingFlags& f, SamplingParams p, const std::string& source) {
  if (f.temperature_flag->count()) p.temperature = f.temperature;
  if (f.top_p_flag->count()) p.top_p = f.top_p;
  if (f.top_k_flag->count()) p.top_k = f.top_k;
  if (f.min_p_flag->count()) p.min_p = f.min_p;
  if (f.repetition_penalty_flag->count()) p.repetition_penalty = f.repetition_penalty;
  if (f.seed_flag->count()) p.seed = f.seed;
  try {
    validate(p);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{} (settings from {} and the flags)", e.what(), source));
  }
  return p;
}

void add_engine_options(CLI::App* cmd, EngineFlags& flags) {
  cmd->add_option("--step-tokens", flags.step_tokens,
                  "Tokens per engine step: decode rows always run, prefill chunks fill the rest")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefill-chunk", flags.prefill_chunk_tokens, "Prompt tokens per prefill chunk")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-rows", flags.max_rows, "Sequences running at once (rows per step)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--host-sampling", flags.host_sampling,
                "Sample on the host from the full logits even where the backend samples (CUDA): for A/B "
                "measurements and debugging");
}

EngineOptions engine_options(const EngineFlags& flags) {
  EngineOptions o;
  o.scheduler.step_tokens = flags.step_tokens;
  o.scheduler.prefill_chunk_tokens = flags.prefill_chunk_tokens;
  o.scheduler.max_rows = flags.max_rows;
  o.backend_sampling = !flags.host_sampling;
  return o;
}

}  // namespace lmx::cli
