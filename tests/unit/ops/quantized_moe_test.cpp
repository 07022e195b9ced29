// Tests for quantized_moe_experts: against a double reference over the dequantized stacks (mixed bits per
// projection; with the integer kernels' activation-quantization bound where they run), bit-identity with ops::moe_experts over dequantized natural-order weights, per-token
// bit-identity whatever the other tokens and thread count, and argument errors.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"
#include "support/quantized_weights.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

namespace lmx {
namespace {

using test::kF32Eps;

struct MoeCase {
  Tensor x, experts, weights;
  ops::QuantizedWeight gate, up, down;
};

MoeCase make_case(int64_t t, int64_t h, int64_t inter, int64_t e, int k, int gate_bits, int up_bits,
                  int down_bits) {
  MoeCase c;
  c.x = test::random_tensor({t, h});
  c.gate = test::random_expert_stack(e, inter, h, gate_bits, 32, DType::kBF16);
  c.up = test::random_expert_stack(e, inter, h, up_bits, 64, DType::kF16);
  c.down = test::random_expert_stack(e, h, inter, down_bits, 32, DType::kBF16);
  const Tensor logits = test::random_tensor({t, e}, DType::kF32, -2.0f, 2.0f);
  ops::moe_route(logits, k, nullptr, c.experts, c.weights);
  return c;
}

// Per element, what multiplies x's quantization error in the integer kernels: |s (q - z)| (they center the
// codes on z = 2^(bits - 1): 8 for 4 bits, 128 for 8 bits).
std::vector<double> integer_error_weight(const ops::QuantizedWeight& w) {
  const auto sq = test::to_doubles(quant::dequantize_affine(
      {w.codes, w.scales, Tensor::zeros(w.biases.shape(), w.biases.dtype()), w.bits, w.group_size}));
  const auto scales = test::to_doubles(w.scales);
  const int64_t k = w.cols();
  const double z = std::ldexp(1.0, w.bits - 1);
  std::vector<double> out(sq.size());
  for (size_t i = 0; i < sq.size(); ++i) {
    const double s = scales[i / static_cast<size_t>(k) * static_cast<size_t>(k / w.group_size) +
                            i % static_cast<size_t>(k) / static_cast<size_t>(w.group_size)];
    out[i] = std::fabs(sq[i] - z * s);
  }
  return out;
}

// The integer kernels' bound for one element of a row: 1.008 * 2^-23 * max|row over its 8-column block|
// (quantized_vnni.cpp), with each |value| first raised by `slack` (how far the kernel's input may be from
// the reference's).
std::vector<double> activation_error_bound(const double* row, int64_t k, double slack) {
  std::vector<double> bound(static_cast<size_t>(k));
  for (int64_t c0 = 0; c0 < k; c0 += 8) {
    double max = 0;
    for (int64_t c = c0; c < c0 + 8; ++c) max = std::max(max, std::fabs(row[c]) + slack);
    for (int64_t c = c0; c < c0 + 8; ++c) bound[static_cast<size_t>(c)] = 1.01 * std::ldexp(max, -23);
  }
  return bound;
}

// out[t] = Σ_j w[t,j] down_e(gelu(gate_e x) * up_e x), in double over the dequantized stacks, and the
// first-order bound of the integer kernels' activation quantization for the projections that run them:
// δg = Σ integer_error_weight * bound(x) (and δu), δact = 1.13 |u| δg + |gelu(g)| δu (|gelu_tanh'| ≤
// 1.13), δy = Σ integer_error_weight * bound(act) + Σ|w| δact, δout = Σ_j w_j δy.
struct MoeReference {
  std::vector<double> value, integer_bound;
};
MoeReference moe_ref(const MoeCase& c) {
  const auto xd = test::to_doubles(c.x), gd = test::to_doubles(test::dequantized(c.gate)),
             ud = test::to_doubles(test::dequantized(c.up)), dd = test::to_doubles(test::dequantized(c.down));
  const auto gsq = integer_error_weight(c.gate), usq = integer_error_weight(c.up), dsq = integer_error_weight(c.down);
  const bool gate_int = ops::cpu::quantized_integer_kernels(c.gate.bits),
             up_int = ops::cpu::quantized_integer_kernels(c.up.bits),
             down_int = ops::cpu::quantized_integer_kernels(c.down.bits);
  const int64_t t = c.x.dim(0), h = c.x.dim(1), k = c.experts.dim(1), inter = c.gate.rows();
  MoeReference ref;
  ref.value.assign(static_cast<size_t>(t * h), 0.0);
  ref.integer_bound.assign(static_cast<size_t>(t * h), 0.0);
  for (int64_t r = 0; r < t; ++r) {
    const auto x_bound = activation_error_bound(xd.data() + r * h, h, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = c.experts.data<int32_t>()[r * k + j];
      const double w = c.weights.item_f32(r * k + j);
      std::vector<double> act(static_cast<size_t>(inter)), act_error(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0, g_error = 0, u_error = 0;
        for (int64_t col = 0; col < h; ++col) {
          const double xv = xd[static_cast<size_t>(r * h + col)];
          const size_t wi = static_cast<size_t>((e * inter + i) * h + col);
          g += xv * gd[wi];
          u += xv * ud[wi];
          g_error += gate_int ? std::fabs(gsq[wi]) * x_bound[static_cast<size_t>(col)] : 0.0;
          u_error += up_int ? std::fabs(usq[wi]) * x_bound[static_cast<size_t>(col)] : 0.0;
        }
        act[static_cast<size_t>(i)] = test::gelu_tanh_ref(g) * u;
        act_error[static_cast<size_t>(i)] = 1.13 * std::fabs(u) * g_error + std::fabs(test::gelu_tanh_ref(g)) * u_error;
      }
      const double act_slack = *std::max_element(act_error.begin(), act_error.end());
      const auto act_bound = activation_error_bound(act.data(), inter, act_slack);
      for (int64_t col = 0; col < h; ++col) {
        double y = 0, y_error = 0;
        for (int64_t i = 0; i < inter; ++i) {
          const size_t wi = static_cast<size_t>((e * h + col) * inter + i);
          y += dd[wi] * act[static_cast<size_t>(i)];
          y_error += std::fabs(dd[wi]) * act_error[static_cast<size_t>(i)] +
                     (down_int ? std::fabs(dsq[wi]) * act_bound[static_cast<size_t>(i)] : 0.0);
        }
        ref.value[static_cast<size_t>(r * h + col)] += w * y;
        ref.integer_bound[static_cast<size_t>(r * h + col)] += std::fabs(w) * y_error;
      }
    }
  }
  return ref;
}

void run(const MoeCase& c, const Tensor& x, const Tensor& experts, const Tensor& weights, Tensor& out) {
  ops::quantized_moe_experts(x, experts, weights, c.gate, c.up, c.down, out);
}

TEST(QuantizedMoeExperts, MatchesReferenceWithMixedBits) {
  // gate 4-bit (reordered columns), up 8-bit, down 3-bit; then all 4-bit.
  for (auto bits : {std::array<int, 3>{4, 8, 3}, std::array<int, 3>{4, 4, 4}, std::array<int, 3>{6, 2, 5}}) {
    const MoeCase c = make_case(11, 64, 96, 6, 2, bits[0], bits[1], bits[2]);
    Tensor out;
    run(c, c.x, c.experts, c.weights, out);
    ASSERT_EQ(out.shape(), (Shape{11, 64}));
    const MoeReference ref = moe_ref(c);
    // The activations here reach ~30, so the bound scales with them (as in the dense MoE test); plus the
    // integer kernels' bound where they run.
    std::vector<double> tol = test::relative_tol(ref.value, 64 * kF32Eps * std::sqrt(64.0 * 96.0));
    for (size_t i = 0; i < tol.size(); ++i) tol[i] += ref.integer_bound[i];
    test::expect_close(out, ref.value, tol, fmt::format("bits {}/{}/{}", bits[0], bits[1], bits[2]).c_str());
  }
}

TEST(QuantizedMoeExperts, BitIdenticalToDenseMoeOverDequantizedWeights) {
  // Natural column order (8- and 3-bit) and FMA dequantization: the same linear_block values, the same
  // activation and combination → ops::moe_experts over the dequantized stacks gives the same bits.
  if ((hwy::SupportedTargets() & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) == 0) GTEST_SKIP() << "no FMA target";
  ops::cpu::set_quantized_integer_kernels(false);  // the f32 kernels' contract
  const MoeCase c = make_case(40, 64, 32, 4, 2, 8, 8, 3);
  const Tensor gate = test::dequantized(c.gate), up = test::dequantized(c.up);
  Tensor gate_up = Tensor::zeros({4, 64, 64}, DType::kF32);
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t i = 0; i < 32 * 64; ++i) {
      gate_up.data<float>()[e * 64 * 64 + i] = gate.data<float>()[e * 32 * 64 + i];
      gate_up.data<float>()[e * 64 * 64 + 32 * 64 + i] = up.data<float>()[e * 32 * 64 + i];
    }
  Tensor got, want;
  run(c, c.x, c.experts, c.weights, got);
  ops::moe_experts(c.x, c.experts, c.weights, gate_up, test::dequantized(c.down), want);
  ops::cpu::set_quantized_integer_kernels(true);
  EXPECT_TRUE(test::bit_equal(got, want));
}

TEST(QuantizedMoeExperts, TokenOutputIndependentOfOtherTokens) {
  // 64 tokens over 4 experts: ~32 rows per expert (the prefill panels); the small calls below give each
  // expert a few rows (the decode path).
  const int64_t tokens = 64;
  const MoeCase c = make_case(tokens, 128, 64, 4, 2, 4, 4, 8);
  for (int threads : {1, 3}) {
    set_default_threads(threads);
    Tensor all;
    run(c, c.x, c.experts, c.weights, all);
    for (int64_t t0 : {int64_t{0}, int64_t{5}, tokens - 1}) {
      Tensor one, few;
      run(c, c.x.slice(0, t0, t0 + 1), c.experts.slice(0, t0, t0 + 1).contiguous(),
          c.weights.slice(0, t0, t0 + 1).contiguous(), one);
      EXPECT_TRUE(test::bit_equal(one, all.slice(0, t0, t0 + 1))) << "token " << t0 << " threads " << threads;
      const int64_t f0 = std::max<int64_t>(0, t0 - 4), f1 = std::min<int64_t>(tokens, t0 + 3);
      run(c, c.x.slice(0, f0, f1), c.experts.slice(0, f0, f1).contiguous(),
          c.weights.slice(0, f0, f1).contiguous(), few);
      EXPECT_TRUE(test::bit_equal(few.slice(0, t0 - f0, t0 - f0 + 1), all.slice(0, t0, t0 + 1)))
          << "token " << t0;
    }
  }
  set_default_threads(0);
}

TEST(QuantizedMoeExperts, RejectsBadArguments) {
  MoeCase c = make_case(3, 64, 32, 4, 2, 4, 4, 4);
  Tensor out;
  c.experts.data<int32_t>()[3] = 4;
  try {
    run(c, c.x, c.experts, c.weights, out);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 4"), std::string::npos) << e.what();
  }
  c.experts.data<int32_t>()[3] = 1;
  MoeCase bad = c;
  bad.down = test::random_expert_stack(4, 64, 64, 4, 32, DType::kBF16);  // I mismatch
  EXPECT_THROW(run(bad, c.x, c.experts, c.weights, out), InvalidArgument);
  bad = c;
  bad.up = test::random_expert_stack(3, 32, 64, 4, 64, DType::kBF16);  // E mismatch
  EXPECT_THROW(run(bad, c.x, c.experts, c.weights, out), InvalidArgument);
  bad = c;
  bad.gate.biases = Tensor();
  EXPECT_THROW(run(bad, c.x, c.experts, c.weights, out), InvalidArgument);
  EXPECT_THROW(run(c, test::random_tensor({3, 32}), c.experts, c.weights, out),
               InvalidArgument);  // H mismatch
}

}  // namespace
}  // namespace lmx
