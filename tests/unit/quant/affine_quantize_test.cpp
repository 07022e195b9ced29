// Tests for quantize_affine / dequantize_affine: hand-computed MLX results (sign handling, all-negative
// and constant groups, zeros, zero-point snapping, GPU vs CPU rounding), the error bounds on random data
// for every bits × group × dtype, shapes with leading dims, and argument errors.
#include "lmx/core/half.h"
#include "lmx/quant/affine.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace lmx {
namespace {

using quant::AffineRounding;

// A [1, n] f32 tensor.
Tensor row_of(const std::vector<float>& v) {
  return Tensor::from_vector(v, {1, static_cast<int64_t>(v.size())});
}

// 32 values cycling through `pattern`.
std::vector<float> cycle32(const std::vector<float>& pattern) {
  std::vector<float> v(32);
  for (size_t j = 0; j < v.size(); ++j) v[j] = pattern[j % pattern.size()];
  return v;
}

uint32_t code_at(const quant::AffineQuantized& q, int64_t row, int64_t j) {
  const int64_t words = q.codes.dim(-1);
  const uint32_t* base = q.codes.data<uint32_t>() + row * words;
  return quant::unpack_code(std::span<const uint32_t>(base, static_cast<size_t>(words)), j, q.bits);
}

struct Expected {
  float scale, bias;
  std::vector<uint32_t> codes;  // for the values of the pattern, in order
};

// Quantizes one 32-element group cycling through `pattern` and checks scale, bias and each code.
void check_group(const std::vector<float>& pattern, int bits, AffineRounding rounding, const Expected& want,
                 const char* what) {
  SCOPED_TRACE(what);
  const auto q = quant::quantize_affine(row_of(cycle32(pattern)), bits, 32, DType::kF32, rounding);
  EXPECT_EQ(q.scales.item_f32(0), want.scale);
  EXPECT_EQ(q.biases.item_f32(0), want.bias);
  for (size_t j = 0; j < 32; ++j)
    EXPECT_EQ(code_at(q, 0, static_cast<int64_t>(j)), want.codes[j % want.codes.size()])
        << "value " << pattern[j % pattern.size()];
}

std::vector<float> iota_minus(int n, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) v[static_cast<size_t>(j)] = static_cast<float>(j) - offset;
  return v;
}
std::vector<uint32_t> codes_iota(int n, int start, int step) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) v[static_cast<size_t>(j)] = static_cast<uint32_t>(start + step * j);
  return v;
}

TEST(AffineQuantize, MaxDominatesGivesNegativeScale) {
  // Values 0..15 (4-bit): range 15 → step 1; |min| > |max| is false, so the scale is negated and the
  // edge is the max: q0 = round(15 / -1) = -15, scale = 15 / -15 = -1, bias = 15, code = 15 - w.
  for (auto r : {AffineRounding::kMlxGpu, AffineRounding::kMlxCpu})
    check_group(iota_minus(16, 0), 4, r, {-1.0f, 15.0f, codes_iota(16, 15, -1)}, "0..15");
  // Values -3..12: same step, still max-dominated: bias 12, code = 12 - w.
  check_group(iota_minus(16, 3), 4, AffineRounding::kMlxGpu, {-1.0f, 12.0f, codes_iota(16, 15, -1)},
              "-3..12");
}

TEST(AffineQuantize, MinDominatesGivesPositiveScale) {
  // Values -12..3: |min| > |max|: scale +1, edge = bias = -12, code = w + 12.
  for (auto r : {AffineRounding::kMlxGpu, AffineRounding::kMlxCpu})
    check_group(iota_minus(16, 12), 4, r, {1.0f, -12.0f, codes_iota(16, 0, 1)}, "-12..3");
}

