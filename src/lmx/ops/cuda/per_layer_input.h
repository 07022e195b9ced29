// Gemma 4's per-layer-input block of a single-token decode step in one kernel (per_layer_input.cu).
#pragma once

#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/linear.h"

#include <cstdint>

namespace lmx::cuda {

// The operands of one layer's MLP residual step and per-layer-input block, for one token.
struct PerLayerInputStep {
  float* x = nullptr;                           // [dim] the residual stream, updated in place
  const float* mlp_out = nullptr;               // [dim] the MLP's output
  const float* mlp_out_norm = nullptr;          // [dim] its norm's weight, or null (none)
  const DeviceQuantized* gate = nullptr;        // [width, dim] per_layer_input_gate
  const float* layer_input = nullptr;           // [width] this layer's per-layer input
  const DeviceQuantized* projection = nullptr;  // [dim, width] per_layer_projection
  const float* projection_norm = nullptr;       // [dim] post_per_layer_input_norm's weight, or null
  float layer_scalar = 1.0f;
  float* next_normed = nullptr;      // [dim] the next layer's normed input, or null (none)
  const float* next_norm = nullptr;  // [dim] its weight, or null
  int dim = 0, width = 0;
  float eps = 0.0f;
};

// One kernel (a thread-block cluster of 8 or 16 blocks) for what these four calls compute, with their bits:
//   residual_norm(x, mlp_out, mlp_out_norm, 1, null, null, 1, dim, eps);
//   quantized_linear(x, dim, 1, *gate, g, width);                        (g: width floats)
//   quantized_linear_gelu(g, width, layer_input, width, 1, *projection, p, dim);  (p: dim floats)
//   residual_norm(x, p, projection_norm, layer_scalar, next_normed, next_norm, 1, dim, eps);
// Every block reads its share of both weights into shared memory before waiting for the previous kernel,
// forms the first residual step itself, projects its gate rows, hands them to every block of the cluster,
// projects its rows of the projection, and hands those to the first block, which takes the second step.
// It applies to 4-bit codes of one format (scale dtype and small_scales alike) with dim and width multiples
// of 128, 16-byte aligned operands, and a dim whose residual_norm runs the float4 kernel, where the tuning
// table's per_layer_input.fused is on. Returns false, having enqueued nothing, when it does not apply.
bool per_layer_input_step(const PerLayerInputStep& step, CudaContext& ctx);

}  // namespace lmx::cuda
