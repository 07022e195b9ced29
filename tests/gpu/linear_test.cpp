// GPU tests for the CUDA projections (lmx/ops/cuda/linear.h): quantized_linear over every bits x group x
// scale dtype and dense_linear over f32/bf16 weights, on ragged shapes, against a double reference of
// the tensor-core numerics and against the CPU ops; bit-for-bit batch invariance across M, row position
// and the decode/prefill kernels; quantized_linear_gelu bit-exact against its two ops; quantized_embedding
// bit-exact against the CPU op.
// Skipped when no CUDA device is visible.
//
// Tolerances. The tensor-core paths compute Σ_k bf16(x_k) · bf16(w_k) with f32 accumulation (w the f32
// dequantized weight; 4-bit weights with bf16 scales round s*q+b to bf16 once, which can differ from
// bf16(f32(s*q+b)) by one bf16 ulp in rare double-rounding cases). Against the double reference of that
// sum: |err| <= (K/16 + 4) * 2^-19 * Σ|x̃ w̃|  (K/16 chained mma steps, each adding 17 aligned terms with
// truncation, generous for Hopper's accumulator) + 2^-6 * max|x̃ w̃| (a few one-ulp weight differences).
// Against the CPU op (exact f32 weights and x; VNNI CPUs quantize x to 16 bits): 2^-7 Σ|x w| covers both
// bf16 roundings, plus 2e-5 max|x| Σ|w| for the CPU's x quantization.
#include "lmx/ops/cuda/linear.h"
#include "lmx/core/half.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/tuning.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"
#include "support/device_quantized.h"
#include "support/quantized_weights.h"
#include "support/test_support.h"
#include "unit/ops/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace lmx {
namespace {

using cuda::DeviceBuffer;

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};
constexpr DType kScaleTypes[] = {DType::kBF16, DType::kF16, DType::kF32};
constexpr uint32_t kSentinelBits = 0x7fa5a5a5u;  // a NaN payload no op produces

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

using test::DeviceQuantizedWeight;
using test::small_scale_weight;
using test::upload;

// Reference values and tolerances for out = x · wᵀ (x [M, K] f32, w [N, K] f32: the exact weights).
struct Reference {
  std::vector<double> value;    // Σ bf16(x) bf16(w) in double (tensor-core numerics)
  std::vector<double> tc_tol;   // bound for the tensor-core paths against `value`
  std::vector<double> cpu_tol;  // bound for |gpu - cpu op|
  std::vector<double> exact;    // Σ x w in double
  std::vector<double> f32_tol;  // bound for an exact f32 fmaf chain against `exact`
};

Reference reference(const Tensor& x, const Tensor& w) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const std::vector<double> xd = test::to_doubles(x), wd = test::to_doubles(w);
  std::vector<double> xb(xd.size()), wb(wd.size());
  for (size_t i = 0; i < xd.size(); ++i) xb[i] = round_bf16(static_cast<float>(xd[i]));
  for (size_t i = 0; i < wd.size(); ++i) wb[i] = round_bf16(static_cast<float>(wd[i]));
  Reference r;
  const size_t count = static_cast<size_t>(m * n);
  r.value.resize(count), r.tc_tol.resize(count), r.cpu_tol.resize(count), r.exact.resize(count);
  r.f32_tol.resize(count);
  for (int64_t i = 0; i < m; ++i) {
    double max_x = 0;
    for (int64_t c = 0; c < k; ++c) max_x = std::max(max_x, std::fabs(xd[static_cast<size_t>(i * k + c)]));
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, sum_abs = 0, max_abs = 0, exact = 0, exact_abs = 0, w_abs = 0;
      for (int64_t c = 0; c < k; ++c) {
        const size_t xi = static_cast<size_t>(i * k + c), wi = static_cast<size_t>(j * k + c);
        const double p = xb[xi] * wb[wi], e = xd[xi] * wd[wi];
        sum += p, sum_abs += std::fabs(p), max_abs = std::max(max_abs, std::fabs(p));
        exact += e, exact_abs += std::fabs(e), w_abs += std::fabs(wd[wi]);
      }
      const size_t o = static_cast<size_t>(i * n + j);
      r.value[o] = sum;
      r.tc_tol[o] = (static_cast<double>(k) / 16 + 4) * std::ldexp(1.0, -19) * sum_abs + std::ldexp(max_abs, -6) + 1e-30;
      r.cpu_tol[o] = std::ldexp(exact_abs, -7) + 2e-5 * max_x * w_abs + 1e-30;
      r.exact[o] = exact;
      r.f32_tol[o] = (static_cast<double>(k) + 2) * std::ldexp(1.0, -24) * exact_abs + 1e-30;
    }
  }
  return r;
}

class CudaLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx_ = std::make_unique<cuda::CudaContext>(0);
  }

  // x [M, K] on the device with row stride x_stride (>= K; padding random).
  DeviceBuffer upload_x(const Tensor& x, int64_t x_stride) {
    const int64_t m = x.dim(0), k = x.dim(1);
    std::vector<float> host = test::random_floats(static_cast<size_t>(m * x_stride));
    const Tensor xc = x.contiguous();
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(host.data() + i * x_stride, xc.data<float>() + i * k, static_cast<size_t>(k) * sizeof(float));
    return cuda::upload_vector(host);
  }

  // Runs `op(out)` into a sentinel-filled [m, out_stride] buffer; returns [m, n] and checks that the
  // padding columns were not written.
  template <class Op>
  std::vector<float> run(int64_t m, int64_t n, int64_t out_stride, Op op) {
    std::vector<uint32_t> init(static_cast<size_t>(std::max<int64_t>(1, m * out_stride)), kSentinelBits);
    DeviceBuffer out = cuda::upload_vector(init);
    op(out.as<float>());
    ctx_->synchronize();
    const auto all = cuda::download_vector<uint32_t>(out, init.size());
    std::vector<float> result(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j)
        result[static_cast<size_t>(i * n + j)] = std::bit_cast<float>(all[static_cast<size_t>(i * out_stride + j)]);
      for (int64_t j = n; j < out_stride; ++j)
        EXPECT_EQ(all[static_cast<size_t>(i * out_stride + j)], kSentinelBits) << "wrote padding at " << i << "," << j;
    }
    return result;
  }

  std::vector<float> quantized(const DeviceBuffer& x, int64_t x_stride, int64_t row0, int64_t m,
                               const cuda::DeviceQuantized& w, int64_t out_stride) {
    return run(m, w.rows, out_stride, [&](float* out) {
      cuda::quantized_linear(x.as<float>() + row0 * x_stride, x_stride, m, w, out, out_stride, *ctx_);
    });
  }

  std::vector<float> dense(const DeviceBuffer& x, int64_t x_stride, int64_t row0, int64_t m,
                           const cuda::DeviceDense& w, int64_t out_stride) {
    return run(m, w.rows, out_stride, [&](float* out) {
      cuda::dense_linear(x.as<float>() + row0 * x_stride, x_stride, m, w, out, out_stride, *ctx_);
    });
  }

  std::unique_ptr<cuda::CudaContext> ctx_;
};

// First `count` values of a reference vector.
std::vector<double> prefix(const std::vector<double>& v, size_t count) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(count)};
}

void expect_within(const std::vector<float>& actual, const std::vector<double>& expected,
                   const std::vector<double>& tol, const std::string& what) {
  ASSERT_LE(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i)
    if (!(std::fabs(static_cast<double>(actual[i]) - expected[i]) <= tol[i])) {
      ADD_FAILURE() << what << ": element " << i << " = " << actual[i] << ", expected " << expected[i] << " ± "
                    << tol[i];
      ++failures;
    }
}

void expect_close_to_cpu(const std::vector<float>& actual, const Tensor& cpu, const std::vector<double>& tol,
                         const std::string& what) {
  std::vector<double> expected(actual.size());
  for (size_t i = 0; i < actual.size(); ++i) expected[i] = cpu.item_f32(static_cast<int64_t>(i));
  expect_within(actual, expected, tol, what + " vs CPU");
}

bool bit_equal_rows(const std::vector<float>& a, int64_t a_row0, const std::vector<float>& b, int64_t b_row0,
                    int64_t rows, int64_t n) {
  return std::memcmp(a.data() + a_row0 * n, b.data() + b_row0 * n, static_cast<size_t>(rows * n) * sizeof(float)) == 0;
}

// K with a partial last chunk of 128 columns (group < 128) and 22 or 23 chunks: an uneven split-K.
int64_t ragged_k(int group) { return 22 * 128 + (group < 128 ? group : 0); }

