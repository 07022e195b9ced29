// BPE merging against a slow obvious reference on random vocabularies and words (short words,
// long words on the heap path, very long words cut into chunks), and concurrent encoding.
#include "lmx/text/tokenizer.h"
#include "unit/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

namespace lmx {
namespace {

struct RandomBpe {
  std::vector<std::string> tokens;                         // id -> token
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
};

// Random merges over the alphabet "abcde": each merge joins two existing tokens into a new one.
RandomBpe random_bpe(std::mt19937_64& gen, int merge_count) {
  RandomBpe bpe;
  std::map<std::string, int> known;
  for (const char c : std::string("abcde")) {
    known[std::string(1, c)] = static_cast<int>(bpe.tokens.size());
    bpe.tokens.emplace_back(1, c);
  }
  std::set<std::pair<std::string, std::string>> used;
  while (static_cast<int>(bpe.merges.size()) < merge_count) {
    std::uniform_int_distribution<size_t> pick(0, bpe.tokens.size() - 1);
    const std::string a = bpe.tokens[pick(gen)], b = bpe.tokens[pick(gen)];
    if (a.size() + b.size() > 8 || !used.insert({a, b}).second) continue;
    bpe.merges.emplace_back(a, b);
    if (!known.count(a + b)) {
      known[a + b] = static_cast<int>(bpe.tokens.size());
      bpe.tokens.push_back(a + b);
    }
  }
  return bpe;
}

// The textbook algorithm: repeatedly merge the adjacent pair of lowest rank, leftmost first.
std::vector<int32_t> reference_bpe(const RandomBpe& bpe, const std::string& word) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t r = 0; r < bpe.merges.size(); ++r) rank.emplace(bpe.merges[r], r);
  std::vector<std::string> symbols;
  for (const char c : word) symbols.emplace_back(1, c);
  while (symbols.size() > 1) {
    size_t best = symbols.size(), best_rank = ~size_t{0};
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = rank.find({symbols[i], symbols[i + 1]});
      if (it != rank.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best == symbols.size()) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& s : symbols) {
    ids.push_back(static_cast<int32_t>(std::find(bpe.tokens.begin(), bpe.tokens.end(), s) - bpe.tokens.begin()));
  }
  return ids;
}

Tokenizer make_tokenizer(const RandomBpe& bpe) {
  nlohmann::json j = test::empty_tokenizer_json();
  for (size_t i = 0; i < bpe.tokens.size(); ++i) j["model"]["vocab"][bpe.tokens[i]] = i;
  for (const auto& [a, b] : bpe.merges) j["model"]["merges"].push_back(a + " " + b);
  return Tokenizer::from_json(j.dump());
}

TEST(TokenizerBpe, MatchesReferenceOnRandomVocabsAndWords) {
  auto& gen = test::rng();
  for (int round = 0; round < 12; ++round) {
    const RandomBpe bpe = random_bpe(gen, 10 + round * 6);
    const Tokenizer tok = make_tokenizer(bpe);
    for (const size_t length : {1, 2, 7, 40, 63, 64, 65, 200, 257, 1000, 3000}) {
      std::string word;
      // Low-entropy words make long merge chains; uniform ones exercise ties.
      std::uniform_int_distribution<int> letter(0, round % 2 == 0 ? 4 : 1);
      for (size_t i = 0; i < length; ++i) word.push_back(static_cast<char>('a' + letter(gen)));
      ASSERT_EQ(tok.encode(word), reference_bpe(bpe, word)) << "round " << round << " word " << word;
    }
  }
}

TEST(TokenizerBpe, ChunkedLongWordsMatchReference) {
  // No merge joins 'e' to anything, so long words are cut after each 'e' before merging.
  RandomBpe bpe;
  for (const char c : std::string("abcde")) bpe.tokens.emplace_back(1, c);
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{"a", "b"}, {"ab", "c"}, {"c", "d"}, {"b", "a"}, {"d", "e"}}) {
    bpe.merges.emplace_back(a, b);
    bpe.tokens.push_back(a + b);
  }
  const Tokenizer tok = make_tokenizer(bpe);
  auto& gen = test::rng();
  std::uniform_int_distribution<int> letter(0, 4);
  for (int round = 0; round < 20; ++round) {
    std::string word;
    for (int i = 0; i < 2000; ++i) word.push_back(static_cast<char>('a' + letter(gen)));
    ASSERT_EQ(tok.encode(word), reference_bpe(bpe, word)) << word;
  }
}

TEST(TokenizerBpe, ConcurrentEncodesAgree) {
  const std::string dir = test::tokenizer_fixture_dir("llama3");
  const Tokenizer tok = dir.empty() ? make_tokenizer(random_bpe(test::rng(), 40)) : Tokenizer::load(dir);
  std::vector<std::string> texts;
  for (const auto& e : test::read_tokenizer_corpus()) texts.push_back(e.text);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i + static_cast<size_t>(t) * 7) % texts.size();
          if (tok.encode(texts[k]) != expected[k]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace lmx
