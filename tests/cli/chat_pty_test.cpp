// `lmx chat` driven through a pseudo-terminal with the demo model: multi-turn answers in English,
// prefix reuse, Ctrl-C stopping an answer without leaving, Ctrl-C / EOF / /quit at the prompt, and
// errors for bad flags.
#include "cli/run_lmx.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace lmx {
namespace {

using Clock = std::chrono::steady_clock;

// A child process whose stdin, stdout and stderr are the slave side of a new pseudo-terminal (its
// controlling terminal, so \x03 written to the master sends it SIGINT). Killed when destroyed.
class PtyProcess {
 public:
  explicit PtyProcess(const std::vector<std::string>& argv) {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) return;
    const char* slave_name = ptsname(master_);
    if (!slave_name) return;
    std::string slave_path = slave_name;
    pid_ = fork();
    if (pid_ == 0) {
      setsid();
      int slave = open(slave_path.c_str(), O_RDWR);
      if (slave < 0) _exit(126);
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
      if (slave > 2) close(slave);
      close(master_);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~PtyProcess() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  bool started() const { return pid_ > 0; }
  bool running() {
    if (pid_ <= 0 || status_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = status;
      return false;
    }
    return true;
  }

  void send(const std::string& text) {
    ASSERT_EQ(write(master_, text.data(), text.size()), (ssize_t)text.size());
  }

  // Reads until `done(output())` holds; false at the deadline or when the child closed the terminal.
  template <typename Pred>
  bool read_until(Pred done, Clock::time_point deadline) {
    while (!done(output_)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd fd{master_, POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(std::min<long long>(left, 100))) <= 0) continue;
      std::array<char, 4096> buffer{};
      ssize_t n = read(master_, buffer.data(), buffer.size());
      if (n <= 0) return done(output_);  // EIO: the child closed the slave side
      output_.append(buffer.data(), static_cast<size_t>(n));
    }
    return true;
  }

  // The exit code (128 + signal when killed), or nullopt at the deadline (the child is then killed).
  std::optional<int> wait_exit(Clock::time_point deadline) {
    while (running()) {
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        status_ = -1;
        return std::nullopt;
      }
      std::array<char, 4096> buffer{};  // keep draining so the child never blocks on a full terminal
      pollfd fd{master_, POLLIN, 0};
      if (poll(&fd, 1, 50) > 0) {
        ssize_t n = read(master_, buffer.data(), buffer.size());
        if (n > 0) output_.append(buffer.data(), static_cast<size_t>(n));
      }
    }
    if (!status_ || *status_ < 0) return std::nullopt;
    return WIFEXITED(*status_) ? WEXITSTATUS(*status_) : 128 + WTERMSIG(*status_);
  }

  const std::string& output() const { return output_; }

 private:
  int master_ = -1;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string output_;
};

