// Gemma 4 weights bound by name from a checkpoint (HF text, HF multimodal or MLX naming).
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/model/gemma4/gemma4_config.h"
#include "lmx/model/quantization_config.h"
#include "lmx/ops/weight.h"

#include <string>
#include <vector>

namespace lmx {

class Checkpoint;

// Norms and scalars are dense tensors; projections and embeddings are Weights (dense or quantized).
struct Gemma4LayerWeights {
  Tensor input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;
  Weight q_proj, k_proj, v_proj, o_proj;  // v_proj undefined on k_eq_v layers; k/v undefined on shared
  Tensor q_norm, k_norm;
  Weight gate_proj, up_proj, down_proj;  // dense MLP
  // MoE block (when the layer has one).
  Weight router_proj;
  Tensor router_scale;  // f32 copy ([H], tiny) so the forward multiplies without converting
  Tensor router_per_expert_scale;
  // Experts: dense as gate_up [E, 2I, H] (gate rows first) + down [E, H, I]; quantized as MLX switch_glu
  // stacks gate [E, I, H], up [E, I, H], down [E, H, I].
  Weight experts_gate_up, experts_gate, experts_up, experts_down;
  Tensor pre_feedforward_layernorm_2, post_feedforward_layernorm_1, post_feedforward_layernorm_2;
  // Per-layer input (PLE).
  Weight per_layer_input_gate, per_layer_projection;
  Tensor post_per_layer_input_norm;
  float layer_scalar = 1.0f;
};

struct Gemma4Weights {
  Weight embed_tokens;  // [V, H]; also the tied output head
  Weight lm_head;       // [V, H] when embeddings are not tied
  Weight embed_tokens_per_layer, per_layer_model_projection;
  Tensor per_layer_projection_norm;
  Tensor norm;
  std::vector<Gemma4LayerWeights> layers;
  std::string prefix;  // the name prefix the checkpoint uses ("model.", "model.language_model.", ...)

  // Binds every tensor the config requires, checking its shape and dtype (a U32 weight without
  // scales is a quantized module missing them). A tensor in the text model's namespace (layers,
  // embeddings, final norm, output head) that the config gives no place is a FormatError naming
  // it and the config key it contradicts; other tensors (vision and audio towers) are ignored.
  // Errors name the checkpoint and the tensor.
  static Gemma4Weights bind(const Checkpoint& checkpoint, const Gemma4Config& config,
                            const QuantizationConfig& quantization);
};

// Bytes of weights one decode step of one row reads: every matrix once (only the top-k experts of
// MoE layers), one row of each embedding table, the whole output head.
size_t decode_weight_bytes(const Gemma4Config& config, const Gemma4Weights& weights);

}  // namespace lmx
