// ForcedTokens: only tokens that continue a sequence agreeing with what was written are allowed, until one
// sequence is complete; then anything is; bad sequences are refused.
#include "lmx/engine/forced_tokens.h"

#include "lmx/core/error.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

TEST(ForcedTokens, FollowsTheSequencesThatAgreeUntilOneIsWhole) {
  ForcedTokens f({{48, 10, 11, 12}, {48, 10, 20}, {48, 10, 11, 13}});
  EXPECT_EQ(f.next(), std::vector<int32_t>({48}));
  EXPECT_FALSE(f.allows(10));
  f.accept(48);
  f.accept(10);
  EXPECT_EQ(f.next(), std::vector<int32_t>({11, 20}));
  EXPECT_TRUE(f.allows(11));
  EXPECT_FALSE(f.allows(12));
  f.accept(11);
  EXPECT_EQ(f.next(), std::vector<int32_t>({12, 13}));
  EXPECT_FALSE(f.allows(20));  // that sequence left behind
  EXPECT_FALSE(f.complete());
  EXPECT_EQ(f.completed(), -1);
  f.accept(13);
  EXPECT_TRUE(f.complete());
  EXPECT_EQ(f.completed(), 2);
  EXPECT_TRUE(f.next().empty());
  EXPECT_TRUE(f.allows(999));
}

TEST(ForcedTokens, AShorterSequenceCompletesFirst) {
  ForcedTokens f({{1, 2}, {1, 2, 3}});
  f.accept(1);
  f.accept(2);
  EXPECT_TRUE(f.complete());
}

TEST(ForcedTokens, RefusesNoSequencesAndEmptyOnes) {
  EXPECT_THROW(ForcedTokens({}), InvalidArgument);
  EXPECT_THROW(ForcedTokens({{1}, {}}), InvalidArgument);
}

}  // namespace
}  // namespace lmx
