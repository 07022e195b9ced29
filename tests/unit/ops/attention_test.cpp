// Tests for ops::attention against a double reference: GQA, causal, sliding window, ragged query
// sets, decode, offset and shuffled positions, rows with no visible key, strided views.
#include "lmx/ops/ops.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lmx {
namespace {

bool visible_ref(int32_t qp, int32_t kp, int window) {
  return kp <= qp && (window <= 0 || qp - kp < window);
}

// out[i, h] = Σ_j softmax_j(scale q_i·k_j over visible j) v_j, all in double; zeros when none visible.
std::vector<double> attention_ref(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::vector<int32_t>& qp, const std::vector<int32_t>& kp, int window,
                                  double scale) {
  const auto qd = test::to_doubles(q), kd = test::to_doubles(k), vd = test::to_doubles(v);
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2), tk = k.dim(0), hkv = k.dim(1), dv = v.dim(2);
  std::vector<double> out(static_cast<size_t>(tq * hq * dv), 0.0);
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      std::vector<double> s(static_cast<size_t>(tk), -INFINITY);
      double max = -INFINITY;
      for (int64_t j = 0; j < tk; ++j) {
        if (!visible_ref(qp[static_cast<size_t>(i)], kp[static_cast<size_t>(j)], window)) continue;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot +=
              qd[static_cast<size_t>((i * hq + h) * d + c)] * kd[static_cast<size_t>((j * hkv + g) * d + c)];
        s[static_cast<size_t>(j)] = scale * dot;
        max = std::max(max, s[static_cast<size_t>(j)]);
      }
      if (max == -INFINITY) continue;
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j) sum += std::exp(s[static_cast<size_t>(j)] - max);
      for (int64_t j = 0; j < tk; ++j) {
        const double p = std::exp(s[static_cast<size_t>(j)] - max) / sum;
        for (int64_t c = 0; c < dv; ++c)
          out[static_cast<size_t>((i * hq + h) * dv + c)] +=
              p * vd[static_cast<size_t>((j * hkv + g) * dv + c)];
      }
    }
  return out;
}

void check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int32_t>& qp,
                     const std::vector<int32_t>& kp, int window, float scale, const char* what) {
  Tensor out;
  ops::attention(q, k, v, qp, kp, window, scale, out);
  ASSERT_EQ(out.shape(), (Shape{q.dim(0), q.dim(1), v.dim(2)}));
  const auto expected = attention_ref(q, k, v, qp, kp, window, scale);
  // Score errors ~ eps·sqrt(D)·|q||k|·scale move probabilities relatively by that much.
  const double tol = 2 * test::kF32Eps * std::sqrt(static_cast<double>(q.dim(2))) * (1.0 + scale * q.dim(2));
  test::expect_close(out, expected, test::relative_tol(expected, tol), what);
}

