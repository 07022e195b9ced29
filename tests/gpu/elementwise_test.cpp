// GPU tests for the CUDA elementwise op set (lmx/ops/cuda/elementwise.h): each op on fresh random
// inputs of odd and large shapes, strided and misaligned views, against its CPU twin in lmx::ops.
// Skipped when no CUDA device is visible.
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/core/half.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/paged_arrays.h"
#include "lmx/ops/ops.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace lmx {
namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
// Fills output padding so tests can check that ops never write outside their rows.
constexpr uint32_t kSentinelBits = 0x7fa5a5a5u;  // a signalling-NaN payload no op produces

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }
float sentinel() { return std::bit_cast<float>(kSentinelBits); }

class CudaElementwise : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx_ = std::make_unique<cuda::CudaContext>(0);
  }

  cudaStream_t stream() const { return ctx_->stream(); }

  // A device copy of `host`, complete on return. (DeviceBuffer copies run on the legacy default stream,
  // which does not order with the context's non-blocking stream, hence the device-wide sync.)
  template <typename T>
  cuda::DeviceBuffer up(const std::vector<T>& host) {
    cuda::DeviceBuffer buffer = cuda::upload_vector(host);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    return buffer;
  }
  // The first `count` elements of `buffer` after all work queued on the stream has finished.
  template <typename T>
  std::vector<T> down(const cuda::DeviceBuffer& buffer, size_t count) {
    ctx_->synchronize();
    return cuda::download_vector<T>(buffer, count);
  }

  std::unique_ptr<cuda::CudaContext> ctx_;
};

// rms_norm against ops::rms_norm (double Σx² there, f32 block sum here): relative error ≤ 1e-5.
// Covers the warp path (dim ≤ 1024), the block path, float4 and scalar paths (stride pads), no weight,
// in-place, and row counts past the grid caps.
TEST_F(CudaElementwise, RmsNormMatchesCpu) {
  struct Case {
    int64_t rows;
    int dim;
    int64_t pad;  // x_stride = dim + pad
  };
  std::vector<Case> cases;
  for (int dim : {1, 7, 33, 256, 1024, 1025, 2560, 5376, 16384})
    for (int64_t rows : {1, 3, 130})
      for (int64_t pad : {0, 3, 8}) cases.push_back({rows, dim, pad});
  cases.push_back({600000, 4, 0});  // warp path, more rows than one grid covers
  cases.push_back({600000, 3, 1});
  cases.push_back({66000, 1028, 0});  // block path, more rows than one grid covers
  const float eps = 1e-6f;
  for (const Case& k : cases) {
    for (bool weighted : {false, true}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "rows " << k.rows << " dim " << k.dim << " pad " << k.pad
                                          << " weighted " << weighted << " in_place " << in_place);
        const int64_t x_stride = k.dim + k.pad;
        std::vector<float> x = test::random_floats(static_cast<size_t>(k.rows * x_stride), -2.0f, 2.0f);
        if (k.rows > 1)  // one row of zeros: mean 0, inv = 1/sqrt(eps)
          for (int c = 0; c < k.dim; ++c) x[static_cast<size_t>(x_stride + c)] = 0.0f;
        const std::vector<float> w = test::random_floats(static_cast<size_t>(k.dim), 0.5f, 1.5f);

        const Tensor xt = Tensor::from_vector(x, {k.rows, x_stride}).slice(1, 0, k.dim);
        const Tensor wt = Tensor::from_vector(w, {k.dim});
        Tensor expected;
        ops::rms_norm(xt, weighted ? &wt : nullptr, eps, expected);
        const float* e = expected.data<float>();

        cuda::DeviceBuffer dx = up(x);
        cuda::DeviceBuffer dw = up(w);
        const int64_t out_stride = in_place ? x_stride : k.dim;
        cuda::DeviceBuffer dout = in_place ? cuda::DeviceBuffer() : up(std::vector<float>(static_cast<size_t>(k.rows * k.dim)));
        float* out_ptr = in_place ? dx.as<float>() : dout.as<float>();
        cuda::rms_norm(dx.as<float>(), x_stride, out_ptr, out_stride, k.rows, k.dim,
                       weighted ? dw.as<float>() : nullptr, eps, stream());
        const std::vector<float> got = down<float>(in_place ? dx : dout, static_cast<size_t>(k.rows * out_stride));

        int64_t bad = 0;
        for (int64_t r = 0; r < k.rows && bad < 5; ++r) {
          for (int c = 0; c < k.dim; ++c) {
            const float want = e[r * k.dim + c];
            const float have = got[static_cast<size_t>(r * out_stride + c)];
            if (!(std::fabs(have - want) <= 1e-5f * std::fabs(want) + 1e-30f)) {
              ADD_FAILURE() << "row " << r << " col " << c << ": got " << have << " want " << want;
              if (++bad >= 5) break;
            }
          }
          if (in_place) {  // the stride padding is never written
            for (int64_t c = k.dim; c < x_stride; ++c) {
              const size_t i = static_cast<size_t>(r * x_stride + c);
              ASSERT_EQ(bits(got[i]), bits(x[i])) << "row " << r << " col " << c;
            }
          }
        }
      }
    }
  }
}

// residual_norm against the CPU ops it fuses: x' = (x + rms_norm(a)·wa)·scale and normed = rms_norm(x')·wn,
// with ops::rms_norm (double Σx²) and f32 add/multiply. x' within 2e-5 of the terms' magnitude, normed
// within 2e-5 relative plus x's error carried through the norm; `a` is never written. Covers float4 and
// scalar paths (odd dims), missing weights, scale 1 (no multiply) and no normed output.
TEST_F(CudaElementwise, ResidualNormMatchesCpu) {
  const float eps = 1e-6f;
  // 8191 and 12288 are wider than the register-held kernel's block (unaligned and aligned rows): the
  // wide kernel runs them.
  for (int dim : {1, 7, 64, 1536, 2560, 5376, 8191, 12288})
    for (int64_t rows : {1, 3, 130})
      for (int variant = 0; variant < 4; ++variant) {
        const bool weighted = variant != 1, with_normed = variant != 2;
        const float scale = variant == 3 ? 0.5f : 1.0f;
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " dim " << dim << " variant " << variant);
        const size_t n = static_cast<size_t>(rows * dim);
        const std::vector<float> x = test::random_floats(n, -2.0f, 2.0f);
        const std::vector<float> a = test::random_floats(n, -3.0f, 3.0f);
        const std::vector<float> wa = test::random_floats(static_cast<size_t>(dim), 0.5f, 1.5f);
        const std::vector<float> wn = test::random_floats(static_cast<size_t>(dim), 0.5f, 1.5f);

        const Tensor wat = Tensor::from_vector(wa, {dim}), wnt = Tensor::from_vector(wn, {dim});
        Tensor na;
        ops::rms_norm(Tensor::from_vector(a, {rows, dim}), weighted ? &wat : nullptr, eps, na);
        std::vector<float> want_x(n);
        for (size_t i = 0; i < n; ++i) {
          const float sum = x[i] + na.data<float>()[i];
          want_x[i] = scale != 1.0f ? sum * scale : sum;
        }
        Tensor want_n;
        ops::rms_norm(Tensor::from_vector(want_x, {rows, dim}), weighted ? &wnt : nullptr, eps, want_n);

        cuda::DeviceBuffer dx = up(x), da = up(a), dwa = up(wa), dwn = up(wn);
        cuda::DeviceBuffer dn = up(std::vector<float>(n, sentinel()));
        cuda::residual_norm(dx.as<float>(), da.as<float>(), weighted ? dwa.as<float>() : nullptr, scale,
                            with_normed ? dn.as<float>() : nullptr, weighted ? dwn.as<float>() : nullptr, rows, dim,
                            eps, stream());
        const std::vector<float> got_x = down<float>(dx, n), got_n = down<float>(dn, n),
                                 got_a = down<float>(da, n);
        int bad = 0;
        for (int64_t r = 0; r < rows && bad < 5; ++r) {
          double ss = 0.0;
          for (int c = 0; c < dim; ++c) ss += static_cast<double>(want_x[r * dim + c]) * want_x[r * dim + c];
          const double inv = 1.0 / std::sqrt(ss / dim + eps);
          for (int c = 0; c < dim && bad < 5; ++c) {
            const size_t i = static_cast<size_t>(r * dim + c);
            ASSERT_EQ(bits(got_a[i]), bits(a[i]));
            const float terms = (std::fabs(x[i]) + std::fabs(na.data<float>()[i])) * scale;
            const float x_tol = 2e-5f * terms + 1e-30f;
            if (!(std::fabs(got_x[i] - want_x[i]) <= x_tol)) {
              ADD_FAILURE() << "x row " << r << " col " << c << ": got " << got_x[i] << " want " << want_x[i];
              ++bad;
            }
            if (!with_normed) {
              ASSERT_EQ(bits(got_n[i]), kSentinelBits);
              continue;
            }
            const float want = want_n.data<float>()[i];
            const float w = weighted ? wn[static_cast<size_t>(c)] : 1.0f;
            const float n_tol = 2e-5f * std::fabs(want) + static_cast<float>(x_tol * inv * w) + 1e-30f;
            if (!(std::fabs(got_n[i] - want) <= n_tol)) {
              ADD_FAILURE() << "normed row " << r << " col " << c << ": got " << got_n[i] << " want " << want;
              ++bad;
            }
          }
        }
      }
}

