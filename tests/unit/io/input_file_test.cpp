// InputFile, the one way lmx opens files it reads: regular files only, never blocking, size caps,
// and errors naming the path and the OS reason.
#include "lmx/io/input_file.h"
#include "io_test_helpers.h"
#include "lmx/io/mapped_file.h"
#include "support/unprivileged.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

namespace lmx {
namespace {

using test::expect_error;

class InputFileTest : public ::testing::Test {
 protected:
  std::string put(const std::string& name, const std::string& bytes) {
    test::write_file(dir_.file(name), bytes);
    return dir_.file(name);
  }
  std::string link(const std::string& name, const std::string& target) {
    EXPECT_EQ(::symlink(target.c_str(), dir_.file(name).c_str()), 0);
    return dir_.file(name);
  }
  test::TempDir dir_;
};

TEST_F(InputFileTest, ReadsRegularFilesAndLinksToThem) {
  const std::string path = put("a.json", "{\"x\": 1}");
  EXPECT_EQ(read_input_file(path, InputKind::kConfig), "{\"x\": 1}");
  EXPECT_EQ(read_input_file(link("b.json", path), InputKind::kConfig), "{\"x\": 1}");
  EXPECT_EQ(read_input_file(put("empty", ""), InputKind::kTemplate), "");
  EXPECT_EQ(*read_input_file_if_exists(path, InputKind::kConfig), "{\"x\": 1}");
  EXPECT_FALSE(read_input_file_if_exists(dir_.file("absent"), InputKind::kConfig).has_value());
}

TEST_F(InputFileTest, FilesThatReportNoSizeAreReadToTheirEnd) {
  // Files in /proc are regular but report size 0.
  const std::string status = read_input_file("/proc/self/status", InputKind::kConfig);
  EXPECT_NE(status.find("Name:"), std::string::npos);
}

TEST_F(InputFileTest, RefusesWhatIsNotARegularFile) {
  ASSERT_EQ(::mkfifo(dir_.file("fifo").c_str(), 0644), 0);
  // A FIFO nobody writes to: opening it must not wait for a writer.
  expect_error<IoError>([&] { read_input_file(dir_.file("fifo"), InputKind::kTokenizer); },
                        {dir_.file("fifo"), "a FIFO, not a regular file"});
  expect_error<IoError>([&] { read_input_file(link("zero", "/dev/zero"), InputKind::kTemplate); },
                        {dir_.file("zero"), "a character device"});
  expect_error<IoError>([&] { read_input_file(dir_.path(), InputKind::kUserData); },
                        {dir_.path(), "a directory"});
  expect_error<IoError>([&] { MappedFile::open(dir_.file("fifo")); }, {"a FIFO"});
  expect_error<IoError>([&] { MappedFile::open("/dev/zero"); }, {"/dev/zero", "a character device"});
}

TEST_F(InputFileTest, NamesLinkProblemsWithThePathAndReason) {
  link("loop_a", dir_.file("loop_b"));
  link("loop_b", dir_.file("loop_a"));
  expect_error<IoError>([&] { read_input_file(dir_.file("loop_a"), InputKind::kConfig); },
                        {dir_.file("loop_a"), "Too many levels of symbolic links"});
  expect_error<IoError>([&] { read_input_file_if_exists(dir_.file("loop_a"), InputKind::kConfig); },
                        {"Too many levels of symbolic links"});
  // A dangling link exists: it is not the same as no file.
  link("dangling", dir_.file("nowhere"));
  expect_error<IoError>([&] { read_input_file_if_exists(dir_.file("dangling"), InputKind::kConfig); },
                        {dir_.file("dangling"), "symbolic link to a file that does not exist"});
  expect_error<IoError>([&] { read_input_file(dir_.file("absent"), InputKind::kConfig); },
                        {dir_.file("absent"), "No such file or directory"});
  expect_error<IoError>([&] { read_input_file(put("file", "x") + "/config.json", InputKind::kConfig); },
                        {"Not a directory"});
  expect_error<IoError>([&] { read_input_file("", InputKind::kConfig); }, {"empty path"});
}

TEST_F(InputFileTest, RefusesFilesOverTheCapOfTheirKind) {
  // A sparse file one byte over the config cap: refused from its size, before any read.
  const std::string path = put("big.json", "");
  const uint64_t cap = input_size_cap(InputKind::kConfig);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(cap + 1)), 0);
  expect_error<IoError>(
      [&] { read_input_file(path, InputKind::kConfig); },
      {path, std::to_string(cap + 1) + " bytes exceeds the limit of " + std::to_string(cap), "config file"});
  EXPECT_LT(input_size_cap(InputKind::kTemplate), input_size_cap(InputKind::kTokenizer));
  EXPECT_GT(input_size_cap(InputKind::kTokenizer),
            uint64_t{100} << 20);  // real tokenizer.json files reach ~35 MB
}

TEST_F(InputFileTest, PermissionErrorsNameThePathAndReason) {
  dir_.allow_other_users();
  const std::string secret = put("secret.json", "{}");
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  ASSERT_EQ(::mkdir(dir_.file("locked").c_str(), 0700), 0);
  auto message = test::run_unprivileged([&] {
    std::string out;
    for (const std::string& path : {secret, dir_.file("locked") + "/config.json"}) {
      try {
        read_input_file_if_exists(path, InputKind::kConfig);
        out += "read " + path + ";";
      } catch (const IoError& e) {
        out += std::string(e.what()) + ";";
      }
    }
    return out;
  });
  if (!message) GTEST_SKIP() << test::unprivileged_skip_reason();
  EXPECT_NE(message->find("cannot open " + secret + ": Permission denied"), std::string::npos) << *message;
  EXPECT_NE(message->find(dir_.file("locked") + "/config.json: Permission denied"), std::string::npos)
      << *message;
}

}  // namespace
}  // namespace lmx
