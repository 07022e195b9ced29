#include "lmx/model/gemma4/forward_flops.h"

#include "lmx/core/error.h"

namespace lmx {

namespace {

// Σ over positions t < T of the keys position t attends to: t + 1, capped at `window` when window > 0.
double attended_keys(int64_t tokens, int window) {
  const double t = static_cast<double>(tokens);
  if (window <= 0 || tokens <= window) return t * (t + 1) / 2;
  const double w = window;
  return w * (w + 1) / 2 + (t - w) * w;  // the first `window` positions ramp up, the rest see `window` keys
}

}  // namespace

ForwardFlops prefill_flops(const Gemma4Config& config, int64_t prompt_tokens) {
  LMX_REQUIRE(InvalidArgument, prompt_tokens >= 0, "prefill_flops: negative prompt length {}", prompt_tokens);
  const double H = config.hidden_size, heads = config.num_attention_heads,
               P = config.hidden_size_per_layer_input;
  const double T = static_cast<double>(prompt_tokens);
  double macs_per_token = 0, attention_macs = 0;
  for (const Gemma4LayerSpec& s : config.layers) {
    const double q = heads * s.head_dim, kv = static_cast<double>(s.num_kv_heads) * s.head_dim;
    const double kv_projections = s.kv_donor >= 0 ? 0 : s.k_eq_v ? 1 : 2;
    macs_per_token += H * q + kv_projections * H * kv + q * H;  // q, k (and v), o
    macs_per_token += 3 * H * s.intermediate_size;              // gate, up, down
    if (s.moe)
      macs_per_token += H * config.num_experts +  // router
                        static_cast<double>(config.top_k_experts) * 3 * H * config.moe_intermediate_size;
    if (P > 0) macs_per_token += 2 * H * P;  // per_layer_input_gate, per_layer_projection
    // q·kᵀ and p·v: head_dim multiply-adds per head and attended key, each.
    attention_macs += 2 * heads * s.head_dim * attended_keys(prompt_tokens, s.sliding ? s.sliding_window : 0);
  }
  if (P > 0)
    macs_per_token += H * P * static_cast<double>(config.num_hidden_layers);  // per_layer_model_projection
  ForwardFlops f;
  f.projections = 2 * macs_per_token * T;
  f.attention = 2 * attention_macs;
  f.head = prompt_tokens > 0 ? 2 * H * config.vocab_size : 0;
  return f;
}

}  // namespace lmx
