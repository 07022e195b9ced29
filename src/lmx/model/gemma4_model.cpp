// Gemma 4 text model: the forward pass over a ragged batch of sequences, on the CPU op set.
#include "lmx/model/gemma4_model.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/safetensors.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/ops.h"

#include <cmath>
#include <cstring>

namespace lmx {

namespace {
// Normalises x [T, H·D] per head of width D (weight [D] or none), in place.
void head_norm(Tensor& x, int heads, int head_dim, const Tensor* weight, float eps) {
  Tensor view = x.reshape({x.dim(0) * heads, head_dim});
  ops::rms_norm(view, weight, eps, view);
}

Tensor linear(const Tensor& x, const Weight& w) { return apply_linear(x, w); }

}  // namespace

std::unique_ptr<Gemma4Model> Gemma4Model::load(const std::string& dir) {
  ModelConfigFiles files = load_model_config(dir);
  Gemma4Config config = Gemma4Config::from_json(files.text, files.root, files.path);
  QuantizationConfig quantization = QuantizationConfig::from_json(files.root, files.path);
  auto checkpoint = std::make_shared<Checkpoint>(Checkpoint::open_dir(dir));
  return std::unique_ptr<Gemma4Model>(new Gemma4Model(std::move(config), std::move(checkpoint), quantization));
}

Gemma4Model::Gemma4Model(Gemma4Config config, std::shared_ptr<Checkpoint> checkpoint,
                         const QuantizationConfig& quantization)
    : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {
  weights_ = Gemma4Weights::bind(*checkpoint_, config_, quantization);
  std::vector<KvLayerSpec> cache_specs(static_cast<size_t>(config_.num_cache_layers));
  for (const auto& l : config_.layers) {
    if (l.kv_donor < 0) cache_specs[static_cast<size_t>(l.cache_index)] = {l.num_kv_heads, l.head_dim, l.sliding_window};
    rope_inv_freq_.push_back(ops::rope_inv_freq(l.head_dim, l.rope_theta, l.rope_rotated_pairs));
    if (l.rope_factor != 1.0)
      for (float& f : rope_inv_freq_.back()) f = static_cast<float>(f / l.rope_factor);
  }
  kv_ = std::make_unique<KvCache>(std::move(cache_specs));
}

std::string Gemma4Model::device_description() const {
  return fmt::format("cpu ({}, {} threads)", ops::simd_target_name(), default_pool().threads());
}

size_t Gemma4Model::weight_bytes_per_token() const { return decode_weight_bytes(config_, weights_); }

// PLE inputs [T, L, P]: (rms_norm(per_layer_model_projection(h) · H^-0.5) + embed_per_layer(ids) · √P) · 2^-0.5.
Tensor Gemma4Model::per_layer_inputs(const Tensor& embeds, std::span<const int32_t> ids) const {
  const int64_t tokens = embeds.dim(0);
  const int layers = config_.num_hidden_layers, width = config_.hidden_size_per_layer_input;
  Tensor token_part = Tensor::zeros({tokens, static_cast<int64_t>(layers) * width}, DType::kF32);
  std::vector<int32_t> ple_ids(ids.begin(), ids.end());
  for (auto& id : ple_ids)
    if (id >= config_.vocab_size_per_layer_input) id = 0;  // ids past the PLE vocab get row 0 (see notes)
  lookup_rows(weights_.embed_tokens_per_layer, ple_ids, std::sqrt(static_cast<float>(width)), token_part);
  Tensor context = linear(embeds, weights_.per_layer_model_projection);
  ops::scale_inplace(context, 1.0f / std::sqrt(static_cast<float>(config_.hidden_size)));
  Tensor context_rows = context.reshape({tokens * layers, width});
  ops::rms_norm(context_rows, &weights_.per_layer_projection_norm, config_.rms_norm_eps, context_rows);
  ops::add_inplace(context, token_part);
  ops::scale_inplace(context, 1.0f / std::sqrt(2.0f));
  return context.reshape({tokens, layers, width});
}

void Gemma4Model::attention_block(int layer, std::span<const KvRow> rows, const Tensor& x, Tensor& out) {
  const Gemma4LayerSpec& spec = config_.layers[static_cast<size_t>(layer)];
  const Gemma4LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const int64_t tokens = x.dim(0);
  const int heads = config_.num_attention_heads, dim = spec.head_dim, kv_heads = spec.num_kv_heads;
  const float eps = config_.rms_norm_eps;
  std::vector<int32_t> positions;
  positions.reserve(static_cast<size_t>(tokens));
  for (const auto& r : rows)
    for (int64_t i = 0; i < r.new_tokens; ++i) positions.push_back(static_cast<int32_t>(r.kv->length() + i));

  Tensor q = linear(x, w.q_proj);
  head_norm(q, heads, dim, &w.q_norm, eps);
  Tensor q3 = q.reshape({tokens, heads, dim});
  ops::apply_rope(q3, positions, rope_inv_freq_[static_cast<size_t>(layer)]);

  if (spec.kv_donor < 0) {
    Tensor k = linear(x, w.k_proj);
    Tensor v = spec.k_eq_v ? k.contiguous() : linear(x, w.v_proj);
    head_norm(k, kv_heads, dim, &w.k_norm, eps);
    head_norm(v, kv_heads, dim, nullptr, eps);
    Tensor k3 = k.reshape({tokens, kv_heads, dim});
    ops::apply_rope(k3, positions, rope_inv_freq_[static_cast<size_t>(layer)]);
    kv_->append(spec.cache_index, rows, k3, v.reshape({tokens, kv_heads, dim}));
  }
  Tensor attn = Tensor::zeros({tokens, heads, dim}, DType::kF32);
  kv_->attend(spec.cache_index, rows, q3, 1.0f, attn);
  out = linear(attn.reshape({tokens, static_cast<int64_t>(heads) * dim}), w.o_proj);
}

Tensor Gemma4Model::mlp_block(int layer, const Tensor& x) const {
  const Gemma4LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  Tensor gate = linear(x, w.gate_proj);
  Tensor up = linear(x, w.up_proj);
  ops::gelu_tanh_mul(gate, up, gate);
  return linear(gate, w.down_proj);
}

Tensor Gemma4Model::forward(std::span<const StepRow> rows, bool all_positions) {
  LMX_REQUIRE(InvalidArgument, !rows.empty(), "forward: empty batch");
  std::vector<int32_t> ids;
  std::vector<KvRow> kv_rows;
  for (size_t r = 0; r < rows.size(); ++r) {
    LMX_REQUIRE(InvalidArgument, rows[r].sequence != nullptr && !rows[r].tokens.empty(), "forward: row {} has no tokens",
                r);
    auto* kv = dynamic_cast<SequenceKv*>(rows[r].sequence);
    LMX_REQUIRE(InvalidArgument, kv != nullptr, "forward: row {}'s sequence belongs to another backend", r);
    for (int32_t id : rows[r].tokens)
      LMX_REQUIRE(InvalidArgument, id >= 0 && id < config_.vocab_size, "token id {} out of range [0, {}) in row {}", id,
                               config_.vocab_size, r);
    ids.insert(ids.end(), rows[r].tokens.begin(), rows[r].tokens.end());
    kv_rows.push_back({kv, static_cast<int64_t>(rows[r].tokens.size())});
  }
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const int64_t hidden = config_.hidden_size;
  const float eps = config_.rms_norm_eps;

  Tensor x = Tensor::zeros({tokens, hidden}, DType::kF32);
  lookup_rows(weights_.embed_tokens, ids, std::sqrt(static_cast<float>(hidden)), x);
  Tensor ple;
  if (config_.hidden_size_per_layer_input > 0) ple = per_layer_inputs(x, ids);

  Tensor normed = Tensor::zeros({tokens, hidden}, DType::kF32);
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    const Gemma4LayerSpec& spec = config_.layers[static_cast<size_t>(i)];
    const Gemma4LayerWeights& w = weights_.layers[static_cast<size_t>(i)];
    // Attention.
    ops::rms_norm(x, &w.input_layernorm, eps, normed);
    Tensor attn;
    attention_block(i, kv_rows, normed, attn);
    ops::rms_norm(attn, &w.post_attention_layernorm, eps, attn);
    ops::add_inplace(x, attn);
    // Feed-forward (dense MLP, plus the expert block on MoE layers).
    ops::rms_norm(x, &w.pre_feedforward_layernorm, eps, normed);
    Tensor ffn = mlp_block(i, normed);
    if (spec.moe) {
      ops::rms_norm(ffn, &w.post_feedforward_layernorm_1, eps, ffn);
      // Router reads the residual stream itself.
      Tensor routed = Tensor::zeros({tokens, hidden}, DType::kF32);
      ops::rms_norm(x, nullptr, eps, routed);
      ops::mul_inplace(routed, w.router_scale);
      ops::scale_inplace(routed, 1.0f / std::sqrt(static_cast<float>(hidden)));
      Tensor router_logits = linear(routed, w.router_proj);
      Tensor experts = Tensor::zeros({tokens, config_.top_k_experts}, DType::kI32);
      Tensor weights = Tensor::zeros({tokens, config_.top_k_experts}, DType::kF32);
      ops::moe_route(router_logits, config_.top_k_experts, &w.router_per_expert_scale, experts, weights);
      Tensor expert_in = Tensor::zeros({tokens, hidden}, DType::kF32);
      ops::rms_norm(x, &w.pre_feedforward_layernorm_2, eps, expert_in);
      Tensor expert_out = Tensor::zeros({tokens, hidden}, DType::kF32);
      if (w.experts_down.is_quantized())
        ops::quantized_moe_experts(expert_in, experts, weights, w.experts_gate.quantized, w.experts_up.quantized,
                                   w.experts_down.quantized, expert_out);
      else
        ops::moe_experts(expert_in, experts, weights, w.experts_gate_up.dense, w.experts_down.dense, expert_out);
      ops::rms_norm(expert_out, &w.post_feedforward_layernorm_2, eps, expert_out);
      ops::add_inplace(ffn, expert_out);
    }
    ops::rms_norm(ffn, &w.post_feedforward_layernorm, eps, ffn);
    ops::add_inplace(x, ffn);
    // Per-layer input.
    if (ple.defined()) {
      Tensor gate = linear(x, w.per_layer_input_gate);
      ops::gelu_tanh(gate);
      Tensor layer_input = ple.slice(1, i, i + 1).contiguous().reshape({tokens, config_.hidden_size_per_layer_input});
      ops::mul_inplace(gate, layer_input);
      Tensor projected = linear(gate, w.per_layer_projection);
      ops::rms_norm(projected, &w.post_per_layer_input_norm, eps, projected);
      ops::add_inplace(x, projected);
    }
    if (w.layer_scalar != 1.0f) ops::scale_inplace(x, w.layer_scalar);
  }
  KvCache::commit(kv_rows);

  // Output head over the requested positions.
  Tensor last = x;
  if (!all_positions) {
    last = Tensor::zeros({static_cast<int64_t>(rows.size()), hidden}, DType::kF32);
    int64_t end = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      end += static_cast<int64_t>(rows[r].tokens.size());
      std::memcpy(last.data<float>() + static_cast<int64_t>(r) * hidden, x.data<float>() + (end - 1) * hidden,
                  static_cast<size_t>(hidden) * 4);
    }
  }
  ops::rms_norm(last, &weights_.norm, eps, last);
  Tensor logits = linear(last, weights_.lm_head.defined() ? weights_.lm_head : weights_.embed_tokens);
  if (config_.final_logit_softcapping) ops::softcap(logits, *config_.final_logit_softcapping);
  return logits;
}

}  // namespace lmx
