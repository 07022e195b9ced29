// Tests for the prefix cache: longest-prefix lookup over chained block keys and the first tokens of one
// more block, tails of finished sequences (copied before a reuser writes into them), sliding groups that need
// only their window, refcounts, LRU eviction when the pool needs room (a chain from its end) and under the
// byte cap, keys per layout.
#include "lmx/kv/prefix_cache.h"
#include "lmx/kv/kv_cache.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

constexpr int kBlock = 4;

// A full-attention layer, a sliding layer of window 8 and a layer sharing the first one's KV.
std::vector<KvLayerGeometry> mixed_layers() {
  return {{1, 4, 0, -1}, {1, 4, 8, -1}, {1, 4, 0, 0}};
}

KvCacheOptions options(size_t budget = 1 << 20, std::optional<size_t> prefix_bytes = std::nullopt) {
  KvCacheOptions o;
  o.codec = KvCodec(KvCodecKind::kF32);
  o.block_tokens = kBlock;
  o.budget_bytes = budget;
  o.prefix_cache_bytes = prefix_bytes;
  return o;
}

std::vector<int32_t> tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `seq` forward to hold `toks` in steps of `step` tokens, caching its blocks after every step as the
// engine does (the KV bytes themselves do not matter here).
void grow(KvCache& cache, KvSequence& seq, const std::vector<int32_t>& toks, int64_t step,
          bool finish = false, bool cache_each_step = true) {
  while (seq.length() < static_cast<int64_t>(toks.size())) {
    const KvRow row{&seq, std::min<int64_t>(step, static_cast<int64_t>(toks.size()) - seq.length())};
    cache.prepare({&row, 1});
    KvCache::commit({&row, 1});
    if (cache_each_step) cache.cache_prefix(seq, toks);
  }
  if (finish) cache.cache_prefix(seq, toks, true);
}

TEST(PrefixCache, ReusesTheLongestCachedPrefix) {
  const auto layers = mixed_layers();
  KvCache cache(layers, options(), host_kv_memory());
  const std::vector<int32_t> t = tokens(14);
  auto a = cache.new_sequence();
  grow(cache, *a, t, 5);
  // A prompt sharing 10 tokens: two whole blocks and the first half of the third.
  const auto other = concat(std::vector<int32_t>(t.begin(), t.begin() + 10), tokens(6, 900));
  auto b = cache.reuse_prefix(other, static_cast<int64_t>(other.size()) - 1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->length(), 10);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(b->first_block(g), 0);
    ASSERT_EQ(b->blocks(g).size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(b->blocks(g)[i], a->blocks(g)[i]) << "shared, not copied";
      EXPECT_EQ(cache.pool().refcount(b->blocks(g)[i]), 3) << "a, b and the cache";
    }
  }
  // The same tokens: three whole blocks (the running sequence's partial block is not cached).
  auto c = cache.reuse_prefix(t, static_cast<int64_t>(t.size()));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->length(), 12);
  // max_tokens bounds the reuse; nothing shared, nothing reused.
  auto d = cache.reuse_prefix(t, 7);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->length(), 7);
  EXPECT_EQ(cache.reuse_prefix(tokens(20, 5000), 19), nullptr);
  const KvPrefixStats s = cache.prefix_stats();
  EXPECT_EQ(s.lookups, 4);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.looked_up_tokens, 15 + 14 + 7 + 19);
  EXPECT_EQ(s.reused_tokens, 10 + 12 + 7);
  EXPECT_EQ(s.cached_blocks, 6);  // blocks 0-2 of the full and the sliding group
  EXPECT_EQ(s.cached_bytes, 3 * (cache.layout().group(0).block_bytes + cache.layout().group(1).block_bytes));
}

TEST(PrefixCache, FinishedSequencesLeaveTheirTailAndReusersCopyIt) {
  const auto layers = mixed_layers();
  KvCache cache(layers, options(), host_kv_memory());
  const std::vector<int32_t> t = tokens(14);
  KvBlockId tail = -1;
  {
    auto a = cache.new_sequence();
    grow(cache, *a, t, 5, /*finish=*/true);
    tail = a->blocks(0).back();
  }
  EXPECT_EQ(cache.pool().refcount(tail), 1) << "only the cache holds it";
  const auto next = concat(t, tokens(5, 700));
  auto b = cache.reuse_prefix(next, static_cast<int64_t>(next.size()) - 1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->length(), 14);
  EXPECT_EQ(b->blocks(0).back(), tail);
  // Writing position 14 copies the shared tail first: the cached block stays as it was.
  std::memset(cache.pool().data(tail), 0x5a, cache.layout().group(0).block_bytes);
  const KvRow row{b.get(), 1};
  cache.prepare({&row, 1});
  EXPECT_NE(b->blocks(0).back(), tail);
  EXPECT_EQ(std::memcmp(cache.pool().data(b->blocks(0).back()), cache.pool().data(tail),
                        cache.layout().group(0).block_bytes),
            0)
      << "the copy holds the tail's bytes";
  EXPECT_EQ(cache.pool().refcount(tail), 1);
  // A prompt that leaves the tail inside it, or ends inside it, reuses the tail's first tokens.
  const auto diverging = concat(std::vector<int32_t>(t.begin(), t.begin() + 13), tokens(3, 800));
  auto c = cache.reuse_prefix(diverging, static_cast<int64_t>(diverging.size()) - 1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->length(), 13);
  EXPECT_EQ(c->blocks(0).back(), tail);
  auto d = cache.reuse_prefix(t, 13);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->length(), 13);
  // Nothing of the tail shared: whole blocks only.
  const auto after_blocks = concat(std::vector<int32_t>(t.begin(), t.begin() + 12), tokens(3, 850));
  EXPECT_EQ(cache.reuse_prefix(after_blocks, 14)->length(), 12);
}

