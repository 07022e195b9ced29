// The lmx CLI against hostile and careless input: special files, link loops, unreadable paths,
// deep nesting, contexts too long, outputs that cannot be written. Every case ends with one line
// "lmx: error: ..." naming what was wrong and a non-zero exit status, never a crash or a hang.
#include "cli/run_lmx.h"
#include "support/test_support.h"
#include "support/unprivileged.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace lmx {
namespace {

using test::run_lmx;
using test::RunResult;
using test::shell_quote;

std::string demo() {
  return test::source_path("models/demo");
}
std::string tiny(const std::string& name) {
  return test::source_path("tests/data/models/" + name);
}

// Every line of the output that starts with "lmx: error:" (the CLI's error lines).
std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < output.size()) {
    size_t end = output.find('\n', begin);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(begin, end - begin);
    if (line.rfind("lmx: error: ", 0) == 0) lines.push_back(line);
    begin = end + 1;
  }
  return lines;
}

// Expects exit status `status` and exactly one error line, which contains every needle.
void expect_failure(const RunResult& r, int status, const std::vector<std::string>& needles,
                    const std::string& what) {
  EXPECT_EQ(r.exit_code, status) << what << "\n" << r.output;
  const std::vector<std::string> lines = error_lines(r.output);
  ASSERT_EQ(lines.size(), 1u) << what << "\n" << r.output;
  for (const auto& needle : needles)
    EXPECT_NE(lines[0].find(needle), std::string::npos) << what << "\n" << lines[0];
}

