// GPU tests for cuda::attention_with_inputs (lmx/ops/cuda/attention.h): the single-token decode kernel that
// takes attention_inputs' work itself against attention_inputs followed by attention — the same output bits
// and the same cache bits — on Gemma 4's shapes and the edges of the kernel: the new row in the first, a
// middle and the last chunk slot, histories folded in a cluster and by the combine kernel, a sliding window,
// two head blocks per kv head, head dims that leave padded columns, keys equal to values, a layer that reads
// another layer's cache (no append), a query that does not see its own row or sees no key at all. Also the
// calls it runs unfused and the inputs it rejects. (attention_inputs and attention are each tested against
// the CPU in elementwise_test.cpp and attention_test.cpp.) Skipped when no CUDA device is visible.
#include "lmx/core/error.h"
#include "lmx/core/half.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/paged_arrays.h"
#include "lmx/ops/cuda/tuning.h"
#include "lmx/ops/ops.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace lmx {
namespace {

using cuda::DeviceBuffer;

constexpr uint16_t kBf16NaN = 0x7fc0;  // never-written cache slots

struct Case {
  int heads, kv_heads, dim, window;
  int pos, kv_len, capacity;  // the query's position, the sequence's kv_len, the cache's slots (= max_kv_len)
  bool own_kv = true;         // the call appends its key and value (else the row at pos is already cached)
  bool k_eq_v = false;        // values are the keys before their norm (one input for both)
};

std::string describe(const Case& c) {
  return "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " dim " +
         std::to_string(c.dim) + " window " + std::to_string(c.window) + " pos " + std::to_string(c.pos) +
         " kv_len " + std::to_string(c.kv_len) + " capacity " + std::to_string(c.capacity) +
         (c.own_kv ? "" : " shared kv") + (c.k_eq_v ? " k_eq_v" : "");
}

// One call's host inputs: the stacked q | k | v projection row, norm weights, RoPE frequencies, caches.
struct Inputs {
  std::vector<float> x, q_norm, k_norm, inv_freq;
  std::vector<uint16_t> k_cache, v_cache;
};

// `tokens` query tokens at positions pos, pos + 1, ... (x holds that many stacked rows).
Inputs make_inputs(const Case& c, int tokens = 1) {
  Inputs in;
  const int64_t width = int64_t{c.heads + 2 * c.kv_heads} * c.dim;
  in.x = test::random_floats(static_cast<size_t>(tokens * width), -3.0f, 3.0f);
  in.q_norm = test::random_floats(static_cast<size_t>(c.dim), 0.5f, 1.5f);
  in.k_norm = test::random_floats(static_cast<size_t>(c.dim), 0.5f, 1.5f);
  in.inv_freq = ops::rope_inv_freq(c.dim, 10000.0, c.dim / 4);  // a quarter of the pairs rotate
  const size_t row = static_cast<size_t>(c.kv_heads) * static_cast<size_t>(c.dim);
  in.k_cache.assign(static_cast<size_t>(c.capacity) * row, kBf16NaN);
  in.v_cache = in.k_cache;
  const int written = c.own_kv ? c.pos : c.pos + tokens;  // rows older than this call (and the shared rows)
  const std::vector<float> k = test::random_floats(static_cast<size_t>(written) * row, -1.0f, 1.0f);
  const std::vector<float> v = test::random_floats(static_cast<size_t>(written) * row, -1.0f, 1.0f);
  for (size_t i = 0; i < k.size(); ++i) in.k_cache[i] = f32_to_bf16(k[i]), in.v_cache[i] = f32_to_bf16(v[i]);
  return in;
}

// Device copies of `in` and the batch and inputs of an attention_with_inputs call over them.
struct DeviceCall {
  DeviceBuffer x, q_norm, k_norm, inv_freq, pos, seq, kv_len, out, partials;
  std::unique_ptr<cuda::PagedArrays> k_cache, v_cache;  // blocks of 64 tokens
  cuda::AttentionBatch batch;
  cuda::AttentionInputs inputs;
  size_t partials_bytes = 0;