TEST_F(CudaLinear, QuantizedMatchesReferenceForEveryFormat) {
  // Every bits x group x scale dtype, each on one of the shapes below; all M of the brief on one x
  // (row r of every call is compared with the same reference row).
  struct Shape2 {
    int64_t n, k;
  };
  const int64_t ms[] = {1, 2, 3, 8, 17, 64, 130};
  int turn = 0;
  for (int bits : kBits)
    for (int group : kGroups)
      for (DType sdt : kScaleTypes) {
        const Shape2 shapes[] = {{1, 64}, {7, 128}, {33, 384}, {257, 2560}, {40, ragged_k(group)}, {65, 2 * group}};
        Shape2 shape = shapes[turn % 6];
        if (shape.k % group != 0) shape.k = group * ((shape.k + group - 1) / group);
        ++turn;
        const ops::QuantizedWeight w =
            test::random_quantized_weight({shape.n, shape.k}, bits, group, sdt, turn % 2 == 0);
        const DeviceQuantizedWeight dw = upload(w);
        const Tensor x = test::random_tensor({130, shape.k});
        const Reference ref = reference(x, test::dequantized(w));
        const Tensor cpu = ops::quantized_linear(x, w);
        const int64_t x_stride = shape.k + (turn % 3 == 0 ? 3 : 4 * (turn % 3));  // odd strides: scalar x loads
        const DeviceBuffer dx = upload_x(x, x_stride);
        const int64_t out_stride = shape.n + turn % 2;
        std::vector<std::vector<float>> outs;
        for (int64_t m : ms) {
          const std::vector<float> out = quantized(dx, x_stride, 0, m, dw.view, out_stride);
          const std::string what = "bits " + std::to_string(bits) + " group " + std::to_string(group) + " " +
                                   std::string(dtype_name(sdt)) + " M=" + std::to_string(m) +
                                   " N=" + std::to_string(shape.n) + " K=" + std::to_string(shape.k);
          const auto count = static_cast<size_t>(m * shape.n);
          expect_within(out, prefix(ref.value, count), prefix(ref.tc_tol, count), what);
          expect_close_to_cpu(out, cpu, prefix(ref.cpu_tol, count), what);
          outs.push_back(out);
          if (HasFailure()) return;
        }
        // Every M gave row r the same bits (the decode and prefill kernels included).
        for (size_t i = 0; i < outs.size(); ++i)
          EXPECT_TRUE(bit_equal_rows(outs[i], 0, outs.back(), 0, ms[i], shape.n)) << "bits " << bits << " M=" << ms[i];
      }
}

TEST_F(CudaLinear, QuantizedUnalignedCodesTakeThePackedPath) {
  // 4- and 8-bit codes at a 4-byte (not 16-byte) aligned address: same values within tolerance.
  for (int bits : {4, 8}) {
    const ops::QuantizedWeight w = test::random_quantized_weight({45, 640}, bits, 64, DType::kBF16, true);
    const DeviceQuantizedWeight dw = upload(w, 4);
    const Tensor x = test::random_tensor({70, 640});
    const Reference ref = reference(x, test::dequantized(w));
    const DeviceBuffer dx = upload_x(x, 640);
    for (int64_t m : {1, 5, 70}) {
      const std::vector<float> out = quantized(dx, 640, 0, m, dw.view, 45);
      const auto count = static_cast<size_t>(m * 45);
      expect_within(out, prefix(ref.value, count), prefix(ref.tc_tol, count), "unaligned bits " + std::to_string(bits));
    }
  }
}

// Row r of any call is bit-identical to row r computed alone (M = 1) and at other positions of other M.
using LinearCall = std::function<std::vector<float>(const DeviceBuffer& x, int64_t x_stride, int64_t row0, int64_t m)>;

void check_batch_invariance(int64_t k, int64_t n, const LinearCall& call, const std::string& what) {
  constexpr int64_t kRows = 150;
  const Tensor x = test::random_tensor({kRows, k});
  const int64_t x_stride = k;
  std::vector<float> host(static_cast<size_t>(kRows * k));
  std::memcpy(host.data(), x.data<float>(), host.size() * sizeof(float));
  const DeviceBuffer dx = cuda::upload_vector(host);
  const std::vector<float> full = call(dx, x_stride, 0, kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    const std::vector<float> alone = call(dx, x_stride, r, 1);
    ASSERT_TRUE(bit_equal_rows(alone, 0, full, r, 1, n)) << what << ": row " << r << " alone";
  }
  for (int64_t m : {2, 3, 8, 9, 17, 33, 64, 65, 100, 130}) {
    for (int64_t row0 : {int64_t{0}, int64_t{1}, kRows - m}) {
      const std::vector<float> part = call(dx, x_stride, row0, m);
      ASSERT_TRUE(bit_equal_rows(part, 0, full, row0, m, n)) << what << ": M=" << m << " from row " << row0;
    }
  }
}