// attention_inputs (the fused per-head norm + RoPE + cache append) against ops::rms_norm and
// ops::apply_rope: q written back within 3e-5 of the pair's magnitude, k (norm, weight, rope) and v (norm,
// no weight, no rope) in the caches within bf16 rounding (2^-8 relative) of the f32 reference; every other
// cache slot and q's neighbouring k/v columns untouched. Stacked q | k | v rows (one token stride), two
// sequences, and the k_eq_v form where v's job reads k's input.
TEST_F(CudaElementwise, AttentionInputsMatchCpu) {
  const float eps = 1e-6f;
  constexpr uint16_t kEmpty = 0x7fc1;  // a NaN the kernel never writes
  for (int head_dim : {64, 256, 512})
    for (int64_t tokens : {1, 5})
      for (bool k_eq_v : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " tokens " << tokens << " k_eq_v " << k_eq_v);
        const int heads = 4, kv_heads = 2, capacity = 8;
        const int64_t qw = int64_t{heads} * head_dim, kvw = int64_t{kv_heads} * head_dim;
        const int64_t stride = qw + 2 * kvw;
        const std::vector<float> x = test::random_floats(static_cast<size_t>(tokens * stride), -3.0f, 3.0f);
        const std::vector<float> q_w = test::random_floats(static_cast<size_t>(head_dim), 0.5f, 1.5f);
        const std::vector<float> k_w = test::random_floats(static_cast<size_t>(head_dim), 0.5f, 1.5f);
        const std::vector<float> inv_freq = ops::rope_inv_freq(head_dim, 10000.0, head_dim / 4);
        std::vector<int32_t> pos(static_cast<size_t>(tokens)), seq(static_cast<size_t>(tokens));
        for (int64_t t = 0; t < tokens; ++t) {
          seq[static_cast<size_t>(t)] = static_cast<int32_t>(t % 2);
          pos[static_cast<size_t>(t)] = static_cast<int32_t>(t / 2 + 3 * (t % 2));
        }

        // CPU reference: each head group as [tokens, heads, head_dim].
        auto heads_of = [&](int64_t offset, int n) {
          std::vector<float> out(static_cast<size_t>(tokens * n * head_dim));
          for (int64_t t = 0; t < tokens; ++t)
            std::copy_n(x.begin() + t * stride + offset, n * head_dim, out.begin() + t * n * head_dim);
          return out;
        };
        auto norm = [&](const std::vector<float>& v, int n, const std::vector<float>* w) {
          Tensor out;
          const Tensor wt = w ? Tensor::from_vector(*w, {head_dim}) : Tensor();
          ops::rms_norm(Tensor::from_vector(v, {tokens * n, head_dim}), w ? &wt : nullptr, eps, out);
          return out.reshape({tokens, n, head_dim});
        };
        Tensor want_q = norm(heads_of(0, heads), heads, &q_w);
        ops::apply_rope(want_q, pos, inv_freq);
        Tensor want_k = norm(heads_of(qw, kv_heads), kv_heads, &k_w);
        ops::apply_rope(want_k, pos, inv_freq);
        const Tensor want_v = norm(heads_of(k_eq_v ? qw : qw + kvw, kv_heads), kv_heads, nullptr);

        cuda::DeviceBuffer dx = up(x), dqw = up(q_w), dkw = up(k_w), dfreq = up(inv_freq), dpos = up(pos),
                           dseq = up(seq);
        const std::vector<uint16_t> empty(static_cast<size_t>(capacity * kvw), kEmpty);
        // Two sequences' k and v caches in scattered blocks of 64 tokens.
        const cuda::PagedArrays k_pages({empty, empty}, kvw, 64), v_pages({empty, empty}, kvw, 64);
        float* base = dx.as<float>();
        const cuda::HeadNormJob jobs[3] = {
            {base, stride, heads, dqw.as<float>(), true, {}},
            {base + qw, stride, kv_heads, dkw.as<float>(), true, k_pages.store()},
            {base + (k_eq_v ? qw : qw + kvw), stride, kv_heads, nullptr, false, v_pages.store()}};
        cuda::attention_inputs(jobs, 3, tokens, head_dim, eps, dpos.as<int32_t>(), dseq.as<int32_t>(),
                               dfreq.as<float>(), stream());
        const std::vector<float> got = down<float>(dx, x.size());
        // k seq 0, k seq 1, v seq 0, v seq 1.
        const std::vector<std::vector<uint16_t>> got_cache = {
            k_pages.download(0, capacity), k_pages.download(1, capacity), v_pages.download(0, capacity),
            v_pages.download(1, capacity)};

        int bad = 0;
        const int half = head_dim / 2;
        for (int64_t t = 0; t < tokens && bad < 5; ++t) {
          for (int h = 0; h < heads; ++h)
            for (int i = 0; i < half && bad < 5; ++i) {
              const float wa = want_q.data<float>()[(t * heads + h) * head_dim + i];
              const float wb = want_q.data<float>()[(t * heads + h) * head_dim + i + half];
              const float ga = got[static_cast<size_t>(t * stride + h * head_dim + i)];
              const float gb = got[static_cast<size_t>(t * stride + h * head_dim + i + half)];
              const float tol = 3e-5f * (std::fabs(wa) + std::fabs(wb)) + 1e-30f;
              if (!(std::fabs(ga - wa) <= tol && std::fabs(gb - wb) <= tol)) {
                ADD_FAILURE() << "q token " << t << " head " << h << " pair " << i << ": got (" << ga << ", " << gb
                              << ") want (" << wa << ", " << wb << ")";
                ++bad;
              }
            }
          for (int64_t e = qw; e < stride; ++e)  // k and v inputs are read, never written
            ASSERT_EQ(bits(got[static_cast<size_t>(t * stride + e)]), bits(x[static_cast<size_t>(t * stride + e)]));
          const int s = seq[static_cast<size_t>(t)];
          for (int which = 0; which < 2; ++which) {
            const Tensor& want = which == 0 ? want_k : want_v;
            const std::vector<uint16_t>& cache = got_cache[static_cast<size_t>(2 * which + s)];
            for (int64_t e = 0; e < kvw && bad < 5; ++e) {
              const float w = want.data<float>()[t * kvw + e];
              const float g = bf16_to_f32(cache[static_cast<size_t>(pos[static_cast<size_t>(t)] * kvw + e)]);
              if (!(std::fabs(g - w) <= std::ldexp(std::fabs(w), -8) + 1e-30f)) {
                ADD_FAILURE() << (which ? "v" : "k") << " token " << t << " elem " << e << ": got " << g << " want "
                              << w;
                ++bad;
              }
            }
          }
        }
        // Slots no token wrote stay empty.
        for (int c = 0; c < 4; ++c)
          for (int slot = 0; slot < capacity; ++slot) {
            bool written = false;
            for (int64_t t = 0; t < tokens; ++t)
              written |= seq[static_cast<size_t>(t)] == c % 2 && pos[static_cast<size_t>(t)] == slot;
            if (written) continue;
            for (int64_t e = 0; e < kvw; ++e) {
              ASSERT_EQ(got_cache[static_cast<size_t>(c)][static_cast<size_t>(slot * kvw + e)], kEmpty)
                  << "cache " << c << " slot " << slot;
            }
          }
      }
}

