// GPU tests for the CUDA MoE ops (ops/cuda/linear.h): moe_route against ops::moe_route (experts exact,
// weights to 1e-6); quantized_moe_experts (tensor cores) against a double reference of its numerics with an
// elementwise error bound (tensor_core_reference); dense_moe_experts (CUDA cores, f32) against
// ops::moe_experts (f32 tolerance from K and the output's scale: the reduction orders differ); and batch
// invariance (a token's output bit-identical alone and inside larger calls, whichever kernel variant —
// ungrouped decode or grouped prefill — each call picks).
#include "lmx/core/half.h"
#include "lmx/model/gemma4/gemma4_weights.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"
#include "support/quantized_weights.h"
#include "support/test_support.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace lmx {
namespace {

using cuda::CudaContext;
using cuda::DeviceBuffer;

constexpr double kF32Eps = std::numeric_limits<float>::epsilon();

// The CPU references run their f32 kernels: the integer (VNNI) ones quantize x, an error well above the
// f32 rounding these tests bound.
class CudaMoeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx_ = std::make_unique<CudaContext>(0);
    ops::cpu::set_quantized_integer_kernels(false);
  }
  void TearDown() override { ops::cpu::set_quantized_integer_kernels(true); }
  CudaContext& ctx() { return *ctx_; }

 private:
  std::unique_ptr<CudaContext> ctx_;
};

DeviceBuffer upload(const Tensor& t) {
  const Tensor c = t.contiguous();
  return DeviceBuffer::upload(c.raw_data(), c.nbytes());
}

Tensor download_f32(const DeviceBuffer& buffer, Shape shape) {
  Tensor t = Tensor::zeros(std::move(shape), DType::kF32);
  buffer.download(t.raw_data(), t.nbytes());
  return t;
}

bool bits_equal(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// |got - want| <= 16·eps·sqrt(K)·rms(want) + 8·eps·|want| elementwise (K = H + I: the two chained
// reductions); both sides accumulate in f32, in different orders.
void expect_close_to_cpu(const Tensor& got, const Tensor& want, int64_t k, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  double sq = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) sq += static_cast<double>(w[i]) * w[i];
  const double rms = std::sqrt(sq / static_cast<double>(std::max<int64_t>(1, want.numel())));
  const double base = 16.0 * kF32Eps * std::sqrt(static_cast<double>(k)) * rms;
  int failures = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double diff = std::fabs(static_cast<double>(g[i]) - w[i]);
    const double tol = base + 8.0 * kF32Eps * std::fabs(w[i]);
    if (!(diff <= tol) && failures++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << g[i] << ", expected " << w[i] << " ± " << tol;
  }
}

// ---- Routing -------------------------------------------------------------------------------------------

// Logits on a grid of `step` in [-4, 4]: exact ties are common for a coarse step, and distinct values
// are far apart (no near-ties that f32 exp rounding could order differently on the two sides).
Tensor grid_logits(int64_t tokens, int experts, float step) {
  std::uniform_int_distribution<int> pick(static_cast<int>(-4.0f / step), static_cast<int>(4.0f / step));
  std::vector<float> v(static_cast<size_t>(tokens * experts));
  for (float& f : v) f = static_cast<float>(pick(test::rng())) * step;
  return Tensor::from_vector(v, {tokens, experts});
}

TEST_F(CudaMoeTest, RouteMatchesCpu) {
  struct Case {
    int64_t tokens;
    int experts, top_k;
    float step;
    bool scale;
  };
  const Case cases[] = {{1, 4, 1, 0.25f, false},      {7, 4, 2, 0.25f, true},
                        {33, 16, 2, 0.25f, false},    {64, 16, 8, 1.0f / 64, true},
                        {5, 128, 8, 0.5f, true},      {200, 128, 8, 1.0f / 64, false},
                        {3, 128, 1, 2.0f, false},     {70, 256, 16, 0.25f, true},
                        {9, 256, 8, 1.0f / 64, true}, {4, 33, 5, 0.25f, true}};
  for (const Case& c : cases) {
    const std::string what =
        fmt::format("T={} E={} k={} step={} scale={}", c.tokens, c.experts, c.top_k, c.step, c.scale);
    const Tensor logits = grid_logits(c.tokens, c.experts, c.step);
    const Tensor scale = test::random_tensor({c.experts}, DType::kF32, 0.5f, 2.0f);
    Tensor want_experts, want_weights;
    ops::moe_route(logits, c.top_k, c.scale ? &scale : nullptr, want_experts, want_weights);

    const DeviceBuffer d_logits = upload(logits), d_scale = upload(scale);
    DeviceBuffer d_experts(sizeof(int32_t) * static_cast<size_t>(c.tokens * c.top_k));
    DeviceBuffer d_weights(sizeof(float) * static_cast<size_t>(c.tokens * c.top_k));
    cuda::moe_route(d_logits.as<float>(), c.tokens, c.experts, c.top_k,
                    c.scale ? d_scale.as<float>() : nullptr, d_experts.as<int32_t>(), d_weights.as<float>(),
                    ctx().stream());
    ctx().synchronize();
    const auto got_experts =
        cuda::download_vector<int32_t>(d_experts, static_cast<size_t>(c.tokens * c.top_k));
    const auto got_weights = cuda::download_vector<float>(d_weights, static_cast<size_t>(c.tokens * c.top_k));
    int failures = 0;
    for (int64_t i = 0; i < c.tokens * c.top_k && failures < 5; ++i) {
      const int32_t we = want_experts.data<int32_t>()[i];
      const float ww = want_weights.data<float>()[i];
      if (got_experts[static_cast<size_t>(i)] != we) {
        ADD_FAILURE() << what << ": token " << i / c.top_k << " slot " << i % c.top_k << " expert "
                      << got_experts[static_cast<size_t>(i)] << ", want " << we;
        ++failures;
      } else if (!(std::fabs(got_weights[static_cast<size_t>(i)] - ww) <=
                   1e-6 * std::max(1.0f, std::fabs(ww)))) {
        ADD_FAILURE() << what << ": token " << i / c.top_k << " slot " << i % c.top_k << " weight "
                      << got_weights[static_cast<size_t>(i)] << ", want " << ww;
        ++failures;
      }
    }
  }
}

