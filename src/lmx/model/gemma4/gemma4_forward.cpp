// Gemma 4's forward pass over a ragged step, on any backend. Where a backend offers a fused op (the CUDA
// decode fusions) the forward asks for it; otherwise it runs the plain ops in the order the fused op's
// contract names — the CPU's order, so the CPU computes what it always did.
#include "lmx/model/gemma4/gemma4_forward.h"

#include "lmx/core/error.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/gemma4/forward_flops.h"
#include "lmx/model/gemma4/gemma4_config.h"
#include "lmx/model/gemma4/gemma4_weights.h"
#include "lmx/model/quantization_config.h"
#include "lmx/ops/ops.h"

#include <cmath>

namespace lmx {

namespace {

// Step buffers (Backend::workspace slots).
enum Slot : int {
  kX = kFirstFamilySlot,
  kNormed,
  kQ,  // q, or the stacked q | k | v projection
  kK,
  kV,
  kAttn,
  kProj,  // the attention's o projection, then the per-layer input's projection
  kGate,  // gate, or the stacked gate | up projection
  kUp,
  kFfn,
  kRouted,
  kRouterLogits,
  kExpertIds,
  kExpertWeights,
  kExpertIn,
  kExpertOut,
  kPle,
  kPleTokens,
  kPleGate,
  kLast,
  kLogits,
  kArgmax,
};

using WeightRef = std::shared_ptr<const BackendWeight>;

// One layer's weights on the backend. Absent projections and norms are null / undefined.
struct LayerOnBackend {
  Tensor input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;
  WeightRef qkv;  // stacked q | k (| v) when the backend stacks them; else q, k, v apart
  WeightRef q_proj, k_proj, v_proj, o_proj;
  Tensor q_norm, k_norm;
  WeightRef gate_up;  // stacked gate | up when the backend stacks them; else gate and up apart
  WeightRef gate_proj, up_proj, down_proj;
  WeightRef router_proj;
  Tensor router_scale, router_per_expert_scale;
  std::shared_ptr<const BackendExperts> experts;
  Tensor pre_feedforward_layernorm_2, post_feedforward_layernorm_1, post_feedforward_layernorm_2;
  WeightRef per_layer_input_gate, per_layer_projection;
  Tensor post_per_layer_input_norm;
  Tensor inv_freq;  // RoPE frequencies [head_dim / 2]
  float layer_scalar = 1.0f;
};

const Tensor* opt(const Tensor& t) {
  return t.defined() ? &t : nullptr;
}

class Gemma4Forward final : public ModelForward {
 public:
  Gemma4Forward(Gemma4Config config, std::shared_ptr<Checkpoint> checkpoint, Gemma4Weights weights)
      : config_(std::move(config)), checkpoint_(std::move(checkpoint)), weights_(std::move(weights)) {
    weight_bytes_ = decode_weight_bytes(config_, weights_);
    d_.family = "gemma4";
    d_.model_type = config_.model_type;
    d_.vocab_size = config_.vocab_size;
    d_.hidden_size = config_.hidden_size;
    d_.num_layers = config_.num_hidden_layers;
    d_.bos_token_id = config_.bos_token_id;
    d_.pad_token_id = config_.pad_token_id;
    d_.eos_token_ids = config_.eos_token_ids;
    d_.context_length = config_.max_position_embeddings;
    for (const auto& l : config_.layers)
      d_.kv_layers.push_back({l.num_kv_heads, l.head_dim, l.sliding_window, l.kv_donor});
  }

  const ModelDescription& description() const override { return d_; }
  size_t weight_bytes_per_token() const override { return weight_bytes_; }
  double prefill_flops(int64_t tokens) const override { return lmx::prefill_flops(config_, tokens).total(); }
  int extra_token_arrays() const override { return config_.hidden_size_per_layer_input > 0 ? 1 : 0; }
  // The per-layer-input table's ids: ids past its vocabulary take row 0 (see the notes).
  void fill_extra(int, std::span<const int32_t> ids, std::span<int32_t> out) const override {
    for (size_t i = 0; i < ids.size(); ++i) out[i] = ids[i] < config_.vocab_size_per_layer_input ? ids[i] : 0;
  }

  void prepare(Backend& be) override;
  StepOutputs enqueue(const StepView& step) override;

