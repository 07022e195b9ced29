// Tests for the paged KV cache: attention through block tables against ops::attention over the full
// history (bit for bit with f32 storage), sliding release, forks with copy-on-write, rewinds across
// block boundaries and windows, KV-sharing layers, layouts and signatures.
#include "lmx/kv/kv_cache.h"
#include "lmx/core/half.h"
#include "lmx/core/thread_pool.h"
#include "lmx/kv/host_kv.h"
#include "lmx/ops/cpu/affine_kv.h"
#include "lmx/ops/ops.h"
#include "lmx/quant/affine.h"
#include "lmx/quant/turbo.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>

namespace lmx {
namespace {

std::vector<int32_t> iota_positions(int64_t from, int64_t count) {
  std::vector<int32_t> p(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(from + i);
  return p;
}

// Rounds every element through bf16 (what bf16 storage keeps).
Tensor rounded_to_bf16(const Tensor& t) {
  Tensor out = t.contiguous();
  for (float& v : out.span<float>()) v = bf16_to_f32(f32_to_bf16(v));
  return out;
}

// What a codec keeps of t [tokens, heads, head_dim]: t itself (f32), rounded through bf16, or the affine
// reference codec's quantize-then-dequantize along head_dim (lmx/quant/affine.h).
Tensor stored(const KvCodec& codec, const Tensor& t, bool values) {
  if (codec.kind() == KvCodecKind::kBf16) return rounded_to_bf16(t);
  if (codec.kind() == KvCodecKind::kTurbo) {
    // TurboQuant: each token-head row through the codec (values rotated back).
    Tensor out = t.contiguous();
    const int d = static_cast<int>(t.dim(2));
    std::vector<std::byte> row(quant::turbo_key_bytes(d, 8) + quant::turbo_value_bytes(d, 4));
    for (int64_t r = 0; r < t.dim(0) * t.dim(1); ++r) {
      float* x = out.data<float>() + r * d;
      if (values) {
        quant::turbo_quantize_value(x, d, codec.value_bits(), row.data());
        quant::turbo_dequantize_value_rotated(row.data(), d, codec.value_bits(), x);
        quant::turbo_unrotate(x, d);
      } else {
        quant::turbo_quantize_key(x, d, codec.bits(), row.data());
        quant::turbo_dequantize_key(row.data(), d, codec.bits(), x);
      }
    }
    return out;
  }
  if (!codec.quantized()) return t;
  return quant::dequantize_affine(
      quant::quantize_affine(t, codec.bits(), codec.group(), DType::kBF16, quant::AffineRounding::kMlxGpu));
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

KvCacheOptions options(int block_tokens, KvCodec codec = KvCodec(KvCodecKind::kF32),
                       size_t budget = 64 << 20) {
  KvCacheOptions o;
  o.codec = codec;
  o.block_tokens = block_tokens;
  o.budget_bytes = budget;
  return o;
}

// One sequence of a one-layer cache fed in chunks, beside its full history, checked step by step against
// ops::attention over that history.
class Tracked {
 public:
  Tracked(KvCache& cache, const KvLayerGeometry& g) : cache_(&cache), g_(g), seq_(cache.new_sequence()) {}
  Tracked(KvCache& cache, const KvLayerGeometry& g, std::unique_ptr<KvSequence> seq, Tensor k, Tensor v)
      : cache_(&cache), g_(g), seq_(std::move(seq)), k_(std::move(k)), v_(std::move(v)) {}

  // Appends `count` random tokens, attends with random queries and compares.
  void step(int64_t count) {
    Tensor k = test::random_tensor({count, g_.num_kv_heads, g_.head_dim});
    Tensor v = test::random_tensor({count, g_.num_kv_heads, g_.head_dim});
    KvRow row{seq_.get(), count};
    const bool was_before = seq_->before_quant_start();
    cache_->prepare({&row, 1});
    const KvCodec codec = cache_->layout_of(*seq_).codec();
    if (was_before && !seq_->before_quant_start()) {
      // Converted at the quantization start: the codec's encoding of the bf16 history.
      k_ = stored(codec, k_, false);
      v_ = stored(codec, v_, true);
    }
    const HostKvStep host(*cache_, {&row, 1});
    const int64_t width = static_cast<int64_t>(g_.num_kv_heads) * g_.head_dim;
    ops::paged_kv_append(host.step(), host.layer(0), k.reshape({count, width}), v.reshape({count, width}));
    k_ = concat(k_, stored(codec, k, false));
    v_ = concat(v_, stored(codec, v, true));
    Tensor q = test::random_tensor({count, g_.num_kv_heads * 2, g_.head_dim});
    Tensor out = Tensor::zeros(q.shape(), DType::kF32), expected = Tensor::zeros(q.shape(), DType::kF32);
    Tensor out2 = out.reshape({count, 2 * width});
    ops::paged_attention(host.step(), host.layer(0), q.reshape({count, 2 * width}), 0.5f, out2);
    const int64_t done = seq_->length();
    ops::attention(q, k_, v_, iota_positions(done, count), iota_positions(0, done + count), g_.window, 0.5f,
                   expected);
    if (codec.kind() == KvCodecKind::kTurbo) {
      // Values summed in the rotated space and rotated back once: equal up to f32 rounding.
      EXPECT_LT(test::max_abs_diff(out, expected), 2e-5f) << "after " << done << " + " << count;
    } else {
      EXPECT_TRUE(bit_equal(out, expected))
          << "after " << done << " + " << count << ": max diff " << test::max_abs_diff(out, expected);
    }
    KvCache::commit({&row, 1});
  }
  void truncate(int64_t length) {
    seq_->truncate(length);
    k_ = k_.slice(0, 0, length).contiguous();
    v_ = v_.slice(0, 0, length).contiguous();
  }
  Tracked fork(int64_t length) {
    return Tracked(*cache_, g_, cache_->fork(*seq_, length), k_.slice(0, 0, length).contiguous(),
                   v_.slice(0, 0, length).contiguous());
  }
  KvSequence& seq() { return *seq_; }

 private:
  static Tensor concat(const Tensor& a, const Tensor& b) {
    if (!a.defined() || a.dim(0) == 0) return b.contiguous();
    Tensor out = Tensor::zeros({a.dim(0) + b.dim(0), a.dim(1), a.dim(2)}, DType::kF32);
    std::memcpy(out.raw_data(), a.raw_data(), a.nbytes());
    std::memcpy(static_cast<std::byte*>(out.raw_data()) + a.nbytes(), b.raw_data(), b.nbytes());
    return out;
  }
  KvCache* cache_;
  KvLayerGeometry g_;
  std::unique_ptr<KvSequence> seq_;
  Tensor k_, v_;
};

void check_chunks(const KvLayerGeometry& g, int block_tokens, const std::vector<int64_t>& chunks,
                  KvCodec codec = KvCodec(KvCodecKind::kF32)) {
  KvCache cache(std::span(&g, 1), options(block_tokens, codec), host_kv_memory());
  Tracked t(cache, g);
  for (int64_t c : chunks) {
    t.step(c);
    if (g.window > 0) {
      // Blocks entirely before the window of the next query are gone.
      const int64_t needed_from = std::max<int64_t>(0, t.seq().length() - g.window + 1);
      EXPECT_LE(t.seq().first_stored_position(0), needed_from);
      EXPECT_GT(t.seq().first_stored_position(0) + 2 * block_tokens + c, needed_from);
    }
  }
}

TEST(KvCache, FullLayerMatchesDirectAttention) {
  for (int bt : {1, 4, 16, 64}) check_chunks({2, 8, 0}, bt, {5, 1, 1, 7, 1, 30, 2});
}
TEST(KvCache, SlidingLayerKeepsOnlyItsWindow) {
  for (int bt : {1, 4, 16}) check_chunks({1, 16, 6}, bt, {9, 1, 1, 1, 4, 1, 13, 1, 1, 1, 1, 1, 1, 1});
}
TEST(KvCache, Bf16StorageMatchesAttentionOverRoundedKeys) {
  check_chunks({2, 8, 0}, 4, {5, 1, 9, 1}, KvCodec(KvCodecKind::kBf16));
  check_chunks({1, 16, 6}, 4, {9, 1, 1, 4, 1}, KvCodec(KvCodecKind::kBf16));
}

// A fork sharing two full blocks and copying the partial third, steps on both, and a rewind, each step
// checked against attention over the tracked history.
void check_fork_and_rewind(const KvLayerGeometry& g, const KvCodec& codec) {
  KvCache cache(std::span(&g, 1), options(8, codec), host_kv_memory());
  Tracked t(cache, g);
  t.step(13);
  Tracked f = t.fork(11);
  f.step(3);
  t.step(1);
  t.truncate(6);
  t.step(4);
}

// Attention reads affine blocks directly (dequantizing inside its loop) and equals attention over the
// reference codec's dequantized history, bit for bit: full and sliding layers, every bits and group, blocks
// of 1 to 64 tokens, forks and rewinds.
TEST(KvCache, AffineStorageMatchesAttentionOverDequantizedKeys) {
  for (const char* spec : {"affine4", "affine8", "affine4:g32", "affine8:g128", "affine4:g128"}) {
    SCOPED_TRACE(spec);
    const KvCodec codec = KvCodec::parse(spec);
    check_chunks({2, 128, 0}, 4, {5, 1, 9, 1}, codec);
    check_chunks({1, 128, 6}, 4, {9, 1, 1, 4, 1}, codec);
    for (int bt : {1, 16, 64}) check_chunks({2, 128, 0}, bt, {20, 1, 1, 70, 1}, codec);
    check_fork_and_rewind({2, 128, 0}, codec);
  }
}

// TurboQuant blocks: attention over the codec's keys and rotated values (rotated back once per output row)
// equals attention over the decoded history, up to that rotation's rounding; every key and value width.
TEST(KvCache, TurboStorageMatchesAttentionOverDecodedKeys) {
  for (const char* spec : {"turbo", "turbo:k8v4", "turbo:k4v3", "turbo:k8v2", "turbo:k4v4"}) {
    SCOPED_TRACE(spec);
    const KvCodec codec = KvCodec::parse(spec);
    check_chunks({2, 64, 0}, 4, {5, 1, 9, 1}, codec);
    check_chunks({1, 128, 6}, 4, {9, 1, 1, 4, 1}, codec);
    check_chunks({2, 32, 0}, 16, {20, 1, 1, 40, 1}, codec);
    check_fork_and_rewind({2, 64, 0}, codec);
  }
}

// Attention over coded blocks gives a task as many query heads of a key head as keeps the threads busy, and
// decodes each row once for them: every thread count (one task per key head, or one per query head) gives
// the reference's result — bit for bit for affine blocks, within rounding for TurboQuant's.
TEST(KvCache, CodedAttentionHoldsForEveryThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE(threads);
    set_default_threads(threads);
    for (const char* spec : {"affine4", "turbo:k4v3"}) {
      SCOPED_TRACE(spec);
      const KvCodec codec = KvCodec::parse(spec);
      check_chunks({1, 64, 0}, 16, {20, 1, 1, 40, 1}, codec);
      check_chunks({3, 64, 0}, 4, {5, 1, 9, 1}, codec);
    }
  }
  set_default_threads(0);
}

// The host row codec gives the reference codec's codes, scales and biases, and its dequantized values, bit
// for bit.
TEST(KvCache, AffineRowCodecMatchesTheReference) {
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      const int d = 256;
      std::vector<std::vector<float>> rows;
      for (int i = 0; i < 12; ++i) rows.push_back(test::random_floats(d, -3.0f, 3.0f));
      rows.push_back(std::vector<float>(d, 0.0f));
      rows.push_back(std::vector<float>(d, -1.5f));  // constant and negative
      rows.push_back(std::vector<float>(d, 2.0f));
      rows.push_back(test::random_floats(d, -1e-8f, 1e-8f));  // below eps
      rows.push_back(test::random_floats(d, 100.0f, 300.0f));
      for (const auto& row : rows) {
        const quant::AffineQuantized ref = quant::quantize_affine(
            Tensor::from_vector(row, {1, d}), bits, group, DType::kBF16, quant::AffineRounding::kMlxGpu);
        std::vector<uint32_t> codes(static_cast<size_t>(d * bits / 32));
        std::vector<uint16_t> scales(static_cast<size_t>(d / group)), biases(scales.size());
        ops::cpu::quantize_affine_row(row.data(), d, bits, group, codes.data(), scales.data(), biases.data());
        ASSERT_EQ(0, std::memcmp(codes.data(), ref.codes.raw_data(), codes.size() * 4))
            << bits << "/" << group;
        ASSERT_EQ(0, std::memcmp(scales.data(), ref.scales.raw_data(), scales.size() * 2))
            << bits << "/" << group;
        ASSERT_EQ(0, std::memcmp(biases.data(), ref.biases.raw_data(), biases.size() * 2))
            << bits << "/" << group;
        std::vector<float> out(static_cast<size_t>(d));
        ops::cpu::dequantize_affine_row(codes.data(), scales.data(), biases.data(), d, bits, group,
                                        out.data());
        const Tensor expected = quant::dequantize_affine(ref);
        ASSERT_EQ(0, std::memcmp(out.data(), expected.raw_data(), out.size() * 4)) << bits << "/" << group;
        // The portable path too (dequantize_affine_row takes AVX2 vectors where the CPU has them).
        ops::cpu::dequantize_affine_row_portable(codes.data(), scales.data(), biases.data(), d, bits, group,
                                                 out.data());
        ASSERT_EQ(0, std::memcmp(out.data(), expected.raw_data(), out.size() * 4))
            << "portable " << bits << "/" << group;
      }
    }
}

TEST(KvCache, CodecSpecsNamesAndBytes) {
  EXPECT_EQ(KvCodec::parse("affine4").name(), "affine4:g64");
  EXPECT_EQ(KvCodec::parse("affine8:g32").name(), "affine8:g32");
  for (const char* spec : {"f32", "bf16", "affine4:g32", "affine4:g64", "affine4:g128", "affine8:g64"})
    EXPECT_EQ(KvCodec::parse(spec).name(), spec);
  // head_dim 256, 2 heads: codes 128 (4-bit) or 256 (8-bit) bytes plus a bf16 scale and bias per group.
  EXPECT_EQ(KvCodec::parse("affine4").token_bytes(2, 256), 2u * (128 + 4 * 4));
  EXPECT_EQ(KvCodec::parse("affine8:g32").token_bytes(2, 256), 2u * (256 + 4 * 8));
  EXPECT_EQ(KvCodec::parse("bf16").token_bytes(2, 256), 2u * 512);
  EXPECT_THROW(KvCodec::parse("affine4:g32").token_bytes(1, 48), InvalidArgument);
  EXPECT_EQ(KvCodec::parse("turbo").name(), "turbo:k8v3");
  for (const char* spec : {"turbo:k8v4", "turbo:k4v3", "turbo:k8v2", "turbo:k4v2"})
    EXPECT_EQ(KvCodec::parse(spec).name(), spec);
  // d = 128, k8v3: keys 128 + 4 blocks × (f16 scale + zero) = 144, values 48 + 4 × f16 σ = 56 (2.56× bf16).
  EXPECT_EQ(KvCodec::parse("turbo").token_bytes(1, 128), 144u);
  EXPECT_EQ(KvCodec::parse("turbo").token_bytes(1, 128, true), 56u);
  EXPECT_THROW(KvCodec::parse("turbo").token_bytes(1, 96), InvalidArgument);
  for (const char* bad : {"turbo:k8v5", "turbo:k2v3", "turbo:k8", "turbo:", "turbo:k8v3x", "turbo:v3k8"})
    EXPECT_THROW(KvCodec::parse(bad), InvalidArgument) << bad;
  for (const char* bad : {"affine", "affine3", "affine4:", "affine4:64", "affine4:g16", "affine4:g64x",
                          "affine16", "AFFINE4", "affine4:g"})
    EXPECT_THROW(KvCodec::parse(bad), InvalidArgument) << bad;
  KvLayout layout(std::vector<KvLayerGeometry>{{2, 256, 0}}, KvCodec::parse("affine4"), 16);
  EXPECT_EQ(layout.signature(0), "kv:affine4:g64:h=2:d=256");
  EXPECT_EQ(layout.bytes_per_token(), 2u * 2 * (128 + 16));
}

// A separate codec for the sliding-window layers: their signatures, offsets and bytes follow it; the full
// layers keep the main codec.
TEST(KvCache, SlidingLayersTakeTheirOwnCodec) {
  const std::vector<KvLayerGeometry> layers = {{1, 256, 512}, {2, 256, 0}, {1, 256, 512}};
  KvLayout layout(layers, KvCodec(KvCodecKind::kBf16), 16, KvCodec::parse("affine4"));
  EXPECT_EQ(layout.signature(0), "kv:affine4:g64:h=1:d=256:window=512");
  EXPECT_EQ(layout.signature(1), "kv:bf16:h=2:d=256");
  EXPECT_EQ(layout.codec_description(), "bf16, sliding affine4:g64");
  const size_t sliding = KvCodec::parse("affine4").token_bytes(1, 256);
  EXPECT_EQ(layout.layer(2).k_offset, 2 * 16 * sliding);
  EXPECT_EQ(layout.group(0).block_bytes, 4 * 16 * sliding);
  EXPECT_EQ(layout.bytes_per_token(), 4 * sliding + 2u * 2 * 256 * 2);
  KvLayout same(layers, KvCodec(KvCodecKind::kBf16), 16, KvCodec(KvCodecKind::kBf16));
  EXPECT_EQ(same.codec_description(), "bf16");
  // A sliding codec in a cache: attention over its blocks as ever.
  check_chunks({1, 128, 6}, 4, {9, 1, 1, 4, 1}, KvCodec::parse("affine8"));
}

TEST(KvCache, LayoutGroupsByWindowAndSignatures) {
  const std::vector<KvLayerGeometry> layers = {
      {1, 256, 512}, {2, 512, 0}, {1, 256, 512}, {1, 256, 512, 0}, {2, 512, 0, 1}};
  KvLayout layout(layers, KvCodec(KvCodecKind::kBf16), 16);
  EXPECT_EQ(layout.num_cache_layers(), 3);
  EXPECT_EQ(layout.num_groups(), 2);
  EXPECT_EQ(layout.cache_layer_of(3), 0);  // shares layer 0's cache
  EXPECT_EQ(layout.cache_layer_of(4), 1);
  EXPECT_FALSE(layout.owns_cache(3));
  EXPECT_TRUE(layout.owns_cache(2));
  EXPECT_EQ(layout.signature(0), "kv:bf16:h=1:d=256:window=512");
  EXPECT_EQ(layout.signature(1), "kv:bf16:h=2:d=512");
  EXPECT_EQ(layout.group(0).layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.group(0).block_bytes, 2u * 2 * 16 * 256 * 2);
  EXPECT_EQ(layout.layer(2).k_offset, 2u * 16 * 256 * 2);
  EXPECT_EQ(layout.layer(2).v_offset, 3u * 16 * 256 * 2);
  EXPECT_EQ(layout.bytes_per_token(), 2u * (256 + 256 + 1024) * 2);
  EXPECT_THROW(KvLayout(std::vector<KvLayerGeometry>{{1, 4, 0, 0}}, KvCodec(), 16),
               InvalidArgument);  // self donor
  EXPECT_THROW(KvLayout(std::vector<KvLayerGeometry>{{1, 4, 0}, {1, 8, 0, 0}}, KvCodec(), 16),
               InvalidArgument);
  EXPECT_THROW(KvLayout(std::vector<KvLayerGeometry>{{0, 4, 0}}, KvCodec(), 16), InvalidArgument);
  EXPECT_THROW(KvLayout(std::vector<KvLayerGeometry>{{1, 4, 0}}, KvCodec(), 0), InvalidArgument);
  EXPECT_EQ(KvCodec::parse("bf16"), KvCodec(KvCodecKind::kBf16));
  EXPECT_THROW(KvCodec::parse("fp8"), InvalidArgument);
}

TEST(KvCache, TruncateAcrossBlockBoundaries) {
  const KvLayerGeometry g{1, 4, 0};
  KvCache cache(std::span(&g, 1), options(4), host_kv_memory());
  Tracked t(cache, g);
  t.step(10);  // blocks 0..2
  EXPECT_EQ(t.seq().blocks(0).size(), 3u);
  t.truncate(8);  // block 2 released
  EXPECT_EQ(t.seq().blocks(0).size(), 2u);
  EXPECT_EQ(cache.pool().used_blocks(0), 2);
  t.truncate(5);
  EXPECT_EQ(t.seq().blocks(0).size(), 2u);  // block 1 still holds position 4
  t.step(6);                                // rewrites positions 5..10
  t.truncate(0);
  EXPECT_EQ(cache.pool().used_blocks(0), 0);
  t.step(3);
  EXPECT_THROW(t.seq().truncate(4), InvalidArgument);
  EXPECT_THROW(t.seq().truncate(-1), InvalidArgument);
}

// Rewinding a sliding layer is refused once its released blocks held keys the next query sees, with the
// reason, and allowed while they are held.
TEST(KvCache, TruncateRespectsTheWindow) {
  const KvLayerGeometry g{1, 4, 8};
  KvCache cache(std::span(&g, 1), options(4), host_kv_memory());
  Tracked t(cache, g);
  t.step(26);
  t.step(1);  // the query at 26 sees keys from 19: blocks 0..3 (positions < 16) released
  EXPECT_EQ(t.seq().first_stored_position(0), 16);
  const std::string why = t.seq().truncate_refusal(20);  // the query at 20 needs keys from 13
  EXPECT_NE(why.find("released positions before 16"), std::string::npos) << why;
  EXPECT_THROW(t.seq().truncate(20), InvalidArgument);
  EXPECT_TRUE(t.seq().can_truncate(23));  // needs keys from 16
  t.truncate(23);
  t.step(2);
  EXPECT_TRUE(t.seq().can_truncate(0));
}

TEST(KvCache, ForkSharesBlocksAndCopiesOnWrite) {
  const KvLayerGeometry g{2, 8, 0};
  KvCache cache(std::span(&g, 1), options(4), host_kv_memory());
  Tracked a(cache, g);
  a.step(10);  // 3 blocks, the last partial
  Tracked b = a.fork(10);
  EXPECT_EQ(cache.pool().used_blocks(0), 3);
  for (KvBlockId id : b.seq().blocks(0)) EXPECT_EQ(cache.pool().refcount(id), 2);
  b.step(1);  // b copies the shared partial block before writing position 10
  EXPECT_EQ(cache.pool().used_blocks(0), 4);
  EXPECT_NE(a.seq().blocks(0)[2], b.seq().blocks(0)[2]);
  EXPECT_EQ(a.seq().blocks(0)[1], b.seq().blocks(0)[1]);
  a.step(3);  // a's partial block is its own again: no copy
  EXPECT_EQ(cache.pool().used_blocks(0), 5);
  Tracked c = a.fork(6);  // mid-block fork of a's older history
  c.step(5);
  b.step(2);
  a.step(1);
  // Releasing every sequence frees every block.
  a = Tracked(cache, g);
  b = Tracked(cache, g);
  c = Tracked(cache, g);
  EXPECT_EQ(cache.pool().used_blocks(0), 0);
  EXPECT_GT(cache.pool().free_blocks(0), 0);
}

TEST(KvCache, ForkOfASlidingSequence) {
  const KvLayerGeometry g{1, 4, 5};
  KvCache cache(std::span(&g, 1), options(2), host_kv_memory());
  Tracked a(cache, g);
  a.step(12);
  a.step(1);
  EXPECT_THROW(cache.fork(a.seq(), 3), InvalidArgument);  // its keys from 0 are gone
  Tracked b = a.fork(12);
  b.step(3);
  a.step(2);
}

TEST(KvCache, ExhaustionIsTypedAndChangesNothing) {
  const KvLayerGeometry g{1, 4, 0};
  const size_t block = 2 * 4 * 4 * 4;  // K and V of 4 tokens, f32
  KvCache cache(std::span(&g, 1), options(4, KvCodec(), 3 * block), host_kv_memory());
  Tracked a(cache, g);
  a.step(8);  // 2 blocks
  auto other = cache.new_sequence();
  KvRow big{other.get(), 9};  // needs 3 more
  try {
    cache.prepare({&big, 1});
    FAIL() << "the pool had room for 9 tokens";
  } catch (const KvPoolExhausted& e) {
    EXPECT_EQ(e.needed_bytes(), 3 * block);
    EXPECT_EQ(e.budget_bytes(), 3 * block);
    EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos);
  }
  EXPECT_TRUE(other->blocks(0).empty());
  EXPECT_EQ(cache.pool().used_blocks(0), 2);
  KvRow small{other.get(), 4};
  EXPECT_NO_THROW(cache.prepare({&small, 1}));
  a = Tracked(cache, g);  // frees 2 blocks
  KvCache::commit({&small, 1});
  KvRow more{other.get(), 8};
  EXPECT_NO_THROW(cache.prepare({&more, 1}));
}

TEST(KvCache, BlocksMoveBetweenGroupsUnderTheBudget) {
  const std::vector<KvLayerGeometry> layers = {{1, 4, 0}, {1, 4, 2}};
  const size_t block = 2 * 4 * 4 * 4;
  KvCache cache(layers, options(4, KvCodec(), 8 * block), host_kv_memory());
  auto s = cache.new_sequence();
  KvRow r{s.get(), 16};
  cache.prepare({&r, 1});  // 4 blocks in each group: the whole budget
  KvCache::commit({&r, 1});
  KvRow one{s.get(), 1};
  // The sliding group releases 3 blocks (the query at 16 sees keys from 15); the full group's new block
  // takes the memory of one of them, the sliding group's new block reuses another.
  cache.prepare({&one, 1});
  KvCache::commit({&one, 1});
  EXPECT_EQ(cache.pool().used_blocks(0), 5);
  EXPECT_EQ(cache.pool().used_blocks(1), 2);
  EXPECT_EQ(cache.pool().free_blocks(1), 1);
  EXPECT_EQ(cache.pool().held_bytes(), 8 * block);
  auto t = cache.new_sequence();
  KvRow too_big{t.get(), 5};  // 2 blocks per group; only one is free
  EXPECT_THROW(cache.prepare({&too_big, 1}), KvPoolExhausted);
  EXPECT_TRUE(t->blocks(0).empty() && t->blocks(1).empty());
}

// A memory that runs out before the budget: the pool reports exhaustion instead of failing.
class TinyMemory final : public KvMemory {
 public:
  explicit TinyMemory(int blocks) : left_(blocks) {}
  void* allocate(size_t bytes) override { return left_-- > 0 ? inner_->allocate(bytes) : nullptr; }
  void free(void* p, size_t bytes) override {
    ++left_;
    inner_->free(p, bytes);
  }
  void copy(void* d, const void* s, size_t n) override { inner_->copy(d, s, n); }
  void read(void* h, const void* s, size_t n) override { inner_->read(h, s, n); }
  void write(void* d, const void* h, size_t n) override { inner_->write(d, h, n); }
  std::string name() const override { return "tiny"; }
  size_t available_bytes() const override { return 0; }

