// GPU tests for cuda::per_layer_input_step (lmx/ops/cuda/per_layer_input.h): bit for bit against the four
// ops it replaces (residual_norm, quantized_linear, quantized_linear_gelu, residual_norm), on E2B's and E4B's
// shapes and on shapes that give a block two gate tiles or leave blocks without projection rows, every 4-bit
// scale format; and the inputs it declines (enqueuing nothing) or rejects.
// Skipped when no CUDA device is visible.
#include "lmx/ops/cuda/per_layer_input.h"
#include "lmx/core/error.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/linear.h"
#include "support/device_quantized.h"
#include "support/quantized_weights.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

namespace lmx {
namespace {

using cuda::DeviceBuffer;
using test::DeviceQuantizedWeight;

constexpr uint32_t kSentinelBits = 0x7fa5a5a5u;  // a NaN payload no op produces

enum class Scales { kSmallBf16, kBf16, kF16, kF32 };

ops::QuantizedWeight weight(int64_t n, int64_t k, int group, Scales scales) {
  switch (scales) {
    case Scales::kSmallBf16:
      return test::small_scale_weight(n, k, group, false);
    case Scales::kBf16:
      return test::random_quantized_weight({n, k}, 4, group, DType::kBF16, true);
    case Scales::kF16:
      return test::random_quantized_weight({n, k}, 4, group, DType::kF16, true);
    default:
      return test::random_quantized_weight({n, k}, 4, group, DType::kF32, true);
  }
}

class CudaPerLayerInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx_ = std::make_unique<cuda::CudaContext>(0);
  }
  DeviceBuffer up(const std::vector<float>& host) {
    DeviceBuffer b = cuda::upload_vector(host);
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    return b;
  }
  std::vector<float> down(const DeviceBuffer& b, size_t count) {
    ctx_->synchronize();
    return cuda::download_vector<float>(b, count);
  }
  std::unique_ptr<cuda::CudaContext> ctx_;
};

struct Case {
  int dim, width, group;
  Scales scales;
  bool norms;    // the two residual steps' norm weights (else none)
  bool next;     // the next layer's normed input (with its weight)
  float scalar;  // the layer scalar
};

TEST_F(CudaPerLayerInput, MatchesTheFourOpsBitForBit) {
  const std::vector<Case> cases = {
      {1536, 256, 64, Scales::kSmallBf16, true, true, 0.71f},  // E2B
      {2560, 256, 64, Scales::kSmallBf16, true, true, 1.3f},   // E4B
      {2560, 256, 32, Scales::kBf16, true, false, 1.0f},
      {768, 512, 128, Scales::kF32, true, true, 0.5f},  // two gate tiles per block of 16
      {384, 256, 64, Scales::kF16, false, true, 1.0f},  // 24 projection tiles: some blocks without any
      {1024, 128, 64, Scales::kSmallBf16, false, false, 2.0f},
  };
  const float eps = 1e-6f;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << " width " << c.width << " group " << c.group
                                    << " scales " << static_cast<int>(c.scales));
    const size_t dim = static_cast<size_t>(c.dim), width = static_cast<size_t>(c.width);
    const DeviceQuantizedWeight gate = test::upload(weight(c.width, c.dim, c.group, c.scales));
    const DeviceQuantizedWeight proj = test::upload(weight(c.dim, c.width, c.group, c.scales));
    const std::vector<float> x = test::random_floats(dim, -2.0f, 2.0f);
    const DeviceBuffer mlp_out = up(test::random_floats(dim, -3.0f, 3.0f));
    const DeviceBuffer mlp_norm = up(test::random_floats(dim, 0.5f, 1.5f));
    const DeviceBuffer proj_norm = up(test::random_floats(dim, 0.5f, 1.5f));
    const DeviceBuffer next_norm = up(test::random_floats(dim, 0.5f, 1.5f));
    const DeviceBuffer layer_input = up(test::random_floats(width, -1.0f, 1.0f));
    const std::vector<float> sentinel(dim, std::bit_cast<float>(kSentinelBits));

    // The four ops.
    DeviceBuffer x_ops = up(x), normed_ops = up(sentinel);
    DeviceBuffer g = up(std::vector<float>(width)), p = up(std::vector<float>(dim));
    const cudaStream_t s = ctx_->stream();
    const float* a_norm = c.norms ? mlp_norm.as<const float>() : nullptr;
    const float* b_norm = c.norms ? proj_norm.as<const float>() : nullptr;
    cuda::residual_norm(x_ops.as<float>(), mlp_out.as<const float>(), a_norm, 1.0f, nullptr, nullptr, 1,
                        c.dim, eps, s);
    cuda::quantized_linear(x_ops.as<const float>(), c.dim, 1, gate.view, g.as<float>(), c.width, *ctx_);
    cuda::quantized_linear_gelu(g.as<float>(), c.width, layer_input.as<const float>(), c.width, 1, proj.view,
                                p.as<float>(), c.dim, *ctx_);
    cuda::residual_norm(x_ops.as<float>(), p.as<const float>(), b_norm, c.scalar,
                        c.next ? normed_ops.as<float>() : nullptr,
                        c.next ? next_norm.as<const float>() : nullptr, 1, c.dim, eps, s);

    // The fused kernel.
    DeviceBuffer x_fused = up(x), normed_fused = up(sentinel);
    cuda::PerLayerInputStep step;
    step.x = x_fused.as<float>();
    step.mlp_out = mlp_out.as<const float>();
    step.mlp_out_norm = a_norm;
    step.gate = &gate.view;
    step.layer_input = layer_input.as<const float>();
    step.projection = &proj.view;
    step.projection_norm = b_norm;
    step.layer_scalar = c.scalar;
    step.next_normed = c.next ? normed_fused.as<float>() : nullptr;
    step.next_norm = c.next ? next_norm.as<const float>() : nullptr;
    step.dim = c.dim;
    step.width = c.width;
    step.eps = eps;
    ASSERT_TRUE(cuda::per_layer_input_step(step, *ctx_));

    const std::vector<float> want_x = down(x_ops, dim), got_x = down(x_fused, dim);
    const std::vector<float> want_n = down(normed_ops, dim), got_n = down(normed_fused, dim);
    int x_diff = 0, n_diff = 0;
    for (size_t i = 0; i < dim; ++i) {
      x_diff += std::bit_cast<uint32_t>(want_x[i]) != std::bit_cast<uint32_t>(got_x[i]);
      n_diff += std::bit_cast<uint32_t>(want_n[i]) != std::bit_cast<uint32_t>(got_n[i]);
    }
    EXPECT_EQ(x_diff, 0) << "first: " << want_x[0] << " vs " << got_x[0];
    EXPECT_EQ(n_diff, 0);
    if (!c.next) {
      EXPECT_EQ(std::bit_cast<uint32_t>(got_n[0]), kSentinelBits);
    }
    // x really moved (a kernel that wrote nothing would fail above only by luck of equal inputs).
    EXPECT_NE(std::bit_cast<uint32_t>(got_x[0]), std::bit_cast<uint32_t>(x[0]));
  }
}

TEST_F(CudaPerLayerInput, DeclinesOrRejectsWhatItDoesNotCover) {
  const DeviceQuantizedWeight gate = test::upload(weight(256, 1536, 64, Scales::kSmallBf16));
  const DeviceQuantizedWeight proj = test::upload(weight(1536, 256, 64, Scales::kSmallBf16));
  const DeviceQuantizedWeight proj_f16 = test::upload(weight(1536, 256, 64, Scales::kF16));
  const DeviceQuantizedWeight gate_8bit =
      test::upload(test::random_quantized_weight({256, 1536}, 8, 64, DType::kBF16, true));
  const DeviceQuantizedWeight gate_odd = test::upload(weight(256, 1408 + 64, 64, Scales::kSmallBf16));
  const DeviceQuantizedWeight proj_odd = test::upload(weight(1408 + 64, 256, 64, Scales::kSmallBf16));
  const DeviceBuffer x = up(std::vector<float>(1600, 1.0f)), mlp_out = up(std::vector<float>(1600, 0.5f));
  const DeviceBuffer layer_input = up(std::vector<float>(256, 0.25f));
  auto step = [&](const cuda::DeviceQuantized& g, const cuda::DeviceQuantized& p, int dim) {
    cuda::PerLayerInputStep s;
    s.x = x.as<float>();
    s.mlp_out = mlp_out.as<const float>();
    s.gate = &g;
    s.layer_input = layer_input.as<const float>();
    s.projection = &p;
    s.dim = dim;
    s.width = 256;
    s.eps = 1e-6f;
    return s;
  };
  const std::vector<float> before = down(x, 1600);
  EXPECT_FALSE(cuda::per_layer_input_step(step(gate_8bit.view, proj.view, 1536), *ctx_));  // 8-bit codes
  EXPECT_FALSE(
      cuda::per_layer_input_step(step(gate.view, proj_f16.view, 1536), *ctx_));  // mixed scale formats
  EXPECT_FALSE(
      cuda::per_layer_input_step(step(gate_odd.view, proj_odd.view, 1472), *ctx_));  // 1472 % 128 != 0
  cuda::PerLayerInputStep misaligned = step(gate.view, proj.view, 1536);
  misaligned.x = x.as<float>() + 1;
  EXPECT_FALSE(cuda::per_layer_input_step(misaligned, *ctx_));
  const std::vector<float> after = down(x, 1600);
  EXPECT_EQ(before, after);  // nothing was enqueued
  EXPECT_THROW(cuda::per_layer_input_step(step(gate.view, proj.view, 2560), *ctx_),
               InvalidArgument);  // shapes
  cuda::PerLayerInputStep missing = step(gate.view, proj.view, 1536);
  missing.layer_input = nullptr;
  EXPECT_THROW(cuda::per_layer_input_step(missing, *ctx_), InvalidArgument);
}

}  // namespace
}  // namespace lmx