TEST_F(CudaLinear, QuantizedBatchInvariance) {
  struct Case {
    int bits, group;
    int64_t n, k;
    DType scale_dtype = DType::kBF16;
    bool pair = false;  // DeviceQuantized::gate_up_pair (longer K segments)
  };
  // 4-bit cases cover the batch-1 kernel (q4_gemv_kernel): ragged K (its tail chunk), N not a multiple of
  // its 32 rows, and a K whose shared memory would exceed the limit (the generic kernel runs batch 1
  // instead); many blocks of 4 segments (N = 8480) and 80 blocks of 16 (N = 2560, the shape of E4B's down
  // projection); segments of 5-6 chunks (N = 10240, its 8-deep ring) with a ragged last chunk, for each
  // scale dtype (f16 and f32 windows are read differently from bf16's). scripts/test_gpu.sh reruns this
  // with every plan forced (the tuning table's q4_gemv.stages, tiles, split). The default plan's shape rules:
  // 4096 rows of 4096 columns (two 16-row tiles, as 31B's q/k/v and o) and the 96-block 1536 x 12288 (a
  // 4-chunk ring, as E2B's down projection). Then gate_up pairs: 4224 x 2816 (26B-A4B's dense gate_up, 4
  // segments instead of 11) and one with a ragged K.
  for (const Case& c :
       {Case{4, 64, 300, 4096}, Case{8, 32, 70, ragged_k(32)}, Case{3, 128, 130, 1152},
        Case{4, 32, 1000, 2560}, Case{6, 64, 17, 448}, Case{4, 64, 77, ragged_k(64)}, Case{4, 128, 40, 65536},
        Case{4, 64, 8480, 1024}, Case{4, 64, 2560, 4096}, Case{4, 64, 10240, 4160},
        Case{4, 32, 10240, 4160, DType::kF16}, Case{4, 128, 10240, 4224, DType::kF32},
        Case{4, 64, 333, 1344, DType::kF16}, Case{4, 64, 4096, 4096}, Case{4, 64, 1536, 12288},
        Case{4, 64, 4224, 2816, DType::kBF16, true}, Case{4, 64, 1000, ragged_k(64), DType::kBF16, true}}) {
    const ops::QuantizedWeight w = test::random_quantized_weight({c.n, c.k}, c.bits, c.group, c.scale_dtype, true);
    DeviceQuantizedWeight dw = upload(w);
    dw.view.gate_up_pair = c.pair;
    check_batch_invariance(
        c.k, c.n,
        [&](const DeviceBuffer& dx, int64_t x_stride, int64_t row0, int64_t m) {
          return quantized(dx, x_stride, row0, m, dw.view, c.n);
        },
        "bits " + std::to_string(c.bits) + " group " + std::to_string(c.group) + " " +
            std::string(dtype_name(c.scale_dtype)) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
            (c.pair ? " gate_up pair" : ""));
    if (HasFailure()) return;
  }
}

// Large prefills: more tiles than the H200 has SMs, x smaller than the weight and the other way round, one K
// segment and several (E4B's down projection at 2000 tokens; E2B's at 2048, which the wave rule of sm_90 runs
// on 96-row x tiles, as it does the 1300-row case); a sample of rows (the first and last of each 128- and
// 96-row tile among them) is bit-identical to the same rows computed alone (the decode kernel).
TEST_F(CudaLinear, QuantizedLargePrefillMatchesRowsAlone) {
  struct Case {
    int64_t n, k, m;
  };
  for (const Case& c : {Case{2048, 1024, 1300}, Case{8192, 512, 600}, Case{10240, 4160, 300},
                        Case{2560, 10240, 2000}, Case{1536, 6144, 2048}}) {
    const ops::QuantizedWeight w = test::random_quantized_weight({c.n, c.k}, 4, 64, DType::kBF16, true);
    const DeviceQuantizedWeight dw = upload(w);
    const Tensor x = test::random_tensor({c.m, c.k});
    const DeviceBuffer dx = upload_x(x, c.k);
    const std::vector<float> full = quantized(dx, c.k, 0, c.m, dw.view, c.n);
    const auto tile_edge = [](int64_t r) {
      return r % 128 == 0 || r % 128 == 127 || r % 96 == 0 || r % 96 == 95;
    };
    for (int64_t r = 0; r < c.m; ++r) {
      if (!tile_edge(r) && r % 61 != 0) continue;
      const std::vector<float> alone = quantized(dx, c.k, r, 1, dw.view, c.n);
      ASSERT_TRUE(bit_equal_rows(alone, 0, full, r, 1, c.n))
          << "N=" << c.n << " K=" << c.k << " M=" << c.m << ": row " << r;
    }
    const std::vector<float> last = quantized(dx, c.k, c.m - 1, 1, dw.view, c.n);
    ASSERT_TRUE(bit_equal_rows(last, 0, full, c.m - 1, 1, c.n))
        << "N=" << c.n << " K=" << c.k << ": last row";
  }
}

