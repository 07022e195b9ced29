// Gemma 4 text-model configuration: parsed from config.json and resolved per layer.
#include "lmx/model/gemma4/gemma4_config.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>

namespace lmx {
namespace {

// Reads an int key with transformers' default when absent; null counts as absent.
int int_or(const nlohmann::json& obj, const char* key, int fallback, const std::string& source) {
  auto v = json_opt_int(obj, key, source);
  if (!v) return fallback;
  LMX_REQUIRE(ConfigError, *v >= 0 && *v <= (int64_t{1} << 31) - 1, "{}: '{}' = {} is out of range", source,
              key, *v);
  return static_cast<int>(*v);
}

void require_positive(int value, const char* key, const std::string& source) {
  LMX_REQUIRE(ConfigError, value > 0, "{}: '{}' must be positive, got {}", source, key, value);
}

// A finite number key (or `fallback` when absent or null).
double finite_or(const nlohmann::json& obj, const char* key, double fallback, const std::string& source) {
  const double v = json_opt_number(obj, key, source).value_or(fallback);
  LMX_REQUIRE(ConfigError, std::isfinite(v), "{}: '{}' must be a finite number, got {}", source, key, v);
  return v;
}

// A token id key: an integer in [0, 2^31), or nullopt when absent or null.
std::optional<int> token_id(const nlohmann::json& obj, const char* key, const std::string& source) {
  std::optional<int64_t> v = json_opt_int(obj, key, source);
  if (!v) return std::nullopt;
  LMX_REQUIRE(ConfigError, *v >= 0 && *v <= std::numeric_limits<int32_t>::max(),
              "{}: '{}' = {} is not a token id", source, key, *v);
  return static_cast<int>(*v);
}

struct RopeSpec {
  double theta;
  double partial_rotary_factor;
  bool proportional;
  double factor = 1.0;  // proportional RoPE divides inv_freq by it
};

RopeSpec rope_for(const nlohmann::json& text, const std::string& layer_type, const std::string& source) {
  RopeSpec spec = layer_type == "full_attention" ? RopeSpec{1e6, 0.25, true} : RopeSpec{1e4, 1.0, false};
  if (!text.contains("rope_parameters") || text["rope_parameters"].is_null()) return spec;
  const auto& all = text["rope_parameters"];
  LMX_REQUIRE(ConfigError, all.is_object(), "{}: 'rope_parameters' must be an object", source);
  if (!all.contains(layer_type)) return spec;
  const auto& p = all[layer_type];
  const std::string ctx = source + ": rope_parameters." + layer_type;
  LMX_REQUIRE(ConfigError, p.is_object(), "{} must be an object", ctx);
  std::string type = p.contains("rope_type") ? json_string(p, "rope_type", ctx) : "default";
  LMX_REQUIRE(ConfigError, type == "default" || type == "proportional",
              "{}: rope_type '{}' is not supported "
              "(expected default or proportional)",
              ctx, type);
  spec.proportional = type == "proportional";
  spec.theta = finite_or(p, "rope_theta", spec.theta, ctx);
  spec.partial_rotary_factor = spec.proportional ? finite_or(p, "partial_rotary_factor", 1.0, ctx) : 1.0;
  if (spec.proportional) spec.factor = finite_or(p, "factor", 1.0, ctx);
  LMX_REQUIRE(ConfigError, spec.factor > 0, "{}: factor {} must be positive", ctx, spec.factor);
  LMX_REQUIRE(ConfigError,
              spec.theta > 0 && spec.partial_rotary_factor > 0 && spec.partial_rotary_factor <= 1,
              "{}: rope_theta {} / partial_rotary_factor {} out of range", ctx, spec.theta,
              spec.partial_rotary_factor);
  return spec;
}

}  // namespace

Gemma4Config Gemma4Config::from_json(const nlohmann::json& text, const nlohmann::json& root,
                                     const std::string& source) {
  LMX_REQUIRE(ConfigError, text.is_object(), "{}: the text config is not a JSON object", source);
  Gemma4Config c;
  c.model_type = root.contains("model_type") && root["model_type"].is_string()
                     ? root["model_type"].get<std::string>()
                     : "";
  const std::string text_type = text.contains("model_type") && text["model_type"].is_string()
                                    ? text["model_type"].get<std::string>()
                                    : c.model_type;
  LMX_REQUIRE(
      Unsupported, c.model_type == "gemma4" || c.model_type == "gemma4_text" || text_type == "gemma4_text",
      "{}: unknown architecture (model_type '{}'); lmx runs gemma4 and gemma4_text", source, c.model_type);

  c.vocab_size = int_or(text, "vocab_size", 262144, source);
  c.hidden_size = int_or(text, "hidden_size", 2304, source);
  c.intermediate_size = int_or(text, "intermediate_size", 9216, source);
  c.num_hidden_layers = int_or(text, "num_hidden_layers", 30, source);
  c.num_attention_heads = int_or(text, "num_attention_heads", 8, source);
  c.num_key_value_heads = int_or(text, "num_key_value_heads", 4, source);
  c.head_dim = int_or(text, "head_dim", 256, source);
  c.sliding_window = int_or(text, "sliding_window", 512, source);
  c.rms_norm_eps = static_cast<float>(finite_or(text, "rms_norm_eps", 1e-6, source));
  if (auto cap = json_opt_number(text, "final_logit_softcapping", source)) {
    LMX_REQUIRE(ConfigError, *cap > 0 && std::isfinite(static_cast<float>(*cap)),
                "{}: 'final_logit_softcapping' must be positive and finite, or null, got {}", source, *cap);
    c.final_logit_softcapping = static_cast<float>(*cap);
  }
  c.tie_word_embeddings =
      json_bool(text, "tie_word_embeddings", source, json_bool(root, "tie_word_embeddings", source, true));
  c.hidden_size_per_layer_input = int_or(text, "hidden_size_per_layer_input", 256, source);
  c.vocab_size_per_layer_input = int_or(text, "vocab_size_per_layer_input", 262144, source);
  c.num_kv_shared_layers = int_or(text, "num_kv_shared_layers", 0, source);
  c.attention_k_eq_v = json_bool(text, "attention_k_eq_v", source, false);
  c.use_double_wide_mlp = json_bool(text, "use_double_wide_mlp", source, false);
  c.enable_moe_block = json_bool(text, "enable_moe_block", source, false);
  c.num_experts = int_or(text, "num_experts", 0, source);
  c.top_k_experts = int_or(text, "top_k_experts", 0, source);
  c.moe_intermediate_size = int_or(text, "moe_intermediate_size", 0, source);
  c.global_head_dim = int_or(text, "global_head_dim", 512, source);
  c.num_global_key_value_heads = int_or(text, "num_global_key_value_heads", 0, source);
  c.max_position_embeddings = int_or(text, "max_position_embeddings", 131072, source);
  c.bos_token_id = token_id(text, "bos_token_id", source);
  c.pad_token_id = token_id(text, "pad_token_id", source);
  if (text.contains("eos_token_id") && !text["eos_token_id"].is_null()) {
    const std::vector<int64_t> ids = json_int_list(text, "eos_token_id", source);
    for (int64_t id : ids)
      LMX_REQUIRE(ConfigError, id >= 0 && id <= std::numeric_limits<int32_t>::max(),
                  "{}: 'eos_token_id' holds {}, which is not a token id", source, id);
    for (int64_t id : ids) c.eos_token_ids.push_back(static_cast<int>(id));
  }
  // The computation lmx implements: GELU (tanh approximation), no attention biases.
  const std::string activation =
      json_opt_string(text, "hidden_activation", source).value_or("gelu_pytorch_tanh");
  LMX_REQUIRE(Unsupported, activation == "gelu_pytorch_tanh",
              "{}: 'hidden_activation' '{}' is not supported (Gemma 4 uses gelu_pytorch_tanh)", source,
              activation);
  LMX_REQUIRE(Unsupported, !json_bool(text, "attention_bias", source, false),
              "{}: 'attention_bias' true is not supported (Gemma 4 attention has no biases)", source);

  for (auto [value, key] : {std::pair{c.vocab_size, "vocab_size"},
                            {c.hidden_size, "hidden_size"},
                            {c.intermediate_size, "intermediate_size"},
                            {c.num_hidden_layers, "num_hidden_layers"},
                            {c.num_attention_heads, "num_attention_heads"},
                            {c.num_key_value_heads, "num_key_value_heads"},
                            {c.head_dim, "head_dim"},
                            {c.sliding_window, "sliding_window"},
                            {c.max_position_embeddings, "max_position_embeddings"}})
    require_positive(value, key, source);
  LMX_REQUIRE(ConfigError, c.num_hidden_layers <= kMaxLayers,
              "{}: 'num_hidden_layers' {} exceeds the limit of {}", source, c.num_hidden_layers, kMaxLayers);
  LMX_REQUIRE(ConfigError, c.head_dim % 2 == 0 && c.global_head_dim % 2 == 0, "{}: head dims must be even",
              source);
  LMX_REQUIRE(ConfigError, c.rms_norm_eps > 0, "{}: 'rms_norm_eps' must be positive", source);
  LMX_REQUIRE(ConfigError, c.hidden_size_per_layer_input == 0 || c.vocab_size_per_layer_input > 0,
              "{}: 'vocab_size_per_layer_input' must be positive with PLE", source);
  LMX_REQUIRE(ConfigError, c.num_kv_shared_layers < c.num_hidden_layers,
              "{}: 'num_kv_shared_layers' ({}) must be "
              "smaller than 'num_hidden_layers' ({})",
              source, c.num_kv_shared_layers, c.num_hidden_layers);
  if (c.enable_moe_block) {
    require_positive(c.num_experts, "num_experts", source);
    require_positive(c.top_k_experts, "top_k_experts", source);
    require_positive(c.moe_intermediate_size, "moe_intermediate_size", source);
    LMX_REQUIRE(ConfigError, c.top_k_experts <= c.num_experts,
                "{}: 'top_k_experts' ({}) exceeds 'num_experts' ({})", source, c.top_k_experts,
                c.num_experts);
  }

  // Layer types: explicit, or transformers' default 5:1 pattern; the last layer is always full.
  std::vector<std::string> types;
  if (text.contains("layer_types") && !text["layer_types"].is_null()) {
    const auto& lt = text["layer_types"];
    LMX_REQUIRE(ConfigError, lt.is_array() && lt.size() == static_cast<size_t>(c.num_hidden_layers),
                "{}: 'layer_types' must be a list of {} strings", source, c.num_hidden_layers);
    for (const auto& t : lt) {
      LMX_REQUIRE(ConfigError, t.is_string() && (t == "sliding_attention" || t == "full_attention"),
                  "{}: 'layer_types' entry {} is not sliding_attention or full_attention", source, t.dump());
      types.push_back(t.get<std::string>());
    }
  } else {
    for (int i = 0; i < c.num_hidden_layers; ++i)
      types.push_back((i + 1) % 6 ? "sliding_attention" : "full_attention");
  }
  types.back() = "full_attention";

  // Full-layer overrides: per_layer_config {"<layer>": {"head_dim", "num_key_value_heads"}}, or the older
  // global_head_dim / num_global_key_value_heads (the latter only with attention_k_eq_v).
  // Keys are layer indices as strings, zero-padded by transformers ("04"); parsed as integers.
  std::map<int, const nlohmann::json*> per_layer;
  const bool has_per_layer = text.contains("per_layer_config") && !text["per_layer_config"].is_null();
  if (has_per_layer) {
    const auto& plc = text["per_layer_config"];
    LMX_REQUIRE(ConfigError, plc.is_object(), "{}: 'per_layer_config' must be an object keyed by layer index",
                source);
    for (const auto& [key, value] : plc.items()) {
      bool numeric =
          !key.empty() && key.size() < 8 && key.find_first_not_of("0123456789") == std::string::npos;
      int index = numeric ? std::stoi(key) : -1;
      LMX_REQUIRE(ConfigError, numeric && index < c.num_hidden_layers && value.is_object(),
                  "{}: 'per_layer_config' key '{}' is not a layer index below {} with an object value",
                  source, key, c.num_hidden_layers);
      per_layer[index] = &value;
    }
  }
  LMX_REQUIRE(Unsupported,
              !text.contains("use_bidirectional_attention") || text["use_bidirectional_attention"].is_null(),
              "{}: 'use_bidirectional_attention' (embedding-style, non-causal) is not supported", source);

  const int first_shared = c.num_hidden_layers - c.num_kv_shared_layers;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    Gemma4LayerSpec s;
    s.sliding = types[static_cast<size_t>(i)] == "sliding_attention";
    s.head_dim = c.head_dim;
    s.num_kv_heads = c.num_key_value_heads;
    if (has_per_layer) {
      if (auto it = per_layer.find(i); it != per_layer.end()) {
        const std::string ctx = source + ": per_layer_config." + std::to_string(i);
        s.head_dim = int_or(*it->second, "head_dim", s.head_dim, ctx);
        s.num_kv_heads = int_or(*it->second, "num_key_value_heads", s.num_kv_heads, ctx);
      }
    } else if (!s.sliding) {
      if (c.global_head_dim > 0) s.head_dim = c.global_head_dim;
      if (c.attention_k_eq_v && c.num_global_key_value_heads > 0)
        s.num_kv_heads = c.num_global_key_value_heads;
    }
    LMX_REQUIRE(ConfigError,
                s.head_dim > 0 && s.head_dim % 2 == 0 && s.num_kv_heads > 0 &&
                    c.num_attention_heads % s.num_kv_heads == 0,
                "{}: layer {} has head_dim {} and {} KV heads for {} query heads", source, i, s.head_dim,
                s.num_kv_heads, c.num_attention_heads);
    s.sliding_window = s.sliding ? c.sliding_window : 0;
    s.k_eq_v = c.attention_k_eq_v && !s.sliding;
    s.moe = c.enable_moe_block;
    s.intermediate_size = c.intermediate_size;
    if (i >= first_shared) {
      // KV sharing: attend over the last earlier non-shared layer of the same type.
      for (int j = first_shared - 1; j >= 0; --j)
        if (types[static_cast<size_t>(j)] == types[static_cast<size_t>(i)]) {
          s.kv_donor = j;
          break;
        }
      LMX_REQUIRE(ConfigError, s.kv_donor >= 0,
                  "{}: KV-shared layer {} ({}) has no earlier layer of its type to share", source, i,
                  types[static_cast<size_t>(i)]);
      if (c.use_double_wide_mlp) s.intermediate_size *= 2;
    }
    RopeSpec rope = rope_for(text, types[static_cast<size_t>(i)], source);
    s.rope_theta = rope.theta;
    s.rope_rotated_pairs =
        static_cast<int>(rope.partial_rotary_factor * s.head_dim / 2);  // Python int(f·d // 2)
    s.rope_factor = rope.factor;
    c.layers.push_back(s);
  }
  for (auto& s : c.layers) {
    if (s.kv_donor < 0) {
      s.cache_index = c.num_cache_layers++;
    } else {
      const auto& donor = c.layers[static_cast<size_t>(s.kv_donor)];
      LMX_REQUIRE(ConfigError, donor.head_dim == s.head_dim && donor.num_kv_heads == s.num_kv_heads,
                  "{}: KV-shared layer and its donor {} differ in head shape", source, s.kv_donor);
      s.cache_index = donor.cache_index;
    }
  }
  return c;
}

}  // namespace lmx
