// Tests for quantized_linear and quantized_embedding: every bits × group × scale dtype against
// dequantize-then-f32 references on ragged shapes, bit-identity with ops::linear over the dequantized
// (column-ordered) matrix, batch invariance across M, row position, thread count and SIMD target, errors;
// the integer (VNNI) kernels for 4- and 8-bit weights against the same references within their
// activation-quantization bound, which is shown tight enough to catch a one-step code error.
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
#include <cmath>
#include <cstring>
#include <random>

namespace lmx {
namespace {

using test::kF32Eps;

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};
constexpr DType kScaleTypes[] = {DType::kBF16, DType::kF16, DType::kF32};

// The integer kernels' error bound for x (quantized_vnni.cpp): each element may move by up to
// 1.008 * 2^-23 * max|x over its block of 8 columns| (half a power-of-two unit).
std::vector<double> activation_error_bound(const Tensor& x) {
  const int64_t k = x.dim(-1), rows = x.numel() / k;
  const auto xd = test::to_doubles(x);
  std::vector<double> bound(xd.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < k; c0 += 8) {
      double max = 0;
      for (int64_t c = c0; c < c0 + 8; ++c) max = std::max(max, std::fabs(xd[r * k + c]));
      for (int64_t c = c0; c < c0 + 8; ++c) bound[r * k + c] = 1.01 * std::ldexp(max, -23);
    }
  return bound;
}

// Σ_k x w in double for all rows of x (w = the f32 dequantized values, as the f32 kernels use). Bound for
// the f32 kernels: the dense tests' 2 eps sqrt(K) Σ|x w|. For the integer kernels, which compute
// Σ s (q - z) x̂ + Σ b' x with the code center z = 2^(bits - 1), b' = b + z s and x̂ within
// activation_error_bound of x: Σ |s (q - z)| * bound(x), plus 2 eps sqrt(K) (Σ|x s (q - z)| + Σ|x b'|) for
// their f32 steps (per lane and chunk at most three roundings for 4 bits, four for 8 bits, the fourth of
// an integer below 2^25 units: far inside the first term).
struct Reference {
  std::vector<double> value, tol;
};
Reference reference(const Tensor& x, const ops::QuantizedWeight& w, bool integer) {
  const Tensor deq = test::dequantized(w);
  const int64_t m = x.numel() / x.dim(-1), n = deq.dim(0), k = deq.dim(1);
  const auto xd = test::to_doubles(x), wd = test::to_doubles(deq);
  // scale * q alone (the dequantization with zero biases), and each group's scale.
  const auto sq = test::to_doubles(quant::dequantize_affine(
      {w.codes, w.scales, Tensor::zeros(w.biases.shape(), w.biases.dtype()), w.bits, w.group_size}));
  const auto scales = test::to_doubles(w.scales);
  const double z = std::ldexp(1.0, w.bits - 1);  // the integer kernels' code center
  const auto xe = activation_error_bound(x);
  Reference r;
  r.value.resize(static_cast<size_t>(m * n));
  r.tol.resize(r.value.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, sum_abs = 0, parts_abs = 0, quantization = 0;
      for (int64_t c = 0; c < k; ++c) {
        const size_t xi = static_cast<size_t>(i * k + c), wi = static_cast<size_t>(j * k + c);
        const double p = xd[xi] * wd[wi];
        const double s = scales[static_cast<size_t>(j * (k / w.group_size) + c / w.group_size)];
        const double centered = sq[wi] - z * s, bias = wd[wi] - sq[wi] + z * s;
        sum += p;
        sum_abs += std::fabs(p);
        parts_abs += std::fabs(xd[xi] * centered) + std::fabs(xd[xi] * bias);
        quantization += std::fabs(centered) * xe[xi];
      }
      r.value[static_cast<size_t>(i * n + j)] = sum;
      const double f32 = 2 * kF32Eps * std::sqrt(static_cast<double>(k));
      r.tol[static_cast<size_t>(i * n + j)] =
          (integer ? quantization + f32 * parts_abs : f32 * sum_abs) + 1e-30;
    }
  return r;
}

// Turns the integer kernels off for its lifetime (the f32 kernels' exact contracts are tested with it).
struct F32KernelsOnly {
  F32KernelsOnly() { ops::cpu::set_quantized_integer_kernels(false); }
  ~F32KernelsOnly() { ops::cpu::set_quantized_integer_kernels(true); }
};

std::vector<double> prefix(const std::vector<double>& v, size_t count) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(count)};
}

