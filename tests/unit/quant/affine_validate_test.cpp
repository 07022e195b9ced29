// Tests for validate_affine: well-formed triples pass; each malformed case is a FormatError that names
// the weight and what is wrong.
#include "lmx/quant/affine.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace lmx
