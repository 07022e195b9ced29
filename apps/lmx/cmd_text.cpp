// `lmx tokenize`, `lmx detokenize`, `lmx template`: the text layer on a model directory's files.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/io/input_file.h"
#include "lmx/io/json_input.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace lmx::cli {
namespace {

// The JSON array in the file a flag names (messages, tools), parsed with the bounds of every JSON input.
nlohmann::ordered_json read_json_array(const std::string& path, const char* flag) {
  const std::string source = fmt::format("{} file {}", flag, path);
  nlohmann::ordered_json value = parse_ordered_json(read_input_file(path, InputKind::kUserData), source);
  LMX_REQUIRE(InvalidArgument, value.is_array(), "{}: must hold a JSON array, got {}", source,
              value.type_name());
  return value;
}

}  // namespace

Verb add_tokenize(CLI::App& app) {
  struct Options {
    std::string model, text, text_file;
    bool no_special = false, json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text with the model's tokenizer");
  cmd->add_option("--model", opt->model, "Directory with tokenizer.json (+ tokenizer_config.json)")
      ->required()
      ->check(non_empty());
  auto* text = cmd->add_option("--text", opt->text, "Text to encode");
  auto* file =
      cmd->add_option("--text-file", opt->text_file, "File whose bytes are encoded")->check(non_empty());
  text->excludes(file);
  cmd->add_flag("--no-special", opt->no_special,
                "Do not add special tokens (BOS/EOS from the post-processor)");
  cmd->add_flag("--json", opt->json, "Print {\"ids\": [...]}");
  return {cmd, [opt, text, file] {
            if (text->count() == 0 && file->count() == 0)
              throw InvalidArgument("tokenize needs --text or --text-file");
            Tokenizer tokenizer = Tokenizer::load(opt->model);
            std::string input =
                file->count() ? read_input_file(opt->text_file, InputKind::kUserData) : opt->text;
            std::vector<int32_t> ids = tokenizer.encode(input, !opt->no_special);
            if (opt->json) {
              std::printf("%s\n", nlohmann::json({{"ids", ids}}).dump().c_str());
            } else {
              std::string csv;
              for (int32_t id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id);
              std::printf("%s\n", csv.c_str());
            }
            return 0;
          }};
}

Verb add_detokenize(CLI::App& app) {
  struct Options {
    std::string model, ids;
    bool skip_special = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Decode token ids to text");
  cmd->add_option("--model", opt->model, "Directory with tokenizer.json")->required()->check(non_empty());
  cmd->add_option("--ids", opt->ids, "Comma-separated token ids")->required();
  cmd->add_flag("--skip-special", opt->skip_special, "Leave special tokens out of the text");
  return {cmd, [opt] {
            Tokenizer tokenizer = Tokenizer::load(opt->model);
            std::vector<int32_t> ids = opt->ids.empty() ? std::vector<int32_t>{} : parse_ids(opt->ids);
            std::string text = tokenizer.decode(ids, opt->skip_special);
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fputc('\n', stdout);
            return 0;
          }};
}

Verb add_template(CLI::App& app) {
  struct Options {
    std::string model, messages, tools;
    bool no_generation_prompt = false, enable_thinking = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("template", "Render messages through the model's chat template");
  cmd->add_option("--model", opt->model, "Directory with tokenizer_config.json or chat_template.jinja")
      ->required()
      ->check(non_empty());
  cmd->add_option("--messages", opt->messages, "JSON file: [{\"role\": ..., \"content\": ...}, ...]")
      ->required()
      ->check(non_empty());
  cmd->add_option("--tools", opt->tools, "JSON file: a list of tool schemas")->check(non_empty());
  cmd->add_flag("--no-generation-prompt", opt->no_generation_prompt,
                "Do not open the model's turn at the end");
  cmd->add_flag("--enable-thinking", opt->enable_thinking, "Pass enable_thinking=true to the template");
  return {cmd, [opt] {
            Tokenizer tokenizer = Tokenizer::load(opt->model);
            nlohmann::ordered_json messages = read_json_array(opt->messages, "--messages");
            nlohmann::ordered_json tools =
                opt->tools.empty() ? nlohmann::ordered_json(nullptr) : read_json_array(opt->tools, "--tools");
            std::optional<bool> thinking;
            if (opt->enable_thinking) thinking = true;
            std::string prompt =
                render_chat(tokenizer, messages, tools, !opt->no_generation_prompt, thinking);
            std::fwrite(prompt.data(), 1, prompt.size(), stdout);  // exactly the rendered bytes
            return 0;
          }};
}

}  // namespace lmx::cli