TEST(QuantizedLinear, MatchesDequantizedReferenceForEveryFormat) {
  // Every bits × group × scale dtype; ragged N; K of 1..9 groups (and, in turn, one pass past the
  // 1024-column prefill panel); M = 1..9 (decode path), 16 and 21 (prefill path).
  std::uniform_int_distribution<int> pick_groups(1, 9);
  const int64_t ns[] = {1, 7, 17, 50};
  int turn = 0;
  for (int bits : kBits)
    for (int group : kGroups)
      for (DType sdt : kScaleTypes) {
        const int64_t k = turn % 5 == 0 ? (1024 / group + 1) * group : group * pick_groups(test::rng());
        const int64_t n = ns[turn % 4];
        ++turn;
        const ops::QuantizedWeight w = test::random_quantized_weight({n, k}, bits, group, sdt, turn % 2 == 0);
        const Tensor x = test::random_tensor({21, k});
        const Reference ref = reference(x, w, ops::cpu::quantized_integer_kernels(bits));
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 21}) {
          const Tensor out = ops::quantized_linear(x.slice(0, 0, m), w);
          ASSERT_EQ(out.shape(), (Shape{m, n}));
          const std::string what =
              fmt::format("bits {} group {} {} M={} N={} K={}", bits, group, dtype_name(sdt), m, n, k);
          const auto count = static_cast<size_t>(m * n);
          test::expect_close(out, prefix(ref.value, count), prefix(ref.tol, count), what.c_str());
          if (HasFailure()) return;
        }
      }
}

TEST(QuantizedLinear, WeightsMayBeUnalignedWindowsOfOneBuffer) {
  // As when mapped from a safetensors file: codes, scales and biases at 4- and 2-byte aligned offsets
  // inside one buffer, with the codes last (a vector load past them would leave the buffer).
  for (int bits : kBits) {
    // K = 320: the integer kernels' last 128-column chunk is a 64-column tail at the very end.
    const ops::QuantizedWeight w = test::random_quantized_weight({11, 320}, bits, 64, DType::kBF16, true);
    const size_t code_bytes = w.codes.nbytes(), sb_bytes = w.scales.nbytes();
    const size_t code_offset = (2 + 2 * sb_bytes + 3) / 4 * 4;  // 4-byte aligned, after the biases
    auto storage = Storage::allocate(code_offset + code_bytes);
    std::memcpy(storage->data() + 2, w.scales.raw_data(), sb_bytes);
    std::memcpy(storage->data() + 2 + sb_bytes, w.biases.raw_data(), sb_bytes);
    std::memcpy(storage->data() + code_offset, w.codes.raw_data(), code_bytes);
    ops::QuantizedWeight view = w;
    view.scales = Tensor::from_storage(storage, w.scales.shape(), DType::kBF16, 2);
    view.biases = Tensor::from_storage(storage, w.biases.shape(), DType::kBF16, 2 + sb_bytes);
    view.codes = Tensor::from_storage(storage, w.codes.shape(), DType::kU32, code_offset);
    for (int64_t m : {1, 3, 17}) {
      const Tensor x = test::random_tensor({m, 320});
      EXPECT_TRUE(test::bit_equal(ops::quantized_linear(x, view), ops::quantized_linear(x, w))) << bits;
    }
  }
}

// True when the chosen SIMD target has FMA (then MulAdd is fma, as in dequantize_affine).
bool best_target_has_fma() {
  return (hwy::SupportedTargets() & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) != 0;
}