std::vector<int32_t> iota_from(int64_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(Attention, CausalPrefillWithGqa) {
  const int64_t t = 37, hq = 8, hkv = 2, d = 40;
  const Tensor q = test::random_tensor({t, hq, d}), k = test::random_tensor({t, hkv, d});
  const Tensor v = test::random_tensor({t, hkv, 24});
  const auto pos = iota_from(t, 0);
  check_attention(q, k, v, pos, pos, 0, 1.0f, "causal gqa");
  check_attention(q, k, v, pos, pos, 0, 0.125f, "causal gqa scaled");
}

TEST(Attention, SlidingWindowBoundary) {
  const int64_t t = 50;
  const Tensor q = test::random_tensor({t, 4, 16}), k = test::random_tensor({t, 1, 16});
  const Tensor v = test::random_tensor({t, 1, 16});
  const auto pos = iota_from(t, 100);
  for (int window : {1, 7, 16, 49, 50, 1000}) {
    const std::string what = fmt::format("window {}", window);
    check_attention(q, k, v, pos, pos, window, 1.0f, what.c_str());
  }
  // Window 1: each query sees only its own key, so the output is exactly that key's v.
  Tensor out;
  ops::attention(q, k, v, pos, pos, 1, 1.0f, out);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(out.item_f32((i * 4 + h) * 16 + c), v.item_f32(i * 16 + c));
}

TEST(Attention, DecodeAndRaggedQueriesWithOffsetPositions) {
  const int64_t tk = 70, hq = 4, hkv = 4, d = 32;
  const Tensor k = test::random_tensor({tk, hkv, d}), v = test::random_tensor({tk, hkv, d});
  const auto kp = iota_from(tk, 1000);
  // Decode: one query at the last position; then a chunk of 5 queries at the end.
  const Tensor q1 = test::random_tensor({1, hq, d});
  check_attention(q1, k, v, {1069}, kp, 0, 1.0f, "decode");
  check_attention(q1, k, v, {1069}, kp, 20, 1.0f, "decode windowed");
  const Tensor q5 = test::random_tensor({5, hq, d});
  check_attention(q5, k, v, {1065, 1066, 1067, 1068, 1069}, kp, 0, 1.0f, "chunk");
  check_attention(q5, k, v, {1065, 1066, 1067, 1068, 1069}, kp, 8, 1.0f, "chunk windowed");
}

TEST(Attention, RowsWithNoVisibleKeyGetZeros) {
  const Tensor q = test::random_tensor({3, 2, 8}), k = test::random_tensor({4, 1, 8}),
               v = test::random_tensor({4, 1, 8});
  const std::vector<int32_t> qp{5, 20, 40}, kp{10, 11, 12, 13};
  Tensor out;
  ops::attention(q, k, v, qp, kp, 16, 1.0f, out);  // query 5: keys in the future; 40: all out of window
  for (int64_t c = 0; c < 16; ++c) {
    EXPECT_EQ(out.item_f32(c), 0.0f);
    EXPECT_EQ(out.item_f32(32 + c), 0.0f);
  }
  check_attention(q, k, v, qp, kp, 16, 1.0f, "partially empty");
}

TEST(Attention, ShuffledTokenOrder) {
  const int64_t t = 23;
  std::vector<int32_t> kp = iota_from(t, 0);
  std::shuffle(kp.begin(), kp.end(), test::rng());
  std::vector<int32_t> qp = kp;
  std::shuffle(qp.begin(), qp.end(), test::rng());
  const Tensor q = test::random_tensor({t, 6, 16}), k = test::random_tensor({t, 3, 16}),
               v = test::random_tensor({t, 3, 8});
  check_attention(q, k, v, qp, kp, 0, 1.0f, "shuffled");
  check_attention(q, k, v, qp, kp, 5, 1.0f, "shuffled windowed");
}

TEST(Attention, StridedViewsOfFusedQkv) {
  // One [T, Hq + 2 Hkv, D] buffer holding q, k and v heads side by side.
  const int64_t t = 19, hq = 4, hkv = 2, d = 24;
  const Tensor fused = test::random_tensor({t, hq + 2 * hkv, d});
  const Tensor q = fused.slice(1, 0, hq), k = fused.slice(1, hq, hq + hkv),
               v = fused.slice(1, hq + hkv, hq + 2 * hkv);
  const auto pos = iota_from(t, 3);
  Tensor strided, dense;
  ops::attention(q, k, v, pos, pos, 0, 1.0f, strided);
  ops::attention(q.contiguous(), k.contiguous(), v.contiguous(), pos, pos, 0, 1.0f, dense);
  EXPECT_TRUE(test::bit_equal(strided, dense));
  check_attention(q, k, v, pos, pos, 0, 1.0f, "fused views");
}

TEST(Attention, QueryOutputIndependentOfOtherQueries) {
  // A decode step (one query) gives the bits of the same query inside a whole prefill.
  const int64_t t = 45, hq = 4, hkv = 2, d = 64;
  const Tensor q = test::random_tensor({t, hq, d}), k = test::random_tensor({t, hkv, d}),
               v = test::random_tensor({t, hkv, d});
  const auto pos = iota_from(t, 0);
  for (int window : {0, 10}) {
    Tensor full;
    ops::attention(q, k, v, pos, pos, window, 1.0f, full);
    for (int64_t i : {0, 17, 44}) {
      Tensor one;
      ops::attention(q.slice(0, i, i + 1), k.slice(0, 0, i + 1), v.slice(0, 0, i + 1),
                     std::vector<int32_t>{pos[static_cast<size_t>(i)]},
                     std::vector<int32_t>(pos.begin(), pos.begin() + i + 1), window, 1.0f, one);
      EXPECT_TRUE(test::bit_equal(one, full.slice(0, i, i + 1))) << "query " << i << " window " << window;
    }
  }
}

TEST(Attention, RejectsBadShapes) {
  const Tensor q = test::random_tensor({2, 3, 8}), k = test::random_tensor({2, 2, 8}),
               v = test::random_tensor({2, 2, 8});
  Tensor out;
  const std::vector<int32_t> pos{0, 1};
  EXPECT_THROW(ops::attention(q, k, v, pos, pos, 0, 1.0f, out), InvalidArgument);  // 3 % 2 != 0
  const Tensor q4 = test::random_tensor({2, 4, 8});
  EXPECT_THROW(ops::attention(q4, k, v, std::vector<int32_t>{0}, pos, 0, 1.0f, out), InvalidArgument);
  EXPECT_THROW(ops::attention(q4, test::random_tensor({2, 2, 7}), v, pos, pos, 0, 1.0f, out),
               InvalidArgument);
}

}  // namespace
}  // namespace lmx
