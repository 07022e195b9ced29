// Tokenizer files read through io's one way to open input: special files and link loops refused
// with the path and reason, JSON components bounded in depth, every error an lmx::Error.
#include "lmx/core/error.h"
#include "lmx/text/tokenizer.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

namespace lmx {
namespace {

// Loads dir as a tokenizer directory and returns the error message ("" when it loads).
std::string load_error(const std::string& dir) {
  try {
    Tokenizer::load(dir);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(TokenizerFiles, SpecialFilesAndLinkLoopsAreRefused) {
  test::TempDir dir;
  test::write_file(dir.file("tokenizer.json"), test::empty_tokenizer_json().dump());
  EXPECT_EQ(load_error(dir.path()), "");

  ASSERT_EQ(::mkfifo(dir.file("tokenizer_config.json").c_str(), 0644), 0);
  EXPECT_NE(load_error(dir.path()).find(dir.file("tokenizer_config.json") + ": it is a FIFO"),
            std::string::npos);
  ASSERT_EQ(::unlink(dir.file("tokenizer_config.json").c_str()), 0);

  ASSERT_EQ(::symlink("/dev/zero", dir.file("chat_template.jinja").c_str()), 0);
  EXPECT_NE(load_error(dir.path()).find("a character device"), std::string::npos);
  ASSERT_EQ(::unlink(dir.file("chat_template.jinja").c_str()), 0);

  ASSERT_EQ(
      ::symlink(dir.file("special_tokens_map.json").c_str(), dir.file("special_tokens_map.json").c_str()), 0);
  EXPECT_NE(load_error(dir.path()).find("Too many levels of symbolic links"), std::string::npos);
  ASSERT_EQ(::unlink(dir.file("special_tokens_map.json").c_str()), 0);

  ASSERT_EQ(::unlink(dir.file("tokenizer.json").c_str()), 0);
  ASSERT_EQ(::mkdir(dir.file("tokenizer.json").c_str(), 0755), 0);
  EXPECT_NE(load_error(dir.path()).find("a directory, not a regular file"), std::string::npos);
}

TEST(TokenizerFiles, DeeplyNestedComponentsAreRefused) {
  nlohmann::json j = test::empty_tokenizer_json();
  std::string text = j.dump();
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const size_t at = text.find("\"normalizer\":null");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 17, "\"normalizer\":" + deep);
  try {
    Tokenizer::from_json(text);
    FAIL() << "loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128 levels"), std::string::npos) << e.what();
  }
  test::TempDir dir;
  test::write_file(dir.file("tokenizer.json"), j.dump());
  test::write_file(dir.file("tokenizer_config.json"), "{\"bos_token\": " + deep + "}");
  EXPECT_NE(
      load_error(dir.path()).find("tokenizer_config.json field 'bos_token': invalid JSON: nested deeper"),
      std::string::npos)
      << load_error(dir.path());
}

}  // namespace
}  // namespace lmx