// Applies the kernels' column order for `bits` to every row of a [R, K] f32 tensor.
Tensor in_kernel_order(const Tensor& t, int bits) {
  Tensor out = Tensor::zeros(t.shape(), DType::kF32);
  const Tensor src = t.contiguous();
  ops::cpu::quantized_prepare_x(src.data<float>(), t.dim(1), t.dim(0), t.dim(1), bits, out.data<float>());
  return out;
}

TEST(QuantizedLinear, BitIdenticalToDenseLinearOverDequantizedWeights) {
  // Same products, same lanes, same order as ops::linear's documented reduction (kernels.h): given the
  // columns in the kernels' order, the results agree bit for bit (on FMA targets, where the kernels'
  // dequantization is dequantize_affine's fma).
  if (!best_target_has_fma()) GTEST_SKIP() << "no FMA target";
  const F32KernelsOnly f32_only;
  for (int bits : kBits) {
    const ops::QuantizedWeight w =
        test::random_quantized_weight({37, 1152}, bits, bits % 2 ? 32 : 128, DType::kBF16, true);
    const Tensor deq = in_kernel_order(test::dequantized(w), bits);
    EXPECT_EQ(ops::cpu::quantized_reorders_columns(bits), bits == 4);
    for (int64_t m : {1, 5, 20}) {
      const Tensor x = test::random_tensor({m, 1152});
      EXPECT_TRUE(test::bit_equal(ops::quantized_linear(x, w), ops::linear(in_kernel_order(x, bits), deq)))
          << "bits " << bits << " M=" << m;
    }
  }
}

TEST(QuantizedLinear, LeadingDimsStridedRowsAndOutputBuffer) {
  const ops::QuantizedWeight w = test::random_quantized_weight({9, 96}, 4, 32, DType::kBF16, true);
  const Tensor x3 = test::random_tensor({2, 5, 96});
  const Tensor out3 = ops::quantized_linear(x3, w);
  EXPECT_EQ(out3.shape(), (Shape{2, 5, 9}));
  EXPECT_TRUE(test::bit_equal(out3.reshape({10, 9}), ops::quantized_linear(x3.reshape({10, 96}), w)));
  // x as a column window of a wider buffer (row stride 130).
  const Tensor wide = test::random_tensor({6, 130});
  const Tensor x = wide.slice(1, 7, 103);
  Tensor out = Tensor::zeros({6, 9}, DType::kF32);
  ops::quantized_linear(x, w, out);
  EXPECT_TRUE(test::bit_equal(out, ops::quantized_linear(x.contiguous(), w)));
}

