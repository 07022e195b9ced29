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

TEST(Tensor, LargeZerosAreMappedZeroPagesThatOutliveTheirViews) {
  // Sizes around Storage::kMapThreshold (heap below, mapped pages from it on), each zero, aligned,
  // writable to the last byte, and kept alive by views after the tensor itself is gone.
  const int64_t at = static_cast<int64_t>(Storage::kMapThreshold);
  for (int64_t bytes : {at - 64, at, at + 4, 3 * at + 4096}) {
    Tensor view;
    {
      Tensor t = Tensor::zeros({bytes}, DType::kU8);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % Storage::kAlignment, 0u) << bytes;
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      int64_t nonzero = 0;
      for (int64_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
      EXPECT_EQ(nonzero, 0) << bytes;
      auto* w = static_cast<unsigned char*>(t.raw_data());
      w[0] = 1;
      w[bytes - 1] = 2;
      view = t.slice(0, bytes - 1, bytes);
    }
    EXPECT_EQ(static_cast<const unsigned char*>(view.raw_data())[0], 2) << bytes;
  }
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

TEST(Tensor, ContiguousCopiesViewsOfEveryDimension) {
  // A [4, 6, 5] tensor holding its flat index; views cut along each dimension (as splitting a stacked
  // gate_up projection does along the middle one), then copied.
  std::vector<float> v(120);
  for (int i = 0; i < 120; ++i) v[i] = static_cast<float>(i);
  const Tensor t = Tensor::from_vector(v, {4, 6, 5});
  struct Cut {
    int d;
    int64_t start, end;
  };
  for (const Cut& cut : {Cut{0, 1, 3}, Cut{1, 3, 6}, Cut{1, 0, 1}, Cut{2, 2, 5}}) {
    const Tensor view = t.slice(cut.d, cut.start, cut.end);
    const Tensor c = view.contiguous();
    ASSERT_TRUE(c.is_contiguous());
    ASSERT_EQ(c.shape(), view.shape());
    int64_t flat = 0;
    for (int64_t i = 0; i < c.dim(0); ++i)
      for (int64_t j = 0; j < c.dim(1); ++j)
        for (int64_t k = 0; k < c.dim(2); ++k, ++flat) {
          int64_t at[3] = {i, j, k};
          at[cut.d] += cut.start;
          EXPECT_EQ(c.data<float>()[flat], static_cast<float>(30 * at[0] + 5 * at[1] + at[2]))
              << "cut along " << cut.d << " at " << i << "," << j << "," << k;
        }
  }
  // A view of a view (select, then a slice of the last dimension) and an empty slice.
  const Tensor inner = t.select(2).slice(1, 1, 4).contiguous();
  ASSERT_EQ(inner.shape(), (Shape{6, 3}));
  EXPECT_EQ(inner.data<float>()[0], 61.0f);
  EXPECT_EQ(inner.data<float>()[17], 88.0f);
  EXPECT_EQ(t.slice(1, 2, 2).contiguous().numel(), 0);
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
