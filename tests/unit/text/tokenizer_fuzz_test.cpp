// Seeded random bytes into encode and random ids (valid and invalid) into decode and the streaming
// detokenizer: no crash, valid UTF-8 out, clear errors for bad ids, bounded time.
#include "lmx/core/error.h"
#include "lmx/text/detokenizer.h"
#include "lmx/text/tokenizer.h"
#include "lmx/text/tokenizer_unicode.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <chrono>

namespace lmx {
namespace {

// The real tokenizers when present, plus a small Metaspace/byte-fallback one that always is.
std::vector<std::pair<std::string, Tokenizer>> fuzz_tokenizers() {
  std::vector<std::pair<std::string, Tokenizer>> out;
  out.emplace_back("small", Tokenizer::from_json(test::byte_fallback_tokenizer_json(
                                {"\u2581", "a", "b", "\u2581a", "ab", "<s>"}, {{"\u2581", "a"}, {"a", "b"}}, true)
                                                     .dump()));
  for (const char* name : {"gemma3", "llama3", "qwen3"}) {
    const std::string dir = test::tokenizer_fixture_dir(name);
    if (!dir.empty()) out.emplace_back(name, Tokenizer::load(dir));
  }
  return out;
}

std::string random_bytes(std::mt19937_64& gen, size_t max_length) {
  std::uniform_int_distribution<size_t> length(0, max_length);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> byte(0, 255);
  static const std::vector<std::string> pieces = {"<bos>", "<|im_start|>", "<s>", "\u2581", " ", "\n", "\xE2\x82", "\xF0\x9F\x98\x80",
                                                  "<0x41>", "'s", "123", "\xC3\xA9", "\t"};
  std::uniform_int_distribution<size_t> piece(0, pieces.size() - 1);
  std::string s;
  const size_t n = length(gen);
  while (s.size() < n) {
    const int k = kind(gen);
    if (k < 5) s.push_back(static_cast<char>(byte(gen)));
    else if (k < 8) s.push_back(static_cast<char>('a' + byte(gen) % 26));
    else s += pieces[piece(gen)];
  }
  return s;
}

TEST(TokenizerFuzz, RandomBytesAndIdsNeverCrash) {
  const auto start = std::chrono::steady_clock::now();
  auto& gen = test::rng();
  for (const auto& [name, tok] : fuzz_tokenizers()) {
    for (int round = 0; round < 150; ++round) {
      const std::string input = random_bytes(gen, round % 10 == 0 ? 4000 : 200);
      const auto ids = tok.encode(input, round % 2 == 0);
      const std::string decoded = tok.decode(ids);
      EXPECT_TRUE(text::is_valid_utf8(decoded)) << name;
      // Every produced id is valid and decodes.
      for (const int32_t id : ids) ASSERT_TRUE(tok.is_valid_id(id)) << name << " id " << id;
    }
    std::uniform_int_distribution<int32_t> any(-5, tok.vocab_size() + 5);
    for (int round = 0; round < 150; ++round) {
      std::vector<int32_t> ids(static_cast<size_t>(round % 40));
      for (auto& id : ids) id = any(gen);
      bool valid = true;
      for (const int32_t id : ids) valid = valid && tok.is_valid_id(id);
      if (valid) {
        const std::string text = tok.decode(ids, round % 2 == 0);
        EXPECT_TRUE(text::is_valid_utf8(text)) << name;
      } else {
        EXPECT_THROW(tok.decode(ids), InvalidArgument) << name;
      }
      StreamingDetokenizer stream(tok);
      std::string streamed;
      std::vector<int32_t> accepted;
      for (const int32_t id : ids) {
        if (!tok.is_valid_id(id)) {
          EXPECT_THROW(stream.feed(id), InvalidArgument);
          continue;
        }
        accepted.push_back(id);
        streamed += stream.feed(id);
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok.decode(accepted)) << name;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "fuzzing took too long";  // generous bound; typically well under 2 s
}

}  // namespace
}  // namespace lmx