// A dense weight [n, k] of dtype on host (as a Tensor for the CPU op) and device.
struct DenseWeight {
  Tensor host;
  DeviceBuffer data;
  cuda::DeviceDense view;
};

DenseWeight dense_weight(int64_t n, int64_t k, DType dtype) {
  DenseWeight w;
  w.host = test::random_tensor({n, k}, dtype, -0.5f, 0.5f);
  w.data = DeviceBuffer::upload(w.host.raw_data(), std::max<size_t>(1, w.host.nbytes()));
  w.view.data = w.data.data();
  w.view.dtype = dtype;
  w.view.rows = n;
  w.view.cols = k;
  return w;
}

Tensor as_f32(const Tensor& t) {
  Tensor out = Tensor::zeros(t.shape(), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = t.item_f32(i);
  return out;
}

TEST_F(CudaLinear, DenseMatchesReferenceAndCpu) {
  struct Case {
    DType dtype;
    int64_t n, k;
  };
  // bf16 with k % 8 == 0 runs the tensor-core kernels (k = 200: a partial chunk); bf16 k = 100 and f32
  // run the exact f32 kernel.
  for (const Case& c : {Case{DType::kBF16, 1, 8}, Case{DType::kBF16, 33, 200}, Case{DType::kBF16, 257, 2560},
                        Case{DType::kBF16, 70, ragged_k(32)}, Case{DType::kBF16, 9, 100}, Case{DType::kF32, 1, 3},
                        Case{DType::kF32, 65, 384}, Case{DType::kF32, 130, 1000}}) {
    const DenseWeight w = dense_weight(c.n, c.k, c.dtype);
    const bool tensor_cores = c.dtype == DType::kBF16 && c.k % 8 == 0;
    const Tensor x = test::random_tensor({130, c.k});
    const Reference ref = reference(x, as_f32(w.host));
    const Tensor cpu = ops::linear(x, w.host);
    const int64_t x_stride = c.k + 1;
    const DeviceBuffer dx = upload_x(x, x_stride);
    std::vector<std::vector<float>> outs;
    const int64_t ms[] = {1, 2, 3, 8, 17, 64, 130};
    for (int64_t m : ms) {
      const std::vector<float> out = dense(dx, x_stride, 0, m, w.view, c.n + 2);
      const std::string what = std::string(dtype_name(c.dtype)) + " M=" + std::to_string(m) +
                               " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k);
      const auto count = static_cast<size_t>(m * c.n);
      if (tensor_cores)
        expect_within(out, prefix(ref.value, count), prefix(ref.tc_tol, count), what);
      else
        expect_within(out, prefix(ref.exact, count), prefix(ref.f32_tol, count), what);
      expect_close_to_cpu(out, cpu, prefix(ref.cpu_tol, count), what);
      outs.push_back(out);
      if (HasFailure()) return;
    }
    for (size_t i = 0; i < outs.size(); ++i)
      EXPECT_TRUE(bit_equal_rows(outs[i], 0, outs.back(), 0, ms[i], c.n)) << dtype_name(c.dtype) << " M=" << ms[i];
  }
}

TEST_F(CudaLinear, DenseBatchInvariance) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const DenseWeight w = dense_weight(200, 1536, dtype);
    check_batch_invariance(
        1536, 200,
        [&](const DeviceBuffer& dx, int64_t x_stride, int64_t row0, int64_t m) {
          return dense(dx, x_stride, row0, m, w.view, 200);
        },
        "dense " + std::string(dtype_name(dtype)));
    if (HasFailure()) return;
  }
}

