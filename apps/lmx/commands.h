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

namespace lmx {
class Tokenizer;
class LanguageModel;
}

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

// Adds --device (cpu | cuda | cuda:N | auto; default auto) to a model-running verb.
void add_device_option(CLI::App* command, std::string& device);
// Loads a model directory on a device named as --device takes it. "auto" picks cuda:0 when the CUDA
// backend is compiled in and a GPU is visible, else the CPU. Unknown names, missing GPUs and a build
// without CUDA are errors naming the device.
std::unique_ptr<LanguageModel> load_language_model(const std::string& dir, const std::string& device);

// Parses "2,105,7" into token ids; throws InvalidArgument naming the bad item.
std::vector<int32_t> parse_ids(const std::string& csv);
// Renders messages through the tokenizer's chat template with its BOS/EOS strings.
std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        std::optional<bool> enable_thinking);
// The bundled demo model directory (models/demo beside the working directory, the binary or the
// source tree); InvalidArgument when none exists.
std::string default_model_dir();
// `model` when given, else default_model_dir(). (--model "" is refused by non_empty().)
std::string model_or_default(const std::string& model);
// Applies --threads (0 = all cores).
void apply_threads(int threads);

// The model's context length in tokens (max_position_embeddings). The one place the CLI reads it.
int64_t context_length(const LanguageModel& model);
// Throws InvalidArgument naming `what` ("the prompt (12 tokens) and --max-tokens 30") and the
// model's context length when `tokens` positions do not fit in it. Call before any work.
void require_within_context(const LanguageModel& model, int64_t tokens, std::string_view what);

// A CLI11 check that refuses an empty value (--model "", --out ""), for every path flag.
const CLI::Validator& non_empty();

// Reads the text layer's files of a model directory as the verbs that use them would (tokenizer,
// tokenizer config, chat template parsed) and its generation_config.json; throws their error.
// Files that are absent are fine.
void check_text_files(const std::string& dir);

}  // namespace lmx::cli