TEST_F(CudaMoeTest, RouteRejectsBadArguments) {
  DeviceBuffer buffer(1024);
  EXPECT_THROW(cuda::moe_route(buffer.as<float>(), 1, 257, 2, nullptr, buffer.as<int32_t>(),
                               buffer.as<float>(), ctx().stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::moe_route(buffer.as<float>(), 1, 8, 9, nullptr, buffer.as<int32_t>(), buffer.as<float>(),
                               ctx().stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::moe_route(buffer.as<float>(), 1, 64, 17, nullptr, buffer.as<int32_t>(),
                               buffer.as<float>(), ctx().stream()),
               InvalidArgument);
}

// ---- Expert dispatch: shared pieces ------------------------------------------------------------------

// Expert ids and weights for T tokens: from ops::moe_route over random logits (distinct experts per
// token), or uniform ids with repeats allowed (stresses the grouping) and random weights.
struct Routing {
  Tensor experts, weights;
};

Routing make_routing(int64_t tokens, int experts, int top_k, bool allow_repeats) {
  Routing r;
  if (!allow_repeats) {
    const Tensor logits = test::random_tensor({tokens, experts}, DType::kF32, -2.0f, 2.0f);
    ops::moe_route(logits, top_k, nullptr, r.experts, r.weights);
    return r;
  }
  std::uniform_int_distribution<int32_t> pick(0, experts - 1);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * top_k));
  for (int32_t& id : ids) id = pick(test::rng());
  r.experts = Tensor::from_vector(ids, {tokens, top_k});
  r.weights = test::random_tensor({tokens, top_k}, DType::kF32, -0.5f, 1.0f);
  return r;
}

Routing slice_routing(const Routing& r, int64_t t0, int64_t t1) {
  return {r.experts.slice(0, t0, t1).contiguous(), r.weights.slice(0, t0, t1).contiguous()};
}

// Device copies of an ops::QuantizedWeight; the codes may start `misalign` bytes (a multiple of 4) past a
// 16-byte boundary, which sends the 4- and 8-bit stacks down the word-by-word path.
struct DeviceQuantizedStack {
  DeviceBuffer codes, scales, biases;
  cuda::DeviceQuantized view;
};

