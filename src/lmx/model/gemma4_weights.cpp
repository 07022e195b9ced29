// Gemma 4 weights bound by name from a checkpoint (HF text, HF multimodal or MLX naming).
#include "lmx/model/gemma4_weights.h"

#include "lmx/core/error.h"
#include "lmx/io/safetensors.h"

#include <cstring>

namespace lmx {
namespace {

// Name prefixes of the text model, in the order they are tried.
constexpr const char* kPrefixes[] = {"model.language_model.", "language_model.model.", "model."};

class Binder {
 public:
  Binder(const Checkpoint& checkpoint, std::string prefix) : checkpoint_(checkpoint), prefix_(std::move(prefix)) {}

  // The tensor `prefix + name`, which must exist and have `shape`.
  Tensor require_tensor(const std::string& name, const Shape& shape) const {
    std::string full = prefix_ + name;
    require<FormatError>(checkpoint_.contains(full), "{}: missing tensor '{}'", checkpoint_.dir(), full);
    Tensor t = checkpoint_.tensor(full);
    require<FormatError>(t.shape() == shape, "{}: tensor '{}' has shape {}, expected {}", checkpoint_.dir(), full,
                         shape_string(t.shape()), shape_string(shape));
    require<FormatError>(is_floating(t.dtype()), "{}: tensor '{}' has dtype {}, expected a float type",
                         checkpoint_.dir(), full, dtype_name(t.dtype()));
    return t;
  }
  bool has(const std::string& name) const { return checkpoint_.contains(prefix_ + name); }
  const std::string& prefix() const { return prefix_; }