std::vector<std::string> chat_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {std::string(LMX_BINARY_DIR) + "/lmx",
                                   "chat",
                                   "--model",
                                   test::source_path("models/demo"),
                                   "--temperature",
                                   "0",
                                   "--stats"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Whether the output ends with the prompt.
bool at_prompt(const std::string& out) {
  return out.size() >= 2 && out.compare(out.size() - 2, 2, "> ") == 0;
}

// Whether, after `from`, the stats line of an answer and the next prompt arrived.
auto answered_after(size_t from) {
  return [from](const std::string& out) {
    size_t stats = out.find("\n[prompt ", from);
    return stats != std::string::npos && out.find("]\r\n> ", stats) != std::string::npos && at_prompt(out);
  };
}

struct Answer {
  std::string text;  // what was streamed between the echoed user line and the stats line
  long long prompt_tokens = -1, reused_tokens = -1, answer_tokens = -1;
  std::string finish;
};

// Parses the turn that starts at the echo of `user_line` (searched from `from`).
Answer parse_answer(const std::string& out, const std::string& user_line, size_t from) {
  Answer a;
  size_t echo = out.find(user_line + "\r\n", from);
  if (echo == std::string::npos) return a;
  size_t begin = echo + user_line.size() + 2;
  size_t stats = out.find("[prompt ", begin);
  if (stats == std::string::npos) return a;
  a.text = out.substr(begin, stats - begin);
  std::smatch m;
  std::string line = out.substr(stats, out.find(']', stats) + 1 - stats);
  if (std::regex_search(
          line, m,
          std::regex(
              R"(\[prompt (\d+) tokens, (\d+) reused, [\d.]+ tok/s; answer (\d+) tokens, [\d.]+ tok/s; (\w+); KV [\d.]+ [KMG]?i?B\])"))) {
    a.prompt_tokens = std::stoll(m[1]);
    a.reused_tokens = std::stoll(m[2]);
    a.answer_tokens = std::stoll(m[3]);
    a.finish = m[4];
  }
  return a;
}

// Readable English rather than noise: mostly letters and spaces, with at least 3 words of ≥ 3 letters.
void expect_english(const std::string& text) {
  size_t letters_or_spaces = 0, chars = 0, long_words = 0, run = 0;
  for (char c : text + " ") {
    if (c == '\r' || c == '\n') c = ' ';
    ++chars;
    bool letter = std::isalpha(static_cast<unsigned char>(c));
    letters_or_spaces += letter || c == ' ';
    if (letter) {
      ++run;
    } else {
      long_words += run >= 3;
      run = 0;
    }
  }
  EXPECT_GE(letters_or_spaces, chars * 6 / 10) << "answer: " << text;
  EXPECT_GE(long_words, 3u) << "answer: " << text;
}

TEST(ChatPty, TwoTurnsThenQuit) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  PtyProcess chat(chat_args({"--max-tokens", "24"}));
  ASSERT_TRUE(chat.started());
  ASSERT_TRUE(chat.read_until(at_prompt, deadline)) << chat.output();

  size_t from = chat.output().size();
  chat.send("Hello, who are you?\n");
  ASSERT_TRUE(chat.read_until(answered_after(from), deadline)) << chat.output();
  Answer first = parse_answer(chat.output(), "Hello, who are you?", from);
  expect_english(first.text);
  EXPECT_GT(first.answer_tokens, 0);
  EXPECT_LE(first.answer_tokens, 24);
  EXPECT_EQ(first.reused_tokens, 0);

  from = chat.output().size();
  chat.send("Tell me a fortune.\n");
  ASSERT_TRUE(chat.read_until(answered_after(from), deadline)) << chat.output();
  Answer second = parse_answer(chat.output(), "Tell me a fortune.", from);
  expect_english(second.text);
  // The second prompt extends the first turn: its KV is reused.
  EXPECT_GT(second.reused_tokens, first.prompt_tokens) << chat.output();
  EXPECT_GT(second.prompt_tokens, second.reused_tokens);

  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(deadline), 0) << chat.output();
}

TEST(ChatPty, CtrlCStopsTheAnswerAndKeepsTheSession) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  PtyProcess chat(chat_args({"--max-tokens", "400", "--ignore-eos"}));
  ASSERT_TRUE(chat.started());
  ASSERT_TRUE(chat.read_until(at_prompt, deadline)) << chat.output();

  size_t from = chat.output().size();
  const std::string question = "Tell me a long story about the sea.";
  chat.send(question + "\n");
  // Wait until the answer is streaming, then press Ctrl-C.
  ASSERT_TRUE(chat.read_until(
      [&](const std::string& out) {
        size_t echo = out.find(question + "\r\n", from);
        return echo != std::string::npos && out.size() > echo + question.size() + 2 + 8;
      },
      deadline))
      << chat.output();
  chat.send("\x03");
  ASSERT_TRUE(chat.read_until(answered_after(from), deadline)) << chat.output();
  Answer stopped = parse_answer(chat.output(), question, from);
  EXPECT_EQ(stopped.finish, "stopped") << chat.output();
  EXPECT_LT(stopped.answer_tokens, 400);
  EXPECT_TRUE(chat.running());

  // The stopped answer stays in the history: the next prompt reuses the first turn's KV.
  from = chat.output().size();
  chat.send("Hello\n");
  ASSERT_TRUE(chat.read_until(
      [&](const std::string& out) {
        size_t echo = out.find("Hello\r\n", from);
        return echo != std::string::npos && out.size() > echo + 7 + 8;
      },
      deadline))
      << chat.output();
  chat.send("\x03");
  ASSERT_TRUE(chat.read_until(answered_after(from), deadline)) << chat.output();
  Answer next = parse_answer(chat.output(), "Hello", from);
  // (Not necessarily all of it: the template trims the partial answer, which may end in a space.)
  EXPECT_GT(next.reused_tokens, stopped.prompt_tokens) << chat.output();

  from = chat.output().size();
  chat.send("/reset\n");
  ASSERT_TRUE(chat.read_until(
      [&](const std::string& out) {
        return out.find("[conversation cleared]", from) != std::string::npos && at_prompt(out);
      },
      deadline))
      << chat.output();
  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(deadline), 0) << chat.output();
}