// A sequence that reused part of a cached tail and ended before writing into it (a request cancelled before
// its first step) holds the cached block itself: caching its shorter tail must not put that block in a second
// entry, which would hold it twice, so that eviction (of blocks only the cache holds) never gave it back.
TEST(PrefixCache, AReusedTailThatWasNeverWrittenIsNotCachedTwice) {
  const auto layers = mixed_layers();
  KvCache cache(layers, options(), host_kv_memory());
  const std::vector<int32_t> t = tokens(14);
  {
    auto a = cache.new_sequence();
    grow(cache, *a, t, 5, /*finish=*/true);
  }
  const auto diverging = concat(std::vector<int32_t>(t.begin(), t.begin() + 13), tokens(3, 800));
  {
    auto b = cache.reuse_prefix(diverging, static_cast<int64_t>(diverging.size()) - 1);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(b->length(), 13);
    cache.cache_prefix(*b, diverging, /*finished=*/true);
  }
  // The longer tail still serves the shorter prompt.
  EXPECT_EQ(cache.reuse_prefix(diverging, static_cast<int64_t>(diverging.size()) - 1)->length(), 13);
  cache.clear_prefix_cache();
  EXPECT_EQ(cache.pool().used_bytes(), 0u);
  EXPECT_EQ(cache.prefix_stats().cached_blocks, 0);
}

TEST(PrefixCache, SlidingGroupsNeedOnlyTheBlocksTheirWindowSpans) {
  const auto layers = mixed_layers();
  const std::vector<int32_t> t = tokens(30);
  const auto branch = concat(std::vector<int32_t>(t.begin(), t.begin() + 20), tokens(4, 600));
  {
    // Cached only at its end: the sliding group had released every block before position 16.
    KvCache cache(layers, options(), host_kv_memory());
    auto a = cache.new_sequence();
    grow(cache, *a, t, 6, /*finish=*/true, /*cache_each_step=*/false);
    EXPECT_EQ(a->first_block(1), 4);
    // Reusing 20 tokens needs sliding blocks 3 and 4, which are gone; no shorter run has them either.
    EXPECT_EQ(cache.reuse_prefix(branch, 23), nullptr);
    // All 30 (and a tail) need sliding blocks 5-7 only: held.
    const auto more = concat(t, tokens(3, 650));
    auto b = cache.reuse_prefix(more, 32);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->length(), 30);
    EXPECT_EQ(b->first_block(0), 0);
    EXPECT_EQ(b->blocks(0).size(), 8u);
    EXPECT_EQ(b->first_block(1), 5);
    EXPECT_EQ(b->blocks(1).size(), 3u);
    EXPECT_TRUE(b->can_truncate(30));
  }
  {
    // Cached after every step (as the engine does): the window's blocks are all there.
    KvCache cache(layers, options(), host_kv_memory());
    auto a = cache.new_sequence();
    grow(cache, *a, t, 6);
    auto b = cache.reuse_prefix(branch, 23);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->length(), 20);
    EXPECT_EQ(b->first_block(1), 3);
    EXPECT_EQ(b->blocks(1).size(), 2u);
  }
}

// A one-layer full-attention cache of `blocks` blocks.
KvCache small_cache(int blocks, std::optional<size_t> prefix_bytes = std::nullopt) {
  const KvLayerGeometry layer{1, 4, 0, -1};
  const size_t block_bytes =
      KvLayout(std::span(&layer, 1), KvCodec(KvCodecKind::kF32), kBlock).group(0).block_bytes;
  KvCacheOptions o = options(static_cast<size_t>(blocks) * block_bytes, prefix_bytes);
  return KvCache(std::span(&layer, 1), o, host_kv_memory());
}

