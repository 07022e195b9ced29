// Model-directory settings: special tokens from tokenizer_config.json / special_tokens_map.json,
// and the chat template from chat_template.jinja, chat_template.json or tokenizer_config.json.
#include "lmx/io/output_file.h"
#include "lmx/text/tokenizer.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

void write_tokenizer(const test::TempDir& dir) {
  nlohmann::json j = test::byte_fallback_tokenizer_json({"a", "<s>", "</s>", "<eot>"}, {});
  j["added_tokens"] = nlohmann::json::parse(R"([
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}])");
  write_text_file(dir.file("tokenizer.json"), j.dump());
}

TEST(TokenizerConfig, SpecialTokensAndStringTemplate) {
  test::TempDir dir;
  write_tokenizer(dir);
  write_text_file(dir.file("tokenizer_config.json"), R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "__type": "AddedToken"},
      "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
      "added_tokens_decoder": {"1": {"content": "<s>"}}})");
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.eos_token(), "</s>");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.chat_template(), "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(tok.chat_templates().at("default"), tok.chat_template());
}

TEST(TokenizerConfig, SpecialTokensMapOverridesAndUnknownTokens) {
  test::TempDir dir;
  write_tokenizer(dir);
  write_text_file(dir.file("tokenizer_config.json"), R"({"bos_token": "<s>", "eos_token": "</s>"})");
  write_text_file(dir.file("special_tokens_map.json"), R"({"eos_token": {"content": "<eot>"}, "bos_token": "<nope>"})");
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.eos_token(), "<eot>");
  EXPECT_EQ(tok.eos_id(), tok.token_to_id("<eot>"));
  EXPECT_EQ(tok.bos_token(), "<nope>");
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_TRUE(tok.chat_template().empty());
}

TEST(TokenizerConfig, NamedTemplatesAndJinjaFilePrecedence) {
  test::TempDir dir;
  write_tokenizer(dir);
  write_text_file(dir.file("tokenizer_config.json"),
                  R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  {
    const Tokenizer tok = Tokenizer::load(dir.path());
    EXPECT_EQ(tok.chat_template(), "D");
    EXPECT_EQ(tok.chat_templates().at("tool_use"), "T");
    EXPECT_FALSE(tok.bos_token().has_value());
  }
  write_text_file(dir.file("chat_template.json"), R"({"chat_template": "J"})");
  EXPECT_EQ(Tokenizer::load(dir.path()).chat_template(), "J");
  write_text_file(dir.file("chat_template.jinja"), "{{ 'from jinja file' }}\n");
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.chat_template(), "{{ 'from jinja file' }}\n");
  EXPECT_EQ(tok.chat_templates().at("tool_use"), "T");
}

TEST(TokenizerConfig, NoConfigFiles) {
  test::TempDir dir;
  write_tokenizer(dir);
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_FALSE(tok.eos_id().has_value());
  EXPECT_TRUE(tok.chat_template().empty());
  EXPECT_TRUE(tok.chat_templates().empty());
  EXPECT_EQ(tok.encode("a<s>a", true), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(0));
}

}  // namespace
}  // namespace lmx