  DeviceCall(const Case& c, const Inputs& in, int tokens = 1) {
    const int64_t qw = int64_t{c.heads} * c.dim, kvw = int64_t{c.kv_heads} * c.dim;
    x = cuda::upload_vector(in.x);
    q_norm = cuda::upload_vector(in.q_norm);
    k_norm = cuda::upload_vector(in.k_norm);
    inv_freq = cuda::upload_vector(in.inv_freq);
    k_cache = std::make_unique<cuda::PagedArrays>(std::vector<std::vector<uint16_t>>{in.k_cache}, kvw, 64);
    v_cache = std::make_unique<cuda::PagedArrays>(std::vector<std::vector<uint16_t>>{in.v_cache}, kvw, 64);
    std::vector<int32_t> positions(static_cast<size_t>(tokens));
    for (int t = 0; t < tokens; ++t) positions[static_cast<size_t>(t)] = c.pos + t;
    pos = cuda::upload_vector(positions);
    seq = cuda::upload_vector(std::vector<int32_t>(static_cast<size_t>(tokens), 0));
    kv_len = cuda::upload_vector(std::vector<int32_t>{c.kv_len});
    out = cuda::upload_vector(std::vector<float>(static_cast<size_t>(tokens * qw), -1.0f));
    batch.q = x.as<float>();
    batch.q_stride = qw + 2 * kvw;
    batch.out = out.as<float>();
    batch.tokens = tokens;
    batch.heads = c.heads;
    batch.kv_heads = c.kv_heads;
    batch.head_dim = c.dim;
    batch.q_pos = pos.as<int32_t>();
    batch.q_seq = seq.as<int32_t>();
    batch.k = k_cache->store();
    batch.v = v_cache->store();
    batch.kv_len = kv_len.as<int32_t>();
    batch.max_kv_len = c.capacity;
    batch.window = c.window;
    batch.scale = 1.0f;
    inputs.q = x.as<float>();
    inputs.q_norm = q_norm.as<float>();
    if (c.own_kv) {
      inputs.k = x.as<float>() + qw;
      inputs.v = c.k_eq_v ? inputs.k : inputs.k + kvw;
      inputs.kv_stride = batch.q_stride;
      inputs.k_norm = k_norm.as<float>();
    }
    inputs.inv_freq = inv_freq.as<float>();
    inputs.eps = 1e-6f;
    partials_bytes = cuda::attention_partials_bytes(batch);
    partials = DeviceBuffer(partials_bytes);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

struct Result {
  bool fused = false;
  std::vector<float> out;
  std::vector<uint16_t> k_cache, v_cache;
};

class CudaAttentionInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx_ = std::make_unique<cuda::CudaContext>(0);
  }

  // attention_with_inputs on fresh device copies of `in`.
  Result run(const Case& c, const Inputs& in, cuda::InputsFusion fusion) {
    DeviceCall call(c, in);
    Result r;
    r.fused = cuda::attention_with_inputs(call.batch, call.inputs, call.partials.as<float>(),
                                          call.partials_bytes, ctx_->stream(), fusion);
    ctx_->synchronize();
    r.out = cuda::download_vector<float>(call.out, static_cast<size_t>(c.heads) * static_cast<size_t>(c.dim));
    const int64_t rows = static_cast<int64_t>(in.k_cache.size()) / (int64_t{c.kv_heads} * c.dim);
    r.k_cache = call.k_cache->download(0, rows);
    r.v_cache = call.v_cache->download(0, rows);
    return r;
  }

  std::unique_ptr<cuda::CudaContext> ctx_;
};

const Case kCases[] = {
    // E4B-like sliding layer: 8 heads on 2 kv heads of 256.
    {8, 2, 256, 0, 0, 1, 64},                    // the first token: its own row is the only key
    {8, 2, 256, 0, 63, 64, 1024},                // the new row last in the first chunk
    {8, 2, 256, 0, 64, 65, 1024},                // first in the second
    {8, 2, 256, 0, 1000, 1001, 1024},            // 16 chunk slots, folded in one cluster
    {8, 2, 256, 0, 1500, 1501, 2048},            // 24 chunks of 32 slots: the combine kernel folds them
    {8, 2, 256, 512, 1000, 1001, 1024},          // sliding window of 512 keys
    {16, 2, 512, 0, 300, 301, 512, true, true},  // a global layer: head_dim 512, keys equal to values
    {8, 8, 64, 0, 200, 201, 256},                // one warp per block (tier 64)
    {32, 1, 128, 0, 130, 131, 256},              // 32 heads of one kv head: two head blocks, one appends
    {8, 4, 96, 0, 77, 78, 128},                  // tier 128 with padded columns
    {4, 2, 16, 0, 9, 10, 32},                    // the tiny test models' sliding dim (tier 32)
    {8, 2, 256, 0, 500, 501, 1024, false},       // a layer that reads another layer's cache: no append
    {8, 2, 256, 0, 500, 500, 1024},  // kv_len 500: the query does not see its own row (still appended)
    {8, 2, 256, 0, 5, 0, 64},        // kv_len 0: no key visible, the row still appended
    {8, 2, 256, 0, 5, 0, 2048},      // the same without a cluster
};

TEST_F(CudaAttentionInputs, FusedMatchesTwoCallsBitForBit) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c);
    const Result two = run(c, in, cuda::InputsFusion::kNever), one = run(c, in, cuda::InputsFusion::kAlways);
    EXPECT_FALSE(two.fused);
    ASSERT_TRUE(one.fused) << "a single-token decode call must fuse";
    ASSERT_EQ(one.out.size(), two.out.size());
    int bad = 0;
    for (size_t i = 0; i < one.out.size() && bad < 5; ++i)
      if (std::bit_cast<uint32_t>(one.out[i]) != std::bit_cast<uint32_t>(two.out[i])) {
        ADD_FAILURE() << "out[" << i << "]: fused " << one.out[i] << " two calls " << two.out[i];
        ++bad;
      }
    EXPECT_EQ(one.k_cache, two.k_cache) << "k cache";
    EXPECT_EQ(one.v_cache, two.v_cache) << "v cache";
    // The two calls did append (or, reading another layer's cache, left it alone), and attention ran.
    const size_t row = static_cast<size_t>(c.kv_heads) * static_cast<size_t>(c.dim);
    const size_t at = static_cast<size_t>(c.pos) * row;
    if (c.own_kv) {
      EXPECT_NE(two.k_cache[at], kBf16NaN) << "the new key row was not appended";
    } else {
      EXPECT_EQ(two.k_cache, in.k_cache);
    }
    EXPECT_NE(std::bit_cast<uint32_t>(two.out[0]), std::bit_cast<uint32_t>(-1.0f));
  }
}