TEST(ChatPty, CtrlCOrEofAtThePromptExits) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  {
    PtyProcess chat(chat_args({}));
    ASSERT_TRUE(chat.read_until(at_prompt, deadline)) << chat.output();
    chat.send("\x03");
    EXPECT_EQ(chat.wait_exit(deadline), 0) << chat.output();
  }
  {
    PtyProcess chat(chat_args({}));
    ASSERT_TRUE(chat.read_until(at_prompt, deadline)) << chat.output();
    chat.send("\x04");  // Ctrl-D: EOF on a terminal
    EXPECT_EQ(chat.wait_exit(deadline), 0) << chat.output();
  }
}

using PipeResult = test::RunResult;

// Runs `lmx chat <args>` with `input` as stdin (a file, not a terminal), stdout and stderr together.
PipeResult run_piped(const std::string& args, const std::string& input) {
  test::TempDir dir;
  std::ofstream(dir.file("input.txt")) << input;
  return test::run_lmx("chat " + args + " < " + dir.file("input.txt"));
}

TEST(ChatPipe, AnswersEachLineWithoutPromptAndExitsAtEof) {
  const std::string model = " --model " + test::source_path("models/demo");
  PipeResult r = run_piped(model + " --temperature 0 --max-tokens 16",
                           "Hello, who are you?\n/reset\nTell me a fortune.\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("> "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[conversation cleared]"), std::string::npos) << r.output;
  expect_english(r.output);
  // The same seed gives the same sampled answer.
  PipeResult a = run_piped(model + " --seed 7 --max-tokens 16", "Tell me a fortune.\n");
  PipeResult b = run_piped(model + " --seed 7 --max-tokens 16", "Tell me a fortune.\n");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
}

TEST(ChatPipe, BadFlagsAndModelGiveClearErrors) {
  const std::string model = " --model " + test::source_path("models/demo");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {model + " --top-p 0", "top_p"},
      {model + " --min-p 1", "min_p"},
      {model + " --temperature -1", "--temperature"},
      {model + " --top-k -2", "--top-k"},
      {model + " --repetition-penalty 0", "repetition_penalty"},
      {model + " --max-tokens 0", "--max-tokens"},
      {" --model /nonexistent/model", "/nonexistent/model"},
      {" --model " + test::source_path("tests/data/models/tiny-e2b"), "tokenizer.json"},
  };
  for (const auto& [args, expected] : cases) {
    PipeResult r = run_piped(args, "hi\n");
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(expected), std::string::npos) << args << "\n" << r.output;
  }
  // A model directory whose tokenizer has no chat template.
  test::TempDir dir;
  for (const char* file : {"config.json", "tokenizer.json", "generation_config.json"})
    test::copy_path(test::source_path("models/demo/") + file, dir.file(file));
  PipeResult r = run_piped(" --model " + dir.path(), "hi\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("has no chat template"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace lmx
