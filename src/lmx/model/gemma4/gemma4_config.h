// Gemma 4 text-model configuration: parsed from config.json and resolved per layer.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace lmx {

// Everything one decoder layer needs to know about its own shape.
struct Gemma4LayerSpec {
  bool sliding = false;  // sliding_attention (true) or full_attention
  int head_dim = 0;      // of q, k and v
  int num_kv_heads = 0;
  int sliding_window = 0;     // 0 for full layers
  bool k_eq_v = false;        // no v_proj: v = v_norm(raw k_proj output)
  int kv_donor = -1;          // ≥ 0: a KV-sharing layer that attends over this earlier layer's cache
  int cache_index = -1;       // cache layer owned by this layer (or its donor's, when sharing)
  int intermediate_size = 0;  // dense MLP width (doubled on KV-shared layers with double-wide MLP)
  bool moe = false;           // has the MoE block beside the dense MLP
  double rope_theta = 10000.0;
  int rope_rotated_pairs = 0;  // frequency pairs that rotate (head_dim / 2 for default RoPE)
  double rope_factor = 1.0;    // inv_freq is divided by it (proportional RoPE's optional 'factor')
};

struct Gemma4Config {
  std::string model_type;  // "gemma4_text" or "gemma4" (multimodal wrapper)
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int global_head_dim = 0;
  int num_global_key_value_heads = 0;
  int sliding_window = 0;
  float rms_norm_eps = 1e-6f;
  std::optional<float> final_logit_softcapping;
  bool tie_word_embeddings = true;
  int hidden_size_per_layer_input = 0;  // PLE width P; 0 = no PLE
  int vocab_size_per_layer_input = 0;
  int num_kv_shared_layers = 0;
  bool attention_k_eq_v = false;
  bool use_double_wide_mlp = false;
  bool enable_moe_block = false;
  int num_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;
  std::optional<int> bos_token_id, pad_token_id;
  std::vector<int> eos_token_ids;  // config.json's eos_token_id: one id or a list
  // Context length: the most token positions a sequence may hold. config.json's
  // max_position_embeddings, or transformers' default 131072 when the key is absent (released
  // Gemma 4 configs set it: 131072 for E2B/E4B, 262144 for 26B-A4B and 31B). Always positive.
  int max_position_embeddings = 0;

  std::vector<Gemma4LayerSpec> layers;  // resolved, one per decoder layer
  int num_cache_layers = 0;             // layers that own a KV cache

  // Most decoder layers accepted (released models have ≤ 60); bounds the work done on a config
  // before its weights are checked against it.
  static constexpr int kMaxLayers = 1024;

  // Parses the text config (config.json's text_config, or the root of a text export). `root` is the
  // whole config.json (for model_type / architectures checks). Every key that changes the
  // computation is checked: wrong types and out-of-range values are ConfigError, values lmx does
  // not implement (another activation, attention biases, bidirectional attention, other RoPE
  // types) Unsupported; both name `source` and the key. Keys lmx does not read are metadata.
  static Gemma4Config from_json(const nlohmann::json& text, const nlohmann::json& root,
                                const std::string& source);
};

}  // namespace lmx