TEST_F(CudaLinear, QuantizedEmbeddingMatchesCpuExactly) {
  int turn = 0;
  for (int bits : kBits)
    for (int group : kGroups)
      for (DType sdt : kScaleTypes) {
        const int64_t vocab = 37, dim = group * (1 + turn % 4);
        ++turn;
        const ops::QuantizedWeight table =
            test::random_quantized_weight({vocab, dim}, bits, group, sdt, turn % 2 == 0);
        const DeviceQuantizedWeight dt = upload(table);
        std::vector<int32_t> ids = {0, 36, 5, 5, 17, 0, 23};
        const DeviceBuffer dids = cuda::upload_vector(ids);
        const float scale = 1.7f;
        Tensor cpu = Tensor::zeros({static_cast<int64_t>(ids.size()), dim}, DType::kF32);
        ops::quantized_embedding(table, ids, scale, cpu);
        const int64_t out_stride = dim + 3;
        const std::vector<float> out = run(static_cast<int64_t>(ids.size()), dim, out_stride, [&](float* o) {
          cuda::quantized_embedding(dt.view, dids.as<int32_t>(), static_cast<int64_t>(ids.size()), scale, o,
                                    out_stride, ctx_->stream());
        });
        ASSERT_EQ(std::memcmp(out.data(), cpu.data<float>(), out.size() * sizeof(float)), 0)
            << "bits " << bits << " group " << group << " " << dtype_name(sdt);
      }
}

// quantized_linear_gelu gives the bits of gelu_tanh_mul then quantized_linear: one kernel at batch 1 with
// 4-bit weights (q4_gemv_kernel forms the product while staging x), the x preparation of the prefill GEMM
// above linear::decode_max_rows() rows (the tuning table's linear.decode_max_rows), the two ops otherwise.
// Up is either the second half of each gate row (the stacked gate_up projection's output) or a buffer of its
// own with another row stride (the PLE's input).
TEST_F(CudaLinear, QuantizedLinearGeluMatchesItsTwoOps) {
  struct Case {
    int bits;
    int64_t n, k, m;
    bool own_up = false;
  };
  for (const Case& c : {Case{4, 300, 2560, 1}, Case{4, 2560, 4096, 1}, Case{4, 8480, 1024, 1},
                        Case{4, 77, ragged_k(64), 1}, Case{8, 70, 1024, 1}, Case{4, 300, 2560, 5},
                        Case{4, 300, 2560, 40}, Case{4, 2560, 10240, 300}, Case{4, 77, ragged_k(64), 200},
                        Case{8, 70, 1024, 130}, Case{4, 300, 256, 200, true}, Case{4, 300, 256, 3, true}}) {
    const ops::QuantizedWeight w = test::random_quantized_weight({c.n, c.k}, c.bits, 64, DType::kBF16, true);
    const DeviceQuantizedWeight dw = upload(w);
    const int64_t stride = 2 * c.k;                             // gate rows (and up rows after them)
    const int64_t up_stride = c.own_up ? 3 * c.k + 4 : stride;  // own_up: rows of a wider buffer
    const Tensor x = test::random_tensor({c.m, stride}, DType::kF32, -3.0f, 3.0f);
    const Tensor u = test::random_tensor({c.m, up_stride}, DType::kF32, -3.0f, 3.0f);
    const std::vector<float> host(x.data<float>(), x.data<float>() + c.m * stride);
    const std::vector<float> host_up(u.data<float>(), u.data<float>() + c.m * up_stride);
    DeviceBuffer two = cuda::upload_vector(host), one = cuda::upload_vector(host);
    DeviceBuffer own_up = cuda::upload_vector(host_up);
    const float* up_two = c.own_up ? own_up.as<float>() + c.k : two.as<float>() + c.k;
    const float* up_one = c.own_up ? own_up.as<float>() + c.k : one.as<float>() + c.k;
    const std::vector<float> expected = run(c.m, c.n, c.n, [&](float* out) {
      cuda::gelu_tanh_mul(two.as<float>(), stride, up_two, up_stride, two.as<float>(), stride, c.m, c.k,
                          ctx_->stream());
      cuda::quantized_linear(two.as<float>(), stride, c.m, dw.view, out, c.n, *ctx_);
    });
    const std::vector<float> fused = run(c.m, c.n, c.n, [&](float* out) {
      cuda::quantized_linear_gelu(one.as<float>(), stride, up_one, up_stride, c.m, dw.view, out, c.n, *ctx_);
    });
    ASSERT_EQ(std::memcmp(fused.data(), expected.data(), fused.size() * sizeof(float)), 0)
        << "bits " << c.bits << " N=" << c.n << " K=" << c.k << " M=" << c.m << " own up " << c.own_up;
  }
}

