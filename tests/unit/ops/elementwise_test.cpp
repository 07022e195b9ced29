// Tests for the elementwise and row-wise ops: gelu_tanh(_mul), softmax, softcap, add/scale/mul,
// argmax, rms_norm and embedding, each against a double reference.
#include "lmx/core/half.h"
#include "lmx/ops/ops.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lmx {
namespace {

using test::kF32Eps;

TEST(Elementwise, GeluTanh) {
  Tensor x = test::random_tensor({33, 70}, DType::kF32, -6.0f, 6.0f);
  const auto xd = test::to_doubles(x);
  std::vector<double> expected(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) expected[i] = test::gelu_tanh_ref(xd[i]);
  ops::gelu_tanh(x);
  test::expect_close(x, expected, test::relative_tol(expected, 8 * kF32Eps), "gelu_tanh");
}

// The f32 operation order with tanh rounded from f64: ops::gelu_tanh evaluates tanh in f64 (Highway's
// Tanh, ≤ 4 f64 ulp) and rounds it, so it matches this formula with the exact tanh except where that
// rounding is a near tie, and there by one f32 ulp of tanh at most. Checked over a million inputs.
TEST(Elementwise, GeluTanhUsesTanhRoundedFromDouble) {
  constexpr int64_t kCount = 1 << 20;
  Tensor x = test::random_tensor({kCount}, DType::kF32, -10.0f, 10.0f);
  std::vector<float> in(x.data<float>(), x.data<float>() + kCount);
  ops::gelu_tanh(x);
  int64_t differ = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    const float v = in[static_cast<size_t>(i)];
    const float inner = 0.7978845608028654f * (v + 0.044715f * (v * v * v));
    const float t = static_cast<float>(std::tanh(static_cast<double>(inner)));
    const float want = 0.5f * v * (1.0f + t);
    const float have = x.data<float>()[i];
    if (have == want) continue;
    ++differ;
    const float t_up = std::nextafter(t, 2.0f), t_down = std::nextafter(t, -2.0f);
    const bool one_ulp = have == 0.5f * v * (1.0f + t_up) || have == 0.5f * v * (1.0f + t_down);
    ASSERT_TRUE(one_ulp) << "x " << v << ": " << have << " vs " << want;
  }
  EXPECT_LT(differ, kCount / 1000) << "tanh should round like the exact value almost always";
}

TEST(Elementwise, GeluTanhMulAndAliasing) {
  const Tensor gate = test::random_tensor({17, 41}, DType::kF32, -5.0f, 5.0f);
  const Tensor up = test::random_tensor({17, 41}, DType::kF32, -2.0f, 2.0f);
  const auto g = test::to_doubles(gate), u = test::to_doubles(up);
  std::vector<double> expected(g.size());
  for (size_t i = 0; i < g.size(); ++i) expected[i] = test::gelu_tanh_ref(g[i]) * u[i];
  Tensor out;
  ops::gelu_tanh_mul(gate, up, out);
  test::expect_close(out, expected, test::relative_tol(expected, 10 * kF32Eps), "gelu_tanh_mul");
  Tensor aliased = gate.contiguous();
  ops::gelu_tanh_mul(aliased, up, aliased);
  EXPECT_TRUE(test::bit_equal(aliased, out));
  EXPECT_THROW(ops::gelu_tanh_mul(gate, test::random_tensor({17, 40}), out), InvalidArgument);
}

TEST(Elementwise, SoftmaxRows) {
  Tensor x = test::random_tensor({9, 300}, DType::kF32, -30.0f, 30.0f);
  const auto xd = test::to_doubles(x);
  std::vector<double> expected(xd.size());
  for (int64_t r = 0; r < 9; ++r) {
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < 300; ++c) max = std::max(max, xd[static_cast<size_t>(r * 300 + c)]);
    for (int64_t c = 0; c < 300; ++c) sum += std::exp(xd[static_cast<size_t>(r * 300 + c)] - max);
    for (int64_t c = 0; c < 300; ++c)
      expected[static_cast<size_t>(r * 300 + c)] = std::exp(xd[static_cast<size_t>(r * 300 + c)] - max) / sum;
  }
  ops::softmax(x);
  std::vector<double> tol(expected.size());
  for (size_t i = 0; i < tol.size(); ++i) tol[i] = 16 * kF32Eps * expected[i] + 1e-12;
  test::expect_close(x, expected, tol, "softmax");
  // Large logits do not overflow (max-subtracted).
  Tensor big = Tensor::from_vector(std::vector<float>{1000.0f, 1000.0f}, {1, 2});
  ops::softmax(big);
  EXPECT_FLOAT_EQ(big.item_f32(0), 0.5f);
}

TEST(Elementwise, Softcap) {
  Tensor x = test::random_tensor({5, 64}, DType::kF32, -100.0f, 100.0f);
  const auto xd = test::to_doubles(x);
  std::vector<double> expected(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) expected[i] = 30.0 * std::tanh(xd[i] / 30.0);
  ops::softcap(x, 30.0f);
  test::expect_close(x, expected, test::relative_tol(expected, 8 * kF32Eps), "softcap");
  EXPECT_THROW(ops::softcap(x, 0.0f), InvalidArgument);
}

