// `lmx chat`: an interactive terminal chat — multi-turn history through the model's chat template,
// sampled answers streamed as they are generated, KV reused across turns, Ctrl-C stops an answer.
#include "commands.h"

#include "lmx/core/error.h"
#include "lmx/core/printable.h"
#include "lmx/engine/chat_session.h"
#include "lmx/engine/sampler.h"
#include "lmx/io/directory.h"
#include "lmx/io/model_dir.h"
#include "lmx/model/language_model.h"
#include "lmx/text/chat_template.h"
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
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
  float temperature = 0, top_p = 0, min_p = 0, repetition_penalty = 0;
  int top_k = 0, max_tokens = 512, threads = 0;
  uint64_t seed = 0;
  bool ignore_eos = false, stats = false;
  // Set when the flag was given (it overrides generation_config.json).
  CLI::Option *temperature_flag = nullptr, *top_p_flag = nullptr, *top_k_flag = nullptr,
              *min_p_flag = nullptr, *repetition_penalty_flag = nullptr, *seed_flag = nullptr;
};

// Prompts run in steps of at most this many tokens, bounding activation memory on long histories.
constexpr int kPrefillChunkTokens = 512;

// One conversation: its messages (the system message first, when given), its KV and its sampler.
class Chat {
 public:
  Chat(const ChatOptions& options, const std::string& dir)
      : options_(options),
        tokenizer_(Tokenizer::load(dir)),
        template_(require_template(tokenizer_, dir)),
        sampler_(sampling_params(options, dir)),
        model_(load_language_model(dir, options.flags)),
        session_(*model_, kPrefillChunkTokens) {
    // Stop at every end token the model directory names (Gemma 4: <eos> and <turn|>).
    stop_ids_ = load_generation_config(dir).eos_token_ids;
    for (int id : model_->description().eos_token_ids) stop_ids_.push_back(id);
    if (tokenizer_.eos_id()) stop_ids_.push_back(*tokenizer_.eos_id());
    std::sort(stop_ids_.begin(), stop_ids_.end());
    stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
    context_tokens_ = context_length(*model_);
    reset();
  }

  void reset() {
    messages_ = nlohmann::ordered_json::array();
    if (!options_.system.empty()) messages_.push_back({{"role", "system"}, {"content", options_.system}});
    session_.reset();
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
    TurnOptions turn;
    // fit_prompt leaves room for at least one token; the answer stops at the context's end.
    turn.max_new_tokens = options_.max_tokens;
    if (context_tokens_ > 0)
      turn.max_new_tokens = static_cast<int>(
          std::min<int64_t>(turn.max_new_tokens, context_tokens_ - static_cast<int64_t>(prompt.size())));
    if (!options_.ignore_eos) turn.stop_token_ids = stop_ids_;
    StreamingDetokenizer detokenizer(tokenizer_, /*skip_special_tokens=*/true);
    std::string text;
    turn.on_token = [&](int32_t token) {
      std::string piece = detokenizer.feed(token);
      write_out(piece);
      text += piece;
      return !g_interrupted;
    };
    g_interrupted = 0;
    TurnResult result;
    try {
      result = generate_turn(session_, sampler_, prompt, turn);
    } catch (const Error& e) {
      write_out("\n");
      report_turn_error(e);
      return false;
    }
    std::string tail = detokenizer.flush();
    text += tail;
    write_out(tail + "\n");
    messages.push_back({{"role", "assistant"}, {"content", text}});
    messages_ = std::move(messages);
    if (result.finish == FinishReason::kCancelled) std::fprintf(stderr, "[stopped]\n");
    if (options_.stats) print_stats(result);
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
    SamplingParams p = sampling_from_generation_config(load_generation_config(dir));
    if (o.temperature_flag->count()) p.temperature = o.temperature;
    if (o.top_p_flag->count()) p.top_p = o.top_p;
    if (o.top_k_flag->count()) p.top_k = o.top_k;
    if (o.min_p_flag->count()) p.min_p = o.min_p;
    if (o.repetition_penalty_flag->count()) p.repetition_penalty = o.repetition_penalty;
    if (o.seed_flag->count()) p.seed = o.seed;
    try {
      validate(p);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(
          fmt::format("{} (settings from {}/generation_config.json and the flags)", e.what(), dir));
    }
    return p;
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

  void print_stats(const TurnResult& r) const {
    const char* finish = r.finish == FinishReason::kStop     ? "stop"
                         : r.finish == FinishReason::kLength ? "length"
                                                             : "stopped";
    const double prefill_rate =
        r.prefill_seconds > 0 ? static_cast<double>(r.prompt_tokens - r.reused_tokens) / r.prefill_seconds
                              : 0;
    const double decode_rate = r.tokens.size() > 1 && r.decode_seconds > 0
                                   ? static_cast<double>(r.tokens.size() - 1) / r.decode_seconds
                                   : 0;
    std::fprintf(stderr,
                 "[prompt %lld tokens, %lld reused, %.1f tok/s; answer %zu tokens, %.1f tok/s; %s; KV %s]\n",
                 static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.reused_tokens),
                 prefill_rate, r.tokens.size(), decode_rate, finish, format_bytes(r.kv_bytes).c_str());
  }

  const ChatOptions& options_;
  Tokenizer tokenizer_;
  ChatTemplate template_;
  Sampler sampler_;
  std::unique_ptr<LanguageModel> model_;
  ChatSession session_;
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
  opt->temperature_flag =
      cmd->add_option("--temperature", opt->temperature,
                      "Sampling temperature, 0 = greedy (default: generation_config.json)")
          ->check(CLI::Range(0.0f, 100.0f));
  opt->top_p_flag = cmd->add_option("--top-p", opt->top_p, "Nucleus sampling mass in (0, 1], 1 = off")
                        ->check(CLI::Range(0.0f, 1.0f));
  opt->top_k_flag = cmd->add_option("--top-k", opt->top_k, "Keep the K most likely tokens, 0 = off")
                        ->check(CLI::Range(0, 1 << 30));
  opt->min_p_flag =
      cmd->add_option("--min-p", opt->min_p, "Keep tokens with p ≥ min_p · p_max, in [0, 1), 0 = off")
          ->check(CLI::Range(0.0f, 1.0f));
  opt->repetition_penalty_flag = cmd->add_option("--repetition-penalty", opt->repetition_penalty,
                                                 "Penalty > 0 on the last 20 tokens, 1 = off");
  opt->seed_flag = cmd->add_option("--seed", opt->seed, "Random seed (reproducible answers)");
  cmd->add_option("--max-tokens", opt->max_tokens, "Most tokens per answer")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", opt->threads, "Worker threads (0 = all cores)");
  add_model_options(cmd, opt->flags);
  cmd->add_flag("--ignore-eos", opt->ignore_eos, "Do not stop at end-of-turn tokens (tests, benchmarks)");
  cmd->add_flag("--stats", opt->stats,
                "Print prompt/answer token counts and speeds after each answer (stderr)");
  return {cmd, [opt] { return run_chat(*opt); }};
}

}  // namespace lmx::cli
