// The lmx CLI's verbs: each registers a CLI11 subcommand and runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmx/engine/engine.h"
#include "lmx/engine/sampler.h"

namespace lmx {
class Tokenizer;
class LanguageModel;
struct GenerationConfig;
}  // namespace lmx

namespace lmx::cli {

// A registered verb: its run function is called when its subcommand was given.
struct Verb {
  CLI::App* command;
  std::function<int()> run;
};

Verb add_generate(CLI::App& app);
Verb add_logits(CLI::App& app);
Verb add_synth(CLI::App& app);
Verb add_bench(CLI::App& app);
Verb add_convert(CLI::App& app);
Verb add_tokenize(CLI::App& app);
Verb add_detokenize(CLI::App& app);
Verb add_template(CLI::App& app);
Verb add_chat(CLI::App& app);
Verb add_info(CLI::App& app);
Verb add_batch(CLI::App& app);
Verb add_kv_fit(CLI::App& app);
Verb add_serve(CLI::App& app);

// The flags every model-running verb takes: where it runs and how its KV cache is kept.
struct ModelFlags {
  std::string device = "auto";  // cpu | cuda | cuda:N | auto
  std::string kv_cache;         // a KvCodec spec; empty: the backend's default (f32 on the CPU, bf16 on CUDA)
  std::string kv_cache_sliding;  // the sliding-window layers' spec; empty: kv_cache's
  std::string kv_budget;         // bytes (suffixes K, M, G, T: powers of 1024); empty: the default share
  int kv_block_tokens = 0;       // 0: the default
  std::string prefix_cache;      // bytes as kv_budget, or "off"; empty: up to the whole KV budget
  int64_t kv_quant_start = 0;    // > 0: bf16 KV below this many tokens, then --kv-cache's codec
};
// Adds --device, --kv-cache, --kv-budget and --kv-block-tokens to a model-running verb.
void add_model_options(CLI::App* command, ModelFlags& flags);
// Loads a model directory on the device --device names, with the KV cache the flags ask for. "auto" picks
// cuda:0 when the CUDA backend is compiled in and a GPU is visible, else the CPU. Unknown names, missing
// GPUs, a build without CUDA and bad KV flags are errors naming the flag.
std::unique_ptr<LanguageModel> load_language_model(const std::string& dir, const ModelFlags& flags);
// "12.0 MiB": a byte count for people.
std::string format_bytes(size_t bytes);
// Parses "1073741824", "512M", "4G", "1.5GiB" (K, M, G, T: powers of 1024); InvalidArgument naming `flag`.
size_t parse_bytes(const std::string& text, const char* flag);

// The sampling flags (--temperature, --top-p, --top-k, --min-p, --repetition-penalty, --seed); each
// overrides a default only when given.
struct SamplingFlags {
  float temperature = 0, top_p = 0, min_p = 0, repetition_penalty = 0;
  int top_k = 0;
  uint64_t seed = 0;
  CLI::Option *temperature_flag = nullptr, *top_p_flag = nullptr, *top_k_flag = nullptr,
              *min_p_flag = nullptr, *repetition_penalty_flag = nullptr, *seed_flag = nullptr;
};
// Adds the sampling flags; `default_note` says where defaults come from ("generation_config.json").
void add_sampling_options(CLI::App* command, SamplingFlags& flags, const std::string& default_note);
// `defaults` with the given flags applied, validated (InvalidArgument naming `source` and the flags).
SamplingParams sampling_params(const SamplingFlags& flags, SamplingParams defaults,
                               const std::string& source);

// How the engine shapes its steps (--step-tokens, --prefill-chunk, --max-rows; defaults: SchedulerOptions')
// and where it samples (--host-sampling).
struct EngineFlags {
  int64_t step_tokens = SchedulerOptions{}.step_tokens;
  int64_t prefill_chunk_tokens = SchedulerOptions{}.prefill_chunk_tokens;
  int max_rows = SchedulerOptions{}.max_rows;
  bool host_sampling = false;
};
void add_engine_options(CLI::App* command, EngineFlags& flags);
EngineOptions engine_options(const EngineFlags& flags);

// Every end token a model directory names, sorted and unique: generation_config.json's eos_token_id
// (`generation`), config.json's, and the tokenizer's EOS when given (Gemma 4: <eos> and <turn|>). What chat
// and batch stop at.
std::vector<int32_t> end_token_ids(const GenerationConfig& generation, const LanguageModel& model,
                                   const Tokenizer* tokenizer);

// Parses "2,105,7" into token ids; throws InvalidArgument naming the bad item.
std::vector<int32_t> parse_ids(const std::string& csv);
// The bundled demo model directory (models/demo beside the working directory, the binary or the
// source tree); InvalidArgument when none exists.
std::string default_model_dir();
// `model` when given, else default_model_dir(). (--model "" is refused by non_empty().)
std::string model_or_default(const std::string& model);
// Applies --threads (0 = all cores).
void apply_threads(int threads);
// Fixes the tuning override file (--tuning PATH; "" leaves it to LMX_TUNING) and checks it before any model
// loads: the CPU table and, in a CUDA build, the file's cuda section (InvalidArgument naming the file and
// key).
void load_tuning(const std::string& path);

// The model's context length in tokens (ModelDescription::context_length: config.json's
// max_position_embeddings; Gemma 4 takes transformers' 131072 when the key is absent); 0 when a
// family does not know it. The one place the CLI reads it.
int64_t context_length(const LanguageModel& model);
// Throws InvalidArgument naming `what` ("the prompt (12 tokens) and --max-tokens 30") and the
// model's context length when `tokens` positions do not fit in it (no check when it is unknown).
// Call before any work.
void require_within_context(const LanguageModel& model, int64_t tokens, std::string_view what);

// A CLI11 check that refuses an empty value (--model "", --out ""), for every path flag.
const CLI::Validator& non_empty();

// Reads the text layer's files of a model directory as the verbs that use them would (tokenizer,
// tokenizer config, chat template parsed) and its generation_config.json; throws their error.
// Files that are absent are fine.
void check_text_files(const std::string& dir);

}  // namespace lmx::cli
