// Tests for the affine bit stream: pack_row / unpack_code bit-exact against an independent bit-by-bit
// reference for every width (including codes that straddle words), literal layouts, and bad arguments.
#include "lmx/quant/affine.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace lmx {
namespace {

// Reference packer, one bit at a time: bit i of code j is bit j*bits + i of the stream, and stream bit
// p is bit p % 32 of word p / 32.
std::vector<uint32_t> pack_bit_by_bit(const std::vector<uint32_t>& codes, int bits) {
  const size_t total = codes.size() * static_cast<size_t>(bits);
  std::vector<uint32_t> words((total + 31) / 32, 0u);
  for (size_t j = 0; j < codes.size(); ++j)
    for (int i = 0; i < bits; ++i) {
      const uint32_t bit = (codes[j] >> i) & 1u;
      const size_t p = j * static_cast<size_t>(bits) + static_cast<size_t>(i);
      words[p / 32] |= bit << (p % 32);
    }
  return words;
}

uint32_t unpack_bit_by_bit(const std::vector<uint32_t>& words, size_t index, int bits) {
  uint32_t code = 0;
  for (int i = 0; i < bits; ++i) {
    const size_t p = index * static_cast<size_t>(bits) + static_cast<size_t>(i);
    code |= ((words[p / 32] >> (p % 32)) & 1u) << i;
  }
  return code;
}

TEST(AffinePack, MatchesBitByBitReferenceForEveryWidth) {
  for (int bits = 1; bits <= 8; ++bits) {
    std::uniform_int_distribution<uint32_t> pick(0, (1u << bits) - 1);
    // Lengths that end mid-word, on a word boundary, and long rows of whole groups.
    for (size_t n :
         {size_t{1}, size_t{7}, size_t{11}, size_t{31}, size_t{32}, size_t{33}, size_t{100}, size_t{512}}) {
      std::vector<uint32_t> codes(n);
      for (auto& c : codes) c = pick(test::rng());
      const std::vector<uint32_t> want = pack_bit_by_bit(codes, bits);
      std::vector<uint32_t> got(want.size(), 0xdeadbeefu);
      quant::pack_row(codes, bits, got);
      ASSERT_EQ(got, want) << "bits " << bits << " n " << n;
      for (size_t j = 0; j < n; ++j) {
        ASSERT_EQ(quant::unpack_code(got, static_cast<int64_t>(j), bits), codes[j])
            << "bits " << bits << " j " << j;
        ASSERT_EQ(unpack_bit_by_bit(got, j, bits), codes[j]);
      }
    }
  }
}

TEST(AffinePack, UnpackReadsArbitraryStreamsLikeTheReference) {
  // Random words (not produced by pack_row): every code, straddling or not, as the reference reads it.
  std::uniform_int_distribution<uint32_t> pick;
  std::vector<uint32_t> words(24);
  for (auto& w : words) w = pick(test::rng());
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (size_t j = 0; j < words.size() * 32 / static_cast<size_t>(bits); ++j)
      ASSERT_EQ(quant::unpack_code(words, static_cast<int64_t>(j), bits), unpack_bit_by_bit(words, j, bits))
          << "bits " << bits << " index " << j;
}

TEST(AffinePack, StraddlingCodesSpanTwoWords) {
  // 3-bit code 10 is bits 30..32, 5-bit code 6 bits 30..34, 6-bit code 5 bits 30..35.
  struct Case {
    int bits;
    size_t index;
  };
  for (const Case c : {Case{3, 10}, Case{5, 6}, Case{6, 5}, Case{3, 21}, Case{5, 19}, Case{6, 21}}) {
    const uint32_t all_ones = (1u << c.bits) - 1;
    std::vector<uint32_t> codes(c.index + 3, 0u);
    codes[c.index] = all_ones;
    std::vector<uint32_t> words((codes.size() * static_cast<size_t>(c.bits) + 31) / 32);
    quant::pack_row(codes, c.bits, words);
    const size_t first_bit = c.index * static_cast<size_t>(c.bits);
    const size_t word = first_bit / 32;
    const unsigned low_bits = 32 - static_cast<unsigned>(first_bit % 32);  // bits landing in the first word
    ASSERT_LT(low_bits, static_cast<unsigned>(c.bits)) << "case does not straddle";
    EXPECT_EQ(words[word], ((1u << low_bits) - 1) << (32 - low_bits)) << c.bits;
    EXPECT_EQ(words[word + 1], (1u << (c.bits - static_cast<int>(low_bits))) - 1) << c.bits;
    EXPECT_EQ(quant::unpack_code(words, static_cast<int64_t>(c.index), c.bits), all_ones);
    EXPECT_EQ(quant::unpack_code(words, static_cast<int64_t>(c.index - 1), c.bits), 0u);
    EXPECT_EQ(quant::unpack_code(words, static_cast<int64_t>(c.index + 1), c.bits), 0u);
  }
}

TEST(AffinePack, LiteralLayouts) {
  std::vector<uint32_t> w1(1), w2(2);
  quant::pack_row(std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}, 4, w1);
  EXPECT_EQ(w1[0], 0x76543210u);  // element j in nibble j, low nibble first
  quant::pack_row(std::vector<uint32_t>{1, 2, 3, 4}, 8, w1);
  EXPECT_EQ(w1[0], 0x04030201u);
  quant::pack_row(std::vector<uint32_t>{1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0}, 2, w1);
  EXPECT_EQ(w1[0], 0x39393939u);
  quant::pack_row(std::vector<uint32_t>(11, 7u), 3, w2);  // 33 bits
  EXPECT_EQ(w2[0], 0xffffffffu);
  EXPECT_EQ(w2[1], 0x1u);
  quant::pack_row(std::vector<uint32_t>{31, 0, 0, 0, 0, 0, 0}, 5, w2);  // 35 bits, first code only
  EXPECT_EQ(w2[0], 0x1fu);
  EXPECT_EQ(w2[1], 0u);
}

TEST(AffinePack, RejectsBadArguments) {
  std::vector<uint32_t> words(1);
  EXPECT_THROW(quant::pack_row(std::vector<uint32_t>{16}, 4, words), InvalidArgument);     // too wide
  EXPECT_THROW(quant::pack_row(std::vector<uint32_t>(9, 0u), 4, words), InvalidArgument);  // 2 words needed
  EXPECT_THROW(quant::pack_row(std::vector<uint32_t>(1, 0u), 0, words), InvalidArgument);  // bits
  EXPECT_THROW(quant::unpack_code(words, 8, 4), InvalidArgument);                          // past the end
  EXPECT_THROW(quant::unpack_code(words, 10, 3), InvalidArgument);                         // straddles out
  EXPECT_THROW(quant::unpack_code(words, -1, 4), InvalidArgument);
  EXPECT_EQ(quant::unpack_code(words, 9, 3), 0u);  // bits 27..29: still inside
}

}  // namespace
}  // namespace lmx
