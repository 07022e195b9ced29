// Tests for KV snapshots: a round trip gives the same tables and bytes in every codec; files from another
// model, tokenizer, codec or block size are refused naming both values; every truncation and every flipped
// byte of a file is refused; a refused or oversized load leaves the cache as it was; writes are atomic.
#include "lmx/kv/snapshot.h"
#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace lmx {
namespace {

constexpr int kBlock = 4;
const KvSnapshotIdentity kIdentity{"model:0123456789abcdef", "tokenizer:fedcba9876543210"};

// A full-attention layer (2 heads of 32), a sliding layer of window 8 and a layer sharing the first's KV.
std::vector<KvLayerGeometry> layers() {
  return {{2, 32, 0, -1}, {2, 32, 8, -1}, {2, 32, 0, 0}};
}

std::unique_ptr<KvCache> make_cache(KvCodec codec = KvCodec(KvCodecKind::kBf16), int block_tokens = kBlock,
                                    size_t budget = 1 << 22) {
  KvCacheOptions o;
  o.codec = codec;
  o.block_tokens = block_tokens;
  o.budget_bytes = budget;
  const auto l = layers();
  return std::make_unique<KvCache>(l, o, host_kv_memory());
}

// A sequence of `length` positions (prepared in steps of 5) whose blocks hold random bytes, and its tokens.
std::unique_ptr<KvSequence> filled_sequence(KvCache& cache, int64_t length, std::vector<int32_t>& tokens) {
  auto seq = cache.new_sequence();
  while (seq->length() < length) {
    const KvRow row{seq.get(), std::min<int64_t>(5, length - seq->length())};
    cache.prepare({&row, 1});
    KvCache::commit({&row, 1});
  }
  for (int g = 0; g < cache.layout().num_groups(); ++g)
    for (KvBlockId id : seq->blocks(g)) {
      auto* bytes = static_cast<unsigned char*>(cache.pool().data(id));
      for (size_t i = 0; i < cache.layout().group(g).block_bytes; ++i) bytes[i] = static_cast<unsigned char>(test::rng()());
    }
  tokens.resize(static_cast<size_t>(length));
  for (auto& t : tokens) t = static_cast<int32_t>(test::rng()() % 50000);
  return seq;
}

void expect_same_kv(const KvCache& a_cache, const KvSequence& a, const KvCache& b_cache, const KvSequence& b) {
  ASSERT_EQ(a.length(), b.length());
  for (int g = 0; g < a_cache.layout().num_groups(); ++g) {
    EXPECT_EQ(a.first_block(g), b.first_block(g)) << "group " << g;
    ASSERT_EQ(a.blocks(g).size(), b.blocks(g).size()) << "group " << g;
    for (size_t i = 0; i < a.blocks(g).size(); ++i)
      EXPECT_EQ(std::memcmp(a_cache.pool().data(a.blocks(g)[i]), b_cache.pool().data(b.blocks(g)[i]),
                            a_cache.layout().group(g).block_bytes),
                0)
          << "group " << g << " block " << i;
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class E>
std::string refusal(const std::string& path, KvCache& cache, const KvSnapshotIdentity& id = kIdentity) {
  try {
    load_kv_snapshot(path, cache, id);
  } catch (const E& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(KvSnapshot, RoundTripsEveryCodecBitForBit) {
  test::TempDir dir;
  for (const char* spec : {"f32", "bf16", "affine4:g32", "affine8:g32", "turbo", "turbo:k4v2"}) {
    SCOPED_TRACE(spec);
    for (int64_t length : {0, 1, 4, 13, 30}) {
      SCOPED_TRACE(length);
      auto cache = make_cache(KvCodec::parse(spec));
      std::vector<int32_t> tokens;
      auto seq = filled_sequence(*cache, length, tokens);
      const std::string path = dir.file("kv.lmxkv");
      save_kv_snapshot(path, *cache, *seq, tokens, kIdentity);
      auto other = make_cache(KvCodec::parse(spec));
      KvSnapshot loaded = load_kv_snapshot(path, *other, kIdentity);
      EXPECT_EQ(loaded.tokens, tokens);
      expect_same_kv(*cache, *seq, *other, *loaded.sequence);
      // The sliding group kept only what its window needs, and a loaded sequence can go on.
      if (length == 30) EXPECT_GT(loaded.sequence->first_block(1), 0);
      const KvRow row{loaded.sequence.get(), 3};
      other->prepare({&row, 1});
    }
  }
  EXPECT_EQ(test::count_entries(dir.path()), 1u) << "no temporary file left behind";
}

TEST(KvSnapshot, RefusesFilesFromAnotherModelTokenizerOrLayout) {
  test::TempDir dir;
  auto cache = make_cache();
  std::vector<int32_t> tokens;
  auto seq = filled_sequence(*cache, 10, tokens);
  const std::string path = dir.file("kv.lmxkv");
  save_kv_snapshot(path, *cache, *seq, tokens, kIdentity);
  auto fresh = make_cache();
  auto message = refusal<InvalidArgument>(path, *fresh, {"model:1111111111111111", kIdentity.tokenizer});
  EXPECT_NE(message.find("another model (model:0123456789abcdef; this model is model:1111111111111111)"),
            std::string::npos)
      << message;
  message = refusal<InvalidArgument>(path, *fresh, {kIdentity.model, "tokenizer:none"});
  EXPECT_NE(message.find("another tokenizer"), std::string::npos) << message;
  auto affine = make_cache(KvCodec::parse("affine4:g32"));
  message = refusal<InvalidArgument>(path, *affine);
  EXPECT_NE(message.find("was saved as kv:bf16:h=2:d=32; this cache stores kv:affine4:g32:h=2:d=32"),
            std::string::npos)
      << message;
  auto big_blocks = make_cache(KvCodec(KvCodecKind::kBf16), 8);
  message = refusal<InvalidArgument>(path, *big_blocks);
  EXPECT_NE(message.find("blocks of 4 tokens; this cache's hold 8"), std::string::npos) << message;
  EXPECT_EQ(fresh->pool().used_bytes(), 0u);
}

TEST(KvSnapshot, RefusesEveryTruncationAndEveryFlippedByte) {
  test::TempDir dir;
  auto cache = make_cache();
  std::vector<int32_t> tokens;
  auto seq = filled_sequence(*cache, 9, tokens);
  const std::string path = dir.file("kv.lmxkv"), bad = dir.file("bad.lmxkv");
  save_kv_snapshot(path, *cache, *seq, tokens, kIdentity);
  const std::string good = read_bytes(path);
  auto fresh = make_cache();
  for (size_t cut = 0; cut < good.size(); cut += (cut < 64 ? 1 : 97)) {
    write_bytes(bad, good.substr(0, cut));
    EXPECT_NE(refusal<FormatError>(bad, *fresh), "(loaded)") << "truncated to " << cut;
  }
  write_bytes(bad, good + std::string(1, '\0'));
  EXPECT_NE(refusal<FormatError>(bad, *fresh).find("1 bytes follow the last payload"), std::string::npos);
  size_t refused = 0, flips = 0;
  for (size_t at = 0; at < good.size(); at += (at < 4200 ? 7 : 61)) {
    std::string corrupt = good;
    corrupt[at] = static_cast<char>(corrupt[at] ^ 0x10);
    write_bytes(bad, corrupt);
    ++flips;
    const std::string message = refusal<FormatError>(bad, *fresh);
    if (message != "(loaded)") ++refused;
    else ADD_FAILURE() << "a flipped byte at " << at << " was loaded";
  }
  EXPECT_EQ(refused, flips);
  write_bytes(bad, "not a snapshot at all, but long enough for a prefix");
  EXPECT_NE(refusal<FormatError>(bad, *fresh).find("not an lmx KV snapshot"), std::string::npos);
  std::string future = good;
  future[8] = 2;
  write_bytes(bad, future);
  EXPECT_NE(refusal<FormatError>(bad, *fresh).find("format version 2; this lmx reads version 1"), std::string::npos);
  EXPECT_EQ(fresh->pool().used_bytes(), 0u) << "nothing loaded half-way";
  EXPECT_NO_THROW(load_kv_snapshot(path, *fresh, kIdentity));
}

TEST(KvSnapshot, APoolTooSmallRefusesWithoutHoldingBlocks) {
  test::TempDir dir;
  auto cache = make_cache();
  std::vector<int32_t> tokens;
  auto seq = filled_sequence(*cache, 30, tokens);
  const std::string path = dir.file("kv.lmxkv");
  save_kv_snapshot(path, *cache, *seq, tokens, kIdentity);
  auto small = make_cache(KvCodec(KvCodecKind::kBf16), kBlock, 3 * cache->layout().group(0).block_bytes);
  EXPECT_THROW(load_kv_snapshot(path, *small, kIdentity), KvPoolExhausted);
  EXPECT_EQ(small->pool().used_bytes(), 0u);
}

TEST(KvSnapshot, WritesAtomicallyAndNamesUnwritablePaths) {
  test::TempDir dir;
  auto cache = make_cache();
  std::vector<int32_t> tokens;
  auto seq = filled_sequence(*cache, 6, tokens);
  const std::string path = dir.file("kv.lmxkv");
  write_bytes(path, "an older file");
  save_kv_snapshot(path, *cache, *seq, tokens, kIdentity);
  EXPECT_NE(read_bytes(path), "an older file");
  EXPECT_EQ(test::count_entries(dir.path()), 1u);
  try {
    save_kv_snapshot(dir.file("missing/kv.lmxkv"), *cache, *seq, tokens, kIdentity);
    ADD_FAILURE() << "saved into a missing directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/kv.lmxkv"), std::string::npos) << e.what();
  }
  EXPECT_THROW(save_kv_snapshot(path, *cache, *seq, std::span(tokens).first(3), kIdentity), InvalidArgument);
}

}  // namespace
}  // namespace lmx
