// Tests for ops::linear: accuracy against a double reference on ragged shapes (f32 and bf16 weights),
// batch invariance (bit-identity across M, row position and thread count), strided x, errors.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/ops.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>

namespace lmx {
namespace {

using test::kF32Eps;

// Checks linear(x, w) against Σ_k x w in double with a bound derived from f32 epsilon, the reduction
// length and Σ|x w| (the scale of the rounding errors of any summation order).
void check_linear(const Tensor& x, const Tensor& w, const char* what) {
  const Tensor out = ops::linear(x, w);
  const int64_t m = x.numel() / x.dim(-1), n = w.dim(0), k = w.dim(1);
  ASSERT_EQ(out.numel(), m * n);
  const auto xd = test::to_doubles(x), wd = test::to_doubles(w);
  std::vector<double> expected(static_cast<size_t>(m * n)), tol(expected.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, sum_abs = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double p = xd[static_cast<size_t>(i * k + c)] * wd[static_cast<size_t>(j * k + c)];
        sum += p;
        sum_abs += std::fabs(p);
      }
      expected[static_cast<size_t>(i * n + j)] = sum;
      tol[static_cast<size_t>(i * n + j)] = 2 * kF32Eps * std::sqrt(static_cast<double>(k)) * sum_abs + 1e-30;
    }
  test::expect_close(out, expected, tol, what);
}

TEST(Linear, MatchesReferenceOnRaggedShapes) {
  for (DType wtype : {DType::kF32, DType::kBF16})
    for (int64_t k : {1, 3, 17, 63, 100, 257, 600, 1100})
      for (int64_t n : {1, 3, 17, 63, 100}) {
        const Tensor x_all = test::random_tensor({21, k});
        const Tensor w = test::random_tensor({n, k}, wtype);
        // 1..9 rows take the streaming (few-rows) path, 16+ rows the widened, K-blocked path.
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 21}) {
          const std::string what = fmt::format("{} M={} N={} K={}", dtype_name(wtype), m, n, k);
          check_linear(x_all.slice(0, 0, m), w, what.c_str());
          if (HasFailure()) return;
        }
      }
}

TEST(Linear, LargerBatchesAndLeadingDims) {
  // M well past one task's row block, and a 3-D x ([.., K] flattens to rows).
  check_linear(test::random_tensor({300, 70}), test::random_tensor({45, 70}, DType::kBF16), "M=300 bf16");
  check_linear(test::random_tensor({130, 513}), test::random_tensor({9, 513}), "M=130 K=513 f32");
  const Tensor x3 = test::random_tensor({2, 5, 33});
  const Tensor w = test::random_tensor({7, 33}, DType::kBF16);
  const Tensor out = ops::linear(x3, w);
  EXPECT_EQ(out.shape(), (Shape{2, 5, 7}));
  check_linear(x3, w, "3-D x");
}

TEST(Linear, StridedRowsOfX) {
  // x as a column window of a wider buffer (row stride 50, K = 37).
  const Tensor wide = test::random_tensor({6, 50});
  const Tensor x = wide.slice(1, 5, 42);
  const Tensor w = test::random_tensor({11, 37}, DType::kBF16);
  const Tensor got = ops::linear(x, w);
  const Tensor want = ops::linear(x.contiguous(), w);
  EXPECT_TRUE(test::bit_equal(got, want));
}

// Batch invariance: row m of any batch equals the row computed alone, bit for bit, for any thread
// count and any position of the row in the batch.
// Runs the batch-invariance check for the current SIMD target.
void check_batch_invariance(DType wtype, int64_t k, int64_t m) {
  const int64_t n = 100;
  const Tensor w = test::random_tensor({n, k}, wtype);
  const Tensor x = test::random_tensor({m, k});
  set_default_threads(1);
  std::vector<Tensor> alone;
  for (int64_t r = 0; r < m; ++r) alone.push_back(ops::linear(x.slice(0, r, r + 1), w));
  for (int threads : {1, 2, 3, 5}) {
    set_default_threads(threads);
    const Tensor full = ops::linear(x, w);
    // Sub-batches placing each row at other indices: a large one and a small (streaming-path) one.
    const int64_t sub0 = m / 3, small0 = m - 6;
    const Tensor sub = ops::linear(x.slice(0, sub0, m), w);
    const Tensor small = ops::linear(x.slice(0, small0, m), w);
    for (int64_t r = 0; r < m; ++r) {
      const Tensor& want = alone[static_cast<size_t>(r)];
      EXPECT_TRUE(test::bit_equal(full.slice(0, r, r + 1), want))
          << dtype_name(wtype) << " K=" << k << " M=" << m << " row " << r << " threads " << threads;
      if (r >= sub0) {
        EXPECT_TRUE(test::bit_equal(sub.slice(0, r - sub0, r - sub0 + 1), want)) << "sub-batch row " << r;
      }
      if (r >= small0) {
        EXPECT_TRUE(test::bit_equal(small.slice(0, r - small0, r - small0 + 1), want))
            << "small batch row " << r;
      }
    }
  }
  set_default_threads(0);
}

TEST(Linear, BatchInvariantBitIdentical) {
  std::uniform_int_distribution<int64_t> pick_m(17, 45);
  for (DType wtype : {DType::kBF16, DType::kF32})
    for (int64_t k : {257, 1100, 2500}) check_batch_invariance(wtype, k, pick_m(test::rng()));
}

// Every SIMD target compiled in and supported here (AVX-512, AVX2, SSE4, ...) is accurate and
// batch-invariant on its own (values may differ between targets: lane counts differ).
TEST(Linear, EveryTargetAccurateAndBatchInvariant) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (DType wtype : {DType::kBF16, DType::kF32}) {
      const Tensor x = test::random_tensor({19, 1037});
      check_linear(x.slice(0, 0, 3), test::random_tensor({13, 1037}, wtype), "target few rows");
      check_linear(x, test::random_tensor({13, 1037}, wtype), "target many rows");
      check_batch_invariance(wtype, 1100, 20);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Linear, EmptyReductionGivesZeros) {
  Tensor out = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  ops::linear(Tensor::zeros({2, 0}, DType::kF32), Tensor::zeros({3, 0}, DType::kBF16), out);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out.item_f32(i), 0.0f);
}

TEST(Linear, RejectsBadArguments) {
  const Tensor x = test::random_tensor({2, 8});
  EXPECT_THROW(ops::linear(x, test::random_tensor({3, 9})), InvalidArgument);                   // K mismatch
  EXPECT_THROW(ops::linear(x.to(DType::kBF16), test::random_tensor({3, 8})), InvalidArgument);  // x dtype
  EXPECT_THROW(ops::linear(x, Tensor::zeros({3, 8}, DType::kI32)), InvalidArgument);            // w dtype
  EXPECT_THROW(ops::linear(x, test::random_tensor({3, 2, 4})), InvalidArgument);                // w rank
  Tensor wrong = Tensor::zeros({2, 4}, DType::kF32);
  EXPECT_THROW(ops::linear(x, test::random_tensor({3, 8}), wrong), InvalidArgument);  // out shape
  try {
    ops::linear(x, test::random_tensor({3, 9}));
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 9]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmx
