// Tests for the f32 KV cache: append/attend against direct attention, sliding-window retention,
// KV-sharing consumers, truncation and signatures.
#include "lmx/kv/kv_cache.h"
#include "lmx/ops/ops.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

namespace lmx {
namespace {

std::vector<int32_t> iota_positions(int64_t from, int64_t count) {
  std::vector<int32_t> p(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(from + i);
  return p;
}

// Feeds a sequence in chunks and checks every step's attention against ops::attention over the
// full history held outside the cache.
void check_chunks(const KvLayerSpec& spec, const std::vector<int64_t>& chunks) {
  KvCache cache({spec});
  auto seq = cache.new_sequence();
  const int q_heads = spec.num_kv_heads * 2;
  int64_t total = 0;
  for (int64_t c : chunks) total += c;
  Tensor all_k = test::random_tensor({total, spec.num_kv_heads, spec.head_dim});
  Tensor all_v = test::random_tensor({total, spec.num_kv_heads, spec.head_dim});
  int64_t done = 0;
  for (int64_t c : chunks) {
    KvRow row{seq.get(), c};
    cache.append(0, {&row, 1}, all_k.slice(0, done, done + c).contiguous(), all_v.slice(0, done, done + c).contiguous());
    Tensor q = test::random_tensor({c, q_heads, spec.head_dim});
    Tensor out = Tensor::zeros(q.shape(), DType::kF32);
    cache.attend(0, {&row, 1}, q, 1.0f, out);
    Tensor expected = Tensor::zeros(q.shape(), DType::kF32);
    auto qp = iota_positions(done, c), kp = iota_positions(0, done + c);
    ops::attention(q, all_k.slice(0, 0, done + c), all_v.slice(0, 0, done + c), qp, kp, spec.sliding_window, 1.0f,
                   expected);
    EXPECT_LE(test::max_abs_diff(out, expected), 1e-5f) << "after " << done << " + " << c;
    KvCache::commit({&row, 1});
    done += c;
    if (spec.sliding_window > 0) {
      EXPECT_LE(seq->stored_tokens(0), spec.sliding_window - 1 + c);
    }
  }
  EXPECT_EQ(seq->length(), total);
}

TEST(KvCache, FullLayerMatchesDirectAttention) { check_chunks({2, 8, 0}, {5, 1, 1, 7, 1}); }
TEST(KvCache, SlidingLayerKeepsOnlyItsWindow) { check_chunks({1, 16, 6}, {9, 1, 1, 1, 4, 1, 13, 1}); }

TEST(KvCache, Signatures) {
  KvCache cache({{1, 256, 512}, {2, 512, 0}});
  EXPECT_EQ(cache.signature(0), "kv:f32:h=1:d=256:window=512");
  EXPECT_EQ(cache.signature(1), "kv:f32:h=2:d=512");
}

TEST(KvCache, TruncateRewinds) {
  KvCache cache({{1, 4, 0}, {1, 4, 3}});
  auto seq = cache.new_sequence();
  KvRow row{seq.get(), 10};
  Tensor k = test::random_tensor({10, 1, 4});
  cache.append(0, {&row, 1}, k, k);
  cache.append(1, {&row, 1}, k, k);
  KvCache::commit({&row, 1});
  seq->truncate(8);
  EXPECT_EQ(seq->length(), 8);
  EXPECT_EQ(seq->stored_tokens(0), 8);
  EXPECT_THROW(seq->truncate(9), InvalidArgument);
  // The sliding layer kept all 10 tokens of the single chunk; rewinding below what it holds fails
  // only once the window has dropped tokens.
  KvRow one{seq.get(), 1};
  Tensor k1 = test::random_tensor({1, 1, 4});
  cache.append(0, {&one, 1}, k1, k1);
  cache.append(1, {&one, 1}, k1, k1);
  KvCache::commit({&one, 1});
  EXPECT_THROW(seq->truncate(2), InvalidArgument);
}

TEST(KvCache, RejectsMismatchedShapes) {
  KvCache cache({{2, 8, 0}});
  auto seq = cache.new_sequence();
  KvRow row{seq.get(), 3};
  Tensor k = test::random_tensor({3, 1, 8});
  EXPECT_THROW(cache.append(0, {&row, 1}, k, k), InvalidArgument);
  KvCache other({{2, 8, 0}});
  auto foreign = other.new_sequence();
  KvRow bad{foreign.get(), 3};
  Tensor ok = test::random_tensor({3, 2, 8});
  EXPECT_THROW(cache.append(0, {&bad, 1}, ok, ok), InvalidArgument);
}

}  // namespace
}  // namespace lmx

namespace lmx {
namespace {

// Rewinding a sliding layer is refused once the window has dropped keys the next query would see,
// and allowed while it still holds them.
TEST(KvCache, TruncateRespectsTheWindow) {
  KvCache cache({{1, 4, 8}});
  auto seq = cache.new_sequence();
  Tensor k = test::random_tensor({26, 1, 4});
  KvRow prefill{seq.get(), 26};
  cache.append(0, {&prefill, 1}, k, k);
  KvCache::commit({&prefill, 1});
  Tensor k1 = test::random_tensor({1, 1, 4});
  KvRow step{seq.get(), 1};
  cache.append(0, {&step, 1}, k1, k1);  // drops keys below 26 - 8 + 1 = 19
  KvCache::commit({&step, 1});
  EXPECT_THROW(seq->truncate(20), InvalidArgument);  // the query at 20 needs keys from 13
  EXPECT_NO_THROW(seq->truncate(26));                // the query at 26 needs keys from 19
  EXPECT_EQ(seq->length(), 26);
}

}  // namespace
}  // namespace lmx
