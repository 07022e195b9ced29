// Tests for Tensor views, copies and dtype conversion, and for the bf16/f16 converters.
#include "lmx/core/half.h"
#include "lmx/core/tensor.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace lmx {
namespace {

TEST(Tensor, ZerosIsAlignedAndZero) {
  Tensor t = Tensor::zeros({3, 5}, DType::kF32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % Storage::kAlignment, 0u);
  for (float v : t.span<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(t.nbytes(), 60u);
}

TEST(Tensor, SliceSelectReshapeShareStorage) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(v, {2, 3, 4});
  Tensor s = t.select(1);
  EXPECT_EQ(s.shape(), (Shape{3, 4}));
  EXPECT_EQ(s.data<float>()[0], 12.0f);
  Tensor sl = t.slice(2, 1, 3);
  EXPECT_FALSE(sl.is_contiguous());
  Tensor c = sl.contiguous();
  EXPECT_EQ(c.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(c.data<float>()[0], 1.0f);
  EXPECT_EQ(c.data<float>()[3], 6.0f);
  EXPECT_EQ(c.data<float>()[11], 22.0f);
  Tensor r = t.reshape({6, 4});
  EXPECT_EQ(r.storage(), t.storage());
  EXPECT_THROW(t.reshape({5, 5}), InvalidArgument);
  EXPECT_THROW(sl.reshape({12}), InvalidArgument);
  EXPECT_THROW(t.slice(0, 1, 3), InvalidArgument);
  EXPECT_THROW(t.data<int32_t>(), InvalidArgument);
}

TEST(Half, Bf16RoundsToNearestEven) {
  // Exhaustive over a stride of bit patterns: the round trip is the nearest bf16 value.
  for (uint32_t u = 0; u < 0xffffffffu - 4093; u += 4093) {
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    uint16_t b = f32_to_bf16(f);
    float back = bf16_to_f32(b);
    float lo = bf16_to_f32(static_cast<uint16_t>(b - 1)), hi = bf16_to_f32(static_cast<uint16_t>(b + 1));
    if (std::isinf(back) || std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)) continue;
    EXPECT_LE(std::fabs(back - f), std::fabs(lo - f)) << u;
    EXPECT_LE(std::fabs(back - f), std::fabs(hi - f)) << u;
  }
}

TEST(Half, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(1e6f)), INFINITY);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f / 3.0f)), 0.333251953125f);
}

TEST(Tensor, ConversionRoundTrip) {
  Tensor t = test::random_tensor({7, 9});
  Tensor b = t.to(DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  Tensor back = b.to(DType::kF32);
  EXPECT_LE(test::max_abs_diff(t, back), 1.0f / 128);
  EXPECT_THROW(t.to(DType::kI32), InvalidArgument);
}

}  // namespace
}  // namespace lmx
