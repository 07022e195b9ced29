// DecodeSkips (LMX_DEBUG_SKIP): the part names, lists with empty items, the round trip through describe(),
// and a clear error for an unknown part.
#include "lmx/model/decode_skips.h"
#include "lmx/core/error.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

TEST(DecodeSkips, ParsesEachPart) {
  EXPECT_FALSE(DecodeSkips::parse("").any());
  EXPECT_TRUE(DecodeSkips::parse("rn").residual);
  EXPECT_TRUE(DecodeSkips::parse("qkv").qkv);
  EXPECT_TRUE(DecodeSkips::parse("inputs").inputs);
  EXPECT_TRUE(DecodeSkips::parse("attention").attention);
  EXPECT_TRUE(DecodeSkips::parse("o").o_proj);
  EXPECT_TRUE(DecodeSkips::parse("mlp").mlp);
  EXPECT_TRUE(DecodeSkips::parse("experts").experts);
  EXPECT_TRUE(DecodeSkips::parse("ple").ple);
  EXPECT_TRUE(DecodeSkips::parse("layers").layers);
  const DecodeSkips some = DecodeSkips::parse("o,,rn,");
  EXPECT_TRUE(some.o_proj && some.residual && !some.qkv && !some.layers);
  EXPECT_EQ(some.describe(), "rn,o");
  EXPECT_EQ(DecodeSkips::parse(some.describe()).describe(), "rn,o");
}

TEST(DecodeSkips, RejectsUnknownParts) {
  EXPECT_THROW(DecodeSkips::parse("rn,attn"), InvalidArgument);
  EXPECT_THROW(DecodeSkips::parse("RN"), InvalidArgument);
  try {
    DecodeSkips::parse("mlp, o");
    FAIL() << "a part with a space was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("' o'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("known: rn,qkv,inputs,attention,o,mlp,experts,ple,layers"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lmx