TEST(AffineQuantize, AllNegativeGroupGpuIncludesZero) {
  // Values -1..-8. GPU kernels start the max at 0: range [-8, 0], step 8/15; q0 = round(-8 / (8/15)) = -15
  // so scale = -8 / -15 and bias = -8; code = round((w + 8) / scale): 7/s = 13.125 → 13, 6/s = 11.25 → 11,
  // 5/s = 9.375 → 9, 4/s = 7.4999995 (f32(8/15) lies above 8/15, so the f32 quotient falls below the tie)
  // → 7, 5.625 → 6, 3.75 → 4, 1.875 → 2, 0.
  const std::vector<float> values = {-1, -2, -3, -4, -5, -6, -7, -8};
  check_group(values, 4, AffineRounding::kMlxGpu, {-8.0f / -15.0f, -8.0f, {13, 11, 9, 7, 6, 4, 2, 0}}, "gpu");
  // MLX's CPU backend uses the true max -1: range 7, step 7/15, q0 = rint(-8 / (7/15)) = rint(-17.14) = -17,
  // scale = -8 / -17, bias = -8; codes 14.875 → 15, 12.75 → 13, 10.625 → 11, 8.5 → 8 (half to even),
  // 6.375 → 6, 4.25 → 4, 2.125 → 2, 0.
  check_group(values, 4, AffineRounding::kMlxCpu, {-8.0f / -17.0f, -8.0f, {15, 13, 11, 8, 6, 4, 2, 0}},
              "cpu");
}

TEST(AffineQuantize, TiesRoundHalfAwayOnGpuAndHalfEvenOnCpu) {
  // 2-bit, values in [-1, 0.5]: step 0.5, min dominates: scale 0.5, bias -1, code = 2w + 2:
  // 0.5 → 3, 0.25 → 2.5, -0.25 → 1.5, -0.75 → 0.5, -1 → 0.
  const std::vector<float> values = {0.5f, 0.25f, -0.25f, -0.75f, -1.0f};
  check_group(values, 2, AffineRounding::kMlxGpu, {0.5f, -1.0f, {3, 3, 2, 1, 0}}, "gpu");
  check_group(values, 2, AffineRounding::kMlxCpu, {0.5f, -1.0f, {3, 2, 2, 0, 0}}, "cpu");
}

TEST(AffineQuantize, ZeroPointSnapCanLeaveTheFarEndOneStepOff) {
  // 2-bit, values in [-1, 1]: |min| == |max| so the max is the edge; step0 = 2/3, 1 / -(2/3) = -1.5 in
  // f32 → q0 = -2, scale = 1 / -2 = -0.5, bias = 1, code = round(2 - 2w) clamped to 3. The edge (1) is
  // exact; -1 lands on code 3 → -0.5, a full step away (MLX's own tests bound the error by one step).
  const std::vector<float> values = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f};
  for (auto r : {AffineRounding::kMlxGpu, AffineRounding::kMlxCpu})
    check_group(values, 2, r, {-0.5f, 1.0f, {0, 1, 2, 3, 3}}, "[-1, 1]");
  const auto q = quant::quantize_affine(row_of(cycle32(values)), 2, 32, DType::kF32);
  const Tensor deq = quant::dequantize_affine(q);
  EXPECT_EQ(deq.item_f32(0), 1.0f);
  EXPECT_EQ(deq.item_f32(4), -0.5f);
}

TEST(AffineQuantize, ZerosAndConstantGroups) {
  // All zeros: step = eps = 1e-7, negated (|0| > |0| is false); q0 = round(-0) == 0 → bias 0, scale -1e-7.
  for (auto r : {AffineRounding::kMlxGpu, AffineRounding::kMlxCpu})
    check_group({0.0f}, 4, r, {-1e-7f, 0.0f, {0}}, "zeros");
  // A constant positive group: step eps, max is the edge: scale = 0.3 / round(0.3 / -1e-7), bias 0.3, code 0.
  const float c = 0.3f;
  const float q0 = std::round(c / -1e-7f);
  for (auto r : {AffineRounding::kMlxGpu, AffineRounding::kMlxCpu})
    check_group({c}, 4, r, {c / q0, c, {0}}, "constant +0.3");
  // A constant negative group: on the GPU the range is [-0.3, 0] (step 0.02, q0 = -15, scale -0.3/-15);
  // on the CPU the max is -0.3 itself, so it is the edge with step eps, as for the positive constant.
  check_group({-c}, 4, AffineRounding::kMlxGpu, {-c / -15.0f, -c, {0}}, "constant -0.3 gpu");
  check_group({-c}, 4, AffineRounding::kMlxCpu, {-c / std::round(-c / -1e-7f), -c, {0}}, "constant -0.3 cpu");
  // Every one of them dequantizes exactly, at any width and group, with f32 scales...
  for (float v : {0.0f, c, -c, 1e-6f, -7.0f})
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int group : {32, 64, 128}) {
        const auto q = quant::quantize_affine(Tensor::from_vector(std::vector<float>(256, v), {2, 128}), bits,
                                              group, DType::kF32);
        const Tensor deq = quant::dequantize_affine(q);
        for (int64_t i = 0; i < deq.numel(); ++i) ASSERT_EQ(deq.item_f32(i), v) << bits << "/" << group;
      }
  // ...except constants below eps/2 in magnitude: edge / ±eps rounds to q0 = 0, so the bias is 0 and the
  // group dequantizes to 0 (as in MLX).
  const auto tiny =
      quant::quantize_affine(Tensor::from_vector(std::vector<float>(32, 4e-8f), {1, 32}), 4, 32, DType::kF32);
  EXPECT_EQ(tiny.biases.item_f32(0), 0.0f);
  EXPECT_EQ(quant::dequantize_affine(tiny).item_f32(5), 0.0f);
}

