// `lmx batch`: many prompts from a JSONL file through the engine at once (continuous batching), each
// with its own sampling fields; results as JSONL in input order.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/printable.h"
#include "lmx/engine/engine.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/io/json_input.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/output_file.h"
#include "lmx/model/language_model.h"
#include "lmx/server/request_fields.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

namespace lmx::cli {
namespace {

struct BatchOptions {
  std::string model, input, output;
  ModelFlags flags;
  EngineFlags engine;
  int max_tokens = 256, threads = 0;
};

// One input line: its request, or why it has none.
struct Line {
  int64_t number = 0;  // 1-based line of the file
  std::optional<GenerationRequest> request;
  std::string error;
};

// The request of one JSON line: exactly one of "prompt", "messages", "prompt_ids", plus request fields over
// `defaults`.
GenerationRequest parse_line(const std::string& text, const GenerationRequest& defaults,
                             const Tokenizer* tokenizer) {
  const nlohmann::ordered_json body = parse_ordered_json(text, "the line");
  LMX_REQUIRE(InvalidArgument, body.is_object(), "the line must be a JSON object, got {}", body.type_name());
  const int given = static_cast<int>(body.contains("prompt")) + static_cast<int>(body.contains("messages")) +
                    static_cast<int>(body.contains("prompt_ids"));
  LMX_REQUIRE(InvalidArgument, given == 1,
              "the line needs exactly one of \"prompt\", \"messages\" and \"prompt_ids\"");
  GenerationRequest r = defaults;
  if (body.contains("prompt_ids")) {
    const nlohmann::ordered_json& ids = body.at("prompt_ids");
    LMX_REQUIRE(InvalidArgument, ids.is_array(), "\"prompt_ids\" must be an array of token ids");
    for (size_t i = 0; i < ids.size(); ++i) {
      LMX_REQUIRE(
          InvalidArgument,
          ids[i].is_number_integer() && ids[i].get<int64_t>() >= 0 && ids[i].get<int64_t>() <= INT32_MAX,
          "\"prompt_ids\"[{}] is not a token id", i);
      r.prompt.push_back(static_cast<int32_t>(ids[i].get<int64_t>()));
    }
  } else {
    LMX_REQUIRE(InvalidArgument, tokenizer != nullptr,
                "text prompts need a tokenizer (the model has no tokenizer.json)");
    if (body.contains("prompt")) {
      LMX_REQUIRE(InvalidArgument, body.at("prompt").is_string(), "\"prompt\" must be a string");
      r.prompt = tokenizer->encode(body.at("prompt").get<std::string>(), /*add_special_tokens=*/true);
    } else {
      LMX_REQUIRE(InvalidArgument, body.at("messages").is_array(),
                  "\"messages\" must be an array of messages");
      const std::string rendered = render_chat(*tokenizer, body.at("messages"), nullptr, true, std::nullopt);
      r.prompt = tokenizer->encode(rendered, /*add_special_tokens=*/false);  // the template wrote <bos>
    }
  }
  apply_request_fields(body, r);
  return r;
}

// What one choice produced.
struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
};

nlohmann::json choice_json(int64_t index, int choice, int n, const ChoiceResult& c, bool logprobs) {
  nlohmann::json out = {{"index", index}};
  if (n > 1) out["choice"] = choice;
  out["text"] = c.text;
  out["tokens"] = c.tokens;
  out["finish_reason"] = finish_reason_name(c.finish.value_or(FinishReason::kError));
  if (!c.error.empty()) out["error"] = c.error;
  if (logprobs) {
    nlohmann::json list = nlohmann::json::array();
    for (const TokenLogprob& t : c.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, lp] : t.top) top.push_back({{"token", id}, {"logprob", lp}});
      list.push_back({{"token", t.token}, {"logprob", t.logprob}, {"top_logprobs", top}});
    }
    out["logprobs"] = list;
  }
  return out;
}

