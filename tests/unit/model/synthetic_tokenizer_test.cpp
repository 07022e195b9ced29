// `lmx synth --tokenizer`: a synthetic checkpoint gets a real tokenizer whose vocabulary covers every id
// the model can emit.
#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/model/synthetic.h"
#include "lmx/text/tokenizer.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <vector>

namespace lmx {
namespace {

TEST(SyntheticTokenizer, PadsTheVocabularySoEveryModelIdDecodes) {
  const std::string demo = test::source_path("models/demo");
  const Tokenizer original = Tokenizer::load(demo);
  nlohmann::json config = test::tiny_config("dense");
  config["vocab_size"] = 9000;  // past the demo tokenizer's 8192 pieces
  test::TempDir dir;
  const std::string out = join_path(dir.path(), "m");
  write_synthetic_gemma4(config, out, /*seed=*/1, nullptr, size_t{1} << 30, false, demo);
  EXPECT_TRUE(path_exists(join_path(out, "chat_template.jinja")));
  EXPECT_TRUE(path_exists(join_path(out, "tokenizer_config.json")));

  const Tokenizer padded = Tokenizer::load(out);
  const std::string text = "The quiet river runs past the stone bridge.";
  EXPECT_EQ(padded.encode(text), original.encode(text));  // the real pieces and merges are unchanged
  const std::vector<int32_t> real = original.encode(text, false);
  EXPECT_EQ(padded.decode(real), original.decode(real));
  for (int32_t id : {8192, 8500, 8999}) {
    ASSERT_TRUE(padded.is_valid_id(id)) << id;
    const std::vector<int32_t> one = {id};
    EXPECT_EQ(padded.decode(one), "<synthetic_" + std::to_string(id) + ">");
  }
}

TEST(SyntheticTokenizer, RefusesATokenizerLargerThanTheModel) {
  test::TempDir dir;
  const std::string out = join_path(dir.path(), "m");
  try {
    write_synthetic_gemma4(test::tiny_config("dense"), out, 1, nullptr, size_t{1} << 30, false,
                           test::source_path("models/demo"));
    FAIL() << "expected a FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary of 300"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(path_exists(out));  // nothing half-written
}

}  // namespace
}  // namespace lmx