DeviceQuantizedStack upload_quantized(const ops::QuantizedWeight& w, size_t misalign = 0) {
  DeviceQuantizedStack d;
  d.codes = DeviceBuffer(w.codes.nbytes() + 16);
  auto* codes = reinterpret_cast<uint32_t*>(static_cast<char*>(d.codes.data()) + misalign);
  EXPECT_EQ(cudaMemcpy(codes, w.codes.raw_data(), w.codes.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  d.scales = upload(w.scales);
  d.biases = upload(w.biases);
  d.view.codes = codes;
  d.view.scales = d.scales.data();
  d.view.biases = d.biases.data();
  d.view.scale_dtype = w.scales.dtype();
  d.view.bits = w.bits;
  d.view.group_size = w.group_size;
  d.view.batch = w.codes.dim(0);
  d.view.rows = w.rows();
  d.view.cols = w.cols();
  return d;
}

// An [E, N, K] stack quantized with quant::quantize_affine from uniform weights in [-1, 1].
ops::QuantizedWeight quantized_stack(int64_t e, int64_t n, int64_t k, int bits, int group,
                                     DType scale_dtype) {
  const quant::AffineQuantized q = quant::quantize_affine(
      test::random_tensor({e, n, k}, DType::kF32, -1.0f, 1.0f), bits, group, scale_dtype);
  ops::QuantizedWeight w;
  w.codes = q.codes;
  w.scales = q.scales;
  w.biases = q.biases;
  w.bits = q.bits;
  w.group_size = q.group_size;
  return w;
}

// The experts on the host (MLX's separate gate and up stacks, for the references) and on the device (gate
// and up joined expert by expert, as the CUDA model uploads them).
struct QuantizedMoe {
  ops::QuantizedWeight gate, up, down;
  DeviceQuantizedStack d_gate_up, d_down;
  int64_t hidden() const { return gate.cols(); }
  int64_t inter() const { return gate.rows(); }
  // The device copies; the codes `misalign` bytes past a 16-byte boundary (upload_quantized).
  void upload(size_t gate_up_misalign = 0, size_t down_misalign = 0) {
    ops::QuantizedWeight joined;
    joined.codes = join_expert_rows(gate.codes, up.codes, "test gate/up codes");
    joined.scales = join_expert_rows(gate.scales, up.scales, "test gate/up scales");
    joined.biases = join_expert_rows(gate.biases, up.biases, "test gate/up biases");
    joined.bits = gate.bits;
    joined.group_size = gate.group_size;
    d_gate_up = upload_quantized(joined, gate_up_misalign);
    d_down = upload_quantized(down, down_misalign);
  }
};

Tensor run_quantized(const QuantizedMoe& m, const Tensor& x, const Routing& r, CudaContext& ctx) {
  const int64_t tokens = x.dim(0), hidden = m.hidden();
  const int top_k = static_cast<int>(r.experts.dim(1));
  const DeviceBuffer d_x = upload(x), d_experts = upload(r.experts), d_weights = upload(r.weights);
  DeviceBuffer d_out(sizeof(float) * static_cast<size_t>(std::max<int64_t>(1, tokens * hidden)));
  cuda::quantized_moe_experts(d_x.as<float>(), tokens, d_experts.as<int32_t>(), d_weights.as<float>(), top_k,
                              m.d_gate_up.view, m.d_down.view, d_out.as<float>(), ctx);
  ctx.synchronize();
  return download_f32(d_out, {tokens, hidden});
}

// ---- The tensor-core reference ----------------------------------------------------------------------
//
// The quantized experts run on tensor cores: each projection is Σ bf16(x)·bf16(w) with f32 accumulation
// (linear_tiles.cuh), gate/up from bf16(x), down from bf16(gelu_tanh(gate)·up) of the f32 gate/up values,
// then the f32 combine. The reference follows that chain in double and carries an elementwise bound on the
// GPU's distance from it through every stage:
//   projection  (K/16 + 4)·2^-19·Σ|x̃w̃| + 2^-6·max|x̃w̃|   (linear_test.cpp's tensor-core bound; x̃, w̃ in bf16)
//   GeGLU       |Δh| ≤ 1.2·|Δg|·(|u| + |Δu|) + |gelu(g)|·|Δu| + 2^-20·|h|   (|gelu'| < 1.2)
//   down input  + 2^-8·(|h| + |Δh|)   (the GPU rounds its h, not the reference's, to bf16)
//   down        Σ_i |Δh̃_i|·|w̃_i| + the projection bound
//   combine     Σ_j |weight_j|·Δ_j + top_k·2^-22·Σ_j |weight_j·y_j|
struct MoeReference {
  std::vector<double> value, tol;  // [tokens, hidden]
};

double round_bf16(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

double gelu_tanh(double g) {
  const double a = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * g * (1.0 + std::tanh(a * (g + 0.044715 * g * g * g)));
}

// Expert e of a stack as bf16-rounded f32 weights [rows, cols] (what the tensor cores multiply).
std::vector<double> expert_weights(const ops::QuantizedWeight& w, int64_t e) {
  quant::AffineQuantized q;
  q.codes = w.codes.slice(0, e, e + 1).contiguous();
  q.scales = w.scales.slice(0, e, e + 1).contiguous();
  q.biases = w.biases.slice(0, e, e + 1).contiguous();
  q.bits = w.bits;
  q.group_size = w.group_size;
  const Tensor f = quant::dequantize_affine(q);
  std::vector<double> out(static_cast<size_t>(f.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = round_bf16(f.data<float>()[i]);
  return out;
}

// y = W v for one expert row block, with the projection bound: y[n] = Σ_k v[k]·W[n, k] (v already bf16).
void project(const std::vector<double>& w, const std::vector<double>& v, int64_t rows,
             std::vector<double>& y, std::vector<double>& tol) {
  const int64_t k = static_cast<int64_t>(v.size());
  y.assign(static_cast<size_t>(rows), 0.0);
  tol.assign(static_cast<size_t>(rows), 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    double sum = 0, sum_abs = 0, max_abs = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double p = v[static_cast<size_t>(i)] * w[static_cast<size_t>(n * k + i)];
      sum += p, sum_abs += std::fabs(p), max_abs = std::max(max_abs, std::fabs(p));
    }
    y[static_cast<size_t>(n)] = sum;
    tol[static_cast<size_t>(n)] =
        (static_cast<double>(k) / 16 + 4) * std::ldexp(sum_abs, -19) + std::ldexp(max_abs, -6) + 1e-30;
  }
}

MoeReference tensor_core_reference(const QuantizedMoe& m, const Tensor& x, const Routing& r) {
  const int64_t tokens = x.dim(0), hidden = m.hidden(), inter = m.inter();
  const int64_t top_k = r.experts.dim(1), num_experts = m.gate.codes.dim(0);
  struct Expert {
    std::vector<double> gate, up, down;
  };
  std::vector<std::unique_ptr<Expert>> experts(static_cast<size_t>(num_experts));
  MoeReference ref;
  ref.value.assign(static_cast<size_t>(tokens * hidden), 0.0);
  ref.tol.assign(static_cast<size_t>(tokens * hidden), 0.0);
  std::vector<double> xb(static_cast<size_t>(hidden)), hb(static_cast<size_t>(inter)), g, gt, u, ut, y, yt;
  std::vector<double> h_tol(static_cast<size_t>(inter));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < hidden; ++i) xb[static_cast<size_t>(i)] = round_bf16(x.data<float>()[t * hidden + i]);
    std::vector<double> sum_abs(static_cast<size_t>(hidden), 0.0);
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = r.experts.data<int32_t>()[t * top_k + j];
      const double weight = r.weights.data<float>()[t * top_k + j];
      if (e < 0 || e >= num_experts) continue;
      auto& ex = experts[static_cast<size_t>(e)];
      if (!ex) ex.reset(new Expert{expert_weights(m.gate, e), expert_weights(m.up, e), expert_weights(m.down, e)});
      project(ex->gate, xb, inter, g, gt);
      project(ex->up, xb, inter, u, ut);
      for (int64_t i = 0; i < inter; ++i) {
        const size_t s = static_cast<size_t>(i);
        const double h = gelu_tanh(g[s]) * u[s];
        const double dh = 1.2 * gt[s] * (std::fabs(u[s]) + ut[s]) + std::fabs(gelu_tanh(g[s])) * ut[s] +
                          std::ldexp(std::fabs(h), -20);
        hb[s] = h;
        h_tol[s] = dh + std::ldexp(std::fabs(h) + dh, -8);
      }
      project(ex->down, hb, hidden, y, yt);
      for (int64_t n = 0; n < hidden; ++n) {
        const size_t s = static_cast<size_t>(n), o = static_cast<size_t>(t * hidden + n);
        double carried = 0;
        for (int64_t i = 0; i < inter; ++i)
          carried += h_tol[static_cast<size_t>(i)] * std::fabs(ex->down[static_cast<size_t>(n * inter + i)]);
        ref.value[o] += weight * y[s];
        ref.tol[o] += std::fabs(weight) * (yt[s] + carried);
        sum_abs[s] += std::fabs(weight * y[s]);
      }
    }
    for (int64_t n = 0; n < hidden; ++n)
      ref.tol[static_cast<size_t>(t * hidden + n)] +=
          static_cast<double>(top_k) * std::ldexp(sum_abs[static_cast<size_t>(n)], -22);
  }
  return ref;
}

void expect_close_to_reference(const Tensor& got, const MoeReference& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.value.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.value.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got.data<float>()[i]) - want.value[i]);
    if (!(diff <= want.tol[i]) && failures++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << got.data<float>()[i] << ", expected " << want.value[i]
                    << " ± " << want.tol[i];
  }
}

// Token rows [t0, t0 + 1) of a GPU call over x alone must be the bits of the same rows inside `all`.
template <class Run>
void expect_token_invariant(const Tensor& x, const Routing& r, const Tensor& all, const Run& run,
                            const std::string& what) {
  const int64_t tokens = x.dim(0), hidden = x.dim(1);
  for (int64_t t0 : {int64_t{0}, tokens / 2, tokens - 1}) {
    const Tensor one = run(x.slice(0, t0, t0 + 1).contiguous(), slice_routing(r, t0, t0 + 1));
    EXPECT_TRUE(bits_equal(one.data<float>(), all.data<float>() + t0 * hidden, hidden))
        << what << ": token " << t0 << " alone differs from the full call";
    const int64_t f0 = std::max<int64_t>(0, t0 - 2), f1 = std::min<int64_t>(tokens, f0 + 5);
    const Tensor few = run(x.slice(0, f0, f1).contiguous(), slice_routing(r, f0, f1));
    EXPECT_TRUE(bits_equal(few.data<float>() + (t0 - f0) * hidden, all.data<float>() + t0 * hidden, hidden))
        << what << ": token " << t0 << " in a call of " << f1 - f0 << " differs from the full call";
  }
}

// ---- Quantized experts ---------------------------------------------------------------------------------

TEST(CudaMoePasses, PassTokensFollowTheActivationBudget) {
  // 26B-A4B (H 2816, I 704, top 8): 16896 bytes per pair, 31775 pairs in 512 MiB, so 3971 tokens per pass.
  EXPECT_EQ(cuda::moe_pass_tokens(1, 8, 2816, 704), 1);
  EXPECT_EQ(cuda::moe_pass_tokens(2048, 8, 2816, 704), 2048);
  EXPECT_EQ(cuda::moe_pass_tokens(3971, 8, 2816, 704), 3971);
  EXPECT_EQ(cuda::moe_pass_tokens(3972, 8, 2816, 704), 1986);  // two equal passes
  EXPECT_EQ(cuda::moe_pass_tokens(8192, 8, 2816, 704), 2731);  // three: 2731, 2731, 2730
  // Small rows: at most kMoeMaxPassPairs pairs; huge rows: at least kMoeMinPassPairs.
  EXPECT_EQ(cuda::moe_pass_tokens(100000, 8, 64, 32), 4000);           // 25 passes of 4000 (≤ 4096 tokens)
  EXPECT_EQ(cuda::moe_pass_tokens(100000, 8, 1 << 20, 1 << 18), 511);  // ≤ 512 (4096 pairs): 196 passes
  EXPECT_EQ(cuda::moe_pass_tokens(7, 40, 1 << 20, 1 << 18), 7);        // fewer tokens than one pass holds
  EXPECT_EQ(cuda::moe_pass_tokens(300, 40, 1 << 20, 1 << 18), 100);    // 102 per pass at most: 3 of 100
}

TEST_F(CudaMoeTest, QuantizedExpertsMatchTheReference) {
  struct Case {
    int64_t tokens, hidden, inter;
    int experts, top_k;
    int gate_bits, up_bits, down_bits, group;
    DType scale_dtype;
    bool repeats;
  };
  const Case cases[] = {
      // 4-bit, each dispatch variant: T ≤ 4 ungrouped, then chunks of 8 pairs (expert_mma_kernel) and of up
      // to 128 (the prefill GEMM).
      {1, 64, 32, 4, 1, 4, 4, 4, 32, DType::kBF16, false},
      {2, 128, 64, 4, 2, 4, 4, 4, 64, DType::kBF16, true},
      {5, 128, 64, 4, 2, 4, 4, 4, 64, DType::kF16, true},
      {64, 128, 96, 16, 2, 4, 4, 4, 32, DType::kBF16, true},
      {64, 256, 64, 128, 8, 4, 4, 4, 64, DType::kBF16, false},
      {64, 2048, 128, 16, 8, 4, 4, 4, 128, DType::kF32, false},  // several segments over H
      // ~150 pairs per expert: on sm_90 one chunk each on the wgmma kernel's 160-row instance (split: several
      // segments over H), else a 128-pair chunk and one of at most 32.
      {600, 2048, 256, 16, 4, 4, 4, 4, 64, DType::kBF16, false},
      // 8-bit and 3-bit formats, and the down projection in another format (then every projection runs
      // the grouped kernel's format dispatch, also at T ≤ 4).
      {1, 128, 64, 16, 2, 8, 8, 8, 64, DType::kBF16, false},
      {5, 128, 64, 4, 2, 8, 8, 8, 32, DType::kF32, true},
      {64, 128, 64, 16, 8, 8, 8, 8, 64, DType::kBF16, false},
      {1, 96, 64, 4, 2, 3, 3, 3, 32, DType::kBF16, false},
      {5, 96, 64, 4, 2, 3, 3, 3, 32, DType::kF16, true},
      {64, 192, 96, 16, 8, 3, 3, 3, 32, DType::kBF16, false},
      {5, 128, 64, 16, 2, 8, 8, 3, 32, DType::kBF16, true},
      {64, 128, 128, 4, 2, 6, 6, 5, 64, DType::kF16, true},
      {3, 128, 64, 4, 2, 2, 2, 4, 32, DType::kBF16, true},
      // Several passes (T·k > cuda::kMoeMaxPassPairs = 32768 pairs: two passes of 2250 tokens).
      {4500, 64, 32, 16, 8, 4, 4, 4, 32, DType::kBF16, false},
  };
  for (const Case& c : cases) {
    const std::string what =
        fmt::format("T={} H={} I={} E={} k={} bits {}/{}/{} g={} {}", c.tokens, c.hidden, c.inter, c.experts,
                    c.top_k, c.gate_bits, c.up_bits, c.down_bits, c.group, dtype_name(c.scale_dtype));
    QuantizedMoe m;
    m.gate = quantized_stack(c.experts, c.inter, c.hidden, c.gate_bits, c.group, c.scale_dtype);
    m.up = quantized_stack(c.experts, c.inter, c.hidden, c.up_bits, c.group, c.scale_dtype);
    m.down = quantized_stack(c.experts, c.hidden, c.inter, c.down_bits, c.group, c.scale_dtype);
    m.upload();
    const Tensor x = test::random_tensor({c.tokens, c.hidden});
    const Routing r = make_routing(c.tokens, c.experts, c.top_k, c.repeats);
    const Tensor got = run_quantized(m, x, r, ctx());
    expect_close_to_reference(got, tensor_core_reference(m, x, r), what);
    if (c.tokens > 1)
      expect_token_invariant(
          x, r, got, [&](const Tensor& xs, const Routing& rs) { return run_quantized(m, xs, rs, ctx()); },
          what);
  }
}

// The grouped prefill GEMM computes rows of a 128-row tile past its chunk (another expert's pairs, pairs
// whose expert id is out of range, rows past those in use) and never stores them, and the scattered x
// preparation leaves the xp rows that no pair names as they were. Stale values there must not reach any
// output: with the projections' input scratch filled with NaN first and a tenth of the pairs routed to
// invalid experts (-1 or E), the outputs are the bits of a run on a fresh context, and they match the
// reference.
TEST_F(CudaMoeTest, QuantizedGroupedPrefillIgnoresStaleInputRows) {
  constexpr int64_t kTokens = 300, kHidden = 256, kInter = 192;
  constexpr int kExperts = 16, kTopK = 4;
  QuantizedMoe m;
  m.gate = quantized_stack(kExperts, kInter, kHidden, 4, 64, DType::kBF16);
  m.up = quantized_stack(kExperts, kInter, kHidden, 4, 64, DType::kBF16);
  m.down = quantized_stack(kExperts, kHidden, kInter, 4, 64, DType::kBF16);
  m.upload();
  const Tensor x = test::random_tensor({kTokens, kHidden});
  Routing r = make_routing(kTokens, kExperts, kTopK, false);
  int32_t* ids = r.experts.data<int32_t>();
  for (int64_t i = 0; i < kTokens * kTopK; i += 10) ids[i] = (i / 10) % 2 == 0 ? -1 : kExperts;
  CudaContext fresh(0);
  const Tensor want = run_quantized(m, x, r, fresh);
  // The projections' bf16 input scratch and the f32 activations (gate/up rows, expert outputs) all NaN, each
  // larger than the call needs (a scratch slot only grows, so the call reuses them).
  const size_t pairs = static_cast<size_t>(kTokens * kTopK);
  for (const auto& [slot, bytes] :
       {std::pair{cuda::Scratch::kLinearInput, 4 * pairs * (kHidden + kInter)},
        std::pair{cuda::Scratch::kMoeActivations, 4 * pairs * (2 * kInter + kHidden) + 4096}})
    LMX_CUDA_CHECK(cudaMemset(ctx().scratch(slot, bytes), 0xFF, bytes));
  LMX_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor got = run_quantized(m, x, r, ctx());
  EXPECT_TRUE(bits_equal(got.data<float>(), want.data<float>(), got.numel()))
      << "stale xp rows changed outputs";
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_TRUE(std::isfinite(got.data<float>()[i])) << "output " << i;
  expect_close_to_reference(got, tensor_core_reference(m, x, r), "stale rows");
}

TEST_F(CudaMoeTest, QuantizedUnalignedCodesTakeThePackedPath) {
  // 4- and 8-bit codes 4 bytes past a 16-byte boundary take the word-by-word format (FormatPacked), which
  // orders a chunk's columns differently from the vector formats: both must match the reference, and each
  // be batch-invariant.
  for (int bits : {4, 8}) {
    QuantizedMoe aligned, unaligned;
    aligned.gate = unaligned.gate = quantized_stack(8, 64, 256, bits, 64, DType::kBF16);
    aligned.up = unaligned.up = quantized_stack(8, 64, 256, bits, 64, DType::kBF16);
    aligned.down = unaligned.down = quantized_stack(8, 256, 64, bits, 64, DType::kBF16);
    aligned.upload();
    unaligned.upload(4, 12);
    for (int64_t tokens : {1, 5, 64}) {
      const std::string what = fmt::format("{} bits, T={}", bits, tokens);
      const Tensor x = test::random_tensor({tokens, 256});
      const Routing r = make_routing(tokens, 8, 2, false);
      const MoeReference want = tensor_core_reference(aligned, x, r);
      const Tensor a = run_quantized(aligned, x, r, ctx()), u = run_quantized(unaligned, x, r, ctx());
      expect_close_to_reference(a, want, what + " aligned");
      expect_close_to_reference(u, want, what + " unaligned");
      if (tokens > 1)
        expect_token_invariant(
            x, r, u, [&](const Tensor& xs, const Routing& rs) { return run_quantized(unaligned, xs, rs, ctx()); },
            what + " unaligned");
    }
  }
}

TEST_F(CudaMoeTest, QuantizedGemmaShapes) {
  // Gemma 4 26B-A4B experts: E=128, k=8, H=2816, I=704, 4-bit group 64 with bf16 scales (small enough for
  // the small-scale dequantization when the stacks say so: both settings give the same bits). T=80 runs
  // the grouped prefill GEMM (chunks of up to 128 pairs); tokens alone run the batch-1 GEMV (decode).
  constexpr int64_t kHidden = 2816, kInter = 704, kTokens = 80;
  constexpr int kExperts = 128, kTopK = 8;
  QuantizedMoe m;
  m.gate = test::random_expert_stack(kExperts, kInter, kHidden, 4, 64, DType::kBF16);
  m.up = test::random_expert_stack(kExperts, kInter, kHidden, 4, 64, DType::kBF16);
  m.down = test::random_expert_stack(kExperts, kHidden, kInter, 4, 64, DType::kBF16);
  for (ops::QuantizedWeight* w : {&m.gate, &m.up, &m.down}) {  // scales within the small-scale range
    w->scales = test::random_tensor(w->scales.shape(), DType::kBF16, -1.0f / 64, 1.0f / 64);
    ASSERT_TRUE(quant::finite_magnitudes_below(w->scales, cuda::kSmallScaleLimit));
  }
  m.upload();
  const Tensor x = test::random_tensor({kTokens, kHidden}, DType::kF32, -0.2f, 0.2f);
  const Routing r = make_routing(kTokens, kExperts, kTopK, false);
  const Tensor all = run_quantized(m, x, r, ctx());
  const Tensor head = x.slice(0, 0, 4).contiguous();
  const Routing head_r = slice_routing(r, 0, 4);
  expect_close_to_reference(all.slice(0, 0, 4).contiguous(), tensor_core_reference(m, head, head_r), "gemma");
  expect_token_invariant(
      x, r, all, [&](const Tensor& xs, const Routing& rs) { return run_quantized(m, xs, rs, ctx()); },
      "gemma");
  for (auto* d : {&m.d_gate_up.view, &m.d_down.view}) d->small_scales = true;
  EXPECT_TRUE(bits_equal(run_quantized(m, x, r, ctx()).data<float>(), all.data<float>(), all.numel()))
      << "small-scale dequantization changed bits";
}

TEST_F(CudaMoeTest, QuantizedRejectsBadArguments) {
  QuantizedMoe m;
  m.gate = quantized_stack(4, 32, 64, 4, 32, DType::kBF16);
  m.up = quantized_stack(4, 32, 64, 4, 32, DType::kBF16);
  m.down = quantized_stack(4, 64, 32, 4, 32, DType::kBF16);
  m.upload();
  DeviceBuffer buffer(1 << 16);
  auto call = [&](const cuda::DeviceQuantized& gate_up, const cuda::DeviceQuantized& down) {
    cuda::quantized_moe_experts(buffer.as<float>(), 1, buffer.as<int32_t>(), buffer.as<float>(), 2, gate_up, down,
                                buffer.as<float>(), ctx());
  };
  cuda::DeviceQuantized bad = m.d_down.view;
  bad.cols = 64;  // I mismatch
  EXPECT_THROW(call(m.d_gate_up.view, bad), InvalidArgument);
  bad = m.d_down.view;
  bad.batch = 3;  // E mismatch
  EXPECT_THROW(call(m.d_gate_up.view, bad), InvalidArgument);
  bad = m.d_gate_up.view;
  bad.rows = 63;  // not [E, 2I, H]
  EXPECT_THROW(call(bad, m.d_down.view), InvalidArgument);
  bad = m.d_gate_up.view;
  bad.bits = 7;
  EXPECT_THROW(call(bad, m.d_down.view), InvalidArgument);
}

// ---- Dense experts -------------------------------------------------------------------------------------

struct DenseMoe {
  Tensor gate_up, down;  // [E, 2I, H], [E, H, I] in the test's dtype
  DeviceBuffer d_gate_up, d_down;
  cuda::DeviceDense v_gate_up, v_down;
};

DenseMoe make_dense(int experts, int64_t hidden, int64_t inter, DType dtype) {
  DenseMoe m;
  m.gate_up = test::random_tensor({experts, 2 * inter, hidden}, dtype, -0.5f, 0.5f);
  m.down = test::random_tensor({experts, hidden, inter}, dtype, -0.5f, 0.5f);
  m.d_gate_up = upload(m.gate_up);
  m.d_down = upload(m.down);
  m.v_gate_up = {m.d_gate_up.data(), dtype, experts, 2 * inter, hidden};
  m.v_down = {m.d_down.data(), dtype, experts, hidden, inter};
  return m;
}

Tensor run_dense(const DenseMoe& m, const Tensor& x, const Routing& r, CudaContext& ctx) {
  const int64_t tokens = x.dim(0), hidden = x.dim(1);
  const DeviceBuffer d_x = upload(x), d_experts = upload(r.experts), d_weights = upload(r.weights);
  DeviceBuffer d_out(sizeof(float) * static_cast<size_t>(std::max<int64_t>(1, tokens * hidden)));
  cuda::dense_moe_experts(d_x.as<float>(), tokens, d_experts.as<int32_t>(), d_weights.as<float>(),
                          static_cast<int>(r.experts.dim(1)), m.v_gate_up, m.v_down, d_out.as<float>(), ctx);
  ctx.synchronize();
  return download_f32(d_out, {tokens, hidden});
}

TEST_F(CudaMoeTest, DenseExpertsMatchCpu) {
  struct Case {
    int64_t tokens, hidden, inter;
    int experts, top_k;
    DType dtype;
    bool repeats;
  };
  const Case cases[] = {
      {1, 64, 32, 4, 1, DType::kF32, false},      {2, 64, 48, 4, 2, DType::kBF16, true},
      {5, 128, 64, 4, 2, DType::kF32, true},      {5, 128, 64, 16, 2, DType::kBF16, true},
      {64, 128, 64, 16, 8, DType::kBF16, false},  {64, 96, 40, 128, 8, DType::kF32, false},
      {64, 1024, 256, 4, 2, DType::kBF16, false}, {64, 512, 256, 16, 2, DType::kF32, true},
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("T={} H={} I={} E={} k={} {}", c.tokens, c.hidden, c.inter,
                                         c.experts, c.top_k, dtype_name(c.dtype));
    const DenseMoe m = make_dense(c.experts, c.hidden, c.inter, c.dtype);
    const Tensor x = test::random_tensor({c.tokens, c.hidden});
    const Routing r = make_routing(c.tokens, c.experts, c.top_k, c.repeats);
    const Tensor got = run_dense(m, x, r, ctx());
    Tensor want;
    ops::moe_experts(x, r.experts, r.weights, m.gate_up, m.down, want);
    expect_close_to_cpu(got, want, c.hidden + c.inter, what);
    if (c.tokens > 1)
      expect_token_invariant(
          x, r, got, [&](const Tensor& xs, const Routing& rs) { return run_dense(m, xs, rs, ctx()); }, what);
  }
}

TEST_F(CudaMoeTest, DenseRejectsBadArguments) {
  const DenseMoe m = make_dense(4, 64, 32, DType::kBF16);
  DeviceBuffer buffer(1 << 16);
  auto call = [&](const cuda::DeviceDense& gate_up, const cuda::DeviceDense& down) {
    cuda::dense_moe_experts(buffer.as<float>(), 1, buffer.as<int32_t>(), buffer.as<float>(), 2, gate_up, down,
                            buffer.as<float>(), ctx());
  };
  cuda::DeviceDense bad = m.v_down;
  bad.cols = 16;
  EXPECT_THROW(call(m.v_gate_up, bad), InvalidArgument);
  bad = m.v_gate_up;
  bad.dtype = DType::kF16;
  EXPECT_THROW(call(bad, m.v_down), InvalidArgument);
  bad = m.v_gate_up;
  bad.data = static_cast<const char*>(bad.data) + 2;  // not 16-byte aligned
  EXPECT_THROW(call(bad, m.v_down), InvalidArgument);
}

TEST_F(CudaMoeTest, ZeroTokensIsANoOp) {
  const DenseMoe m = make_dense(4, 64, 32, DType::kF32);
  cuda::dense_moe_experts(nullptr, 0, nullptr, nullptr, 2, m.v_gate_up, m.v_down, nullptr, ctx());
  cuda::moe_route(nullptr, 0, 8, 2, nullptr, nullptr, nullptr, ctx().stream());
  ctx().synchronize();
}

// ---- The MoE block's fused norms -------------------------------------------------------------------------
//
// moe_inputs and the combine with MoeOutputNorms must give the bits of the ops they replace, for rows one
// warp normalises (H <= 1024), rows a block normalises, and rows too ragged for float4 loads (there the
// fused combine sums squares in float order where the unfused rms_norm of the aligned expert output sums
// float4s: compared within a few f32 roundings).

TEST_F(CudaMoeTest, MoeInputsGiveTheBitsOfTheUnfusedOps) {
  struct Case {
    int64_t tokens;
    int hidden;
    bool weights;
  };
  const Case cases[] = {{1, 2816, true}, {5, 2816, true}, {3, 64, true}, {7, 30, true},
                        {2, 1030, true}, {4, 5120, false}, {9, 128, false}};
  for (const Case& c : cases) {
    const std::string what = fmt::format("T={} H={}{}", c.tokens, c.hidden, c.weights ? "" : " no weights");
    const int64_t n = c.tokens * c.hidden;
    const float mul = 1.0f / std::sqrt(static_cast<float>(c.hidden));
    const DeviceBuffer x = upload(test::random_tensor({c.tokens, c.hidden}, DType::kF32, -3.0f, 3.0f));
    const DeviceBuffer router_scale = upload(test::random_tensor({c.hidden}, DType::kF32, 0.5f, 1.5f));
    const DeviceBuffer expert_norm = upload(test::random_tensor({c.hidden}, DType::kF32, -2.0f, 2.0f));
    const float* rs = c.weights ? router_scale.as<float>() : nullptr;
    const float* en = c.weights ? expert_norm.as<float>() : nullptr;
    DeviceBuffer routed(sizeof(float) * n), expert_in(sizeof(float) * n), want_routed(sizeof(float) * n),
        want_expert_in(sizeof(float) * n);
    const cudaStream_t s = ctx().stream();
    cuda::moe_inputs(x.as<float>(), c.tokens, c.hidden, rs, mul, en, 1e-6f, routed.as<float>(), expert_in.as<float>(),
                     s);
    cuda::rms_norm(x.as<float>(), c.hidden, want_routed.as<float>(), c.hidden, c.tokens, c.hidden, nullptr, 1e-6f, s);
    if (rs != nullptr) cuda::mul_rows(want_routed.as<float>(), rs, c.tokens, c.hidden, s);
    cuda::scale(want_routed.as<float>(), n, mul, s);
    cuda::rms_norm(x.as<float>(), c.hidden, want_expert_in.as<float>(), c.hidden, c.tokens, c.hidden, en, 1e-6f, s);
    ctx().synchronize();
    const Tensor got_r = download_f32(routed, {n}), want_r = download_f32(want_routed, {n});
    const Tensor got_e = download_f32(expert_in, {n}), want_e = download_f32(want_expert_in, {n});
    EXPECT_TRUE(bits_equal(got_r.data<float>(), want_r.data<float>(), n)) << what << ": routed";
    EXPECT_TRUE(bits_equal(got_e.data<float>(), want_e.data<float>(), n)) << what << ": expert_in";
  }
}

TEST_F(CudaMoeTest, ExpertOutputNormsGiveTheBitsOfTheUnfusedOps) {
  struct Case {
    int64_t tokens, hidden, inter;
    int experts, top_k;
    bool dense, misaligned;
  };
  const Case cases[] = {
      {1, 2816, 704, 16, 8, false, false},  // decode (ungrouped), a block per row, a thread per float4
      {5, 4096, 64, 4, 2, false, false},    // grouped; 1024 float4s: still a thread per float4
      {2, 4128, 64, 4, 2, false, false},    // 1032 float4s: threads stride over the row
      {64, 128, 64, 16, 2, false, false},   // grouped, a warp per row
      {4500, 64, 32, 16, 8, false, false},  // several passes
      {5, 128, 64, 4, 2, true, false},      // dense experts
      {3, 128, 64, 64, 40, false, false},   // top_k above the fused kernels' 32: the unfused ops run
      {3, 2048, 64, 4, 2, false, true},     // dense_out 4 bytes past a 16-byte boundary: float rows
      {3, 256, 64, 4, 2, false, true},
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("T={} H={} I={} E={} k={}{}{}", c.tokens, c.hidden, c.inter, c.experts,
                                         c.top_k, c.dense ? " dense" : "", c.misaligned ? " misaligned" : "");
    const int64_t n = c.tokens * c.hidden;
    QuantizedMoe q;
    DenseMoe d;
    if (c.dense) {
      d = make_dense(c.experts, c.hidden, c.inter, DType::kBF16);
    } else {
      q.gate = quantized_stack(c.experts, c.inter, c.hidden, 4, 32, DType::kBF16);
      q.up = quantized_stack(c.experts, c.inter, c.hidden, 4, 32, DType::kBF16);
      q.down = quantized_stack(c.experts, c.hidden, c.inter, 4, 32, DType::kBF16);
      q.upload();
    }
    const Tensor x = test::random_tensor({c.tokens, c.hidden});
    const Routing r = make_routing(c.tokens, c.experts, c.top_k, true);
    const Tensor dense_in = test::random_tensor({c.tokens, c.hidden}, DType::kF32, -4.0f, 4.0f);
    const DeviceBuffer d_x = upload(x), d_experts = upload(r.experts), d_weights = upload(r.weights);
    const DeviceBuffer dense_norm = upload(test::random_tensor({c.hidden}, DType::kF32, -2.0f, 2.0f));
    const DeviceBuffer expert_norm = upload(test::random_tensor({c.hidden}, DType::kF32, -2.0f, 2.0f));
    const int64_t skip = c.misaligned ? 1 : 0;  // floats before the dense rows
    DeviceBuffer dense(sizeof(float) * (n + 1)), want_dense(sizeof(float) * (n + 1));
    float* dense_rows = dense.as<float>() + skip;
    float* want_dense_rows = want_dense.as<float>() + skip;
    ASSERT_EQ(cudaMemcpy(dense_rows, dense_in.raw_data(), dense_in.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(want_dense_rows, dense_in.raw_data(), dense_in.nbytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    DeviceBuffer out(sizeof(float) * n), want_out(sizeof(float) * n);
    auto experts = [&](float* o, const cuda::MoeOutputNorms* norms) {
      if (c.dense)
        cuda::dense_moe_experts(d_x.as<float>(), c.tokens, d_experts.as<int32_t>(), d_weights.as<float>(), c.top_k,
                                d.v_gate_up, d.v_down, o, ctx(), norms);
      else
        cuda::quantized_moe_experts(d_x.as<float>(), c.tokens, d_experts.as<int32_t>(), d_weights.as<float>(),
                                    c.top_k, q.d_gate_up.view, q.d_down.view, o, ctx(), norms);
    };
    cuda::MoeOutputNorms norms;
    norms.dense_out = dense_rows;
    norms.dense_norm = dense_norm.as<float>();
    norms.expert_norm = expert_norm.as<float>();
    norms.eps = 1e-6f;
    experts(out.as<float>(), &norms);
    const cudaStream_t s = ctx().stream();
    const int h = static_cast<int>(c.hidden);
    experts(want_out.as<float>(), nullptr);
    cuda::rms_norm(want_dense_rows, h, want_dense_rows, h, c.tokens, h, dense_norm.as<float>(), 1e-6f, s);
    cuda::rms_norm(want_out.as<float>(), h, want_out.as<float>(), h, c.tokens, h, expert_norm.as<float>(), 1e-6f, s);
    cuda::add(want_dense_rows, want_out.as<float>(), n, s);
    ctx().synchronize();
    const Tensor got_o = download_f32(out, {n}), want_o = download_f32(want_out, {n});
    const Tensor got_d = download_f32(dense, {n + 1}).slice(0, skip, skip + n).contiguous();
    const Tensor want_d = download_f32(want_dense, {n + 1}).slice(0, skip, skip + n).contiguous();
    if (!c.misaligned) {
      EXPECT_TRUE(bits_equal(got_o.data<float>(), want_o.data<float>(), n)) << what << ": out";
      EXPECT_TRUE(bits_equal(got_d.data<float>(), want_d.data<float>(), n)) << what << ": dense_out";
    } else {
      // Each output is a normed value (|v| up to ~2 · 3 · sqrt(H) for these inputs) or a sum of two: a few
      // f32 roundings of the inverse rms apart.
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got_o.data<float>()[i], want_o.data<float>()[i], 1e-5 * (1.0 + std::fabs(want_o.data<float>()[i])))
            << what << ": out " << i;
        ASSERT_NEAR(got_d.data<float>()[i], want_d.data<float>()[i], 1e-5 * (1.0 + std::fabs(want_d.data<float>()[i])))
            << what << ": dense_out " << i;
      }
    }
  }
}

}  // namespace
}  // namespace lmx
