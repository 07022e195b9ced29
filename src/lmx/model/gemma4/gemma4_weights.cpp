// Gemma 4 weights bound by name from a checkpoint (HF text, HF multimodal or MLX naming; dense or
// MLX affine-quantized).
#include "lmx/model/gemma4/gemma4_weights.h"

#include "lmx/core/error.h"
#include "lmx/io/safetensors.h"
#include "lmx/quant/affine.h"

#include <cstring>
#include <set>
#include <string_view>
#include <utility>

namespace lmx {
namespace {

// Name prefixes of the text model, in the order they are tried.
constexpr const char* kPrefixes[] = {"model.language_model.", "language_model.model.", "model."};

// Binds tensors under one name prefix and records every tensor it binds into `bound`.
class Binder {
 public:
  Binder(const Checkpoint& checkpoint, std::string prefix, const QuantizationConfig& quantization,
         std::set<std::string>& bound)
      : checkpoint_(checkpoint), prefix_(std::move(prefix)), quantization_(quantization), bound_(bound) {}

  // The dense float tensor `prefix + name`, which must exist and have `shape`.
  Tensor tensor(const std::string& name, const Shape& shape) const {
    return full_tensor(prefix_ + name, shape);
  }

  Tensor full_tensor(const std::string& full, const Shape& shape) const {
    if (!checkpoint_.contains(full))
      throw FormatError(fmt::format("{}: missing tensor '{}'", checkpoint_.dir(), full));
    Tensor t = checkpoint_.tensor(full);
    bound_.insert(full);
    if (t.shape() != shape)
      throw FormatError(fmt::format("{}: tensor '{}' has shape {}, expected {}", checkpoint_.dir(), full,
                                    shape_string(t.shape()), shape_string(shape)));
    if (!is_floating(t.dtype()))
      throw FormatError(fmt::format("{}: tensor '{}' has dtype {}, expected a float type", checkpoint_.dir(),
                                    full, dtype_name(t.dtype())));
    return t;
  }

  // The module `prefix + module` ([.., N, K] logical shape): quantized when `<module>.scales` exists,
  // else the dense `<module>.weight` (or `dense_name` when the dense tensor has another name).
  Weight weight(const std::string& module, const Shape& shape, const std::string& dense_name = "") const {
    const std::string full = prefix_ + module;
    Weight w;
    if (!checkpoint_.contains(full + ".scales")) {
      const std::string dense = dense_name.empty() ? full + ".weight" : prefix_ + dense_name;
      // MLX codes are U32: such a weight without scales is a quantized module missing a part.
      if (checkpoint_.contains(dense) && checkpoint_.info(dense).dtype == DType::kU32)
        throw FormatError(fmt::format("{}: quantized module '{}' lacks '{}.scales' ('{}' holds U32 codes)",
                                      checkpoint_.dir(), full, full, dense));
      w.dense = full_tensor(dense, shape);
      return w;
    }
    std::optional<QuantizationSpec> spec = quantization_.spec_for(full);
    if (!spec)
      throw FormatError(
          fmt::format("{}: '{}' has quantization scales but config.json's quantization block does not "
                      "quantize it",
                      checkpoint_.dir(), full));
    for (const char* part : {".weight", ".biases"})
      if (!checkpoint_.contains(full + part))
        throw FormatError(
            fmt::format("{}: quantized module '{}' lacks '{}{}'", checkpoint_.dir(), full, full, part));
    w.quantized.codes = checkpoint_.tensor(full + ".weight");
    w.quantized.scales = checkpoint_.tensor(full + ".scales");
    w.quantized.biases = checkpoint_.tensor(full + ".biases");
    for (const char* part : {".weight", ".scales", ".biases"}) bound_.insert(full + part);
    w.quantized.bits = spec->bits;
    w.quantized.group_size = spec->group_size;
    quant::validate_affine(w.quantized.codes, w.quantized.scales, w.quantized.biases, spec->bits,
                           spec->group_size, checkpoint_.dir() + ": " + full);
    Shape logical = w.quantized.codes.shape();
    logical.back() = w.quantized.cols();
    if (logical != shape)
      throw FormatError(fmt::format("{}: quantized '{}' holds a {} matrix ({} bits), expected {}",
                                    checkpoint_.dir(), full, shape_string(logical), spec->bits,
                                    shape_string(shape)));
    return w;
  }