 private:
  Tensor buffer(Backend& be, int slot, int64_t rows, int64_t cols, DType dtype = DType::kF32) const {
    return be.workspace(slot, {rows, cols}, dtype);
  }
  // x = (x + rms_norm(a)·a_norm)·scale; normed = rms_norm(x)·normed_norm unless normed is null.
  void residual(Backend& be, Tensor& x, Tensor& a, const Tensor& a_norm, float scale, Tensor* normed,
                const Tensor* normed_norm) const;
  // out = (gelu_tanh(gate)·up)·Wᵀ.
  void linear_gelu(Backend& be, const BackendWeight& w, Tensor& gate, const Tensor& up, Tensor& out) const;
  // PLE inputs [T, L·P]: (rms_norm(per_layer_model_projection(h)·H^-0.5) + embed_per_layer(ids)·√P)·2^-0.5.
  Tensor per_layer_inputs(const StepView& s, const Tensor& x) const;
  void attention(int layer, const StepView& s, const Tensor& normed, Tensor& out) const;
  // The feed-forward block of `layer` (dense MLP, and the experts on MoE layers) into `out`.
  void feed_forward(int layer, const StepView& s, const Tensor& x, const Tensor& normed, Tensor& out) const;

  Gemma4Config config_;
  std::shared_ptr<Checkpoint> checkpoint_;  // keeps the mapped weights alive while a backend uses them
  Gemma4Weights weights_;
  ModelDescription d_;
  size_t weight_bytes_ = 0;
  WeightRef embed_tokens_, lm_head_, embed_tokens_per_layer_, per_layer_model_projection_;
  Tensor per_layer_projection_norm_, norm_;
  std::vector<LayerOnBackend> layers_;
};

void Gemma4Forward::prepare(Backend& be) {
  auto weight = [&](const Weight& w) { return w.defined() ? be.prepare_weight(w) : nullptr; };
  auto vec = [&](const Tensor& t) { return t.defined() ? be.upload(t) : Tensor(); };
  embed_tokens_ = weight(weights_.embed_tokens);
  lm_head_ = weight(weights_.lm_head);
  embed_tokens_per_layer_ = weight(weights_.embed_tokens_per_layer);
  per_layer_model_projection_ = weight(weights_.per_layer_model_projection);
  per_layer_projection_norm_ = vec(weights_.per_layer_projection_norm);
  norm_ = vec(weights_.norm);
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const Gemma4LayerWeights& l = weights_.layers[i];
    const Gemma4LayerSpec& spec = config_.layers[i];
    LayerOnBackend& o = layers_.emplace_back();
    o.input_layernorm = vec(l.input_layernorm);
    o.post_attention_layernorm = vec(l.post_attention_layernorm);
    o.pre_feedforward_layernorm = vec(l.pre_feedforward_layernorm);
    o.post_feedforward_layernorm = vec(l.post_feedforward_layernorm);
    if (l.k_proj.defined()) {
      const Weight* qkv[] = {&l.q_proj, &l.k_proj, &l.v_proj};
      o.qkv = be.prepare_stacked({qkv, l.v_proj.defined() ? size_t{3} : size_t{2}});
    }
    if (!o.qkv) {
      o.q_proj = weight(l.q_proj);
      o.k_proj = weight(l.k_proj);
      o.v_proj = weight(l.v_proj);
    }
    o.o_proj = weight(l.o_proj);
    o.q_norm = vec(l.q_norm);
    o.k_norm = vec(l.k_norm);
    const Weight* gate_up[] = {&l.gate_proj, &l.up_proj};
    o.gate_up = be.prepare_stacked(gate_up, /*geglu_pair=*/true);
    if (!o.gate_up) {
      o.gate_proj = weight(l.gate_proj);
      o.up_proj = weight(l.up_proj);
    }
    o.down_proj = weight(l.down_proj);
    if (spec.moe) {
      o.router_proj = weight(l.router_proj);
      o.router_scale = vec(l.router_scale);
      o.router_per_expert_scale = vec(l.router_per_expert_scale);
      o.experts = be.prepare_experts(l.experts_gate_up, l.experts_gate, l.experts_up, l.experts_down);
      o.pre_feedforward_layernorm_2 = vec(l.pre_feedforward_layernorm_2);
      o.post_feedforward_layernorm_1 = vec(l.post_feedforward_layernorm_1);
      o.post_feedforward_layernorm_2 = vec(l.post_feedforward_layernorm_2);
    }
    o.per_layer_input_gate = weight(l.per_layer_input_gate);
    o.per_layer_projection = weight(l.per_layer_projection);
    o.post_per_layer_input_norm = vec(l.post_per_layer_input_norm);
    std::vector<float> inv = ops::rope_inv_freq(spec.head_dim, spec.rope_theta, spec.rope_rotated_pairs);
    if (spec.rope_factor != 1.0)
      for (float& f : inv) f = static_cast<float>(f / spec.rope_factor);
    o.inv_freq = be.upload(Tensor::from_vector(inv, {static_cast<int64_t>(inv.size())}));
    o.layer_scalar = l.layer_scalar;
  }
  // A backend with its own copies needs neither the host weights nor the mapping any more.
  if (!be.device().is_cpu()) {
    weights_ = Gemma4Weights();
    checkpoint_.reset();
  }
}

void Gemma4Forward::residual(Backend& be, Tensor& x, Tensor& a, const Tensor& a_norm, float scale,
                             Tensor* normed, const Tensor* normed_norm) const {
  const float eps = config_.rms_norm_eps;
  if (be.residual_norm(x, a, opt(a_norm), scale, normed, normed_norm, eps)) return;
  be.rms_norm(a, opt(a_norm), eps, a);
  be.add(x, a);
  if (scale != 1.0f) be.scale(x, scale);
  if (normed != nullptr) be.rms_norm(x, normed_norm, eps, *normed);
}

void Gemma4Forward::linear_gelu(Backend& be, const BackendWeight& w, Tensor& gate, const Tensor& up,
                                Tensor& out) const {
  if (be.linear_gelu(gate, up, w, out)) return;
  be.gelu_tanh_mul(gate, up, gate);
  be.linear(gate, w, out);
}

Tensor Gemma4Forward::per_layer_inputs(const StepView& s, const Tensor& x) const {
  Backend& be = *s.backend;
  const int64_t t = s.tokens, layers = config_.num_hidden_layers, width = config_.hidden_size_per_layer_input;
  Tensor tokens = buffer(be, kPleTokens, t, layers * width);
  be.embedding(*embed_tokens_per_layer_, s.extras[0], std::sqrt(static_cast<float>(width)), tokens);
  Tensor context = buffer(be, kPle, t, layers * width);
  be.linear(x, *per_layer_model_projection_, context);
  be.scale(context, 1.0f / std::sqrt(static_cast<float>(config_.hidden_size)));
  Tensor rows = context.reshape({t * layers, width});
  be.rms_norm(rows, opt(per_layer_projection_norm_), config_.rms_norm_eps, rows);
  be.add(context, tokens);
  be.scale(context, 1.0f / std::sqrt(2.0f));
  return context;
}

void Gemma4Forward::attention(int layer, const StepView& s, const Tensor& normed, Tensor& out) const {
  Backend& be = *s.backend;
  const Gemma4LayerSpec& spec = config_.layers[static_cast<size_t>(layer)];
  const LayerOnBackend& w = layers_[static_cast<size_t>(layer)];
  const int64_t t = s.tokens;
  const int heads = config_.num_attention_heads, kv_heads = spec.num_kv_heads;
  const int64_t q_width = int64_t{heads} * spec.head_dim, kv_width = int64_t{kv_heads} * spec.head_dim;
  const bool own_kv = spec.kv_donor < 0;
  // Projections: one stacked q | k (| v) matrix where the backend stacked them, else one per output.
  AttentionInputs in;
  in.q_norm = opt(w.q_norm);
  in.k_norm = opt(w.k_norm);
  in.inv_freq = &w.inv_freq;
  in.eps = config_.rms_norm_eps;
  if (w.qkv) {
    Tensor qkv = buffer(be, kQ, t, w.qkv->rows);
    be.linear(normed, *w.qkv, qkv);
    in.q = qkv.slice(1, 0, q_width);
    if (own_kv) {
      in.k = qkv.slice(1, q_width, q_width + kv_width);
      in.v = spec.k_eq_v ? in.k : qkv.slice(1, q_width + kv_width, q_width + 2 * kv_width);
    }
  } else {
    in.q = buffer(be, kQ, t, q_width);
    be.linear(normed, *w.q_proj, in.q);
    if (own_kv) {
      in.k = buffer(be, kK, t, kv_width);
      be.linear(normed, *w.k_proj, in.k);
      in.v = in.k;  // k_eq_v: the values are the keys before their norm
      if (!spec.k_eq_v) {
        in.v = buffer(be, kV, t, kv_width);
        be.linear(normed, *w.v_proj, in.v);
      }
    }
  }
  Tensor attn = buffer(be, kAttn, t, q_width);
  const PagedKvLayer kv = s.kv_layer(layer);
  if (!be.attention_with_inputs(s.kv, kv, in, 1.0f, attn)) {
    // Per-head norms and RoPE, the cache append, then attention.
    be.head_norm(in.q, heads, in.q_norm, in.eps);
    be.rope(in.q, heads, s.positions, w.inv_freq);
    if (own_kv) {
      if (spec.k_eq_v) {
        Tensor v = buffer(be, kV, t, kv_width);
        be.copy(in.k, v);
        in.v = v;
      }
      be.head_norm(in.k, kv_heads, in.k_norm, in.eps);
      be.head_norm(in.v, kv_heads, nullptr, in.eps);
      be.rope(in.k, kv_heads, s.positions, w.inv_freq);
      be.kv_append(s.kv, kv, in.k, in.v);
    }
    be.attention(s.kv, kv, in.q, 1.0f, attn);
  }
  be.linear(attn, *w.o_proj, out);
}

void Gemma4Forward::feed_forward(int layer, const StepView& s, const Tensor& x, const Tensor& normed,
                                 Tensor& out) const {
  Backend& be = *s.backend;
  const Gemma4LayerSpec& spec = config_.layers[static_cast<size_t>(layer)];
  const LayerOnBackend& w = layers_[static_cast<size_t>(layer)];
  const int64_t t = s.tokens, hidden = config_.hidden_size, inter = spec.intermediate_size;
  const float eps = config_.rms_norm_eps;
  Tensor expert_in, expert_ids, expert_weights;
  if (spec.moe) {
    // The routing reads the residual stream itself (normed without a weight) and may run beside the dense
    // MLP; the experts read it normed by pre_feedforward_layernorm_2.
    be.begin_side();
    Tensor routed = buffer(be, kRouted, t, hidden);
    expert_in = buffer(be, kExpertIn, t, hidden);
    const float router_mul = 1.0f / std::sqrt(static_cast<float>(hidden));
    if (!be.moe_inputs(x, opt(w.router_scale), router_mul, opt(w.pre_feedforward_layernorm_2), eps, routed,
                       expert_in)) {
      be.rms_norm(x, nullptr, eps, routed);
      be.mul_rows(routed, w.router_scale);
      be.scale(routed, router_mul);
      be.rms_norm(x, opt(w.pre_feedforward_layernorm_2), eps, expert_in);
    }
    Tensor logits = buffer(be, kRouterLogits, t, config_.num_experts);
    be.linear(routed, *w.router_proj, logits);
    expert_ids = buffer(be, kExpertIds, t, config_.top_k_experts, DType::kI32);
    expert_weights = buffer(be, kExpertWeights, t, config_.top_k_experts);
    be.moe_route(logits, config_.top_k_experts, opt(w.router_per_expert_scale), expert_ids, expert_weights);
    be.end_side();
  }
  // The dense MLP: down(gelu_tanh(gate(x)) · up(x)).
  if (w.gate_up) {
    Tensor gate_up = buffer(be, kGate, t, 2 * inter);
    if (be.linear_geglu(normed, *w.gate_up, gate_up)) {
      be.linear(gate_up.slice(1, 0, inter), *w.down_proj, out);
    } else {
      be.linear(normed, *w.gate_up, gate_up);
      Tensor gate = gate_up.slice(1, 0, inter);
      linear_gelu(be, *w.down_proj, gate, gate_up.slice(1, inter, 2 * inter), out);
    }
  } else {
    Tensor gate = buffer(be, kGate, t, inter), up = buffer(be, kUp, t, inter);
    be.linear(normed, *w.gate_proj, gate);
    be.linear(normed, *w.up_proj, up);
    linear_gelu(be, *w.down_proj, gate, up, out);
  }
  if (!spec.moe) return;
  // out = post_ffn_norm_1(mlp) + post_ffn_norm_2(experts).
  be.join_side();
  Tensor expert_out = buffer(be, kExpertOut, t, hidden);
  MoeOutputNorms norms;
  norms.dense_out = &out;
  norms.dense_norm = opt(w.post_feedforward_layernorm_1);
  norms.expert_norm = opt(w.post_feedforward_layernorm_2);
  norms.eps = eps;
  // Without a side stream the expert ids were written several ops before the experts run.
  if (be.moe_experts_normed(expert_in, expert_ids, expert_weights, *w.experts, expert_out, norms,
                            !be.has_side()))
    return;
  be.moe_experts(expert_in, expert_ids, expert_weights, *w.experts, expert_out);
  be.rms_norm(out, norms.dense_norm, eps, out);
  be.rms_norm(expert_out, norms.expert_norm, eps, expert_out);
  be.add(out, expert_out);
}

StepOutputs Gemma4Forward::enqueue(const StepView& s) {
  Backend& be = *s.backend;
  const int64_t t = s.tokens, hidden = config_.hidden_size, ple_width = config_.hidden_size_per_layer_input;
  const float eps = config_.rms_norm_eps;
  Tensor x = buffer(be, kX, t, hidden), normed = buffer(be, kNormed, t, hidden);
  be.embedding(*embed_tokens_, s.ids, std::sqrt(static_cast<float>(hidden)), x);
  Tensor ple;
  if (ple_width > 0) ple = per_layer_inputs(s, x);

  const int layers = config_.num_hidden_layers;
  if (layers > 0) be.rms_norm(x, opt(layers_[0].input_layernorm), eps, normed);
  Tensor proj = buffer(be, kProj, t, hidden), ffn = buffer(be, kFfn, t, hidden);
  for (int i = 0; i < layers; ++i) {
    const LayerOnBackend& w = layers_[static_cast<size_t>(i)];
    // The next layer's normed input is the last residual step's second output (none after the last layer).
    Tensor* next_normed = i + 1 < layers ? &normed : nullptr;
    const Tensor* next_norm =
        i + 1 < layers ? opt(layers_[static_cast<size_t>(i) + 1].input_layernorm) : nullptr;
    attention(i, s, normed, proj);
    residual(be, x, proj, w.post_attention_layernorm, 1.0f, &normed, opt(w.pre_feedforward_layernorm));
    feed_forward(i, s, x, normed, ffn);
    if (ple_width == 0) {
      residual(be, x, ffn, w.post_feedforward_layernorm, w.layer_scalar, next_normed, next_norm);
      continue;
    }
    // Per-layer input: x += norm(projection(gelu_tanh(gate(x)) · ple[i])), then the layer scalar.
    Tensor layer_input = ple.slice(1, i * ple_width, (i + 1) * ple_width);
    if (t == 1) {
      PerLayerInputStep step;
      step.x = &x;
      step.mlp_out = &ffn;
      step.mlp_out_norm = opt(w.post_feedforward_layernorm);
      step.gate = w.per_layer_input_gate.get();
      step.layer_input = layer_input;
      step.projection = w.per_layer_projection.get();
      step.projection_norm = opt(w.post_per_layer_input_norm);
      step.layer_scalar = w.layer_scalar;
      step.next_normed = next_normed;
      step.next_norm = next_norm;
      step.eps = eps;
      if (be.per_layer_input_step(step)) continue;
    }
    residual(be, x, ffn, w.post_feedforward_layernorm, 1.0f, nullptr, nullptr);
    Tensor gate = buffer(be, kPleGate, t, ple_width);
    be.linear(x, *w.per_layer_input_gate, gate);
    linear_gelu(be, *w.per_layer_projection, gate, layer_input, proj);
    residual(be, x, proj, w.post_per_layer_input_norm, w.layer_scalar, next_normed, next_norm);
  }

  // Output head over the requested positions.
  Tensor last = buffer(be, kLast, s.out_rows, hidden);
  if (s.all_positions) {
    be.copy(x, last);
  } else {
    for (int64_t r = 0; r < s.rows; ++r) {
      const int64_t i = s.last_index[static_cast<size_t>(r)];
      Tensor to = last.slice(0, r, r + 1);
      be.copy(x.slice(0, i, i + 1), to);
    }
  }
  be.rms_norm(last, opt(norm_), eps, last);
  StepOutputs out;
  out.logits = buffer(be, kLogits, s.out_rows, config_.vocab_size);
  be.linear(last, lm_head_ ? *lm_head_ : *embed_tokens_, out.logits);
  if (config_.final_logit_softcapping) be.softcap(out.logits, *config_.final_logit_softcapping);
  out.argmax = be.workspace(kArgmax, {s.out_rows}, DType::kI32);
  be.argmax_rows(out.logits, out.argmax);
  return out;
}

}  // namespace

std::unique_ptr<ModelForward> open_gemma4(const ModelConfigFiles& files, const std::string& dir) {
  Gemma4Config config = Gemma4Config::from_json(files.text, files.root, files.path);
  QuantizationConfig quantization = QuantizationConfig::from_json(files.root, files.path);
  auto checkpoint = std::make_shared<Checkpoint>(Checkpoint::open_dir(dir));
  Gemma4Weights weights = Gemma4Weights::bind(*checkpoint, config, quantization);
  return std::make_unique<Gemma4Forward>(std::move(config), std::move(checkpoint), std::move(weights));
}

}  // namespace lmx