// attention_inputs with runs of several heads per warp (prefill's schedule; runs that cross from one job to
// the next, skip a job without heads, or hold every head) against one head per warp (decode's): the same bits
// in x and in the caches.
TEST_F(CudaElementwise, AttentionInputsSameBitsForAnyHeadsPerWarp) {
  const float eps = 1e-6f;
  for (int head_dim : {256, 512})
    for (bool empty_job : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << " empty job " << empty_job);
      const int heads = 4, kv_heads = 2, capacity = 16;
      const int64_t tokens = 7, qw = int64_t{heads} * head_dim, kvw = int64_t{kv_heads} * head_dim;
      const int64_t stride = qw + 2 * kvw;
      const std::vector<float> x = test::random_floats(static_cast<size_t>(tokens * stride), -3.0f, 3.0f);
      const std::vector<float> q_w = test::random_floats(static_cast<size_t>(head_dim), 0.5f, 1.5f);
      const std::vector<float> k_w = test::random_floats(static_cast<size_t>(head_dim), 0.5f, 1.5f);
      const std::vector<float> inv_freq = ops::rope_inv_freq(head_dim, 10000.0, head_dim / 4);
      std::vector<int32_t> pos(static_cast<size_t>(tokens)), seq(static_cast<size_t>(tokens), 0);
      for (int64_t t = 0; t < tokens; ++t)
        pos[static_cast<size_t>(t)] = static_cast<int32_t>(100 + 3 * t) % capacity;
      std::vector<float> first_x;
      std::vector<std::vector<uint16_t>> first_caches;
      for (int run : {1, 2, 3, 5, 8, 100}) {
        SCOPED_TRACE(::testing::Message() << run << " heads per warp");
        cuda::DeviceBuffer dx = up(x), dqw = up(q_w), dkw = up(k_w), dfreq = up(inv_freq), dpos = up(pos),
                           dseq = up(seq);
        const std::vector<uint16_t> empty(static_cast<size_t>(capacity * kvw), 0);
        const cuda::PagedArrays k_cache({empty}, kvw, 64), v_cache({empty}, kvw, 64);
        float* base = dx.as<float>();
        const cuda::HeadNormJob q = {base, stride, heads, dqw.as<float>(), true, {}};
        const cuda::HeadNormJob k = {base + qw, stride, kv_heads, dkw.as<float>(), true, k_cache.store()};
        const cuda::HeadNormJob v = {base + qw + kvw, stride, kv_heads, nullptr, false, v_cache.store()};
        const cuda::HeadNormJob none = {base + qw + kvw, stride, 0, nullptr, false, {}};
        const cuda::HeadNormJob jobs[3] = {q, empty_job ? none : k, empty_job ? k : v};
        cuda::attention_inputs(jobs, 3, tokens, head_dim, eps, dpos.as<int32_t>(), dseq.as<int32_t>(),
                               dfreq.as<float>(), stream(), run);
        const std::vector<float> got = down<float>(dx, x.size());
        const std::vector<std::vector<uint16_t>> caches = {k_cache.download(0, capacity),
                                                           v_cache.download(0, capacity)};
        if (run == 1) {
          first_x = got;
          first_caches = caches;
          continue;
        }
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(bits(got[i]), bits(first_x[i])) << "x element " << i;
        for (size_t c = 0; c < caches.size(); ++c) ASSERT_EQ(caches[c], first_caches[c]) << "cache " << c;
      }
    }
}

// RoPE against ops::apply_rope on [T, H, D] head views inside wider token rows (fused-QKV layout):
// rotated values within 2e-6 (|a| + |b|) for positions < 8192; pairs with inv_freq 0, the other heads
// of the row and all padding are bit-unchanged.
TEST_F(CudaElementwise, RopeMatchesCpu) {
  struct Case {
    int64_t tokens;
    int heads;
    int head_dim;
    int pairs;  // rotated pairs (the rest have inv_freq 0)
  };
  std::vector<Case> cases;
  for (int64_t tokens : {1, 3, 130})
    for (int heads : {1, 3, 8}) {
      cases.push_back({tokens, heads, 2, 1});
      cases.push_back({tokens, heads, 64, 32});
      cases.push_back({tokens, heads, 128, 64});
      cases.push_back({tokens, heads, 256, 128});
      cases.push_back({tokens, heads, 512, 64});  // Gemma 4 full layers: 64 of 256 pairs rotated
      cases.push_back({tokens, heads, 1024, 300});  // more pairs than one block row of threads
    }
  cases.push_back({1100000, 1, 2, 1});  // more tokens than one grid covers
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << "tokens " << k.tokens << " heads " << k.heads << " head_dim "
                                      << k.head_dim << " pairs " << k.pairs);
    const int half = k.head_dim / 2;
    const int64_t row_heads = k.heads + 2;  // two more heads (like K and V) that rope must not touch
    const int64_t token_stride = row_heads * k.head_dim;
    std::vector<float> x = test::random_floats(static_cast<size_t>(k.tokens * token_stride), -3.0f, 3.0f);
    std::vector<int32_t> positions(static_cast<size_t>(k.tokens));
    std::uniform_int_distribution<int32_t> pos_dist(0, 8191);
    for (auto& p : positions) p = pos_dist(test::rng());
    positions[0] = 8191;
    if (k.tokens > 1) positions[1] = 0;
    const std::vector<float> inv_freq = ops::rope_inv_freq(k.head_dim, 10000.0, k.pairs);

    Tensor expected = Tensor::from_vector(x, {k.tokens, row_heads, static_cast<int64_t>(k.head_dim)});
    Tensor view = expected.slice(1, 0, k.heads);
    ops::apply_rope(view, positions, inv_freq);
    const float* e = expected.data<float>();

    cuda::DeviceBuffer dx = up(x);
    cuda::DeviceBuffer dpos = up(positions);
    cuda::DeviceBuffer dfreq = up(inv_freq);
    cuda::rope(dx.as<float>(), token_stride, k.tokens, k.heads, k.head_dim, dpos.as<int32_t>(), dfreq.as<float>(),
               stream());
    const std::vector<float> got = down<float>(dx, x.size());

    int bad = 0;
    for (int64_t t = 0; t < k.tokens && bad < 5; ++t) {
      for (int64_t h = 0; h < row_heads && bad < 5; ++h) {
        const int64_t base = t * token_stride + h * k.head_dim;
        for (int i = 0; i < half; ++i) {
          const size_t ia = static_cast<size_t>(base + i), ib = static_cast<size_t>(base + i + half);
          if (h >= k.heads || inv_freq[static_cast<size_t>(i)] == 0.0f) {
            if (bits(got[ia]) != bits(x[ia]) || bits(got[ib]) != bits(x[ib])) {
              ADD_FAILURE() << "token " << t << " head " << h << " pair " << i << " changed";
              ++bad;
            }
            continue;
          }
          const float tol = 2e-6f * (std::fabs(x[ia]) + std::fabs(x[ib])) + 1e-30f;
          if (!(std::fabs(got[ia] - e[ia]) <= tol && std::fabs(got[ib] - e[ib]) <= tol)) {
            ADD_FAILURE() << "token " << t << " (pos " << positions[static_cast<size_t>(t)] << ") head " << h
                          << " pair " << i << ": got (" << got[ia] << ", " << got[ib] << ") want (" << e[ia]
                          << ", " << e[ib] << ")";
            if (++bad >= 5) break;
          }
        }
      }
    }
  }
}

// gelu_tanh against ops::gelu_tanh: within 4 eps (|x| + |y|) (tanhf's ulps times the 0.5x factor).
// A pointer offset of one float exercises the unaligned (scalar) path.
TEST_F(CudaElementwise, GeluTanhMatchesCpu) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{2560 * 3 + 1}, int64_t{1} << 20, (int64_t{1} << 23) + 5}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " offset " << offset);
      std::vector<float> x = test::random_floats(static_cast<size_t>(n + offset), -8.0f, 8.0f);
      const float specials[] = {0.0f, -0.0f, 30.0f, -30.0f, 100.0f, -100.0f, 1e-20f, -5.0f};
      for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(i) < n; ++i)
        x[static_cast<size_t>(offset) + i] = specials[i];
      Tensor expected = Tensor::from_vector(std::vector<float>(x.begin() + offset, x.end()), {n});
      ops::gelu_tanh(expected);
      const float* e = expected.data<float>();

      cuda::DeviceBuffer dx = up(x);
      cuda::gelu_tanh(dx.as<float>() + offset, n, stream());
      const std::vector<float> got = down<float>(dx, x.size());
      ASSERT_EQ(bits(got[0]), bits(x[0]));  // the element before an offset view is untouched
      int bad = 0;
      for (int64_t i = 0; i < n && bad < 5; ++i) {
        const float xi = x[static_cast<size_t>(i + offset)], have = got[static_cast<size_t>(i + offset)];
        if (!(std::fabs(have - e[i]) <= 4 * kEps * (std::fabs(xi) + std::fabs(e[i])))) {
          ADD_FAILURE() << "x " << xi << ": got " << have << " want " << e[i];
          ++bad;
        }
      }
    }
  }
}

