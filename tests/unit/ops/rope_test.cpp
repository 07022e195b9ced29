// Tests for RoPE: inv_freq tables (default and Gemma 4 proportional) and apply_rope against a
// reference that rotates in double from the f32 angle the contract specifies.
#include "lmx/ops/ops.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lmx {
namespace {

using test::kF32Eps;

TEST(RopeInvFreq, DefaultAndProportional) {
  const auto def = ops::rope_inv_freq(256, 10000.0, 128);
  ASSERT_EQ(def.size(), 128u);
  EXPECT_EQ(def[0], 1.0f);
  for (int i = 0; i < 128; ++i) {
    const double want = std::pow(10000.0, -2.0 * i / 256.0);
    EXPECT_NEAR(def[static_cast<size_t>(i)], want, 4 * kF32Eps * want) << i;
  }
  // Gemma 4 full layers: D = 512, theta = 1e6, 64 rotated pairs with exponent over the full 512.
  const auto prop = ops::rope_inv_freq(512, 1e6, 64);
  ASSERT_EQ(prop.size(), 256u);
  for (int i = 0; i < 256; ++i) {
    if (i < 64) {
      const double want = std::pow(1e6, -2.0 * i / 512.0);
      EXPECT_NEAR(prop[static_cast<size_t>(i)], want, 4 * kF32Eps * want) << i;
    } else {
      EXPECT_EQ(prop[static_cast<size_t>(i)], 0.0f) << i;
    }
  }
  // Exactly the f32 arithmetic of transformers: 1.0f / powf(base, float(2i) / float(D)).
  EXPECT_EQ(prop[63], 1.0f / std::pow(1e6f, 126.0f / 512.0f));
  EXPECT_THROW(ops::rope_inv_freq(255, 1e4, 10), InvalidArgument);
  EXPECT_THROW(ops::rope_inv_freq(256, 1e4, 129), InvalidArgument);
}

// x'[i] = x[i] cos - x[i+D/2] sin, x'[i+D/2] = x[i+D/2] cos + x[i] sin with angle = f32(pos * f).
std::vector<double> rope_ref(const Tensor& x, const std::vector<int32_t>& pos,
                             const std::vector<float>& inv) {
  auto xd = test::to_doubles(x);
  const int64_t t = x.dim(0), h = x.dim(1), d = x.dim(2), half = d / 2;
  std::vector<double> out = xd;
  for (int64_t a = 0; a < t; ++a)
    for (int64_t b = 0; b < h; ++b)
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[static_cast<size_t>(a)]) * inv[static_cast<size_t>(i)];
        const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
        const size_t base = static_cast<size_t>((a * h + b) * d);
        const double x1 = xd[base + static_cast<size_t>(i)], x2 = xd[base + static_cast<size_t>(i + half)];
        out[base + static_cast<size_t>(i)] = x1 * c - x2 * s;
        out[base + static_cast<size_t>(i + half)] = x2 * c + x1 * s;
      }
  return out;
}

TEST(ApplyRope, DefaultRope) {
  const std::vector<int32_t> pos{0, 1, 5, 1000, 77, 4095};
  const auto inv = ops::rope_inv_freq(64, 10000.0, 32);
  Tensor x = test::random_tensor({6, 3, 64});
  const auto expected = rope_ref(x, pos, inv);
  ops::apply_rope(x, pos, inv);
  test::expect_close(x, expected, test::relative_tol(expected, 6 * kF32Eps), "rope default");
  // Position 0 is the identity.
  for (int64_t c = 0; c < 3 * 64; ++c) EXPECT_NEAR(x.item_f32(c), expected[static_cast<size_t>(c)], 0.0);
}

TEST(ApplyRope, ProportionalLeavesUnrotatedDimsUnchanged) {
  const int64_t d = 32;
  const auto inv = ops::rope_inv_freq(static_cast<int>(d), 1e6, 4);  // 4 of 16 pairs rotated
  const std::vector<int32_t> pos{3, 9, 120000};
  Tensor x = test::random_tensor({3, 2, d});
  const Tensor before = x.contiguous();
  const auto expected = rope_ref(x, pos, inv);
  ops::apply_rope(x, pos, inv);
  test::expect_close(x, expected, test::relative_tol(expected, 6 * kF32Eps), "rope proportional");
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < d; ++i) {
        const int64_t pair = i % (d / 2);
        const int64_t flat = (t * 2 + h) * d + i;
        if (pair >= 4) {
          EXPECT_EQ(x.item_f32(flat), before.item_f32(flat)) << flat;
        } else if (pos[static_cast<size_t>(t)] != 0) {
          EXPECT_NE(x.item_f32(flat), before.item_f32(flat)) << flat;
        }
      }
}

TEST(ApplyRope, StridedViewAndErrors) {
  // Rotate the k heads inside a fused [T, Hq + Hk, D] buffer without touching the q heads.
  Tensor fused = test::random_tensor({4, 5, 16});
  const Tensor before = fused.contiguous();
  Tensor k = fused.slice(1, 3, 5);
  const std::vector<int32_t> pos{10, 11, 12, 13};
  const auto inv = ops::rope_inv_freq(16, 10000.0, 8);
  const auto expected = rope_ref(k.contiguous(), pos, inv);
  ops::apply_rope(k, pos, inv);
  test::expect_close(k, expected, test::relative_tol(expected, 6 * kF32Eps), "rope strided");
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t i = 0; i < 3 * 16; ++i) EXPECT_EQ(fused.item_f32(t * 80 + i), before.item_f32(t * 80 + i));
  EXPECT_THROW(ops::apply_rope(k, std::vector<int32_t>{1, 2}, inv), InvalidArgument);
  EXPECT_THROW(ops::apply_rope(k, pos, std::vector<float>(7)), InvalidArgument);
}

}  // namespace
}  // namespace lmx
