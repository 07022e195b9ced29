// Tests for moe_route (softmax top-k, ties, renormalisation, per-expert scale) and moe_experts
// (against a double reference, bit-identical per token whatever the other tokens).
#include "lmx/core/thread_pool.h"
#include "lmx/ops/ops.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lmx {
namespace {

using test::kF32Eps;

TEST(MoeRoute, TiesGoToLowerIndexAndWeightsRenormalise) {
  const Tensor logits = Tensor::from_vector(std::vector<float>{1.0f, 3.0f, 3.0f, 0.0f, 3.0f,   //
                                                               2.0f, 2.0f, 2.0f, 2.0f, 2.0f},  //
                                            {2, 5});
  Tensor experts, weights;
  ops::moe_route(logits, 2, nullptr, experts, weights);
  ASSERT_EQ(experts.shape(), (Shape{2, 2}));
  EXPECT_EQ(experts.data<int32_t>()[0], 1);
  EXPECT_EQ(experts.data<int32_t>()[1], 2);
  EXPECT_EQ(experts.data<int32_t>()[2], 0);
  EXPECT_EQ(experts.data<int32_t>()[3], 1);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(weights.item_f32(i), 0.5f);
}

TEST(MoeRoute, MatchesReferenceWithPerExpertScale) {
  const int64_t t = 9, e = 64;
  const int k = 8;
  const Tensor logits = test::random_tensor({t, e}, DType::kF32, -4.0f, 4.0f);
  for (DType scale_type : {DType::kF32, DType::kBF16}) {
    const Tensor scale = test::random_tensor({e}, scale_type, 0.5f, 2.0f);
    Tensor experts, weights, plain_experts, plain_weights;
    ops::moe_route(logits, k, &scale, experts, weights);
    ops::moe_route(logits, k, nullptr, plain_experts, plain_weights);
    const auto ld = test::to_doubles(logits);
    for (int64_t r = 0; r < t; ++r) {
      std::vector<int32_t> order(static_cast<size_t>(e));
      std::iota(order.begin(), order.end(), 0);
      auto logit = [&](int32_t x) { return ld[static_cast<size_t>(r * e + x)]; };
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logit(a) > logit(b); });
      double top_sum = 0;
      for (int j = 0; j < k; ++j) top_sum += std::exp(logit(order[static_cast<size_t>(j)]));
      double plain_sum = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t want = order[static_cast<size_t>(j)];
        EXPECT_EQ(experts.data<int32_t>()[r * k + j], want) << "token " << r << " slot " << j;
        EXPECT_EQ(plain_experts.data<int32_t>()[r * k + j], want);
        const double p = std::exp(logit(want)) / top_sum;
        EXPECT_NEAR(plain_weights.item_f32(r * k + j), p, 8 * kF32Eps * (p + 1e-3));
        EXPECT_NEAR(weights.item_f32(r * k + j), p * scale.item_f32(want), 16 * kF32Eps * (p + 1e-3) * 2);
        plain_sum += plain_weights.item_f32(r * k + j);
      }
      EXPECT_NEAR(plain_sum, 1.0, 8 * kF32Eps);
    }
  }
  Tensor experts, weights;
  EXPECT_THROW(ops::moe_route(logits, 65, nullptr, experts, weights), InvalidArgument);
}

// out[t] = Σ_j w[t,j] down_e(gelu(gate_e x) * up_e x), all in double.
std::vector<double> moe_ref(const Tensor& x, const Tensor& experts, const Tensor& weights,
                            const Tensor& gate_up, const Tensor& down) {
  const auto xd = test::to_doubles(x), gu = test::to_doubles(gate_up), dn = test::to_doubles(down);
  const int64_t t = x.dim(0), h = x.dim(1), k = experts.dim(1), inter = gate_up.dim(1) / 2;
  std::vector<double> out(static_cast<size_t>(t * h), 0.0);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = experts.data<int32_t>()[r * k + j];
      const double w = weights.item_f32(r * k + j);
      std::vector<double> act(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < h; ++c) {
          g += xd[static_cast<size_t>(r * h + c)] * gu[static_cast<size_t>((e * 2 * inter + i) * h + c)];
          u += xd[static_cast<size_t>(r * h + c)] *
               gu[static_cast<size_t>((e * 2 * inter + inter + i) * h + c)];
        }
        act[static_cast<size_t>(i)] = test::gelu_tanh_ref(g) * u;
      }
      for (int64_t c = 0; c < h; ++c) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i)
          y += dn[static_cast<size_t>((e * h + c) * inter + i)] * act[static_cast<size_t>(i)];
        out[static_cast<size_t>(r * h + c)] += w * y;
      }
    }
  return out;
}