// gelu_tanh_mul on gate/up column windows of a fused [rows, 2*cols + pad] buffer, into a separate
// padded output and in place over gate: within 8 eps |g| |u| + 2 eps |y| of ops::gelu_tanh_mul.
TEST_F(CudaElementwise, GeluTanhMulMatchesCpu) {
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{130}, int64_t{600000}}) {
    for (int64_t cols : {1, 7, 33, 2560, 5376}) {
      if (rows * cols > 4 * 1000 * 1000) continue;
      for (int64_t pad : {0, 1, 4}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " pad " << pad << " in_place "
                                            << in_place);
          const int64_t in_stride = 2 * cols + pad;
          std::vector<float> fused = test::random_floats(static_cast<size_t>(rows * in_stride), -6.0f, 6.0f);
          for (int64_t r = 0; r < rows; ++r)  // up in [-2, 2]
            for (int64_t c = 0; c < cols; ++c) fused[static_cast<size_t>(r * in_stride + cols + c)] /= 3.0f;
          const Tensor ft = Tensor::from_vector(fused, {rows, in_stride});
          Tensor expected;
          ops::gelu_tanh_mul(ft.slice(1, 0, cols), ft.slice(1, cols, 2 * cols), expected);
          const float* e = expected.data<float>();

          cuda::DeviceBuffer dfused = up(fused);
          const int64_t out_stride = in_place ? in_stride : cols + pad;
          std::vector<float> out_init(static_cast<size_t>(rows * out_stride), sentinel());
          cuda::DeviceBuffer dout = in_place ? cuda::DeviceBuffer() : up(out_init);
          float* gate = dfused.as<float>();
          float* out = in_place ? gate : dout.as<float>();
          cuda::gelu_tanh_mul(gate, in_stride, gate + cols, in_stride, out, out_stride, rows, cols, stream());
          const std::vector<float> got = down<float>(in_place ? dfused : dout, static_cast<size_t>(rows * out_stride));

          int bad = 0;
          for (int64_t r = 0; r < rows && bad < 5; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              const float g = fused[static_cast<size_t>(r * in_stride + c)];
              const float u = fused[static_cast<size_t>(r * in_stride + cols + c)];
              const float want = e[r * cols + c], have = got[static_cast<size_t>(r * out_stride + c)];
              const float tol = 8 * kEps * std::fabs(g) * std::fabs(u) + 2 * kEps * std::fabs(want) + 1e-30f;
              if (!(std::fabs(have - want) <= tol)) {
                ADD_FAILURE() << "row " << r << " col " << c << ": got " << have << " want " << want;
                if (++bad >= 5) break;
              }
            }
            for (int64_t c = cols; c < out_stride; ++c) {  // up and padding untouched
              const float before = in_place ? fused[static_cast<size_t>(r * out_stride + c)] : sentinel();
              ASSERT_EQ(bits(got[static_cast<size_t>(r * out_stride + c)]), bits(before)) << "row " << r << " col " << c;
            }
          }
        }
      }
    }
  }
}

// softcap against ops::softcap: within 4 eps · cap.
TEST_F(CudaElementwise, SoftcapMatchesCpu) {
  for (int64_t n : {1, 7, 33, 5376 * 3, 262144 + 2}) {
    for (int64_t offset : {0, 1}) {
      for (float cap : {30.0f, 50.0f}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " offset " << offset << " cap " << cap);
        std::vector<float> x = test::random_floats(static_cast<size_t>(n + offset), -200.0f, 200.0f);
        Tensor expected = Tensor::from_vector(std::vector<float>(x.begin() + offset, x.end()), {n});
        ops::softcap(expected, cap);
        const float* e = expected.data<float>();
        cuda::DeviceBuffer dx = up(x);
        cuda::softcap(dx.as<float>() + offset, n, cap, stream());
        const std::vector<float> got = down<float>(dx, x.size());
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 5; ++i) {
          const float have = got[static_cast<size_t>(i + offset)];
          if (!(std::fabs(have - e[i]) <= 4 * kEps * cap)) {
            ADD_FAILURE() << "x " << x[static_cast<size_t>(i + offset)] << ": got " << have << " want " << e[i];
            ++bad;
          }
        }
      }
    }
  }
}

// add, scale and mul round once per element, exactly like the CPU: bit-identical results, including
// unaligned views (scalar path) and add(x, x).
TEST_F(CudaElementwise, AddScaleMulBitExact) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{4096 + 3}, (int64_t{1} << 22) + 1}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " offset " << offset);
      const std::vector<float> x = test::random_floats(static_cast<size_t>(n + offset), -10.0f, 10.0f);
      const std::vector<float> a = test::random_floats(static_cast<size_t>(n + offset), -10.0f, 10.0f);
      const std::vector<float> xs(x.begin() + offset, x.end()), as(a.begin() + offset, a.end());
      const Tensor at = Tensor::from_vector(as, {n});

      Tensor add_ref = Tensor::from_vector(xs, {n});
      ops::add_inplace(add_ref, at);
      Tensor mul_ref = Tensor::from_vector(xs, {n});
      ops::mul_inplace(mul_ref, at);
      Tensor scale_ref = Tensor::from_vector(xs, {n});
      ops::scale_inplace(scale_ref, 0.0625f * 3.0f);
      Tensor twice_ref = Tensor::from_vector(xs, {n});
      ops::add_inplace(twice_ref, Tensor::from_vector(xs, {n}));

      const cuda::DeviceBuffer da = up(a);
      auto run = [&](auto op) {
        cuda::DeviceBuffer dx = up(x);
        op(dx.as<float>() + offset, da.as<float>() + offset);
        const std::vector<float> got = down<float>(dx, x.size());
        return std::vector<float>(got.begin() + offset, got.end());
      };
      const auto expect_bits = [&](const std::vector<float>& got, const Tensor& ref, const char* what) {
        const float* e = ref.data<float>();
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(got[static_cast<size_t>(i)]), bits(e[i])) << what << " at " << i;
      };
      expect_bits(run([&](float* d, const float* s) { cuda::add(d, s, n, stream()); }), add_ref, "add");
      expect_bits(run([&](float* d, const float* s) { cuda::mul(d, s, n, stream()); }), mul_ref, "mul");
      expect_bits(run([&](float* d, const float*) { cuda::scale(d, n, 0.0625f * 3.0f, stream()); }), scale_ref,
                  "scale");
      expect_bits(run([&](float* d, const float*) { cuda::add(d, d, n, stream()); }), twice_ref, "add(x, x)");
    }
  }
}

