// Directory checks, listings and atomic output (files and directories): every failure names the
// path and the OS reason, and an interrupted write leaves no trace.
#include "lmx/io/directory.h"
#include "io_test_helpers.h"
#include "lmx/io/output_file.h"
#include "lmx/io/staged_directory.h"
#include "support/unprivileged.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

namespace lmx {
namespace {

using test::expect_error;

TEST(Directory, ChecksNameThePathAndReason) {
  test::TempDir dir;
  test::write_file(dir.file("file"), "x");
  ASSERT_EQ(::symlink(dir.file("loop").c_str(), dir.file("loop").c_str()), 0);
  EXPECT_NO_THROW(require_directory(dir.path(), "model directory"));
  expect_error<IoError>([&] { require_directory(dir.file("absent"), "model directory"); },
                        {"model directory", dir.file("absent"), "No such file or directory"});
  expect_error<IoError>([&] { require_directory(dir.file("file"), "model directory"); }, {"not a directory"});
  expect_error<IoError>([&] { require_directory(dir.file("loop"), "model directory"); },
                        {"Too many levels of symbolic links"});
  EXPECT_TRUE(path_exists(dir.file("file")));
  EXPECT_FALSE(path_exists(dir.file("absent")));
  expect_error<IoError>([&] { path_exists(dir.file("loop")); }, {dir.file("loop"), "symbolic links"});
  expect_error<IoError>([&] { path_exists(dir.file("file") + "/x"); }, {"Not a directory"});
}

TEST(Directory, ListsSortedAndReportsUnreadableDirectories) {
  test::TempDir dir;
  for (const char* name : {"b", "a", "c.safetensors"}) test::write_file(dir.file(name), "");
  EXPECT_EQ(list_directory(dir.path()), (std::vector<std::string>{"a", "b", "c.safetensors"}));
  EXPECT_FALSE(is_empty_directory(dir.path()));
  expect_error<IoError>([&] { list_directory(dir.file("a")); }, {"cannot list directory", "Not a directory"});

  dir.allow_other_users();
  ASSERT_EQ(::mkdir(dir.file("unlistable").c_str(), 0311), 0);  // searchable, not readable
  auto message = test::run_unprivileged([&] {
    try {
      list_directory(dir.file("unlistable"));
      return std::string("listed");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
  });
  if (!message) GTEST_SKIP() << test::unprivileged_skip_reason();
  EXPECT_EQ(*message, "cannot list directory " + dir.file("unlistable") + ": Permission denied");
}

TEST(AtomicFileWriter, CommitReplacesAndAbandonLeavesNothing) {
  test::TempDir dir;
  const std::string path = dir.file("out.npy");
  write_text_file(path, "old");
  {
    AtomicFileWriter out(path);
    out.write("partial");
  }  // no commit
  EXPECT_EQ(test::read_file(path), "old");
  EXPECT_EQ(test::count_entries(dir.path()), 1u);
  write_text_file(path, "new");
  EXPECT_EQ(test::read_file(path), "new");
  expect_error<IoError>([&] { AtomicFileWriter out(dir.path()); }, {dir.path(), "is a directory"});
  expect_error<IoError>([&] { AtomicFileWriter out(dir.file("absent/x")); }, {"No such file or directory"});
}

class StagedDirectoryTest : public ::testing::Test {
 protected:
  std::string target() const { return dir_.file("out"); }
  test::TempDir dir_;
};

TEST_F(StagedDirectoryTest, AppearsWholeOnlyAtCommit) {
  StagedDirectory staged(target() + "/", false);
  EXPECT_EQ(staged.target(), target());
  write_text_file(join_path(staged.path(), "config.json"), "{}");
  EXPECT_FALSE(test::exists(target()));
  staged.commit();
  EXPECT_EQ(test::read_file(target() + "/config.json"), "{}");
  EXPECT_EQ(test::count_entries(dir_.path()), 1u);  // no staging directory left
}

TEST_F(StagedDirectoryTest, AbandonedWriteLeavesNoTrace) {
  {
    StagedDirectory staged(target(), false);
    write_text_file(join_path(staged.path(), "model.safetensors"), "partial");
  }
  EXPECT_EQ(test::count_entries(dir_.path()), 0u);
}

TEST_F(StagedDirectoryTest, CreatesMissingParentsAndFillsAnEmptyDirectory) {
  StagedDirectory nested(dir_.file("a/b/out"), false);
  nested.commit();
  EXPECT_TRUE(test::exists(dir_.file("a/b/out")));
  ASSERT_EQ(::mkdir(target().c_str(), 0755), 0);
  StagedDirectory staged(target(), false);
  write_text_file(join_path(staged.path(), "x"), "1");
  staged.commit();
  EXPECT_EQ(test::read_file(target() + "/x"), "1");
}

TEST_F(StagedDirectoryTest, NonEmptyTargetNeedsReplaceWhichReplacesItWhole) {
  ASSERT_EQ(::mkdir(target().c_str(), 0755), 0);
  test::write_file(target() + "/old.txt", "old");
  expect_error<InvalidArgument>([&] { StagedDirectory staged(target(), false); },
                                {target(), "is not empty", "--force"});
  EXPECT_EQ(test::count_entries(dir_.path()), 1u);  // refused before creating anything
  StagedDirectory staged(target(), true);
  write_text_file(join_path(staged.path(), "new.txt"), "new");
  EXPECT_TRUE(test::exists(target() + "/old.txt"));
  staged.commit();
  EXPECT_FALSE(test::exists(target() + "/old.txt"));
  EXPECT_EQ(test::read_file(target() + "/new.txt"), "new");
  EXPECT_EQ(test::count_entries(dir_.path()), 1u);  // the old contents are gone
}

TEST_F(StagedDirectoryTest, RefusesFilesTheRootAndChangedTargets) {
  test::write_file(target(), "a file");
  expect_error<InvalidArgument>([&] { StagedDirectory staged(target(), true); },
                                {target(), "exists and is not a directory"});
  expect_error<InvalidArgument>([] { StagedDirectory staged("/", true); }, {"root directory"});
  expect_error<InvalidArgument>([] { StagedDirectory staged("", true); }, {"empty"});
  // The target is checked again at commit: something created meanwhile is not overwritten.
  const std::string other = dir_.file("other");
  StagedDirectory staged(other, false);
  ASSERT_EQ(::mkdir(other.c_str(), 0755), 0);
  test::write_file(other + "/theirs", "x");
  expect_error<InvalidArgument>([&] { staged.commit(); }, {other, "is not empty"});
  EXPECT_EQ(test::read_file(other + "/theirs"), "x");
}

TEST_F(StagedDirectoryTest, SameOrInside) {
  ASSERT_EQ(::mkdir(dir_.file("m").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir_.file("m2").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(dir_.file("m").c_str(), dir_.file("link").c_str()), 0);
  EXPECT_TRUE(same_or_inside(dir_.path(), dir_.file("m")));
  EXPECT_TRUE(same_or_inside(dir_.file("link"), dir_.file("m")));
  EXPECT_TRUE(same_or_inside("/", dir_.file("m")));
  EXPECT_FALSE(same_or_inside(dir_.file("m"), dir_.file("m2")));
  EXPECT_FALSE(same_or_inside(dir_.file("m"), dir_.path()));
  EXPECT_FALSE(same_or_inside(dir_.file("absent"), dir_.file("m")));
}

TEST_F(StagedDirectoryTest, UnwritableParentIsAnIoErrorNamingIt) {
  dir_.allow_other_users();
  ASSERT_EQ(::mkdir(dir_.file("ro").c_str(), 0555), 0);
  auto message = test::run_unprivileged([&] {
    try {
      StagedDirectory staged(dir_.file("ro/out"), false);
      return std::string("created");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
  });
  if (!message) GTEST_SKIP() << test::unprivileged_skip_reason();
  EXPECT_NE(message->find(dir_.file("ro/out")), std::string::npos) << *message;
  EXPECT_NE(message->find("Permission denied"), std::string::npos) << *message;
}

}  // namespace
}  // namespace lmx