// A copy of the demo model whose file `name` is replaced by what `make` puts at the path.
class HostileModelDir {
 public:
  explicit HostileModelDir(const std::string& name) : name_(name) {
    for (const char* file : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                             "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
      if (name_ != file) EXPECT_EQ(::symlink((demo() + "/" + file).c_str(), dir_.file(file).c_str()), 0);
  }
  std::string path() const { return dir_.path(); }
  std::string file() const { return dir_.file(name_); }

 private:
  test::TempDir dir_;
  std::string name_;
};

TEST(HardeningCli, SpecialFilesInAModelDirectoryAreRefusedWithoutBlocking) {
  test::TempDir scratch;
  test::write_file(scratch.file("messages.json"), R"([{"role": "user", "content": "hi"}])");
  const std::string messages = " --messages " + scratch.file("messages.json");
  struct Case {
    std::string file, kind, verb;
  };
  const std::vector<Case> cases = {
      {"model.safetensors", "fifo", "generate --prompt-ids 2,3 --max-tokens 1"},
      {"tokenizer.json", "fifo", "tokenize --text hi"},
      {"chat_template.jinja", "fifo", "template" + messages},
      {"config.json", "fifo", "bench --gen-tokens 1 --prompt-tokens 1"},
      {"chat_template.jinja", "/dev/zero", "template" + messages},
      {"config.json", "/dev/zero", "logits --prompt-ids 2 --out " + scratch.file("x.npy")},
      {"tokenizer_config.json", "loop", "template" + messages},
      {"chat_template.jinja", "loop", "template" + messages},
      {"generation_config.json", "dir", "generate --prompt-ids 2 --max-tokens 1"},
      {"model.safetensors", "dangling", "generate --prompt-ids 2 --max-tokens 1"},
  };
  for (const Case& c : cases) {
    HostileModelDir dir(c.file);
    if (c.kind == "fifo") ASSERT_EQ(::mkfifo(dir.file().c_str(), 0644), 0);
    if (c.kind == "/dev/zero") ASSERT_EQ(::symlink("/dev/zero", dir.file().c_str()), 0);
    if (c.kind == "loop") ASSERT_EQ(::symlink(dir.file().c_str(), dir.file().c_str()), 0);
    if (c.kind == "dir") ASSERT_EQ(::mkdir(dir.file().c_str(), 0755), 0);
    if (c.kind == "dangling") ASSERT_EQ(::symlink("/nonexistent/weights", dir.file().c_str()), 0);
    const std::string what = c.file + " as " + c.kind + ": " + c.verb;
    // `timeout` turns a hang into a failure instead of a stuck test.
    RunResult r =
        test::run_shell("timeout 60 " + test::lmx_binary() + " " + c.verb + " --model " + dir.path());
    const std::string reason = c.kind == "fifo"        ? "a FIFO, not a regular file"
                               : c.kind == "/dev/zero" ? "a character device"
                               : c.kind == "loop"      ? "Too many levels of symbolic links"
                               : c.kind == "dir"       ? "a directory, not a regular file"
                                                       : "symbolic link to a file that does not exist";
    expect_failure(r, 1, {dir.file(), reason}, what);
  }
}

TEST(HardeningCli, FlagFilesMustBeRegularFilesAndBoundedJson) {
  test::TempDir dir;
  test::write_file(dir.file("deep.json"), std::string(150000, '[') + std::string(150000, ']'));
  expect_failure(run_lmx("tokenize --model " + demo() + " --text-file " + dir.path()), 1,
                 {dir.path(), "a directory"}, "--text-file DIR");
  expect_failure(run_lmx("tokenize --model " + demo() + " --text-file /dev/zero"), 1, {"/dev/zero"},
                 "--text-file /dev/zero");
  expect_failure(run_lmx("template --model " + demo() + " --messages " + dir.file("deep.json")), 1,
                 {"--messages file", "deep.json", "nested deeper than 128 levels"}, "deep messages");
  expect_failure(run_lmx("synth --config " + dir.file("deep.json") + " --out " + dir.file("out")), 1,
                 {"deep.json", "nested deeper"}, "deep synth config");
  EXPECT_FALSE(test::exists(dir.file("out")));
}

TEST(HardeningCli, UsageErrorsAreOneLineWithStatusTwo) {
  expect_failure(run_lmx("generate --model '' --prompt-ids 2"), 2, {"--model", "empty"}, "--model ''");
  expect_failure(run_lmx("logits --model " + demo() + " --prompt-ids 2 --out ''"), 2, {"--out", "empty"},
                 "--out ''");
  expect_failure(run_lmx("generate --prompt-ids 2 --max-tokens -5"), 2, {"--max-tokens"}, "--max-tokens -5");
  expect_failure(run_lmx("generate --prompt-ids 2 --frobnicate"), 2, {"--frobnicate"}, "unknown flag");
  expect_failure(run_lmx("logits --prompt-ids 2"), 2, {"--model"}, "missing --model");
  expect_failure(run_lmx("synth --preset gemma4-e2b --layers -1 --out /tmp/never"), 1, {"cannot keep -1"},
                 "--layers -1");
  expect_failure(run_lmx("synth --preset gemma4-e2b --layers 0 --out /tmp/never"), 1, {"cannot keep 0"},
                 "--layers 0");
  EXPECT_EQ(run_lmx("--help").exit_code, 0);
  EXPECT_EQ(run_lmx("generate --help").exit_code, 0);
}

TEST(HardeningCli, ContextLengthIsEnforcedBeforeAnyWork) {
  // The demo model's context is 2048 tokens (config.json max_position_embeddings).
  std::string ids = "2";
  for (int i = 0; i < 2048; ++i) ids += ",5";
  expect_failure(run_lmx("generate --model " + demo() + " --prompt-ids 2,3 --max-tokens 3000"), 1,
                 {"--max-tokens 3000", "3002 positions", "context length of 2048 tokens"}, "generate");
  expect_failure(run_lmx("logits --model " + demo() + " --prompt-ids " + ids + " --out /tmp/never.npy"), 1,
                 {"the prompt (2049 tokens)", "context length of 2048"}, "logits");
  expect_failure(run_lmx("bench --model " + demo() + " --prompt-tokens 1000000 --gen-tokens 8"), 1,
                 {"--prompt-tokens 1000000", "context length of 2048"}, "bench");
  RunResult fits = run_lmx("generate --model " + demo() + " --prompt-ids 2,3 --max-tokens 2 --json");
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}

TEST(HardeningCli, BenchOnAVocabularyOfThreeTokens) {
  // bench draws prompt ids past the special tokens 0-2 when there are more; with three, from all.
  test::TempDir dir;
  nlohmann::json config = nlohmann::json::parse(test::read_file(tiny("tiny-31b") + "/config.json"));
  config["vocab_size"] = 3;
  test::write_file(dir.file("config.json"), config.dump());
  ASSERT_EQ(run_lmx("synth --config " + dir.file("config.json") + " --out " + dir.file("m")).exit_code, 0);
  RunResult r =
      run_lmx("bench --model " + dir.file("m") + " --prompt-tokens 4 --gen-tokens 1 --threads 1 --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(HardeningCli, ChatExitsNonZeroWhenATurnFailsAndNamesTheContext) {
  test::TempDir dir;
  std::string long_line;
  for (int i = 0; i < 3000; ++i) long_line += "word ";
  test::write_file(dir.file("input.txt"), long_line + "\n");
  RunResult r = run_lmx("chat --model " + demo() + " --max-tokens 4 < " + dir.file("input.txt"));
  expect_failure(r, 1, {"the message is too long", "context length is 2048 tokens"}, "chat");
  // A line without end (stdin from /dev/zero) is reported once and skipped; memory stays bounded.
  RunResult zeros = test::run_shell("head -c 9000000 /dev/zero | " + test::lmx_binary() + " chat --model " +
                                    demo() + " --max-tokens 2");
  expect_failure(zeros, 1, {"input line is longer than"}, "chat on /dev/zero");
  // A turn that works keeps the status at 0.
  test::write_file(dir.file("ok.txt"), "Hello\n");
  EXPECT_EQ(run_lmx("chat --model " + demo() + " --max-tokens 2 < " + dir.file("ok.txt")).exit_code, 0);
}

TEST(HardeningCli, ConvertAndSynthWriteWholeDirectoriesOnly) {
  test::TempDir dir;
  const std::string out = dir.file("out");
  ASSERT_EQ(::mkdir(out.c_str(), 0755), 0);
  test::write_file(out + "/keep.txt", "mine");
  const std::string convert = "convert --model " + tiny("tiny-31b") + " --quantize 4 --out " + out;
  expect_failure(run_lmx(convert), 1, {out, "is not empty", "--force"}, "convert into a non-empty directory");
  expect_failure(run_lmx("synth --preset gemma4-e2b --layers 1 --out " + out), 1, {"is not empty"}, "synth");
  EXPECT_EQ(test::read_file(out + "/keep.txt"), "mine");
  RunResult forced = run_lmx(convert + " --force");
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_FALSE(test::exists(out + "/keep.txt"));
  EXPECT_TRUE(test::exists(out + "/model.safetensors"));
  expect_failure(run_lmx("convert --model " + tiny("tiny-31b") + " --quantize 4 --out / --force"), 1,
                 {"--out /"}, "convert --out /");
  test::write_file(dir.file("file"), "x");
  expect_failure(run_lmx("synth --preset gemma4-e2b --layers 1 --out " + dir.file("file") + " --force"), 1,
                 {dir.file("file"), "not a directory"}, "synth --out FILE");
  // A source that does not load is not converted: nothing appears at --out.
  expect_failure(run_lmx("convert --model " + test::source_path("tests/data") + " --quantize 4 --out " +
                         dir.file("never")),
                 1, {"config.json"}, "convert of a directory without a model");
  EXPECT_FALSE(test::exists(dir.file("never")));
}

TEST(HardeningCli, ConvertChecksTheTextFilesItCopies) {
  test::TempDir dir;
  for (const char* file : {"config.json", "model.safetensors", "generation_config.json"})
    test::copy_path(demo() + "/" + file, dir.file(file));
  test::write_file(dir.file("tokenizer.json"), "{\"model\": ");
  expect_failure(run_lmx("convert --model " + dir.path() + " --quantize 4 --out " + dir.file("out")), 1,
                 {dir.file("tokenizer.json"), "invalid JSON"}, "convert with a broken tokenizer.json");
  EXPECT_FALSE(test::exists(dir.file("out")));
}

TEST(HardeningCli, HostileBytesInMessagesAreEscaped) {
  RunResult r = run_lmx("generate --model " + shell_quote("/nonexistent/\x1b[2J\xff") + " --prompt-ids 2");
  expect_failure(r, 1, {"/nonexistent/\\x1b[2J\\xff"}, "escaped model path");
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos);
  RunResult newline = run_lmx("detokenize --model " + demo() + " --ids " + shell_quote("1,\n2"));
  expect_failure(newline, 1, {"\\n2"}, "newline in an id list");
}

TEST(HardeningCli, OutputThatCannotBeWrittenFails) {
  // stdout on a full device: the answer was not delivered.
  RunResult r = test::run_shell(test::lmx_binary() + " tokenize --model " + demo() + " --text hi >/dev/full");
  expect_failure(r, 1, {"cannot write the output", "No space left on device"}, "stdout on /dev/full");
  test::TempDir dir;
  expect_failure(run_lmx("logits --model " + demo() + " --prompt-ids 2 --out " + dir.path()), 1,
                 {dir.path(), "is a directory"}, "logits --out DIR");
}

TEST(HardeningCli, UnreadablePathsNameThePathAndReason) {
  const auto prefix = test::unprivileged_shell_prefix(test::lmx_binary());
  if (!prefix)
    GTEST_SKIP() << test::unprivileged_skip_reason() << " (or the lmx binary is not reachable by it)";
  test::TempDir dir;
  dir.allow_other_users();
  const std::string model = dir.file("model");
  ASSERT_EQ(::mkdir(model.c_str(), 0755), 0);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                           "chat_template.jinja", "generation_config.json"})
    test::copy_path(demo() + "/" + file, model + "/" + file);
  const std::string lmx = *prefix + test::lmx_binary();

  ASSERT_EQ(::chmod(model.c_str(), 0), 0);
  expect_failure(test::run_shell(lmx + " generate --prompt-ids 2 --max-tokens 1 --model " + model), 1,
                 {model, "Permission denied"}, "unreadable model directory");
  ASSERT_EQ(::chmod(model.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((model + "/tokenizer_config.json").c_str(), 0), 0);
  expect_failure(test::run_shell(lmx + " tokenize --text hi --model " + model), 1,
                 {model + "/tokenizer_config.json", "Permission denied"}, "unreadable tokenizer_config.json");
  ASSERT_EQ(::chmod((model + "/tokenizer_config.json").c_str(), 0644), 0);
  ASSERT_EQ(::chmod((model + "/config.json").c_str(), 0), 0);
  expect_failure(test::run_shell(lmx + " bench --gen-tokens 1 --model " + model), 1,
                 {model + "/config.json", "Permission denied"}, "unreadable config.json");
  ASSERT_EQ(::chmod((model + "/config.json").c_str(), 0644), 0);
  const std::string readonly = dir.file("readonly");
  ASSERT_EQ(::mkdir(readonly.c_str(), 0555), 0);
  expect_failure(test::run_shell(lmx + " synth --preset gemma4-e2b --layers 1 --out " + readonly + "/out"), 1,
                 {readonly + "/out", "Permission denied"}, "synth into a read-only directory");
}

}  // namespace
}  // namespace lmx
