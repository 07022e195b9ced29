// Unicode helpers of the tokenizer: UTF-8 repair, the NFC/NFKC fast path against plain utf8proc,
// character classes, and the Oniguruma -> PCRE2 pattern translation.
#include "lmx/text/tokenizer_pattern.h"
#include "lmx/text/tokenizer_unicode.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>

namespace lmx::text {
namespace {

std::string utf8proc_reference(const std::string& s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const auto len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                                static_cast<utf8proc_option_t>(options));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
  std::free(out);
  return r;
}

TEST(TokenizerUnicode, InvalidUtf8BecomesReplacementPerMaximalSubpart) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(to_valid_utf8("abc"), "abc");
  EXPECT_EQ(to_valid_utf8("a\x80z"), "a" + fffd + "z");
  EXPECT_EQ(to_valid_utf8("\xE2\x82z"), fffd + "z");              // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate: each byte
  EXPECT_EQ(to_valid_utf8("\xC0\x80"), fffd + fffd);             // overlong
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98"), fffd);
  EXPECT_EQ(to_valid_utf8(std::string("\0x", 2)), std::string("\0x", 2));
  EXPECT_FALSE(is_valid_utf8("\xFF"));
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
}

TEST(TokenizerUnicode, NormalizationFastPathMatchesUtf8proc) {
  auto& gen = test::rng();
  // Characters around the fast path's boundaries: ASCII, Latin-1, combining marks, kana with
  // voicing marks, Hangul syllables and jamo, CJK, compatibility characters, emoji.
  const std::vector<char32_t> alphabet = {'a', 'e', 'A', ' ', 0xE9, 0xC5, 0x300, 0x301, 0x30A, 0x327, 0x1E0A, 0x323,
                                          0x304B, 0x3099, 0x309B, 0x30AB, 0xAC00, 0x1100, 0x1161, 0x11A8, 0x4E00,
                                          0xFB01, 0x2460, 0xFF21, 0xB2, 0xA0, 0x212B, 0x1F600, 0x0344, 0x0F73};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    const int length = 1 + round % 12;
    for (int i = 0; i < length; ++i) append_utf8(s, alphabet[pick(gen)]);
    EXPECT_EQ(normalize_unicode(s, NormalizationForm::kNfc), utf8proc_reference(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE)) << s;
    EXPECT_EQ(normalize_unicode(s, NormalizationForm::kNfkc),
              utf8proc_reference(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT)) << s;
    EXPECT_EQ(normalize_unicode(s, NormalizationForm::kNfd), utf8proc_reference(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE)) << s;
    EXPECT_EQ(normalize_unicode(s, NormalizationForm::kNfkd),
              utf8proc_reference(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT)) << s;
  }
}

TEST(TokenizerUnicode, CharacterClassesFollowRust) {
  for (const char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', char32_t{0x85}, char32_t{0xA0}, char32_t{0x2009}, char32_t{0x3000}}) {
    EXPECT_TRUE(is_whitespace(c)) << static_cast<uint32_t>(c);
  }
  for (const char32_t c : {U'a', U'_', char32_t{0x200B}, char32_t{0x180E}, char32_t{0xFEFF}}) EXPECT_FALSE(is_whitespace(c));
  EXPECT_TRUE(is_numeric(U'7'));
  EXPECT_TRUE(is_numeric(0x2460));  // circled digit one (No)
  EXPECT_TRUE(is_numeric(0x0663));  // Arabic-Indic three (Nd)
  EXPECT_FALSE(is_numeric(U'x'));
  EXPECT_TRUE(is_punctuation(U'$'));  // ASCII symbol counts as punctuation in HF
  EXPECT_TRUE(is_punctuation(0x3002));
  EXPECT_FALSE(is_punctuation(0x20AC));  // euro sign is a symbol (Sc)
  EXPECT_TRUE(is_word_char(U'_'));
  EXPECT_TRUE(is_word_char(0x301));
  EXPECT_FALSE(is_word_char(U'-'));
  EXPECT_EQ(to_lowercase("ÀB\u0130\u03a3"), "àbi\u0307\u03c3");
}

TEST(TokenizerUnicode, OnigPatternTranslation) {
  EXPECT_EQ(translate_onig_pattern("a+"), "a+");
  EXPECT_NE(translate_onig_pattern("\\s").find("\\x{85}"), std::string::npos);
  EXPECT_EQ(translate_onig_pattern("[^\\s\\p{L}]").find("[^\\t"), 0u);
  EXPECT_EQ(translate_onig_pattern("\\h"), "[0-9a-fA-F]");
  EXPECT_EQ(translate_onig_pattern("[]a]"), "[\\]a]");
  // \s is Unicode White_Space: NEL yes, zero-width space and U+180E no.
  const Pattern space = Pattern::regex("\\s+");
  std::vector<PatternMatch> m;
  space.find_matches("a\u0085b\u200bc\u180ed", m);
  size_t matched = 0;
  for (const auto& x : m) matched += x.is_match;
  EXPECT_EQ(matched, 1u);
}

TEST(TokenizerUnicode, EmptyMatchesFollowOniguruma) {
  // Onig's find_iter: an empty match right after a match is skipped by one character.
  const Pattern digits = Pattern::regex("\\d*");
  std::vector<std::pair<size_t, size_t>> matches;
  digits.for_each_match("a12b", [&](size_t b, size_t e) { matches.emplace_back(b, e); });
  EXPECT_EQ(matches, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(Pattern::regex("x*").replace_all("abc", "-"), "-a-b-c-");
  EXPECT_EQ(Pattern::literal("").replace_all("ab", "-"), "-a-b-");
  EXPECT_EQ(Pattern::literal("ab").replace_all("", "-"), "");
}

}  // namespace
}  // namespace lmx::text
