// Tests for quantized_linear and quantized_embedding: every bits × group × scale dtype against
// dequantize-then-f32 references on ragged shapes, bit-identity with ops::linear over the dequantized
// (column-ordered) matrix, batch invariance across M, row position, thread count and SIMD target, errors.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>

namespace lmx {
namespace {

using test::kF32Eps;

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};
constexpr DType kScaleTypes[] = {DType::kBF16, DType::kF16, DType::kF32};

// A random [.., N, K] weight: either arbitrary codes (every word is a valid bit stream) with random
// scales of both signs and random biases, or the MLX quantization of random values.
ops::QuantizedWeight random_weight(const Shape& shape, int bits, int group, DType scale_type,
                                   bool arbitrary_codes) {
  ops::QuantizedWeight w;
  w.bits = bits;
  w.group_size = group;
  if (arbitrary_codes) {
    Shape codes_shape = shape, group_shape = shape;
    codes_shape.back() = shape.back() * bits / 32;
    group_shape.back() = shape.back() / group;
    w.codes = Tensor::zeros(codes_shape, DType::kU32);
    std::uniform_int_distribution<uint32_t> pick;
    for (auto& c : w.codes.span<uint32_t>()) c = pick(test::rng());
    w.scales = test::random_tensor(group_shape, scale_type, -0.1f, 0.1f);
    w.biases = test::random_tensor(group_shape, scale_type, -0.5f, 0.5f);
  } else {
    const auto q = quant::quantize_affine(test::random_tensor(shape), bits, group, scale_type);
    w.codes = q.codes;
    w.scales = q.scales;
    w.biases = q.biases;
  }
  return w;
}

Tensor dequantized(const ops::QuantizedWeight& w) {
  return quant::dequantize_affine({w.codes, w.scales, w.biases, w.bits, w.group_size});
}

// Σ_k x w in double for all rows of x, with the dense tests' bound 2 eps sqrt(K) Σ|x w| (the weights
// the kernels use are exactly the f32 dequantized values).
struct Reference {
  std::vector<double> value, tol;
};
Reference reference(const Tensor& x, const Tensor& deq) {
  const int64_t m = x.numel() / x.dim(-1), n = deq.dim(0), k = deq.dim(1);
  const auto xd = test::to_doubles(x), wd = test::to_doubles(deq);
  Reference r;
  r.value.resize(static_cast<size_t>(m * n));
  r.tol.resize(r.value.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, sum_abs = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double p = xd[static_cast<size_t>(i * k + c)] * wd[static_cast<size_t>(j * k + c)];
        sum += p;
        sum_abs += std::fabs(p);
      }
      r.value[static_cast<size_t>(i * n + j)] = sum;
      r.tol[static_cast<size_t>(i * n + j)] =
          2 * kF32Eps * std::sqrt(static_cast<double>(k)) * sum_abs + 1e-30;
    }
  return r;
}

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
        const ops::QuantizedWeight w = random_weight({n, k}, bits, group, sdt, turn % 2 == 0);
        const Tensor x = test::random_tensor({21, k});
        const Reference ref = reference(x, dequantized(w));
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
    const ops::QuantizedWeight w = random_weight({11, 256}, bits, 64, DType::kBF16, true);
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
      const Tensor x = test::random_tensor({m, 256});
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
  for (int bits : kBits) {
    const ops::QuantizedWeight w = random_weight({37, 1152}, bits, bits % 2 ? 32 : 128, DType::kBF16, true);
    const Tensor deq = in_kernel_order(dequantized(w), bits);
    EXPECT_EQ(ops::cpu::quantized_reorders_columns(bits), bits == 4);
    for (int64_t m : {1, 5, 20}) {
      const Tensor x = test::random_tensor({m, 1152});
      EXPECT_TRUE(test::bit_equal(ops::quantized_linear(x, w), ops::linear(in_kernel_order(x, bits), deq)))
          << "bits " << bits << " M=" << m;
    }
  }
}

TEST(QuantizedLinear, LeadingDimsStridedRowsAndOutputBuffer) {
  const ops::QuantizedWeight w = random_weight({9, 96}, 4, 32, DType::kBF16, true);
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
  const ops::QuantizedWeight w = random_weight({n, k}, bits, group, DType::kBF16, true);
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
}

// Every SIMD target compiled in and supported here is accurate and batch-invariant on its own (values
// may differ between targets: lane counts differ).
TEST(QuantizedLinear, EveryTargetAccurateAndBatchInvariant) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int bits : {4, 8, 5}) {
      const ops::QuantizedWeight w = random_weight({13, 1088}, bits, 64, DType::kF16, true);
      const Tensor x = test::random_tensor({19, 1088});
      const Reference ref = reference(x, dequantized(w));
      test::expect_close(ops::quantized_linear(x.slice(0, 0, 3), w), prefix(ref.value, 39),
                         prefix(ref.tol, 39), "target few rows");
      test::expect_close(ops::quantized_linear(x, w), ref.value, ref.tol, "target many rows");
      check_batch_invariance(bits, 32, 1088, 20);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(QuantizedLinear, RejectsBadArguments) {
  const ops::QuantizedWeight w = random_weight({3, 64}, 4, 32, DType::kBF16, true);
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
  bad = random_weight({2, 3, 64}, 4, 32, DType::kBF16, true);  // a stack is not a matrix
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
      const ops::QuantizedWeight table = random_weight({37, 384}, bits, group, sdt, bits % 2 == 0);
      const Tensor deq = dequantized(table);
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
  const ops::QuantizedWeight table = random_weight({10, 64}, 8, 64, DType::kBF16, true);
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