struct MoeCase {
  Tensor x, experts, weights, gate_up, down;
};

MoeCase make_case(int64_t t, int64_t h, int64_t inter, int64_t e, int k, DType wtype) {
  MoeCase c;
  c.x = test::random_tensor({t, h});
  c.gate_up = test::random_tensor({e, 2 * inter, h}, wtype, -0.5f, 0.5f);
  c.down = test::random_tensor({e, h, inter}, wtype, -0.5f, 0.5f);
  const Tensor logits = test::random_tensor({t, e}, DType::kF32, -2.0f, 2.0f);
  ops::moe_route(logits, k, nullptr, c.experts, c.weights);
  return c;
}

TEST(MoeExperts, MatchesReference) {
  for (DType wtype : {DType::kF32, DType::kBF16}) {
    const MoeCase c = make_case(11, 40, 24, 6, 2, wtype);
    Tensor out;
    ops::moe_experts(c.x, c.experts, c.weights, c.gate_up, c.down, out);
    ASSERT_EQ(out.shape(), (Shape{11, 40}));
    const auto expected = moe_ref(c.x, c.experts, c.weights, c.gate_up, c.down);
    test::expect_close(out, expected, test::relative_tol(expected, 8 * kF32Eps * std::sqrt(40.0 * 24.0)),
                       dtype_name(wtype).data());
  }
}

TEST(MoeExperts, TokenOutputIndependentOfOtherTokens) {
  // 64 tokens over 4 experts: ~32 rows per expert (the batched linear path); the small calls below
  // give each expert a few rows (the streaming path).
  const int64_t tokens = 64;
  const MoeCase c = make_case(tokens, 70, 33, 4, 2, DType::kBF16);
  for (int threads : {1, 3}) {
    set_default_threads(threads);
    Tensor all;
    ops::moe_experts(c.x, c.experts, c.weights, c.gate_up, c.down, all);
    for (int64_t t0 : {int64_t{0}, int64_t{5}, tokens - 1}) {
      Tensor one, few;
      ops::moe_experts(c.x.slice(0, t0, t0 + 1), c.experts.slice(0, t0, t0 + 1).contiguous(),
                       c.weights.slice(0, t0, t0 + 1).contiguous(), c.gate_up, c.down, one);
      EXPECT_TRUE(test::bit_equal(one, all.slice(0, t0, t0 + 1))) << "token " << t0 << " threads " << threads;
      const int64_t f0 = std::max<int64_t>(0, t0 - 4), f1 = std::min<int64_t>(tokens, t0 + 3);
      ops::moe_experts(c.x.slice(0, f0, f1), c.experts.slice(0, f0, f1).contiguous(),
                       c.weights.slice(0, f0, f1).contiguous(), c.gate_up, c.down, few);
      EXPECT_TRUE(test::bit_equal(few.slice(0, t0 - f0, t0 - f0 + 1), all.slice(0, t0, t0 + 1)))
          << "token " << t0;
    }
  }
  set_default_threads(0);
}

TEST(MoeExperts, RejectsBadExpertIds) {
  MoeCase c = make_case(3, 8, 4, 4, 2, DType::kF32);
  c.experts.data<int32_t>()[3] = 4;
  Tensor out;
  try {
    ops::moe_experts(c.x, c.experts, c.weights, c.gate_up, c.down, out);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::moe_experts(c.x, c.experts, c.weights, c.gate_up, test::random_tensor({4, 8, 5}), out),
               InvalidArgument);
}

}  // namespace
}  // namespace lmx