// mul_rows (a row vector broadcast over rows) against ops::mul_inplace's broadcast: bit-identical.
TEST_F(CudaElementwise, MulRowsBitExact) {
  for (int64_t rows : {1, 3, 130}) {
    for (int64_t cols : {1, 4, 7, 33, 2560}) {
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " offset " << offset);
        const std::vector<float> x = test::random_floats(static_cast<size_t>(rows * cols + offset), -4.0f, 4.0f);
        const std::vector<float> y = test::random_floats(static_cast<size_t>(cols + offset), -4.0f, 4.0f);
        Tensor expected = Tensor::from_vector(std::vector<float>(x.begin() + offset, x.end()), {rows, cols});
        ops::mul_inplace(expected, Tensor::from_vector(std::vector<float>(y.begin() + offset, y.end()), {cols}));
        const float* e = expected.data<float>();
        cuda::DeviceBuffer dx = up(x);
        cuda::DeviceBuffer dy = up(y);
        cuda::mul_rows(dx.as<float>() + offset, dy.as<float>() + offset, rows, cols, stream());
        const std::vector<float> got = down<float>(dx, x.size());
        for (int64_t i = 0; i < rows * cols; ++i)
          ASSERT_EQ(bits(got[static_cast<size_t>(i + offset)]), bits(e[i])) << "at " << i;
      }
    }
  }
}

// embedding against ops::embedding for f32 and bf16 tables, with and without a scale, into padded
// output rows: bit-identical, padding untouched.
TEST_F(CudaElementwise, EmbeddingBitExact) {
  const int64_t vocab = 1000;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t dim : {1, 4, 7, 33, 2560}) {
      for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{130}, int64_t{70000}}) {
        if (count * dim > 2 * 1000 * 1000) continue;
        for (int64_t pad : {0, 1, 4}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " dim " << dim << " count " << count << " pad "
                                            << pad);
          const Tensor table = test::random_tensor({vocab, dim}, DType::kF32, -1.0f, 1.0f).to(dtype);
          std::vector<int32_t> ids(static_cast<size_t>(count));
          std::uniform_int_distribution<int32_t> id_dist(0, static_cast<int32_t>(vocab - 1));
          for (auto& id : ids) id = id_dist(test::rng());
          ids[0] = static_cast<int32_t>(vocab - 1);
          if (count > 2) {  // repeated ids
            ids[1] = 0;
            ids[2] = 0;
          }
          const float scale = pad == 1 ? 1.0f : bf16_to_f32(f32_to_bf16(std::sqrt(static_cast<float>(dim))));
          Tensor expected;
          ops::embedding(table, ids, scale, expected);
          const float* e = expected.data<float>();

          const cuda::DeviceBuffer dtable = cuda::DeviceBuffer::upload(table.raw_data(), table.nbytes());
          const cuda::DeviceBuffer dids = up(ids);  // (its device sync also covers the table upload)
          const int64_t out_stride = dim + pad;
          cuda::DeviceBuffer dout = up(std::vector<float>(static_cast<size_t>(count * out_stride), sentinel()));
          cuda::embedding(dtable.data(), dtype, dim, dids.as<int32_t>(), count, scale, dout.as<float>(), out_stride,
                          stream());
          const std::vector<float> got = down<float>(dout, static_cast<size_t>(count * out_stride));
          for (int64_t t = 0; t < count; ++t) {
            for (int64_t c = 0; c < dim; ++c)
              ASSERT_EQ(bits(got[static_cast<size_t>(t * out_stride + c)]), bits(e[t * dim + c]))
                  << "token " << t << " col " << c;
            for (int64_t c = dim; c < out_stride; ++c)
              ASSERT_EQ(bits(got[static_cast<size_t>(t * out_stride + c)]), kSentinelBits);
          }
        }
      }
    }
  }
}