// InputsFusion::kAuto fuses a single-token call unless its split-KV grid folds in clusters over more than 64
// blocks (attention.cu): 16 kv heads × 8 slots (clusters of 8, which every sm_90 device holds) run two
// kernels, the same heads over 32 slots (no clusters) and 2 kv heads × 8 slots one. The same bits either way.
TEST_F(CudaAttentionInputs, AutoDeclinesLargeClusterGrids) {
  const cuda::CudaTuning::Attention& rules = cuda::tuning().attention;
  if (rules.fused_inputs != cuda::Choice::kAuto || rules.fused_inputs_max_cluster_blocks != 64)
    GTEST_SKIP() << "the tuning table replaces the rule";
  const struct {
    Case c;
    bool fused;
  } cases[] = {{{32, 16, 128, 0, 400, 401, 512}, false},
               {{32, 16, 128, 0, 1500, 1501, 2048}, true},
               {{8, 2, 128, 0, 400, 401, 512}, true}};
  for (const auto& [c, fused] : cases) {
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c);
    const Result automatic = run(c, in, cuda::InputsFusion::kAuto),
                 two = run(c, in, cuda::InputsFusion::kNever);
    EXPECT_EQ(automatic.fused, fused);
    EXPECT_EQ(automatic.k_cache, two.k_cache);
    ASSERT_EQ(automatic.out.size(), two.out.size());
    for (size_t i = 0; i < two.out.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(automatic.out[i]), std::bit_cast<uint32_t>(two.out[i]))
          << "out[" << i << "]";
  }
}

// Calls with more than one query token, or past the split-KV path, run the two kernels (and say so); with
// InputsFusion::kNever a single token does too. Inconsistent inputs are rejected before any launch.
TEST_F(CudaAttentionInputs, UnfusedCallsAndRejects) {
  const Case c{8, 2, 256, 0, 10, 12, 64};
  EXPECT_FALSE(run(c, make_inputs(c), cuda::InputsFusion::kNever).fused);

  DeviceCall two_tokens(c, make_inputs(c, 2), 2);
  const cuda::AttentionBatch& batch = two_tokens.batch;
  const cuda::AttentionInputs& inputs = two_tokens.inputs;
  float* partials = two_tokens.partials.as<float>();
  const size_t bytes = two_tokens.partials_bytes;
  const cudaStream_t s = ctx_->stream();
  EXPECT_FALSE(cuda::attention_with_inputs(batch, inputs, partials, bytes, s,
                                           cuda::InputsFusion::kAlways));  // two tokens
  ctx_->synchronize();

  cuda::AttentionInputs bad = inputs;
  bad.v = nullptr;  // keys without values
  EXPECT_THROW(cuda::attention_with_inputs(batch, bad, partials, bytes, s), InvalidArgument);
  bad = inputs;
  bad.q = inputs.k;  // not the batch's q
  EXPECT_THROW(cuda::attention_with_inputs(batch, bad, partials, bytes, s), InvalidArgument);
  bad = inputs;
  bad.inv_freq = nullptr;
  EXPECT_THROW(cuda::attention_with_inputs(batch, bad, partials, bytes, s), InvalidArgument);
  EXPECT_THROW(cuda::attention_with_inputs(batch, inputs, partials, bytes / 2, s), InvalidArgument);
  ctx_->synchronize();
}

}  // namespace
}  // namespace lmx
