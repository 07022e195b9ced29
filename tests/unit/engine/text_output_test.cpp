// lmx::TextOutput on the demo model's tokenizer: streamed text equals a full decode, and stop strings
// (also ones that span token boundaries or sit in multi-byte text) cut the text exactly where a slow
// reference — decode everything, find the first stop string — cuts it, never emitting text after it.
#include "lmx/engine/text_output.h"
#include "lmx/core/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

class TextOutputTest : public ::testing::Test {
 protected:
  static const Tokenizer& tokenizer() {
    static const Tokenizer t = Tokenizer::load(test::source_path("models/demo"));
    return t;
  }
  // Streams `ids` through a TextOutput with `stop`; returns the text and whether it stopped, checking
  // that nothing is emitted after the stop.
  static std::pair<std::string, bool> stream(const std::vector<int32_t>& ids, std::vector<std::string> stop) {
    TextOutput out(&tokenizer(), std::move(stop));
    std::string text;
    for (int32_t id : ids) {
      const bool was_stopped = out.stopped();
      std::string piece = out.feed(id);
      if (was_stopped) EXPECT_EQ(piece, "");
      text += piece;
    }
    text += out.finish();
    return {text, out.stopped()};
  }
  // The reference: the whole decode, cut before the earliest stop string.
  static std::pair<std::string, bool> reference(const std::vector<int32_t>& ids,
                                                const std::vector<std::string>& stop) {
    std::string text = tokenizer().decode(ids, /*skip_special_tokens=*/true);
    size_t cut = std::string::npos;
    for (const auto& s : stop) cut = std::min(cut, text.find(s));
    if (cut == std::string::npos) return {text, false};
    return {text.substr(0, cut), true};
  }
};

const char* kText =
    "Once upon a time, a small robot named Pip walked to the market. It bought three apples — "
    "rouges et vertes — and said: «¡Hola!» 🙂 Then Pip went home, tired but happy.";

TEST_F(TextOutputTest, WithoutStopStringsStreamsTheFullDecode) {
  const auto ids = tokenizer().encode(kText, false);
  EXPECT_EQ(stream(ids, {}), reference(ids, {}));
  EXPECT_EQ(stream(ids, {}).first, kText);
}

TEST_F(TextOutputTest, StopStringsCutWhereTheReferenceCuts) {
  const auto ids = tokenizer().encode(kText, false);
  for (const std::vector<std::string>& stop : std::vector<std::vector<std::string>>{
           {"robot"},
           {"ot na"},         // across a token boundary
           {"three", "Pip"},  // the earlier match wins
           {"Pip", "three"},
           {"— and"},  // multi-byte
           {"🙂"},
           {"«¡"},
           {"happy."},  // at the very end
           {"Once"},    // at the start
           {"not in the text"},
           {"a", "aa"},
       }) {
    EXPECT_EQ(stream(ids, stop), reference(ids, stop)) << stop.front();
  }
}

TEST_F(TextOutputTest, RandomStopStringsMatchTheReference) {
  const auto ids = tokenizer().encode(kText, false);
  const std::string text = tokenizer().decode(ids, true);
  for (int trial = 0; trial < 200; ++trial) {
    // A random substring of the text (whole UTF-8 characters), sometimes with its last byte changed.
    size_t begin = test::rng()() % text.size(), length = 1 + test::rng()() % 12;
    while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
    size_t end = std::min(text.size(), begin + length);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    std::string stop = text.substr(begin, end - begin);
    if (trial % 3 == 0) stop.back() = 'q';
    EXPECT_EQ(stream(ids, {stop}), reference(ids, {stop})) << "stop \"" << stop << "\"";
  }
}

TEST_F(TextOutputTest, HoldsBackOnlyWhatCouldBeginAStopString) {
  const auto ids = tokenizer().encode("Hello world", false);
  TextOutput out(&tokenizer(), {"world peace"});
  std::string emitted;
  for (int32_t id : ids) emitted += out.feed(id);
  EXPECT_EQ(emitted, "Hello ");  // "world" may still become "world peace"
  EXPECT_EQ(out.finish(), "world");
  EXPECT_FALSE(out.stopped());
}

TEST_F(TextOutputTest, NoTokenizerNoTextAndEmptyStopRefused) {
  TextOutput out(nullptr, {});
  EXPECT_EQ(out.feed(5), "");
  EXPECT_EQ(out.finish(), "");
  EXPECT_THROW(TextOutput(&tokenizer(), {"x", ""}), InvalidArgument);
}

}  // namespace
}  // namespace lmx
