// printable(): text quoting hostile input stays one line of printable UTF-8 on a terminal.
#include "lmx/core/printable.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

TEST(Printable, PrintableUtf8PassesUnchanged) {
  EXPECT_EQ(printable("config.json: key 'x' — café 中文 😀"), "config.json: key 'x' — café 中文 😀");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, ControlsAndLineBreaksAreEscaped) {
  EXPECT_EQ(printable("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(printable("\x1b[2J\x07"), "\\x1b[2J\\x07");
  EXPECT_EQ(printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(printable("\x7f"), "\\x7f");
  EXPECT_EQ(printable("\u0085 \u2028 \u202e \u2066"), "\\u{0085} \\u{2028} \\u{202e} \\u{2066}");
}

TEST(Printable, InvalidUtf8BytesAreEscapedOneByOne) {
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("ab\xc3"), "ab\\xc3");                         // truncated sequence
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
  EXPECT_EQ(printable("\xe2\x28\xa1"), "\\xe2(\\xa1");
}

}  // namespace
}  // namespace lmx