 private:
  int left_;
  std::shared_ptr<KvMemory> inner_ = host_kv_memory();
};

TEST(KvCache, DeviceOutOfMemoryIsExhaustion) {
  const KvLayerGeometry g{1, 4, 0};
  KvCache cache(std::span(&g, 1), options(4), std::make_shared<TinyMemory>(2));
  auto s = cache.new_sequence();
  KvRow r{s.get(), 12};
  EXPECT_THROW(cache.prepare({&r, 1}), KvPoolExhausted);
}

TEST(KvCache, RejectsForeignAndBadRows) {
  const KvLayerGeometry g{2, 8, 0};
  KvCache cache(std::span(&g, 1), options(4), host_kv_memory());
  KvCache other(std::span(&g, 1), options(4), host_kv_memory());
  auto foreign = other.new_sequence();
  KvRow bad{foreign.get(), 3};
  EXPECT_THROW(cache.prepare({&bad, 1}), InvalidArgument);
  EXPECT_THROW(cache.own(foreign.get()), InvalidArgument);
  auto seq = cache.new_sequence();
  KvRow empty{seq.get(), 0};
  EXPECT_THROW(cache.prepare({&empty, 1}), InvalidArgument);
  KvRow twice[2] = {{seq.get(), 1}, {seq.get(), 1}};
  EXPECT_THROW(cache.prepare(twice), InvalidArgument);
  KvRow row{seq.get(), 3};
  cache.prepare({&row, 1});
  const HostKvStep host(cache, {&row, 1});
  Tensor wrong = test::random_tensor({3, 8});
  EXPECT_THROW(ops::paged_kv_append(host.step(), host.layer(0), wrong, wrong), InvalidArgument);
}

// ---- Quantization start ------------------------------------------------------------------------------

KvCacheOptions quant_start_options(KvCodec codec, int64_t start, size_t budget = 64 << 20) {
  KvCacheOptions o = options(4, codec, budget);
  o.quant_start = start;
  return o;
}

TEST(KvCacheQuantStart, Bf16UntilTheStartThenTheCodecOfTheBf16History) {
  for (const KvLayerGeometry& g : {KvLayerGeometry{2, 32, 0}, KvLayerGeometry{1, 32, 6}}) {
    for (const KvCodec codec : {KvCodec::affine(4, 32), KvCodec::affine(8, 32), KvCodec::turbo(8, 3)}) {
      SCOPED_TRACE(codec.name() + " window " + std::to_string(g.window));
      KvCache cache(std::span(&g, 1), quant_start_options(codec, 10), host_kv_memory());
      EXPECT_EQ(cache.codec_description(), codec.name() + ", bf16 below 10 tokens");
      Tracked t(cache, g);  // checks attention against its history after every step
      EXPECT_TRUE(t.seq().before_quant_start());
      EXPECT_EQ(cache.layout_of(t.seq()).codec(), KvCodec(KvCodecKind::kBf16));
      t.step(3);
      t.step(3);
      EXPECT_EQ(cache.step_limit(t.seq()), 4);
      t.step(4);  // exactly to the start: still bf16
      EXPECT_TRUE(t.seq().before_quant_start());
      EXPECT_EQ(t.seq().min_reusable_offset(), 0);
      EXPECT_EQ(cache.step_phase(t.seq()), 1);  // its next step converts it
      t.step(1);
      EXPECT_FALSE(t.seq().before_quant_start());
      EXPECT_EQ(cache.layout_of(t.seq()).codec(), codec);
      EXPECT_EQ(t.seq().min_reusable_offset(), 10);
      t.step(5);
      t.step(1);
      EXPECT_EQ(cache.pool().used_blocks(1), 0);  // the bf16 blocks went back
    }
  }
}

TEST(KvCacheQuantStart, NothingRewindsForksOrCrossesBelowTheStart) {
  const KvLayerGeometry g{1, 32, 0};
  KvCache cache(std::span(&g, 1), quant_start_options(KvCodec::affine(4, 32), 8), host_kv_memory());
  Tracked t(cache, g);
  t.step(6);
  KvRow crossing{&t.seq(), 3};
  EXPECT_THROW(cache.prepare({&crossing, 1}), InvalidArgument);  // 6 + 3 crosses 8
  t.truncate(2);                                                 // before the start, rewinding is free
  t.step(6);
  t.step(1);  // converts at 8
  EXPECT_FALSE(t.seq().can_truncate(7));
  EXPECT_NE(t.seq().truncate_refusal(7).find("minimum reusable offset 8"), std::string::npos)
      << t.seq().truncate_refusal(7);
  EXPECT_THROW(cache.fork(t.seq(), 5), InvalidArgument);
  Tracked b = t.fork(8);  // at the start itself: the converted history
  EXPECT_FALSE(b.seq().before_quant_start());
  b.step(2);
  t.truncate(8);
  t.step(3);
  // Rows on both sides of the start never share a step.
  auto fresh = cache.new_sequence();
  KvRow both[2] = {{&t.seq(), 1}, {fresh.get(), 1}};
  EXPECT_THROW(cache.prepare(both), InvalidArgument);
}

TEST(KvCacheQuantStart, ConversionThatDoesNotFitChangesNothing) {
  const KvLayerGeometry g{1, 32, 0};
  const KvCodec codec = KvCodec::affine(8, 32);
  const size_t bf16_block = 2 * 4 * 32 * 2,
               affine_block = 4 * (codec.token_bytes(1, 32) + codec.token_bytes(1, 32, /*values=*/true));
  // Two bf16 blocks fit, and one converted block beside them, but not the two the conversion needs.
  KvCache cache(std::span(&g, 1), quant_start_options(codec, 8, 2 * bf16_block + affine_block + 1),
                host_kv_memory());
  Tracked t(cache, g);
  t.step(8);
  KvRow next{&t.seq(), 1};
  EXPECT_THROW(cache.prepare({&next, 1}), KvPoolExhausted);
  EXPECT_TRUE(t.seq().before_quant_start());
  EXPECT_EQ(t.seq().blocks(0).size(), 2u);
  EXPECT_EQ(cache.pool().used_blocks(0), 0);
}

TEST(KvCacheQuantStart, PrefixReuseTakesAConvertedPrefixFromTheStartOnElseABf16One) {
  const KvLayerGeometry g{1, 32, 0};
  KvCacheOptions o = quant_start_options(KvCodec::affine(4, 32), 8);
  o.prefix_cache_bytes = size_t{1} << 20;
  KvCache cache(std::span(&g, 1), o, host_kv_memory());
  std::vector<int32_t> tokens(14);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(100 + i);
  Tracked t(cache, g);
  t.step(8);
  cache.cache_prefix(t.seq(), tokens);  // its bf16 blocks
  t.step(6);                            // converts, then 14 positions
  cache.cache_prefix(t.seq(), tokens, /*finished=*/true);
  // All 14 tokens shared: the converted sequence's blocks.
  std::vector<int32_t> longer = tokens;
  longer.push_back(7);
  auto converted = cache.reuse_prefix(longer, 14);
  ASSERT_NE(converted, nullptr);
  EXPECT_EQ(converted->length(), 14);
  EXPECT_FALSE(converted->before_quant_start());
  EXPECT_EQ(converted->min_reusable_offset(), 8);
  // Six shared: below the start, the bf16 blocks.
  std::vector<int32_t> early(tokens.begin(), tokens.begin() + 6);
  early.push_back(1);
  early.push_back(2);
  auto bf16 = cache.reuse_prefix(early, 7);
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->length(), 6);
  EXPECT_TRUE(bf16->before_quant_start());
  const KvPrefixStats stats = cache.prefix_stats();
  EXPECT_EQ(stats.lookups, 2);
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.reused_tokens, 20);
}

TEST(KvCacheQuantStart, RefusedWithoutAQuantizedCodec) {
  const KvLayerGeometry g{1, 32, 0};
  try {
    KvCache cache(std::span(&g, 1), quant_start_options(KvCodec(KvCodecKind::kBf16), 8), host_kv_memory());
    FAIL() << "a bf16 cache took a quantization start";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs a quantized KV codec"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmx
