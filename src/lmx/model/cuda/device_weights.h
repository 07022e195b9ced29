// Gemma 4 weights uploaded to the GPU once: projections as stored (bf16/f32 dense, or MLX packed
// codes with their scales and biases; q/k/v and the MLP's gate/up stacked into one matrix each when
// stored alike), small vectors (norm weights, router scales) as f32.
#pragma once

#include "lmx/model/gemma4/gemma4_weights.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/linear.h"

#include <vector>

namespace lmx {

// One projection or embedding table on the device (dense or quantized; `defined` false when absent).
struct DeviceWeight {
  bool defined = false;
  bool quantized = false;
  cuda::DeviceDense dense;
  cuda::DeviceQuantized packed;
  cuda::DeviceBuffer data, scales, biases;  // own the memory the views above point into

  int64_t rows() const { return quantized ? packed.rows : dense.rows; }
};

// A small vector as f32 on the device (empty when the tensor is undefined).
struct DeviceVector {
  cuda::DeviceBuffer buffer;
  const float* get() const { return buffer.empty() ? nullptr : buffer.as<const float>(); }
};

struct DeviceLayerWeights {
  DeviceVector input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;
  // q, k (and v) as one stacked projection (qkv_proj, rows q | k | v) when stored alike; otherwise apart.
  DeviceWeight q_proj, k_proj, v_proj, qkv_proj, o_proj;
  DeviceVector q_norm, k_norm;
  // gate and up as one stacked [2I, H] projection (gate_up_proj) when stored alike; otherwise the two.
  DeviceWeight gate_proj, up_proj, gate_up_proj, down_proj;
  DeviceWeight router_proj;
  DeviceVector router_scale, router_per_expert_scale;
  // Experts: gate_up [E, 2I, H] (quantized: MLX's gate and up stacks joined expert by expert), down [E, H, I].
  DeviceWeight experts_gate_up, experts_down;
  DeviceVector pre_feedforward_layernorm_2, post_feedforward_layernorm_1, post_feedforward_layernorm_2;
  DeviceWeight per_layer_input_gate, per_layer_projection;
  DeviceVector post_per_layer_input_norm;
  float layer_scalar = 1.0f;
};

struct DeviceWeights {
  DeviceWeight embed_tokens, lm_head, embed_tokens_per_layer, per_layer_model_projection;
  DeviceVector per_layer_projection_norm, norm;
  std::vector<DeviceLayerWeights> layers;

  // Copies every tensor of `weights` to the current device (f16 dense matrices are widened to f32).
  static DeviceWeights upload(const Gemma4Weights& weights);
  // Device bytes held.
  size_t bytes() const;
};

}  // namespace lmx