  bool has(const std::string& name) const { return checkpoint_.contains(prefix_ + name); }
  const std::string& prefix() const { return prefix_; }
  // A tensor `prefix + name` read directly from the checkpoint.
  Tensor raw(const std::string& name) const {
    bound_.insert(prefix_ + name);
    return checkpoint_.tensor(prefix_ + name);
  }

 private:
  const Checkpoint& checkpoint_;
  std::string prefix_;
  const QuantizationConfig& quantization_;
  std::set<std::string>& bound_;
};

// Where lm_head lives for a text-model prefix: HF keeps it at the root, MLX under language_model.
std::string head_prefix(const std::string& prefix) {
  return prefix == "language_model.model." ? "language_model." : "";
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The layer index of "layers.<i>.<part>" and the part after it; index -1 for other names.
std::pair<int, std::string_view> layer_part(std::string_view rest) {
  if (!starts_with(rest, "layers.")) return {-1, {}};
  const size_t dot = rest.find('.', 7);
  const std::string_view number = rest.substr(7, dot == std::string_view::npos ? dot : dot - 7);
  if (number.empty() || number.size() > 8 || number.find_first_not_of("0123456789") != std::string_view::npos)
    return {-1, {}};
  return {std::stoi(std::string(number)),
          dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1)};
}

// Why a text-model tensor that was not bound contradicts the config, for the error message.
std::string unbound_reason(std::string_view rest, const Gemma4Config& c) {
  if (rest.find("per_layer") != std::string_view::npos && c.hidden_size_per_layer_input == 0)
    return "config.json sets hidden_size_per_layer_input 0, which turns per-layer inputs (PLE) off";
  if ((rest.find(".experts.") != std::string_view::npos || rest.find(".router.") != std::string_view::npos) &&
      !c.enable_moe_block)
    return "config.json does not enable_moe_block";
  if (starts_with(rest, "lm_head.") && c.tie_word_embeddings)
    return "config.json ties the output head to embed_tokens (tie_word_embeddings)";
  if (rest.find("self_attn.v_proj.") != std::string_view::npos && c.attention_k_eq_v)
    return "config.json sets attention_k_eq_v: full layers use their keys as values";
  if (rest.ends_with(".bias")) return "lmx's Gemma 4 has no biases (attention_bias must be false)";
  if (layer_part(rest).first >= c.num_hidden_layers)
    return fmt::format("config.json has num_hidden_layers {}", c.num_hidden_layers);
  return "the model config.json describes has no such weight";
}

// Rejects a tensor in the text model's namespace (its layers, embeddings, final norm, output head)
// that binding did not use: it contradicts the config (PLE weights with hidden_size_per_layer_input
// 0, layers past num_hidden_layers, MoE weights without enable_moe_block, biases), and loading
// the checkpoint anyway would compute another model than the one it holds. Tensors outside that
// namespace (vision and audio towers, anything else) are metadata to lmx and stay accepted, as do
// the K/V projections and norms of KV-shared layers, which transformers ignores on load.
void reject_unbound_weights(const Checkpoint& checkpoint, const Gemma4Config& c, const std::string& prefix,
                            const std::set<std::string>& bound) {
  static const std::set<std::string, std::less<>> kTextModules = {"layers",
                                                                  "embed_tokens",
                                                                  "embed_tokens_per_layer",
                                                                  "per_layer_model_projection",
                                                                  "per_layer_projection_norm",
                                                                  "norm"};
  const std::string head = head_prefix(prefix) + "lm_head.";
  for (const std::string& name : checkpoint.names()) {
    if (bound.count(name)) continue;
    std::string_view rest;
    if (starts_with(name, head)) {
      rest = std::string_view(name).substr(head.size() - 8);  // "lm_head...."
    } else if (starts_with(name, prefix)) {
      rest = std::string_view(name).substr(prefix.size());
      if (!kTextModules.count(rest.substr(0, rest.find('.')))) continue;
      if (rest.ends_with(".embed_scale")) continue;  // a non-persistent buffer some exports keep
      const auto [index, part] = layer_part(rest);
      const bool shared =
          index >= 0 && index < c.num_hidden_layers && c.layers[static_cast<size_t>(index)].kv_donor >= 0;
      if (shared && (starts_with(part, "self_attn.k_proj.") || starts_with(part, "self_attn.v_proj.") ||
                     starts_with(part, "self_attn.k_norm.") || starts_with(part, "self_attn.v_norm.")))
        continue;
    } else {
      continue;
    }
    throw FormatError(
        fmt::format("{}: tensor '{}' in {} is not a weight of the model config.json describes ({})",
                    checkpoint.dir(), name, checkpoint.file_of(name), unbound_reason(rest, c)));
  }
}

// A stored scalar ([] or [1]) as float.
float scalar_value(const Tensor& t, const std::string& name) {
  if (t.numel() != 1)
    throw FormatError(
        fmt::format("tensor '{}' should hold one value, has shape {}", name, shape_string(t.shape())));
  return t.item_f32(0);
}

void bind_experts(const Binder& b, const std::string& l, const Gemma4Config& c, Gemma4LayerWeights& lw,
                  const std::string& dir) {
  const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  if (b.has(l + "experts.gate_up_proj")) {  // HF layout
    lw.experts_gate_up.dense = b.tensor(l + "experts.gate_up_proj", {E, 2 * I, H});
    lw.experts_down.dense = b.tensor(l + "experts.down_proj", {E, H, I});
    return;
  }
  const std::string glu = l + "experts.switch_glu.";
  Weight gate = b.weight(glu + "gate_proj", {E, I, H});
  Weight up = b.weight(glu + "up_proj", {E, I, H});
  lw.experts_down = b.weight(glu + "down_proj", {E, H, I});
  if (gate.is_quantized() != up.is_quantized() || gate.is_quantized() != lw.experts_down.is_quantized())
    throw FormatError(fmt::format("{}: layer experts '{}' mix quantized and dense projections", dir, glu));
  if (gate.is_quantized()) {
    lw.experts_gate = std::move(gate);
    lw.experts_up = std::move(up);
  } else {
    lw.experts_gate_up.dense = join_expert_rows(gate.dense, up.dense, dir + ": " + glu);
  }
}

}  // namespace

Gemma4Weights Gemma4Weights::bind(const Checkpoint& checkpoint, const Gemma4Config& c,
                                  const QuantizationConfig& quantization) {
  std::string prefix;
  for (const char* p : kPrefixes)
    if (checkpoint.contains(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  if (prefix.empty())
    throw FormatError(
        fmt::format("{}: no embed_tokens.weight under any known prefix (model., model.language_model., "
                    "language_model.model.); is this a Gemma 4 checkpoint?",
                    checkpoint.dir()));
  std::set<std::string> bound;
  Binder b(checkpoint, prefix, quantization, bound);
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers,
                P = c.hidden_size_per_layer_input;

  Gemma4Weights w;
  w.prefix = prefix;
  w.embed_tokens = b.weight("embed_tokens", {V, H});
  w.norm = b.tensor("norm.weight", {H});
  if (!c.tie_word_embeddings) {
    // HF keeps lm_head at the root; MLX nests it under language_model.
    Binder root(checkpoint, head_prefix(prefix), quantization, bound);
    w.lm_head = root.weight("lm_head", {V, H});
  }
  if (P > 0) {
    w.embed_tokens_per_layer = b.weight("embed_tokens_per_layer", {c.vocab_size_per_layer_input, L * P});
    w.per_layer_model_projection = b.weight("per_layer_model_projection", {L * P, H});
    w.per_layer_projection_norm = b.tensor("per_layer_projection_norm.weight", {P});
  }

  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const Gemma4LayerSpec& s = c.layers[static_cast<size_t>(i)];
    const std::string l = "layers." + std::to_string(i) + ".";
    const int64_t D = s.head_dim, Hq = c.num_attention_heads, Hkv = s.num_kv_heads, I = s.intermediate_size;
    Gemma4LayerWeights lw;
    lw.input_layernorm = b.tensor(l + "input_layernorm.weight", {H});
    lw.post_attention_layernorm = b.tensor(l + "post_attention_layernorm.weight", {H});
    lw.pre_feedforward_layernorm = b.tensor(l + "pre_feedforward_layernorm.weight", {H});
    lw.post_feedforward_layernorm = b.tensor(l + "post_feedforward_layernorm.weight", {H});
    lw.q_proj = b.weight(l + "self_attn.q_proj", {Hq * D, H});
    lw.o_proj = b.weight(l + "self_attn.o_proj", {H, Hq * D});
    lw.q_norm = b.tensor(l + "self_attn.q_norm.weight", {D});
    if (s.kv_donor < 0) {
      lw.k_proj = b.weight(l + "self_attn.k_proj", {Hkv * D, H});
      lw.k_norm = b.tensor(l + "self_attn.k_norm.weight", {D});
      if (!s.k_eq_v) lw.v_proj = b.weight(l + "self_attn.v_proj", {Hkv * D, H});
    }
    lw.gate_proj = b.weight(l + "mlp.gate_proj", {I, H});
    lw.up_proj = b.weight(l + "mlp.up_proj", {I, H});
    lw.down_proj = b.weight(l + "mlp.down_proj", {H, I});
    if (s.moe) {
      const int64_t E = c.num_experts;
      lw.router_proj = b.weight(l + "router.proj", {E, H});
      lw.router_scale = b.tensor(l + "router.scale", {H}).to(DType::kF32);  // f32 once, not per step
      lw.router_per_expert_scale = b.tensor(l + "router.per_expert_scale", {E});
      bind_experts(b, l, c, lw, checkpoint.dir());
      lw.pre_feedforward_layernorm_2 = b.tensor(l + "pre_feedforward_layernorm_2.weight", {H});
      lw.post_feedforward_layernorm_1 = b.tensor(l + "post_feedforward_layernorm_1.weight", {H});
      lw.post_feedforward_layernorm_2 = b.tensor(l + "post_feedforward_layernorm_2.weight", {H});
    }
    if (P > 0) {
      lw.per_layer_input_gate = b.weight(l + "per_layer_input_gate", {P, H});
      lw.per_layer_projection = b.weight(l + "per_layer_projection", {H, P});
      lw.post_per_layer_input_norm = b.tensor(l + "post_per_layer_input_norm.weight", {H});
    }
    // transformers always saves layer_scalar (a persistent buffer); older exports may lack it (= 1).
    if (b.has(l + "layer_scalar"))
      lw.layer_scalar = scalar_value(b.raw(l + "layer_scalar"), prefix + l + "layer_scalar");
    w.layers.push_back(std::move(lw));
  }
  reject_unbound_weights(checkpoint, c, prefix, bound);
  return w;
}

size_t decode_weight_bytes(const Gemma4Config& config, const Gemma4Weights& weights) {
  size_t total = 0;
  for (const auto& l : weights.layers) {
    for (const Tensor* t :
         {&l.input_layernorm, &l.post_attention_layernorm, &l.pre_feedforward_layernorm,
          &l.post_feedforward_layernorm, &l.q_norm, &l.k_norm, &l.router_scale, &l.router_per_expert_scale,
          &l.pre_feedforward_layernorm_2, &l.post_feedforward_layernorm_1, &l.post_feedforward_layernorm_2,
          &l.post_per_layer_input_norm})
      if (t->defined()) total += t->nbytes();
    for (const Weight* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj,
                            &l.down_proj, &l.router_proj, &l.per_layer_input_gate, &l.per_layer_projection})
      total += w->bytes();
    // MoE: only the top-k experts are read per token.
    if (config.num_experts > 0) {
      size_t experts =
          l.experts_gate_up.bytes() + l.experts_gate.bytes() + l.experts_up.bytes() + l.experts_down.bytes();
      total += experts / static_cast<size_t>(config.num_experts) * static_cast<size_t>(config.top_k_experts);
    }
  }
  total += weights.per_layer_model_projection.bytes();
  if (weights.per_layer_projection_norm.defined()) total += weights.per_layer_projection_norm.nbytes();
  total += weights.norm.nbytes();
  // The output head reads the whole table; embeddings read one row each.
  total += weights.lm_head.defined() ? weights.lm_head.bytes() + weights.embed_tokens.row_bytes()
                                     : weights.embed_tokens.bytes();
  total += weights.embed_tokens_per_layer.row_bytes();
  return total;
}

}  // namespace lmx