// softcap's tanh is rounded from f64 like gelu_tanh's: cap * tanh(x / cap) with the exact tanh rounded to
// f32, except at near-ties, and there by one ulp of tanh.
TEST(Elementwise, SoftcapUsesTanhRoundedFromDouble) {
  constexpr int64_t kCount = 1 << 20;
  constexpr float kCap = 30.0f;
  Tensor x = test::random_tensor({kCount}, DType::kF32, -200.0f, 200.0f);
  std::vector<float> in(x.data<float>(), x.data<float>() + kCount);
  ops::softcap(x, kCap);
  int64_t differ = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    const float q = in[static_cast<size_t>(i)] / kCap;
    const float t = static_cast<float>(std::tanh(static_cast<double>(q)));
    const float have = x.data<float>()[i];
    if (have == kCap * t) continue;
    ++differ;
    ASSERT_TRUE(have == kCap * std::nextafter(t, 2.0f) || have == kCap * std::nextafter(t, -2.0f))
        << "x " << in[static_cast<size_t>(i)] << ": " << have << " vs " << kCap * t;
  }
  EXPECT_LT(differ, kCount / 1000);
}

TEST(Elementwise, AddScaleMul) {
  Tensor x = test::random_tensor({4, 6});
  const Tensor a = test::random_tensor({4, 6});
  const Tensor row = test::random_tensor({6});
  const auto xd = test::to_doubles(x), ad = test::to_doubles(a), rd = test::to_doubles(row);
  ops::add_inplace(x, a);
  ops::scale_inplace(x, 0.5f);
  ops::mul_inplace(x, row);
  ops::add_inplace(x, row);
  for (size_t i = 0; i < xd.size(); ++i) {
    const float want =
        ((static_cast<float>(xd[i]) + static_cast<float>(ad[i])) * 0.5f) * static_cast<float>(rd[i % 6]) +
        static_cast<float>(rd[i % 6]);
    EXPECT_EQ(x.item_f32(static_cast<int64_t>(i)), want) << i;
  }
  EXPECT_THROW(ops::add_inplace(x, test::random_tensor({5})), InvalidArgument);
  EXPECT_THROW(ops::mul_inplace(x, test::random_tensor({4, 5})), InvalidArgument);
}

TEST(Elementwise, ArgmaxFirstMax) {
  const std::vector<float> row{1.0f, 5.0f, -2.0f, 5.0f, 4.0f};
  EXPECT_EQ(ops::argmax(row), 1);
  const std::vector<float> with_nan{NAN, 2.0f, 3.0f, 3.0f};
  EXPECT_EQ(ops::argmax(with_nan), 2);
  EXPECT_EQ(ops::argmax(std::vector<float>{-1.0f}), 0);
  EXPECT_THROW(ops::argmax(std::span<const float>{}), InvalidArgument);
}

// rms_norm in double: x / sqrt(mean(x²) + eps) * w.
std::vector<double> rms_norm_ref(const Tensor& x, const Tensor* w, double eps) {
  const auto xd = test::to_doubles(x);
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  std::vector<double> wd = w ? test::to_doubles(*w) : std::vector<double>(static_cast<size_t>(cols), 1.0);
  std::vector<double> out(xd.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c)
      ss += xd[static_cast<size_t>(r * cols + c)] * xd[static_cast<size_t>(r * cols + c)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] =
          xd[static_cast<size_t>(r * cols + c)] * inv * wd[static_cast<size_t>(c)];
  }
  return out;
}

TEST(RmsNorm, WeightsF32Bf16AndNone) {
  const Tensor x = test::random_tensor({3, 7, 257}, DType::kF32, -3.0f, 3.0f);
  for (int variant = 0; variant < 3; ++variant) {
    Tensor w;
    if (variant == 0) w = test::random_tensor({257}, DType::kF32, 0.5f, 2.0f);
    if (variant == 1) w = test::random_tensor({257}, DType::kBF16, 0.5f, 2.0f);
    const Tensor* wp = variant == 2 ? nullptr : &w;
    const auto expected = rms_norm_ref(x, wp, 1e-6);
    Tensor out;
    ops::rms_norm(x, wp, 1e-6f, out);
    EXPECT_EQ(out.shape(), x.shape());
    test::expect_close(out, expected, test::relative_tol(expected, 6 * kF32Eps), "rms_norm");
    // In place gives the same bits.
    Tensor inplace = x.contiguous();
    ops::rms_norm(inplace, wp, 1e-6f, inplace);
    EXPECT_TRUE(test::bit_equal(inplace, out));
  }
}

TEST(RmsNorm, StridedRowsAndErrors) {
  // Per-head norm over a column window of a fused buffer (e.g. q inside qkv).
  const Tensor fused = test::random_tensor({5, 96});
  const Tensor q = fused.slice(1, 16, 48);
  const Tensor w = test::random_tensor({32});
  Tensor out;
  ops::rms_norm(q, &w, 1e-6f, out);
  const auto expected = rms_norm_ref(q.contiguous(), &w, 1e-6);
  test::expect_close(out, expected, test::relative_tol(expected, 6 * kF32Eps), "rms_norm strided");
  const Tensor bad_w = test::random_tensor({31});
  EXPECT_THROW(ops::rms_norm(q, &bad_w, 1e-6f, out), InvalidArgument);
}

TEST(Embedding, LooksUpAndScales) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor table = test::random_tensor({50, 24}, dtype);
    const std::vector<int32_t> ids{0, 49, 7, 7, 13};
    Tensor out;
    ops::embedding(table, ids, 2.5f, out);
    ASSERT_EQ(out.shape(), (Shape{5, 24}));
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t c = 0; c < 24; ++c)
        EXPECT_EQ(out.item_f32(static_cast<int64_t>(t) * 24 + c), table.item_f32(ids[t] * 24 + c) * 2.5f);
  }
}

TEST(Embedding, BadIdNamesTheId) {
  const Tensor table = test::random_tensor({50, 8}, DType::kBF16);
  Tensor out;
  for (int32_t bad : {50, -1, 262144}) {
    const std::vector<int32_t> ids{3, bad};
    try {
      ops::embedding(table, ids, 1.0f, out);
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lmx