TEST(AffineQuantize, GroupsOfOneRowAreIndependentAndLeadingDimsKeep) {
  // Three groups in one row (4-bit g32) give the per-group results above; a 3-D stack keeps its shape.
  std::vector<float> row = cycle32(iota_minus(16, 0));
  const std::vector<float> second = cycle32(iota_minus(16, 12));
  const std::vector<float> third = cycle32({-1, -2, -3, -4, -5, -6, -7, -8});
  row.insert(row.end(), second.begin(), second.end());
  row.insert(row.end(), third.begin(), third.end());
  std::vector<float> stacked;
  for (int e = 0; e < 4; ++e) stacked.insert(stacked.end(), row.begin(), row.end());
  const auto q = quant::quantize_affine(Tensor::from_vector(stacked, {2, 2, 96}), 4, 32, DType::kBF16);
  EXPECT_EQ(q.codes.shape(), (Shape{2, 2, 12}));
  EXPECT_EQ(q.scales.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(q.scales.dtype(), DType::kBF16);
  EXPECT_EQ(q.biases.dtype(), DType::kBF16);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(q.scales.item_f32(r * 3 + 0), -1.0f);
    EXPECT_EQ(q.biases.item_f32(r * 3 + 0), 15.0f);
    EXPECT_EQ(q.scales.item_f32(r * 3 + 1), 1.0f);
    EXPECT_EQ(q.biases.item_f32(r * 3 + 1), -12.0f);
    EXPECT_EQ(q.scales.item_f32(r * 3 + 2), bf16_to_f32(f32_to_bf16(8.0f / 15.0f)));  // rounded to bf16
    EXPECT_EQ(code_at(q, r, 3), 12u);
    EXPECT_EQ(code_at(q, r, 32 + 3), 3u);
    EXPECT_EQ(code_at(q, r, 64 + 3), 7u);
  }
}

TEST(AffineQuantize, CodesAreThePackedRowStream) {
  // The codes tensor is pack_row of each row's codes; quantizing bf16 and f16 inputs works on their values.
  const Tensor w = test::random_tensor({3, 192}, DType::kBF16);
  for (int bits : {3, 5, 6}) {
    const auto q = quant::quantize_affine(w, bits, 64, DType::kF16);
    EXPECT_EQ(q.codes.dim(-1), 192 * bits / 32);
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<uint32_t> codes(192);
      for (int64_t j = 0; j < 192; ++j) codes[static_cast<size_t>(j)] = code_at(q, r, j);
      std::vector<uint32_t> words(static_cast<size_t>(q.codes.dim(-1)));
      quant::pack_row(codes, bits, words);
      for (size_t i = 0; i < words.size(); ++i)
        ASSERT_EQ(words[i], q.codes.data<uint32_t>()[r * q.codes.dim(-1) + static_cast<int64_t>(i)]);
    }
    const auto q32 = quant::quantize_affine(w.to(DType::kF32), bits, 64, DType::kF16);
    const auto q16 = quant::quantize_affine(w.to(DType::kF32).to(DType::kF16), bits, 64, DType::kF16);
    EXPECT_EQ(test::max_abs_diff(quant::dequantize_affine(q32), quant::dequantize_affine(q)), 0.0f);
    EXPECT_EQ(q16.codes.shape(), q.codes.shape());
  }
}