// argmax_rows against ops::argmax, exactly, with planted ties (the first wins), NaNs (never win),
// all-NaN rows (→ 0), ±inf, and rows as wide as a 262144-token vocabulary.
TEST_F(CudaElementwise, ArgmaxRowsExact) {
  for (int64_t cols : {1, 2, 7, 33, 2560, 16383, 16384, 20001, 262144}) {
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{130}, int64_t{70000}}) {
      if (rows * cols > 40 * 1000 * 1000 || (rows == 70000 && cols > 2)) continue;
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " offset " << offset);
        std::vector<float> x = test::random_floats(static_cast<size_t>(rows * cols + offset), -1.0f, 1.0f);
        std::mt19937_64& g = test::rng();
        for (int64_t r = 0; r < rows; ++r) {
          float* row = x.data() + offset + r * cols;
          auto col = [&] { return static_cast<int64_t>(g() % static_cast<uint64_t>(cols)); };
          switch (r % 8) {
            case 0: {  // a tie: the lower index wins
              const int64_t a = col(), b = col();
              row[a] = row[b] = 5.0f;
              break;
            }
            case 1:  // NaNs, including at index 0, never win
              row[0] = kNaN;
              for (int k = 0; k < 4; ++k) row[col()] = kNaN;
              break;
            case 2:  // all NaN → 0
              for (int64_t c = 0; c < cols; ++c) row[c] = kNaN;
              break;
            case 3:  // all -inf with a NaN: the first -inf that is not NaN
              for (int64_t c = 0; c < cols; ++c) row[c] = -kInf;
              row[0] = kNaN;
              break;
            case 4:  // +inf twice
              row[col()] = kInf;
              row[col()] = kInf;
              break;
            case 5:  // all equal → 0
              for (int64_t c = 0; c < cols; ++c) row[c] = 0.25f;
              break;
            case 6:  // the maximum is the last element
              row[cols - 1] = 2.0f;
              break;
            default:  // +0 and -0 tie: the first wins
              for (int64_t c = 0; c < cols; ++c) row[c] = -1.0f;
              row[cols / 2] = -0.0f;
              row[cols - 1] = 0.0f;
              break;
          }
        }
        cuda::DeviceBuffer dx = up(x);
        // One kernel per row, then (wide rows) the split over blocks with its merge.
        const size_t partial_bytes = cuda::argmax_partials_bytes(rows, cols);
        cuda::DeviceBuffer partials(std::max<size_t>(partial_bytes, 1));
        for (bool split : {false, true}) {
          if (split && partial_bytes == 0) continue;
          cuda::DeviceBuffer dout = up(std::vector<int32_t>(static_cast<size_t>(rows), -7));
          cuda::argmax_rows(dx.as<float>() + offset, rows, cols, dout.as<int32_t>(), stream(),
                            split ? partials.data() : nullptr, split ? partial_bytes : 0);
          const std::vector<int32_t> got = down<int32_t>(dout, static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) {
            const std::span<const float> row(x.data() + offset + r * cols, static_cast<size_t>(cols));
            ASSERT_EQ(got[static_cast<size_t>(r)], ops::argmax(row))
                << "row " << r << " (case " << r % 8 << ")" << (split ? " split" : "");
          }
        }
      }
    }
  }
}

// copy_rows between padded buffers: bit-identical rows, destination padding untouched.
TEST_F(CudaElementwise, CopyRowsExact) {
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{130}, int64_t{600000}}) {
    for (int64_t cols : {1, 4, 7, 33, 2560}) {
      if (rows * cols > 4 * 1000 * 1000) continue;
      for (int64_t src_pad : {0, 1, 4}) {
        for (int64_t dst_pad : {0, 3, 8}) {
          SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " pads " << src_pad << ", "
                                            << dst_pad);
          const int64_t src_stride = cols + src_pad, dst_stride = cols + dst_pad;
          const std::vector<float> src = test::random_floats(static_cast<size_t>(rows * src_stride));
          const cuda::DeviceBuffer dsrc = up(src);
          cuda::DeviceBuffer ddst = up(std::vector<float>(static_cast<size_t>(rows * dst_stride), sentinel()));
          cuda::copy_rows(dsrc.as<float>(), src_stride, ddst.as<float>(), dst_stride, rows, cols, stream());
          const std::vector<float> got = down<float>(ddst, static_cast<size_t>(rows * dst_stride));
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c)
              ASSERT_EQ(bits(got[static_cast<size_t>(r * dst_stride + c)]), bits(src[static_cast<size_t>(r * src_stride + c)]))
                  << "row " << r << " col " << c;
            for (int64_t c = cols; c < dst_stride; ++c)
              ASSERT_EQ(bits(got[static_cast<size_t>(r * dst_stride + c)]), kSentinelBits);
          }
        }
      }
    }
  }
}

// Sizes of 0 are a no-op: nothing is launched, so null pointers are fine and the stream stays clean.
// An embedding table of another dtype is an InvalidArgument.
TEST_F(CudaElementwise, ZeroSizesAreNoOps) {
  cudaStream_t s = stream();
  cuda::rms_norm(nullptr, 16, nullptr, 16, 0, 16, nullptr, 1e-6f, s);
  cuda::rms_norm(nullptr, 0, nullptr, 0, 5, 0, nullptr, 1e-6f, s);
  cuda::rope(nullptr, 128, 0, 8, 128, nullptr, nullptr, s);
  cuda::rope(nullptr, 128, 4, 0, 128, nullptr, nullptr, s);
  cuda::gelu_tanh_mul(nullptr, 8, nullptr, 8, nullptr, 8, 0, 8, s);
  cuda::gelu_tanh_mul(nullptr, 8, nullptr, 8, nullptr, 8, 4, 0, s);
  cuda::gelu_tanh(nullptr, 0, s);
  cuda::softcap(nullptr, 0, 30.0f, s);
  cuda::add(nullptr, nullptr, 0, s);
  cuda::scale(nullptr, 0, 2.0f, s);
  cuda::mul(nullptr, nullptr, 0, s);
  cuda::mul_rows(nullptr, nullptr, 0, 16, s);
  cuda::embedding(nullptr, DType::kBF16, 16, nullptr, 0, 1.0f, nullptr, 16, s);
  cuda::argmax_rows(nullptr, 0, 262144, nullptr, s);
  cuda::copy_rows(nullptr, 8, nullptr, 8, 0, 8, s);
  EXPECT_NO_THROW(ctx_->synchronize());
  EXPECT_THROW(cuda::embedding(nullptr, DType::kF16, 16, nullptr, 0, 1.0f, nullptr, 16, s), InvalidArgument);
}

}  // namespace
}  // namespace lmx