 private:
  const Checkpoint& checkpoint_;
  std::string prefix_;
};

// A stored scalar ([] or [1]) as float.
float scalar_value(const Tensor& t, const std::string& name) {
  require<FormatError>(t.numel() == 1, "tensor '{}' should hold one value, has shape {}", name,
                       shape_string(t.shape()));
  return t.item_f32(0);
}

}  // namespace

Gemma4Weights Gemma4Weights::bind(const Checkpoint& checkpoint, const Gemma4Config& c) {
  std::string prefix;
  for (const char* p : kPrefixes)
    if (checkpoint.contains(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  require<FormatError>(!prefix.empty(), "{}: no embed_tokens.weight under any known prefix (model., "
                       "model.language_model., language_model.model.); is this a Gemma 4 checkpoint?",
                       checkpoint.dir());
  Binder b(checkpoint, prefix);
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers, P = c.hidden_size_per_layer_input;

  Gemma4Weights w;
  w.prefix = prefix;
  w.embed_tokens = b.require_tensor("embed_tokens.weight", {V, H});
  w.norm = b.require_tensor("norm.weight", {H});
  if (!c.tie_word_embeddings) {
    // HF keeps lm_head at the root; MLX nests it under language_model.
    std::string head = prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";
    require<FormatError>(checkpoint.contains(head), "{}: missing tensor '{}' (tie_word_embeddings is false)",
                         checkpoint.dir(), head);
    w.lm_head = checkpoint.tensor(head);
    require<FormatError>(w.lm_head.shape() == Shape{V, H}, "{}: '{}' has shape {}, expected [{}, {}]",
                         checkpoint.dir(), head, shape_string(w.lm_head.shape()), V, H);
  }
  if (P > 0) {
    w.embed_tokens_per_layer = b.require_tensor("embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P});
    w.per_layer_model_projection = b.require_tensor("per_layer_model_projection.weight", {L * P, H});
    w.per_layer_projection_norm = b.require_tensor("per_layer_projection_norm.weight", {P});
  }

  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const Gemma4LayerSpec& s = c.layers[static_cast<size_t>(i)];
    const std::string l = "layers." + std::to_string(i) + ".";
    const int64_t D = s.head_dim, Hq = c.num_attention_heads, Hkv = s.num_kv_heads, I = s.intermediate_size;
    Gemma4LayerWeights lw;
    lw.input_layernorm = b.require_tensor(l + "input_layernorm.weight", {H});
    lw.post_attention_layernorm = b.require_tensor(l + "post_attention_layernorm.weight", {H});
    lw.pre_feedforward_layernorm = b.require_tensor(l + "pre_feedforward_layernorm.weight", {H});
    lw.post_feedforward_layernorm = b.require_tensor(l + "post_feedforward_layernorm.weight", {H});
    lw.q_proj = b.require_tensor(l + "self_attn.q_proj.weight", {Hq * D, H});
    lw.o_proj = b.require_tensor(l + "self_attn.o_proj.weight", {H, Hq * D});
    lw.q_norm = b.require_tensor(l + "self_attn.q_norm.weight", {D});
    if (s.kv_donor < 0) {
      lw.k_proj = b.require_tensor(l + "self_attn.k_proj.weight", {Hkv * D, H});
      lw.k_norm = b.require_tensor(l + "self_attn.k_norm.weight", {D});
      if (!s.k_eq_v) lw.v_proj = b.require_tensor(l + "self_attn.v_proj.weight", {Hkv * D, H});
    }
    lw.gate_proj = b.require_tensor(l + "mlp.gate_proj.weight", {I, H});
    lw.up_proj = b.require_tensor(l + "mlp.up_proj.weight", {I, H});
    lw.down_proj = b.require_tensor(l + "mlp.down_proj.weight", {H, I});
    if (s.moe) {
      const int64_t E = c.num_experts, EI = c.moe_intermediate_size;
      lw.router_proj = b.require_tensor(l + "router.proj.weight", {E, H});
      lw.router_scale = b.require_tensor(l + "router.scale", {H});
      lw.router_per_expert_scale = b.require_tensor(l + "router.per_expert_scale", {E});
      if (b.has(l + "experts.gate_up_proj")) {
        lw.experts_gate_up = b.require_tensor(l + "experts.gate_up_proj", {E, 2 * EI, H});
        lw.experts_down = b.require_tensor(l + "experts.down_proj", {E, H, EI});
      } else {
        // MLX layout: separate per-expert gate and up; joined once here into the HF layout.
        Tensor gate = b.require_tensor(l + "experts.switch_glu.gate_proj.weight", {E, EI, H});
        Tensor up = b.require_tensor(l + "experts.switch_glu.up_proj.weight", {E, EI, H});
        require<FormatError>(gate.dtype() == up.dtype(), "{}: expert gate and up projections of layer {} differ in dtype",
                             checkpoint.dir(), i);
        Tensor joined = Tensor::zeros({E, 2 * EI, H}, gate.dtype());
        const size_t half = static_cast<size_t>(EI * H) * dtype_size(gate.dtype());
        auto* dst = static_cast<std::byte*>(joined.raw_data());
        Tensor gc = gate.contiguous(), uc = up.contiguous();
        for (int64_t e = 0; e < E; ++e) {
          std::memcpy(dst + 2 * e * half, static_cast<const std::byte*>(gc.raw_data()) + e * half, half);
          std::memcpy(dst + (2 * e + 1) * half, static_cast<const std::byte*>(uc.raw_data()) + e * half, half);
        }
        lw.experts_gate_up = joined;
        lw.experts_down = b.require_tensor(l + "experts.switch_glu.down_proj.weight", {E, H, EI});
      }
      lw.pre_feedforward_layernorm_2 = b.require_tensor(l + "pre_feedforward_layernorm_2.weight", {H});
      lw.post_feedforward_layernorm_1 = b.require_tensor(l + "post_feedforward_layernorm_1.weight", {H});
      lw.post_feedforward_layernorm_2 = b.require_tensor(l + "post_feedforward_layernorm_2.weight", {H});
    }
    if (P > 0) {
      lw.per_layer_input_gate = b.require_tensor(l + "per_layer_input_gate.weight", {P, H});
      lw.per_layer_projection = b.require_tensor(l + "per_layer_projection.weight", {H, P});
      lw.post_per_layer_input_norm = b.require_tensor(l + "post_per_layer_input_norm.weight", {H});
    }
    if (b.has(l + "layer_scalar")) {
      Tensor t = checkpoint.tensor(prefix + l + "layer_scalar");
      lw.layer_scalar = scalar_value(t, prefix + l + "layer_scalar");
    }
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace lmx