// quantized_linear_geglu, where it applies, gives the bits of quantized_linear then gelu_tanh_mul on the
// first half (one kernel pairing gate and up rows); elsewhere it enqueues nothing and says so.
TEST_F(CudaLinear, QuantizedLinearGegluMatchesItsTwoOps) {
  struct Case {
    int bits;
    int64_t n, k, m;
    bool applies;
    DType scale_dtype = DType::kBF16;
    bool small = false;
    bool pair = false;  // DeviceQuantized::gate_up_pair, as the model uploads gate_up projections
  };
  // E4B's gate/up (20480 x 2560), E2B's (12288 x 1536; its double-wide 24576 x 1536) with small scales, a
  // half (4104) that is not a multiple of the 16-row tile with a ragged K, f16 and f32 scales; then what it
  // declines: I below q4_gemv.geglu_min_rows (26B-A4B's 4224 x 2816), 8 bits, an odd row count, M > 1.
  for (const Case& c : {Case{4, 20480, 2560, 1, true, DType::kBF16, false, true},
                        Case{4, 12288, 1536, 1, true, DType::kBF16, true, true},
                        Case{4, 24576, 1536, 1, true, DType::kBF16, true, true},
                        Case{4, 8208, ragged_k(64), 1, true, DType::kBF16, false, true},
                        Case{4, 8208, ragged_k(64), 1, true}, Case{4, 2 * 4101, 1344, 1, true, DType::kF16},
                        Case{4, 8192, 1024, 1, true, DType::kF32}, Case{4, 4224, 2816, 1, false},
                        Case{8, 8192, 1024, 1, false}, Case{4, 8193, 1024, 1, false}, Case{4, 8192, 1024, 5, false}}) {
    const std::string what = "bits " + std::to_string(c.bits) + " " + std::string(dtype_name(c.scale_dtype)) +
                             (c.small ? " small" : "") + (c.pair ? " pair" : "") + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                             " M=" + std::to_string(c.m);
    const ops::QuantizedWeight w = c.small ? small_scale_weight(c.n, c.k, 64, false)
                                           : test::random_quantized_weight({c.n, c.k}, c.bits, 64, c.scale_dtype, true);
    DeviceQuantizedWeight dw = upload(w);
    dw.view.gate_up_pair = c.pair;
    ASSERT_EQ(dw.view.small_scales, c.small) << what;
    const Tensor x = test::random_tensor({c.m, c.k}, DType::kF32, -3.0f, 3.0f);
    const int64_t x_stride = c.k + 4, half = c.n / 2;
    const DeviceBuffer dx = upload_x(x, x_stride);
    bool applied = false;
    const std::vector<float> fused = run(c.m, c.n, c.n, [&](float* out) {
      applied = cuda::quantized_linear_geglu(dx.as<float>(), x_stride, c.m, dw.view, out, *ctx_);
    });
    // (scripts/test_gpu.sh reruns this with plans forced: one 16-row tile per warp leaves no pairing.)
    ASSERT_EQ(applied, c.applies && cuda::tuning().q4_gemv.tiles != 1) << what;
    if (!applied) {  // nothing written
      for (float v : fused) ASSERT_EQ(std::bit_cast<uint32_t>(v), kSentinelBits) << what;
      continue;
    }
    const std::vector<float> expected = run(c.m, c.n, c.n, [&](float* out) {
      cuda::quantized_linear(dx.as<float>(), x_stride, c.m, dw.view, out, c.n, *ctx_);
      cuda::gelu_tanh_mul(out, c.n, out + half, c.n, out, c.n, c.m, half, ctx_->stream());
    });
    ASSERT_EQ(std::memcmp(fused.data(), expected.data(), static_cast<size_t>(half) * sizeof(float)), 0) << what;
    for (int64_t i = half; i < c.n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(fused[static_cast<size_t>(i)]), kSentinelBits) << what << ": wrote the up half";
  }
}

// With small scales every 4-bit kernel (batch-1 GEMV with both plans, the generic decode kernel, prefill,
// the GeGLU input) takes the subnormal dequantization (FormatQ4<bf16, true>): the same bits as without it.
TEST_F(CudaLinear, QuantizedSmallScalesGiveTheSameBits) {
  struct Case {
    int group;
    int64_t n, k;
    bool non_finite;
  };
  const int64_t ms[] = {1, 2, 3, 8, 17, 33, 64, 130};
  for (const Case& c : {Case{64, 300, 4096, false}, Case{32, 77, ragged_k(32), false}, Case{128, 16400, 512, false},
                        Case{64, 2560, 4096, false}, Case{64, 40, 65536, false}, Case{64, 333, 1344, true}}) {
    const std::string what = "group " + std::to_string(c.group) + " N=" + std::to_string(c.n) +
                             " K=" + std::to_string(c.k) + (c.non_finite ? " with inf/NaN scales" : "");
    const ops::QuantizedWeight w = small_scale_weight(c.n, c.k, c.group, c.non_finite);
    const DeviceQuantizedWeight dw = upload(w);
    ASSERT_TRUE(dw.view.small_scales) << what;
    cuda::DeviceQuantized plain = dw.view;
    plain.small_scales = false;
    const Tensor x = test::random_tensor({130, c.k});
    const DeviceBuffer dx = upload_x(x, c.k);
    for (int64_t m : ms) {
      const std::vector<float> fast = quantized(dx, c.k, 0, m, dw.view, c.n);
      const std::vector<float> exact = quantized(dx, c.k, 0, m, plain, c.n);
      ASSERT_EQ(std::memcmp(fast.data(), exact.data(), fast.size() * sizeof(float)), 0) << what << " M=" << m;
      if (m == 1 && !c.non_finite) {  // and the values are right (row 0 against the reference)
        const Reference ref = reference(x.slice(0, 0, 1), test::dequantized(w));
        expect_within(fast, ref.value, ref.tc_tol, what);
      }
    }
    // The GeGLU input at batch 1 (x as gate, x + 0.5 as up).
    std::vector<float> host(static_cast<size_t>(2 * c.k));
    std::memcpy(host.data(), x.data<float>(), static_cast<size_t>(c.k) * sizeof(float));
    for (int64_t i = 0; i < c.k; ++i) host[static_cast<size_t>(c.k + i)] = host[static_cast<size_t>(i)] + 0.5f;
    std::vector<std::vector<float>> gelu;
    for (const cuda::DeviceQuantized& view : {dw.view, plain}) {
      DeviceBuffer in = cuda::upload_vector(host);
      gelu.push_back(run(1, c.n, c.n, [&](float* out) {
        cuda::quantized_linear_gelu(in.as<float>(), 2 * c.k, in.as<float>() + c.k, 2 * c.k, 1, view, out, c.n, *ctx_);
      }));
    }
    ASSERT_EQ(std::memcmp(gelu[0].data(), gelu[1].data(), gelu[0].size() * sizeof(float)), 0) << what << " GeGLU";
  }
}

TEST_F(CudaLinear, ArgumentErrors) {
  const ops::QuantizedWeight w = test::random_quantized_weight({4, 64}, 4, 64, DType::kBF16, true);
  DeviceQuantizedWeight dw = upload(w);
  DeviceBuffer x(64 * sizeof(float)), out(4 * sizeof(float));
  cuda::DeviceQuantized bad = dw.view;
  bad.bits = 7;
  EXPECT_THROW(cuda::quantized_linear(x.as<float>(), 64, 1, bad, out.as<float>(), 4, *ctx_), InvalidArgument);
  bad = dw.view;
  bad.batch = 2;
  EXPECT_THROW(cuda::quantized_linear(x.as<float>(), 64, 1, bad, out.as<float>(), 4, *ctx_), InvalidArgument);
  cuda::DeviceDense dense;
  dense.data = x.data();
  dense.dtype = DType::kF16;
  dense.rows = 1;
  dense.cols = 64;
  EXPECT_THROW(cuda::dense_linear(x.as<float>(), 64, 1, dense, out.as<float>(), 4, *ctx_), InvalidArgument);
  EXPECT_THROW(cuda::quantized_linear_gelu(x.as<float>(), 64, x.as<float>(), 8, 1, dw.view, out.as<float>(), 4, *ctx_),
               InvalidArgument);  // up stride below K
  bad = dw.view;
  bad.bits = 7;
  EXPECT_THROW(cuda::quantized_linear_geglu(x.as<float>(), 64, 1, bad, out.as<float>(), *ctx_), InvalidArgument);
  // M = 0 is a no-op.
  EXPECT_NO_THROW(cuda::quantized_linear(x.as<float>(), 64, 0, dw.view, out.as<float>(), 4, *ctx_));
}

}  // namespace
}  // namespace lmx
