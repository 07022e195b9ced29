// `lmx chat`: an interactive terminal chat — multi-turn history through the model's chat template,
// sampled answers streamed as they are generated, KV reused across turns, Ctrl-C stops an answer.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/printable.h"
#include "lmx/engine/engine.h"
#include "lmx/engine/sampler.h"
#include "lmx/io/directory.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/language_model.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

namespace lmx::cli {
namespace {

// Set by SIGINT; read between tokens and when a read of the next line is interrupted.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) {
  g_interrupted = 1;
}

// Installs on_sigint without SA_RESTART, so a blocked read() returns EINTR.
void install_sigint_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGINT, &action, nullptr);
}

// Lines of stdin, read with read(2) so that SIGINT interrupts a wait for input. A line longer than
// kMaxLineBytes (stdin from /dev/zero, a binary file) is reported once and skipped, so memory
// stays bounded.
class LineReader {
 public:
  enum class Result { kLine, kEof, kInterrupted, kTooLong };
  static constexpr size_t kMaxLineBytes = size_t{4} << 20;

  // The next line without its '\n' (a last line without '\n' counts at EOF).
  Result next(std::string& line) {
    for (;;) {
      if (size_t newline = pending_.find('\n'); newline != std::string::npos) {
        line = pending_.substr(0, newline);
        pending_.erase(0, newline + 1);
        if (skipping_) {
          skipping_ = false;
          continue;  // the rest of a line already reported as too long
        }
        return Result::kLine;
      }
      if (pending_.size() > kMaxLineBytes) {
        pending_.clear();
        if (!skipping_) {
          skipping_ = true;
          return Result::kTooLong;
        }
      }
      if (g_interrupted) return Result::kInterrupted;
      char buffer[4096];
      ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (pending_.empty() || skipping_) return Result::kEof;
        line.swap(pending_);
        pending_.clear();
        return Result::kLine;
      }
      pending_.append(buffer, static_cast<size_t>(n));
    }
  }

 private:
  std::string pending_;
  bool skipping_ = false;  // inside a line that was too long, until its '\n'
};

std::string trim(const std::string& s) {
  const char* space = " \t\r\n";
  size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

void write_out(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// A turn's error, as main reports errors: one line, hostile bytes escaped.
void report_turn_error(const Error& e) {
  std::fprintf(stderr, "lmx: error: %s\n", printable(e.what()).c_str());
}

struct ChatOptions {
  std::string model, system;
  ModelFlags flags;
  SamplingFlags sampling;
  int max_tokens = 512, threads = 0;
  bool ignore_eos = false, stats = false;
};

// One conversation on the engine: its messages (the system message first, when given) and its sampling
// settings. Its KV stays in the model's prefix cache between turns, so a turn runs only what the template
// added (and what the cache evicted).
class Chat {
 public:
  Chat(const ChatOptions& options, const std::string& dir)
      : options_(options),
        tokenizer_(Tokenizer::load(dir)),
        template_(require_template(tokenizer_, dir)),
        sampling_(sampling_params(options, dir)),
        model_(load_language_model(dir, options.flags)),
        engine_(*model_, &tokenizer_) {
    stop_ids_ = end_token_ids(load_generation_config(dir), *model_, &tokenizer_);
    context_tokens_ = context_length(*model_);
    reset();
  }

  void reset() {
    messages_ = nlohmann::ordered_json::array();
    if (!options_.system.empty()) messages_.push_back({{"role", "system"}, {"content", options_.system}});
  }

  // Answers one user message, streaming the text to stdout; the answer (partial when stopped by
  // Ctrl-C) joins the history. Errors of this turn are reported and leave the history unchanged;
  // returns false for them.
  bool answer(const std::string& user_text) {
    nlohmann::ordered_json messages = messages_;
    messages.push_back({{"role", "user"}, {"content", user_text}});
    std::vector<int32_t> prompt;
    try {
      prompt = fit_prompt(messages);
    } catch (const Error& e) {
      report_turn_error(e);
      return false;
    }
    GenerationRequest request;
    request.prompt = prompt;
    request.sampling = sampling_;
    // fit_prompt leaves room for at least one token; the answer stops at the context's end.
    request.max_tokens = options_.max_tokens;
    if (context_tokens_ > 0)
      request.max_tokens = static_cast<int>(
          std::min<int64_t>(request.max_tokens, context_tokens_ - static_cast<int64_t>(prompt.size())));
    if (!options_.ignore_eos) request.stop_token_ids = stop_ids_;
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    TurnStats stats;
    std::string text, error;
    RequestId id = 0;
    bool done = false;
    g_interrupted = 0;
    try {
      id = engine_.submit(std::move(request), [&](const RequestEvent& event) {
        if (!event.tokens.empty() && stats.answer_tokens == 0)
          stats.first_token_s = std::chrono::duration<double>(Clock::now() - start).count();
        stats.answer_tokens = event.generated_tokens;
        stats.prompt_tokens = event.prompt_tokens;
        stats.reused_tokens = event.reused_tokens;
        write_out(event.text);
        text += event.text;
        if (event.finish) {
          done = true;
          stats.finish = *event.finish;
          error = event.error;
        } else if (g_interrupted) {
          engine_.cancel(id);
        }
      });
      while (!done) engine_.step();
    } catch (const Error& e) {
      write_out("\n");
      report_turn_error(e);
      return false;
    }
    write_out("\n");
    if (stats.finish == FinishReason::kError) {
      report_turn_error(Error(error));
      return false;
    }
    stats.total_s = std::chrono::duration<double>(Clock::now() - start).count();
    stats.kv_bytes = model_->kv_cache().prefix_stats().cached_bytes;
    messages.push_back({{"role", "assistant"}, {"content", text}});
    messages_ = std::move(messages);
    if (stats.finish == FinishReason::kCancelled) std::fprintf(stderr, "[stopped]\n");
    if (options_.stats) print_stats(stats);
    g_interrupted = 0;
    return true;
  }

 private:
  static ChatTemplate require_template(const Tokenizer& tokenizer, const std::string& dir) {
    LMX_REQUIRE(InvalidArgument, !tokenizer.chat_template().empty(),
                "{} has no chat template (chat_template.jinja or tokenizer_config.json)", dir);
    return ChatTemplate(tokenizer.chat_template());
  }

  static SamplingParams sampling_params(const ChatOptions& o, const std::string& dir) {
    return cli::sampling_params(o.sampling, sampling_from_generation_config(load_generation_config(dir)),
                                dir + "/generation_config.json");
  }

  // The prompt of `messages`, after dropping their oldest user/assistant exchanges while it would
  // not leave room for one generated token in the model's context. Throws when the last message
  // alone is too long, or for a template error.
  std::vector<int32_t> fit_prompt(nlohmann::ordered_json& messages) const {
    const size_t first_turn = options_.system.empty() ? 0 : 1;
    for (;;) {
      ChatTemplateInputs inputs;
      inputs.messages = messages;
      inputs.add_generation_prompt = true;
      inputs.bos_token = tokenizer_.bos_token();
      inputs.eos_token = tokenizer_.eos_token();
      std::vector<int32_t> ids = tokenizer_.encode(template_.render(inputs), /*add_special_tokens=*/false);
      LMX_REQUIRE(InvalidArgument, !ids.empty(), "the chat template rendered an empty prompt");
      if (context_tokens_ <= 0 || static_cast<int64_t>(ids.size()) < context_tokens_) return ids;
      LMX_REQUIRE(
          InvalidArgument, messages.size() >= first_turn + 3,
          "the message is too long: its prompt has {} tokens and the model's context length is {} tokens",
          ids.size(), context_tokens_);
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first_turn),
                     messages.begin() + static_cast<std::ptrdiff_t>(first_turn + 2));
    }
  }

  // What one answer took: tokens, times from the submission, how it ended.
  struct TurnStats {
    int64_t prompt_tokens = 0, reused_tokens = 0, answer_tokens = 0;
    double first_token_s = 0, total_s = 0;
    FinishReason finish = FinishReason::kLength;
    size_t kv_bytes = 0;
  };

  static void print_stats(const TurnStats& r) {
    const char* finish = r.finish == FinishReason::kStop     ? "stop"
                         : r.finish == FinishReason::kLength ? "length"
                                                             : "stopped";
    const double prefill_rate =
        r.first_token_s > 0 ? static_cast<double>(r.prompt_tokens - r.reused_tokens) / r.first_token_s : 0;
    const double decode_s = r.total_s - r.first_token_s;
    const double decode_rate =
        r.answer_tokens > 1 && decode_s > 0 ? static_cast<double>(r.answer_tokens - 1) / decode_s : 0;
    std::fprintf(
        stderr, "[prompt %lld tokens, %lld reused, %.1f tok/s; answer %lld tokens, %.1f tok/s; %s; KV %s]\n",
        static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.reused_tokens), prefill_rate,
        static_cast<long long>(r.answer_tokens), decode_rate, finish, format_bytes(r.kv_bytes).c_str());
  }

  const ChatOptions& options_;
  Tokenizer tokenizer_;
  ChatTemplate template_;
  SamplingParams sampling_;
  std::unique_ptr<LanguageModel> model_;
  Engine engine_;
  std::vector<int32_t> stop_ids_;
  int64_t context_tokens_ = 0;  // the model's context length; 0 = unknown
  nlohmann::ordered_json messages_;
};