// Bound on the error of rounding v to the stored scale/bias dtype: unit roundoff relative to |v|, or half
// the subnormal spacing (f16 scales of small weights are subnormal: below 6.1e-5).
double storage_error(DType d, double v) {
  const double u = d == DType::kBF16  ? std::ldexp(1.0, -8)
                   : d == DType::kF16 ? std::ldexp(1.0, -11)
                                      : std::ldexp(1.0, -24);
  const double tiny = d == DType::kBF16  ? std::ldexp(1.0, -134)
                      : d == DType::kF16 ? std::ldexp(1.0, -25)
                                         : std::ldexp(1.0, -150);
  return std::max(u * std::fabs(v), tiny);
}

TEST(AffineQuantize, RoundTripErrorWithinHalfAStep) {
  // Random rows, some scaled by 1e3 or 1e-3. Per element with stored scale S, bias B, code q:
  // |w - deq| ≤ |S|/2 + e(S) q + e(B) (+ f32 rounding), e the scale dtype's rounding error — half a
  // step — except at the clamped far end (q = 2^bits - 1), where MLX's zero-point snapping allows one step.
  // The edge (larger-magnitude extreme) always gets code 0.
  for (DType sdt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int group : {32, 64, 128}) {
        Tensor w = test::random_tensor({4, 256});
        float* p = w.data<float>();
        for (int64_t j = 0; j < 256; ++j) {
          p[256 + j] *= 1e3f;
          p[512 + j] *= 1e-3f;
        }
        const auto q = quant::quantize_affine(w, bits, group, sdt);
        const Tensor deq = quant::dequantize_affine(q);
        const uint32_t top = (1u << bits) - 1;
        for (int64_t r = 0; r < 4; ++r)
          for (int64_t g = 0; g < 256 / group; ++g) {
            const double s = std::fabs(q.scales.item_f32(r * (256 / group) + g));
            const double b = std::fabs(q.biases.item_f32(r * (256 / group) + g));
            int64_t edge = -1;
            float edge_abs = -1;
            for (int64_t j = g * group; j < (g + 1) * group; ++j) {
              const double x = p[r * 256 + j];
              const uint32_t c = code_at(q, r, j);
              const double slack =
                  storage_error(sdt, s) * c + storage_error(sdt, b) + 4e-7 * (std::fabs(x) + s * c + b);
              const double err = std::fabs(x - deq.item_f32(r * 256 + j));
              const double bound = (c == top ? s : s / 2) + slack;
              ASSERT_LE(err, bound) << dtype_name(sdt) << " bits " << bits << " group " << group << " row "
                                    << r << " j " << j << " code " << c;
              if (std::fabs(p[r * 256 + j]) > edge_abs) {
                edge_abs = std::fabs(p[r * 256 + j]);
                edge = j;
              }
            }
            EXPECT_EQ(code_at(q, r, edge), 0u) << "edge of group " << g;
          }
      }
}

TEST(AffineQuantize, RejectsBadArguments) {
  const Tensor w = test::random_tensor({2, 64});
  EXPECT_THROW(quant::quantize_affine(w, 7, 32, DType::kBF16), InvalidArgument);
  EXPECT_THROW(quant::quantize_affine(w, 1, 32, DType::kBF16), InvalidArgument);
  EXPECT_THROW(quant::quantize_affine(w, 4, 16, DType::kBF16), InvalidArgument);
  EXPECT_THROW(quant::quantize_affine(w, 4, 128, DType::kBF16), InvalidArgument);  // K = 64 < group
  EXPECT_THROW(quant::quantize_affine(test::random_tensor({2, 48}), 4, 32, DType::kBF16), InvalidArgument);
  EXPECT_THROW(quant::quantize_affine(w, 4, 32, DType::kI32), InvalidArgument);
  EXPECT_THROW(quant::quantize_affine(Tensor::zeros({2, 64}, DType::kI32), 4, 32, DType::kF32),
               InvalidArgument);
  Tensor bad = test::random_tensor({2, 64});
  bad.data<float>()[70] = std::nanf("");
  try {
    quant::quantize_affine(bad, 4, 32, DType::kF32);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("element 70"), std::string::npos) << e.what();
  }
  bad.data<float>()[70] = INFINITY;
  EXPECT_THROW(quant::quantize_affine(bad, 4, 32, DType::kF32), InvalidArgument);
  EXPECT_TRUE(quant::valid_affine_params(3, 128));
  EXPECT_FALSE(quant::valid_affine_params(4, 256));
}

}  // namespace
}  // namespace lmx
