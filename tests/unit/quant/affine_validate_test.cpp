// Tests for validate_affine: well-formed triples pass; each malformed case is a FormatError that names
// the weight and what is wrong.
#include "lmx/quant/affine.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace lmx {
namespace {

// Expects validate_affine to throw a FormatError mentioning the name and `needle`.
void expect_rejected(const Tensor& codes, const Tensor& scales, const Tensor& biases, int bits, int group,
                     const std::string& needle) {
  try {
    quant::validate_affine(codes, scales, biases, bits, group, "model.layers.0.mlp.up_proj");
    ADD_FAILURE() << "accepted; expected an error about " << needle;
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.layers.0.mlp.up_proj"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(AffineValidate, AcceptsWellFormedTriples) {
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      for (DType sdt : {DType::kF32, DType::kBF16, DType::kF16}) {
        const auto q = quant::quantize_affine(test::random_tensor({2, 3, 384}), bits, group, sdt);
        EXPECT_NO_THROW(quant::validate_affine(q.codes, q.scales, q.biases, bits, group, "w"));
      }
}

TEST(AffineValidate, RejectsMalformedTriples) {
  const auto q = quant::quantize_affine(test::random_tensor({8, 256}), 4, 64, DType::kBF16);  // codes [8, 32]
  const Tensor& c = q.codes;
  const Tensor& s = q.scales;
  const Tensor& b = q.biases;
  expect_rejected(c, s, b, 7, 64, "bits 7");
  expect_rejected(c, s, b, 4, 48, "group size 48");
  expect_rejected(Tensor(), s, b, 4, 64, "codes missing");
  expect_rejected(c, s, Tensor(), 4, 64, "biases missing");
  expect_rejected(Tensor::zeros({8, 32}, DType::kI32), s, b, 4, 64, "I32");
  expect_rejected(c, Tensor::zeros({8, 4}, DType::kI32), b, 4, 64, "F32, BF16 or F16");
  expect_rejected(c, s, Tensor::zeros({8, 4}, DType::kF16), 4, 64, "share one dtype");
  expect_rejected(c, Tensor::zeros({8, 2}, DType::kBF16), b, 4, 64, "scales [8, 2]");    // groups
  expect_rejected(c, s, Tensor::zeros({7, 4}, DType::kBF16), 4, 64, "biases [7, 4]");    // rows
  expect_rejected(c, Tensor::zeros({8, 4, 1}, DType::kBF16), b, 4, 64, "scales");        // rank
  expect_rejected(Tensor::zeros({8, 4}, DType::kU32), s, b, 3, 64, "whole 3-bit rows");  // 128 bits / 3
  expect_rejected(Tensor::zeros({8, 6}, DType::kU32), Tensor::zeros({8, 1}, DType::kBF16),
                  Tensor::zeros({8, 1}, DType::kBF16), 4, 64, "K = 48");  // not a multiple of the group
  expect_rejected(Tensor::zeros({8, 0}, DType::kU32), Tensor::zeros({8, 0}, DType::kBF16),
                  Tensor::zeros({8, 0}, DType::kBF16), 4, 64, "whole");
  // The same triple read with the wrong bits: 32 words of 8-bit codes are K = 128 → 2 groups, not 4.
  expect_rejected(c, s, b, 8, 64, "expected [8, 2]");
}

TEST(AffineValidate, DequantizeRejectsInconsistentTriples) {
  auto q = quant::quantize_affine(test::random_tensor({2, 64}), 4, 32, DType::kF32);
  q.group_size = 64;
  EXPECT_THROW(quant::dequantize_affine(q), FormatError);
}

TEST(AffineScales, FiniteMagnitudesBelowALimit) {
  const float limit = 0x1p-5f;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float below = std::nextafter(limit, 0.0f);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto make = [&](std::vector<float> v) {
      const auto n = static_cast<int64_t>(v.size());
      return Tensor::from_vector(v, {n}).to(dtype);
    };
    const std::string what(dtype_name(dtype));
    // The largest bf16 below the limit (exact in every dtype here); f32's own largest is checked below.
    const float largest = limit * (1.0f - 0x1p-8f);
    EXPECT_TRUE(quant::finite_magnitudes_below(make({0.0f, -0.0f, 1e-3f, -largest, largest}), limit)) << what;
    EXPECT_TRUE(quant::finite_magnitudes_below(make({inf, -inf, nan, 1e-3f}), limit)) << what << ": non-finite ignored";
    EXPECT_FALSE(quant::finite_magnitudes_below(make({1e-3f, limit}), limit)) << what << ": the limit itself";
    EXPECT_FALSE(quant::finite_magnitudes_below(make({-limit, 1e-3f}), limit)) << what << ": negative";
    EXPECT_FALSE(quant::finite_magnitudes_below(make({1e-3f, 0.5f, inf}), limit)) << what;
    EXPECT_TRUE(quant::finite_magnitudes_below(Tensor::zeros({0}, dtype), limit)) << what << ": empty";
  }
  EXPECT_TRUE(quant::finite_magnitudes_below(Tensor::from_vector<float>({below, -below}, {2}), limit));
  // Any shape, any stride.
  const Tensor grid = Tensor::from_vector<float>({1e-3f, 1e-3f, 0.5f, 1e-3f, 0.25f, 0.5f}, {2, 3});
  EXPECT_FALSE(quant::finite_magnitudes_below(grid.slice(1, 0, 2), limit));
  EXPECT_TRUE(quant::finite_magnitudes_below(grid.slice(1, 0, 1), limit));
  EXPECT_THROW(quant::finite_magnitudes_below(Tensor::zeros({4}, DType::kU32), limit), InvalidArgument);
}

}  // namespace
}  // namespace lmx