int run_chat(const ChatOptions& options) {
  apply_threads(options.threads);
  const std::string dir = model_or_default(options.model);
  require_directory(dir, "model directory");
  Chat chat(options, dir);
  const bool interactive = ::isatty(STDIN_FILENO);
  if (interactive)
    std::fprintf(stderr,
                 "lmx chat with %s — /reset starts over, /quit or Ctrl-D leaves, Ctrl-C stops an answer\n",
                 printable(dir).c_str());
  install_sigint_handler();
  LineReader reader;
  std::string line;
  // Exit status 1 when any turn failed: its answer, the requested work, did not happen.
  int status = 0;
  for (;;) {
    if (interactive) write_out("> ");
    LineReader::Result got = reader.next(line);
    if (got == LineReader::Result::kTooLong) {
      std::fprintf(stderr, "lmx: error: an input line is longer than %zu bytes; it is skipped\n",
                   LineReader::kMaxLineBytes);
      status = 1;
      continue;
    }
    if (got != LineReader::Result::kLine) {
      if (interactive) write_out("\n");
      return status;  // EOF or Ctrl-C at the prompt
    }
    const std::string text = trim(line);
    if (text.empty()) continue;
    if (text == "/quit" || text == "/exit") return status;
    if (text == "/reset") {
      chat.reset();
      std::fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    if (text[0] == '/' && text.find(' ') == std::string::npos) {
      std::fprintf(stderr, "unknown command %s (commands: /reset, /quit)\n", printable(text).c_str());
      continue;
    }
    if (!chat.answer(text)) status = 1;
  }
}

}  // namespace

Verb add_chat(CLI::App& app) {
  auto opt = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat in the terminal (default model: models/demo)");
  cmd->add_option("--model", opt->model, "Model directory (default: models/demo of the lmx source tree)")
      ->check(non_empty());
  cmd->add_option("--system", opt->system, "System message that opens the conversation");
  add_sampling_options(cmd, opt->sampling, "generation_config.json");
  cmd->add_option("--max-tokens", opt->max_tokens, "Most tokens per answer")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  add_model_options(cmd, opt->flags);
  cmd->add_flag("--ignore-eos", opt->ignore_eos, "Do not stop at end-of-turn tokens (tests, benchmarks)");
  cmd->add_flag("--stats", opt->stats,
                "Print prompt/answer token counts and speeds after each answer (stderr)");
  return {cmd, [opt] { return run_chat(*opt); }};
}

}  // namespace lmx::cli