TEST(PrefixCache, EvictsUnreferencedBlocksWhenThePoolNeedsRoomFromAChainsEnd) {
  KvCache cache = small_cache(6);
  const std::vector<int32_t> a_tokens = tokens(16);
  {
    auto a = cache.new_sequence();
    grow(cache, *a, a_tokens, 16, true);
  }
  EXPECT_EQ(cache.prefix_stats().cached_blocks, 4);
  // 12 unrelated tokens need three blocks: two are free, one comes from the cache.
  auto b = cache.new_sequence();
  grow(cache, *b, tokens(12, 3000), 12);
  EXPECT_EQ(cache.prefix_stats().evicted_blocks, 1);
  // The chain lost its last block: its first three still serve.
  auto c = cache.reuse_prefix(a_tokens, 15);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->length(), 12);
  // Blocks a sequence uses are never evicted: c holds A's three, b its own three; nothing is left.
  auto d = cache.new_sequence();
  const KvRow row{d.get(), 1};
  EXPECT_THROW(cache.prepare({&row, 1}), KvPoolExhausted);
  EXPECT_FALSE(cache.try_prepare({&row, 1}));
  c.reset();  // A's blocks are evictable again
  cache.prepare({&row, 1});
  EXPECT_EQ(cache.prefix_stats().evicted_blocks, 2);
}

TEST(PrefixCache, KeepsUnreferencedBytesUnderItsCap) {
  const KvLayerGeometry layer{1, 4, 0, -1};
  const size_t block_bytes =
      KvLayout(std::span(&layer, 1), KvCodec(KvCodecKind::kF32), kBlock).group(0).block_bytes;
  KvCache cache = small_cache(64, 2 * block_bytes);
  const std::vector<int32_t> t = tokens(16);
  auto a = cache.new_sequence();
  grow(cache, *a, t, 16);
  EXPECT_EQ(cache.prefix_stats().cached_blocks, 4) << "referenced by the running sequence: kept";
  a.reset();
  cache.cache_prefix(*cache.new_sequence(), {});  // any insertion trims
  EXPECT_EQ(cache.prefix_stats().cached_blocks, 2);
  auto b = cache.reuse_prefix(t, 15);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->length(), 8) << "the chain's first blocks stayed";
}

TEST(PrefixCache, RewoundSequencesCacheWhatTheyHoldNow) {
  const auto layers = mixed_layers();
  KvCache cache(layers, options(), host_kv_memory());
  const std::vector<int32_t> first = tokens(12);
  auto a = cache.new_sequence();
  grow(cache, *a, first, 4);
  a->truncate(6);
  const auto second = concat(std::vector<int32_t>(first.begin(), first.begin() + 6), tokens(10, 400));
  grow(cache, *a, second, 4);
  auto b = cache.reuse_prefix(second, 15);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->length(), 15);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b->blocks(0)[i], a->blocks(0)[i]);
  // The first history's blocks 1 and 2 are still cached under their own keys.
  auto c = cache.reuse_prefix(first, 11);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->length(), 11);
  EXPECT_NE(c->blocks(0)[1], a->blocks(0)[1]);
  // A fork carries the keys of its whole blocks.
  auto f = cache.fork(*a, 13);
  grow(cache, *f, second, 4);
  EXPECT_EQ(cache.reuse_prefix(second, 16)->length(), 16);
}

TEST(PrefixCache, KeysDependOnTheLayout) {
  const auto layers = mixed_layers();
  const KvLayout f32(layers, KvCodec(KvCodecKind::kF32), 4), bf16(layers, KvCodec(KvCodecKind::kBf16), 4),
      big_blocks(layers, KvCodec(KvCodecKind::kF32), 8);
  EXPECT_EQ(prefix_chain_seed(f32), prefix_chain_seed(KvLayout(layers, KvCodec(KvCodecKind::kF32), 4)));
  EXPECT_NE(prefix_chain_seed(f32), prefix_chain_seed(bf16));
  EXPECT_NE(prefix_chain_seed(f32), prefix_chain_seed(big_blocks));
  const std::vector<int32_t> t = tokens(4);
  const uint64_t key = prefix_chain_hash(1, t);
  EXPECT_NE(key, prefix_chain_hash(2, t));
  EXPECT_NE(key, prefix_chain_hash(1, tokens(4, 101)));
  EXPECT_NE(key, prefix_chain_hash(1, std::span(t).first(3)));
}

TEST(PrefixCache, OffMeansNoReuseAndNoHeldBlocks) {
  const auto layers = mixed_layers();
  KvCache cache(layers, options(1 << 20, 0), host_kv_memory());
  EXPECT_FALSE(cache.has_prefix_cache());
  const std::vector<int32_t> t = tokens(12);
  {
    auto a = cache.new_sequence();
    grow(cache, *a, t, 4, true);
  }
  EXPECT_EQ(cache.pool().used_bytes(), 0u);
  EXPECT_EQ(cache.reuse_prefix(t, 11), nullptr);
  EXPECT_EQ(cache.prefix_stats().lookups, 0);
}

}  // namespace
}  // namespace lmx