// Row r of any batch equals the row computed alone, bit for bit, for any thread count and position.
void check_batch_invariance(int bits, int group, int64_t k, int64_t m) {
  const int64_t n = 70;
  const ops::QuantizedWeight w = test::random_quantized_weight({n, k}, bits, group, DType::kBF16, true);
  const Tensor x = test::random_tensor({m, k});
  set_default_threads(1);
  std::vector<Tensor> alone;
  for (int64_t r = 0; r < m; ++r) alone.push_back(ops::quantized_linear(x.slice(0, r, r + 1), w));
  for (int threads : {1, 2, 3, 5}) {
    set_default_threads(threads);
    const Tensor full = ops::quantized_linear(x, w);
    // Sub-batches placing each row at other indices: a large one and a small (decode-path) one.
    const int64_t sub0 = m / 3, small0 = m - 6;
    const Tensor sub = ops::quantized_linear(x.slice(0, sub0, m), w);
    const Tensor small = ops::quantized_linear(x.slice(0, small0, m), w);
    for (int64_t r = 0; r < m; ++r) {
      const Tensor& want = alone[static_cast<size_t>(r)];
      EXPECT_TRUE(test::bit_equal(full.slice(0, r, r + 1), want))
          << "bits " << bits << " K=" << k << " M=" << m << " row " << r << " threads " << threads;
      if (r >= sub0) {
        EXPECT_TRUE(test::bit_equal(sub.slice(0, r - sub0, r - sub0 + 1), want)) << "sub row " << r;
      }
      if (r >= small0) {
        EXPECT_TRUE(test::bit_equal(small.slice(0, r - small0, r - small0 + 1), want)) << "small row " << r;
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
  set_default_threads(0);
}

TEST(QuantizedLinear, BatchInvariantBitIdentical) {
  std::uniform_int_distribution<int64_t> pick_m(17, 45);
  check_batch_invariance(4, 64, 2112, pick_m(test::rng()));  // K past two prefill panels
  check_batch_invariance(8, 32, 320, pick_m(test::rng()));
  check_batch_invariance(3, 128, 1152, pick_m(test::rng()));
  check_batch_invariance(6, 32, 96, pick_m(test::rng()));
  {
    const F32KernelsOnly f32_only;  // the f32 kernels for 4 and 8 bits too
    check_batch_invariance(4, 64, 2112, pick_m(test::rng()));
    check_batch_invariance(8, 32, 320, pick_m(test::rng()));
  }
}

// The targets to test one by one: every one compiled into this test and supported here, plus AVX3_DL
// (compiled only into the integer kernels) when supported, paired with AVX3 for the other kernels.
std::vector<int64_t> targets_to_test() {
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  if ((hwy::SupportedTargets() & HWY_AVX3_DL) != 0 && (hwy::SupportedTargets() & HWY_AVX3) != 0 &&
      std::find(targets.begin(), targets.end(), int64_t{HWY_AVX3_DL}) == targets.end())
    targets.insert(targets.begin(), int64_t{HWY_AVX3_DL | HWY_AVX3});
  return targets;
}

// Every SIMD target compiled in and supported here is accurate and batch-invariant on its own (values
// may differ between targets: lane counts differ, and only some targets have the integer kernels).
TEST(QuantizedLinear, EveryTargetAccurateAndBatchInvariant) {
  for (int64_t target : targets_to_test()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target & -target));
    for (int bits : {4, 8, 5}) {
      SCOPED_TRACE(ops::cpu::quantized_integer_kernels(bits) ? "integer kernels" : "f32 kernels");
      const ops::QuantizedWeight w = test::random_quantized_weight({13, 1088}, bits, 64, DType::kF16, true);
      const Tensor x = test::random_tensor({19, 1088});
      const Reference ref = reference(x, w, ops::cpu::quantized_integer_kernels(bits));
      test::expect_close(ops::quantized_linear(x.slice(0, 0, 3), w), prefix(ref.value, 39),
                         prefix(ref.tol, 39), "target few rows");
      test::expect_close(ops::quantized_linear(x, w), ref.value, ref.tol, "target many rows");
      check_batch_invariance(bits, 32, 1088, 20);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// ---- The integer kernels (4- and 8-bit weights on CPUs with AVX-512 VNNI) ---------------------------------

constexpr int kIntegerBits[] = {4, 8};

bool integer_kernels_here() {
  return ops::cpu::quantized_integer_kernels(4);
}

TEST(QuantizedLinearInteger, ServeFourAndEightBitsOnlyWhereTheCpuHasVnni) {
  for (int bits : {2, 3, 5, 6}) EXPECT_FALSE(ops::cpu::quantized_integer_kernels(bits)) << bits;
  for (int bits : kIntegerBits) {
    if (!__builtin_cpu_supports("avx512vnni")) {
      EXPECT_FALSE(ops::cpu::quantized_integer_kernels(bits)) << bits;
    } else {
      EXPECT_TRUE(ops::cpu::quantized_integer_kernels(bits))
          << bits << ": VNNI CPU without the integer kernels";
      const F32KernelsOnly f32_only;
      EXPECT_FALSE(ops::cpu::quantized_integer_kernels(bits)) << bits;
    }
  }
}

// x rows with the shapes the integer kernels must survive: ordinary values, one outlier 1000x the rest
// (its block's unit grows, the others keep theirs), an all-zero 128-column chunk, and tiny values.
Tensor awkward_x(int64_t m, int64_t k) {
  Tensor x = test::random_tensor({m, k});
  float* p = x.data<float>();
  std::uniform_int_distribution<int64_t> pick_col(0, k - 1);
  for (int64_t r = 0; r < m; ++r) {
    switch (r % 4) {
      case 1:
        p[r * k + pick_col(test::rng())] = 1000.0f;
        break;
      case 2:
        std::fill(p + r * k, p + r * k + std::min<int64_t>(k, 128), 0.0f);
        break;
      case 3:
        for (int64_t c = 0; c < k; ++c) p[r * k + c] *= 1e-6f;
        break;
      default:
        break;
    }
  }
  return x;
}

TEST(QuantizedLinearInteger, MatchesDequantizedReferenceOnRaggedShapes) {
  // K: below one 128-column chunk, with a 32/64/96-column tail chunk, and past a 2048-column span with a
  // tail; N: tails of every weight-row tile; M: decode tiles (1..5) and prefill tiles (16, 17, 40).
  if (!integer_kernels_here()) GTEST_SKIP() << "no integer kernels on this CPU";
  const int64_t ns[] = {1, 5, 9, 13};
  int turn = 0;
  for (int bits : kIntegerBits)
    for (int group : kGroups)
      for (int64_t k : {int64_t{128}, int64_t{1024}, int64_t{2048 + 128 + 64}, int64_t{3 * 128 + 32},
                        int64_t{96}, int64_t{64}, int64_t{32}}) {
        if (k % group != 0) continue;
        for (bool arbitrary : {false, true}) {
          const DType sdt = kScaleTypes[turn % 3];
          const int64_t n = ns[turn % 4];
          ++turn;
          const ops::QuantizedWeight w = test::random_quantized_weight({n, k}, bits, group, sdt, arbitrary);
          const Tensor x = awkward_x(40, k);
          const Reference ref = reference(x, w, true);
          for (int64_t m : {1, 2, 3, 5, 16, 17, 40}) {
            const Tensor out = ops::quantized_linear(x.slice(0, 0, m), w);
            const std::string what =
                fmt::format("bits {} group {} {} {} codes M={} N={} K={}", bits, group, dtype_name(sdt),
                            arbitrary ? "arbitrary" : "quantized", m, n, k);
            const auto count = static_cast<size_t>(m * n);
            test::expect_close(out, prefix(ref.value, count), prefix(ref.tol, count), what.c_str());
            if (HasFailure()) return;
          }
        }
      }
}

// The code of w[row, col] (4 or 8 bits: codes never straddle words), and setting it.
uint32_t code_at(const ops::QuantizedWeight& w, int64_t row, int64_t col) {
  const uint32_t word = w.codes.data<uint32_t>()[row * w.codes.dim(-1) + col * w.bits / 32];
  return (word >> (col * w.bits % 32)) & ((1u << w.bits) - 1);
}
void set_code(ops::QuantizedWeight& w, int64_t row, int64_t col, uint32_t code) {
  uint32_t& word = w.codes.data<uint32_t>()[row * w.codes.dim(-1) + col * w.bits / 32];
  const int64_t shift = col * w.bits % 32;
  word = (word & ~(((1u << w.bits) - 1) << shift)) | (code << shift);
}

TEST(QuantizedLinearInteger, KeepsPrecisionBesideALargeElement) {
  // Each block of 8 columns of x has one element 2^12 times the others, in a column whose weights are zero
  // (code = the center z, bias -z * scale: zero in the kernels' centered form too), so the result is made of
  // the small elements alone and the f32 tolerance is relative to them: x rounded to 16 bits per block (one
  // digit fewer) would break it for most outputs.
  if (!integer_kernels_here()) GTEST_SKIP() << "no integer kernels on this CPU";
  for (int bits : kIntegerBits) {
    SCOPED_TRACE(fmt::format("bits {}", bits));
    const int64_t n = 16, k = 384, groups = k / 64;
    const uint32_t center = 1u << (bits - 1);
    ops::QuantizedWeight w = test::random_quantized_weight({n, k}, bits, 64, DType::kF32, true);
    for (int64_t g = 0; g < n * groups; ++g)
      w.biases.data<float>()[g] = -static_cast<float>(center) * w.scales.data<float>()[g];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c0 = 0; c0 < k; c0 += 8) set_code(w, r, c0, center);
    Tensor x = test::random_tensor({4, k}, DType::kF32, -1.0f / 4096, 1.0f / 4096);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c0 = 0; c0 < k; c0 += 8) x.data<float>()[r * k + c0] = 1.0f;
    const Reference ref = reference(x, w, true);
    test::expect_close(ops::quantized_linear(x, w), ref.value, ref.tol, "large elements");
    Tensor coarse = x.contiguous();
    float* p = coarse.data<float>();
    for (int64_t i = 0; i < coarse.numel(); ++i) p[i] = std::ldexp(std::nearbyint(std::ldexp(p[i], 15)), -15);
    const auto coarse_value = reference(coarse, w, true).value;
    int beyond = 0;
    for (size_t i = 0; i < coarse_value.size(); ++i)
      beyond += std::fabs(coarse_value[i] - ref.value[i]) > ref.tol[i];
    EXPECT_GT(beyond, static_cast<int>(coarse_value.size()) / 2) << beyond << " of " << coarse_value.size();
  }
}

TEST(QuantizedLinearInteger, BoundCatchesACodeOneStepOff) {
  // The bound is tight enough to tell the kernels' result from that of a weight with one code per row one
  // step off (the effect of, e.g., a wrong center or a misplaced code byte in one column of K = 2048): the
  // result on w is within the bound of w's reference and outside the bound of the altered weight's.
  if (!integer_kernels_here()) GTEST_SKIP() << "no integer kernels on this CPU";
  for (int bits : kIntegerBits) {
    SCOPED_TRACE(fmt::format("bits {}", bits));
    const int64_t n = 24, k = 2048, col = 1000;
    const ops::QuantizedWeight w = test::random_quantized_weight({n, k}, bits, 64, DType::kBF16, false);
    ops::QuantizedWeight off = w;
    off.codes = Tensor::zeros(w.codes.shape(), DType::kU32);
    std::memcpy(off.codes.raw_data(), w.codes.raw_data(), w.codes.nbytes());
    for (int64_t r = 0; r < n; ++r) {
      const uint32_t q = code_at(w, r, col);
      set_code(off, r, col, q == 0 ? 1 : q - 1);
    }
    Tensor x = test::random_tensor({3, k});
    for (int64_t r = 0; r < 3; ++r) x.data<float>()[r * k + col] = 1.0f;
    const Tensor out = ops::quantized_linear(x, w);
    const Reference ref = reference(x, w, true), off_ref = reference(x, off, true);
    test::expect_close(out, ref.value, ref.tol, "the weight itself");
    int caught = 0;
    for (size_t i = 0; i < off_ref.value.size(); ++i)
      caught += std::fabs(out.item_f32(static_cast<int64_t>(i)) - off_ref.value[i]) > off_ref.tol[i];
    EXPECT_EQ(caught, static_cast<int>(off_ref.value.size()));
  }
}

TEST(QuantizedLinearInteger, BatchInvariantAcrossRowCountsAndThreads) {
  // Each row alone (M = 1, one thread) against every M in 1..40 (decode and prefill tiles) and 1, 2, 3 and
  // 5 threads, bit for bit; K with a span and a tail chunk, N with tile tails.
  if (!integer_kernels_here()) GTEST_SKIP() << "no integer kernels on this CPU";
  for (int bits : kIntegerBits)
    for (int group : {32, 64, 128}) {
      const int64_t k = 2048 + 128 + (group == 128 ? 128 : 64), n = 70;
      const ops::QuantizedWeight w = test::random_quantized_weight({n, k}, bits, group, DType::kBF16, true);
      const Tensor x = awkward_x(40, k);
      set_default_threads(1);
      std::vector<Tensor> alone;
      for (int64_t r = 0; r < 40; ++r) alone.push_back(ops::quantized_linear(x.slice(0, r, r + 1), w));
      for (int threads : {1, 2, 3, 5}) {
        set_default_threads(threads);
        for (int64_t m = 1; m <= 40; ++m)
          for (int64_t first : {int64_t{0}, 40 - m}) {
            const Tensor out = ops::quantized_linear(x.slice(0, first, first + m), w);
            for (int64_t r = 0; r < m; ++r)
              ASSERT_TRUE(test::bit_equal(out.slice(0, r, r + 1), alone[static_cast<size_t>(first + r)]))
                  << "bits " << bits << " group " << group << " M=" << m << " first " << first << " row " << r
                  << " threads " << threads;
          }
      }
      set_default_threads(0);
    }
}

TEST(QuantizedLinear, RejectsBadArguments) {
  const ops::QuantizedWeight w = test::random_quantized_weight({3, 64}, 4, 32, DType::kBF16, true);
  const Tensor x = test::random_tensor({2, 64});
  EXPECT_THROW(ops::quantized_linear(test::random_tensor({2, 96}), w), InvalidArgument);  // K mismatch
  EXPECT_THROW(ops::quantized_linear(x.to(DType::kBF16), w), InvalidArgument);            // x dtype
  ops::QuantizedWeight bad = w;
  bad.bits = 7;
  EXPECT_THROW(ops::quantized_linear(x, bad), InvalidArgument);
  bad = w;
  bad.scales = test::random_tensor({3, 1}, DType::kBF16);
  try {
    ops::quantized_linear(x, bad);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("quantized_linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scales [3, 1]"), std::string::npos) << e.what();
  }
  bad = test::random_quantized_weight({2, 3, 64}, 4, 32, DType::kBF16, true);  // a stack is not a matrix
  EXPECT_THROW(ops::quantized_linear(x, bad), InvalidArgument);
  Tensor wrong = Tensor::zeros({2, 4}, DType::kF32);
  EXPECT_THROW(ops::quantized_linear(x, w, wrong), InvalidArgument);  // out shape
  EXPECT_EQ(w.rows(), 3);
  EXPECT_EQ(w.cols(), 64);
  EXPECT_EQ(w.bytes(), size_t{3 * 8 * 4 + 3 * 2 * 2 * 2});
}

TEST(QuantizedEmbedding, RowsAreDequantizedTimesScale) {
  const bool exact = best_target_has_fma();
  for (int bits : kBits)
    for (int group : kGroups) {
      const DType sdt = kScaleTypes[(bits + group / 32) % 3];
      const ops::QuantizedWeight table =
          test::random_quantized_weight({37, 384}, bits, group, sdt, bits % 2 == 0);
      const Tensor deq = test::dequantized(table);
      const std::vector<int32_t> ids = {5, 0, 36, 5, 17};
      const float scale = 3.5f;
      Tensor out;
      ops::quantized_embedding(table, ids, scale, out);
      ASSERT_EQ(out.shape(), (Shape{5, 384}));
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t c = 0; c < 384; ++c) {
          const float want = deq.item_f32(ids[t] * 384 + c) * scale;
          const float got = out.item_f32(static_cast<int64_t>(t) * 384 + c);
          if (exact) {
            ASSERT_EQ(got, want) << "bits " << bits << " group " << group << " token " << t << " col " << c;
          } else {
            ASSERT_NEAR(got, want, 4 * kF32Eps * (std::fabs(want) + 1));
          }
        }
    }
}

TEST(QuantizedEmbedding, RejectsBadIds) {
  const ops::QuantizedWeight table = test::random_quantized_weight({10, 64}, 8, 64, DType::kBF16, true);
  Tensor out;
  const std::vector<int32_t> ids = {1, 10};
  try {
    ops::quantized_embedding(table, ids, 1.0f, out);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("token id 10 (at index 1)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::quantized_embedding(table, std::vector<int32_t>{-1}, 1.0f, out), InvalidArgument);
}

}  // namespace
}  // namespace lmx