int run_batch(const BatchOptions& o) {
  apply_threads(o.threads);
  require_directory(o.model, "model directory");
  const std::string input = read_input_file(o.input, InputKind::kUserData);
  std::optional<Tokenizer> tokenizer;
  if (path_exists(join_path(o.model, "tokenizer.json"))) tokenizer = Tokenizer::load(o.model);
  AtomicFileWriter writer(o.output);  // refuses a directory before the model loads
  auto model = load_language_model(o.model, o.flags);

  GenerationRequest defaults;
  const GenerationConfig generation = load_generation_config(o.model);
  defaults.sampling = sampling_from_generation_config(generation);
  defaults.max_tokens = o.max_tokens;
  defaults.stop_token_ids = end_token_ids(generation, *model, tokenizer ? &*tokenizer : nullptr);

  std::vector<Line> lines;
  for (size_t pos = 0, number = 1; pos < input.size(); ++number) {
    size_t end = input.find('\n', pos);
    if (end == std::string::npos) end = input.size();
    std::string text = input.substr(pos, end - pos);
    pos = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are not requests
    Line line{static_cast<int64_t>(number), std::nullopt, {}};
    try {
      line.request = parse_line(text, defaults, tokenizer ? &*tokenizer : nullptr);
    } catch (const Error& e) {
      line.error = e.what();
    }
    lines.push_back(std::move(line));
  }

  Engine engine(*model, tokenizer ? &*tokenizer : nullptr, engine_options(o.engine));
  std::vector<std::vector<ChoiceResult>> results(lines.size());
  std::vector<int> unfinished(lines.size(), 0);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].request) continue;
    const int n = lines[i].request->n;
    results[i].resize(static_cast<size_t>(n));
    try {
      engine.submit(*lines[i].request, [&, i](const RequestEvent& e) {
        ChoiceResult& c = results[i][static_cast<size_t>(e.choice)];
        c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
        c.text += e.text;
        c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
        if (e.finish) {
          c.finish = e.finish;
          c.error = e.error;
          --unfinished[i];
        }
      });
      unfinished[i] = n;
    } catch (const Error& e) {
      lines[i].error = e.what();
    }
  }

  // Lines go out in input order as soon as each is complete.
  size_t next = 0, failed = 0;
  int64_t generated = 0;
  auto write_ready = [&] {
    for (; next < lines.size() && unfinished[next] == 0; ++next) {
      const Line& line = lines[next];
      if (!line.error.empty()) {
        ++failed;
        std::fprintf(stderr, "lmx: line %lld: %s\n", static_cast<long long>(line.number),
                     printable(line.error).c_str());
        writer.write(nlohmann::json({{"index", next}, {"error", line.error}}).dump() + "\n");
        continue;
      }
      const int n = line.request->n;
      for (int c = 0; c < n; ++c) {
        const ChoiceResult& r = results[next][static_cast<size_t>(c)];
        generated += static_cast<int64_t>(r.tokens.size());
        if (r.finish == FinishReason::kError) ++failed;
        writer.write(choice_json(static_cast<int64_t>(next), c, n, r, line.request->top_logprobs >= 0)
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n");
      }
    }
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_progress = start;
  const bool progress = ::isatty(STDERR_FILENO);
  while (!engine.idle()) {
    engine.step();
    write_ready();
    if (progress && Clock::now() - last_progress > std::chrono::milliseconds(200)) {
      last_progress = Clock::now();
      const double s = std::chrono::duration<double>(last_progress - start).count();
      const auto done = static_cast<double>(next), total = static_cast<double>(lines.size());
      const int width = 30, filled = total > 0 ? static_cast<int>(width * done / total) : width;
      std::fprintf(stderr, "\r[%s%s] %zu/%zu lines, %lld tokens, %.1f tok/s ",
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), next,
                   lines.size(), static_cast<long long>(engine.stats().generated_tokens),
                   s > 0 ? static_cast<double>(engine.stats().generated_tokens) / s : 0.0);
    }
  }
  write_ready();
  writer.commit();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, "%sbatch: %zu lines (%zu failed), %lld tokens generated in %.2f s (%.1f tok/s)\n",
               progress ? "\n" : "", lines.size(), failed, static_cast<long long>(generated), seconds,
               seconds > 0 ? static_cast<double>(generated) / seconds : 0.0);
  return failed > 0 ? 1 : 0;
}

}  // namespace

Verb add_batch(CLI::App& app) {
  auto opt = std::make_shared<BatchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "batch",
      "Run many prompts from a JSONL file through the engine at once; write JSONL results in input order");
  cmd->add_option("--model", opt->model, "Model directory")->required()->check(non_empty());
  cmd->add_option(
         "--input", opt->input,
         "JSONL input: one object per line with \"prompt\" (text), \"messages\" (chat) or \"prompt_ids\", "
         "plus OpenAI sampling fields (max_tokens, temperature, top_p, top_k, min_p, seed, stop, n, "
         "presence_penalty, frequency_penalty, repetition_penalty, logit_bias, logprobs)")
      ->required()
      ->check(non_empty());
  cmd->add_option("--output", opt->output,
                  "JSONL output: {\"index\", \"text\", \"tokens\", \"finish_reason\"} per choice (\"choice\" "
                  "when n > 1), "
                  "{\"index\", \"error\"} for a bad line")
      ->required()
      ->check(non_empty());
  cmd->add_option("--max-tokens", opt->max_tokens, "Tokens per choice when a line gives no max_tokens")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  add_engine_options(cmd, opt->engine);
  add_model_options(cmd, opt->flags);
  return {cmd, [opt] { return run_batch(*opt); }};
}

}  // namespace lmx::cli
