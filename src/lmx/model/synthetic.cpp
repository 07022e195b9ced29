// Synthetic Gemma 4 checkpoints: real shapes, seeded random weights, for benchmarks and tests.
#include "lmx/model/synthetic.h"

#include "lmx/core/error.h"
#include "lmx/core/half.h"
#include "lmx/core/thread_pool.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/io/json_input.h"
#include "lmx/io/output_file.h"
#include "lmx/io/sharded_writer.h"
#include "lmx/io/staged_directory.h"
#include "lmx/model/convert.h"
#include "lmx/model/gemma4/gemma4_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>

namespace lmx {
namespace {

nlohmann::json layer_types(int layers, int period) {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < layers; ++i) types.push_back((i + 1) % period ? "sliding_attention" : "full_attention");
  types.back() = "full_attention";
  return types;
}

nlohmann::json base_config() {
  return {
      {"architectures", {"Gemma4ForCausalLM"}},
      {"model_type", "gemma4_text"},
      {"vocab_size", 262144},
      {"head_dim", 256},
      {"global_head_dim", 512},
      {"rms_norm_eps", 1e-6},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"final_logit_softcapping", 30.0},
      {"tie_word_embeddings", true},
      {"bos_token_id", 2},
      {"eos_token_id", 1},
      {"pad_token_id", 0},
      {"max_position_embeddings", 131072},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention",
         {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
      {"attention_k_eq_v", false},
      {"num_kv_shared_layers", 0},
      {"hidden_size_per_layer_input", 0},
      {"vocab_size_per_layer_input", 262144},
      {"use_double_wide_mlp", false},
      {"enable_moe_block", false},
  };
}

// xorshift64* stream: fast, deterministic, good enough for benchmark weights.
struct Random {
  uint64_t state;
  explicit Random(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
    if (!state) state = 1;
  }
  float uniform() {  // in [-1, 1)
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    uint64_t r = state * 2685821657736338717ull;
    return static_cast<float>(static_cast<int64_t>(r) >> 40) * (1.0f / 8388608.0f);
  }
};

struct TensorPlan {
  std::string name;
  Shape shape;
  float center;  // 0 for matrices, ~1 for norms and scalars
  float spread;
};

std::vector<TensorPlan> plan_tensors(const Gemma4Config& c) {
  std::vector<TensorPlan> plan;
  const int64_t H = c.hidden_size, P = c.hidden_size_per_layer_input, L = c.num_hidden_layers;
  auto matrix = [&](const std::string& name, Shape shape) {
    float fan_in = static_cast<float>(shape.back());
    plan.push_back({name, std::move(shape), 0.0f, std::sqrt(3.0f / fan_in)});
  };
  auto norm = [&](const std::string& name, int64_t n) { plan.push_back({name, {n}, 1.0f, 0.1f}); };
  plan.push_back(
      {"model.embed_tokens.weight", {c.vocab_size, H}, 0.0f, 1.0f / std::sqrt(static_cast<float>(H))});
  if (P > 0) {
    plan.push_back(
        {"model.embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P}, 0.0f, 0.05f});
    matrix("model.per_layer_model_projection.weight", {L * P, H});
    norm("model.per_layer_projection_norm.weight", P);
  }
  for (int i = 0; i < L; ++i) {
    const auto& s = c.layers[static_cast<size_t>(i)];
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const int64_t D = s.head_dim, Hq = c.num_attention_heads, Hkv = s.num_kv_heads, I = s.intermediate_size;
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      norm(l + n + ".weight", H);
    matrix(l + "self_attn.q_proj.weight", {Hq * D, H});
    norm(l + "self_attn.q_norm.weight", D);
    if (s.kv_donor < 0) {
      matrix(l + "self_attn.k_proj.weight", {Hkv * D, H});
      norm(l + "self_attn.k_norm.weight", D);
      if (!s.k_eq_v) matrix(l + "self_attn.v_proj.weight", {Hkv * D, H});
    }
    matrix(l + "self_attn.o_proj.weight", {H, Hq * D});
    matrix(l + "mlp.gate_proj.weight", {I, H});
    matrix(l + "mlp.up_proj.weight", {I, H});
    matrix(l + "mlp.down_proj.weight", {H, I});
    if (s.moe) {
      const int64_t E = c.num_experts, EI = c.moe_intermediate_size;
      matrix(l + "router.proj.weight", {E, H});
      norm(l + "router.scale", H);
      norm(l + "router.per_expert_scale", E);
      matrix(l + "experts.gate_up_proj", {E, 2 * EI, H});
      matrix(l + "experts.down_proj", {E, H, EI});
      for (const char* n :
           {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"})
        norm(l + n + ".weight", H);
    }
    if (P > 0) {
      matrix(l + "per_layer_input_gate.weight", {P, H});
      matrix(l + "per_layer_projection.weight", {H, P});
      norm(l + "post_per_layer_input_norm.weight", H);
    }
    plan.push_back({l + "layer_scalar", {1}, 1.0f, 0.0f});
  }
  norm("model.norm.weight", H);
  return plan;
}

Tensor fill(const TensorPlan& p, uint64_t seed) {
  Tensor t = Tensor::zeros(p.shape, DType::kBF16);
  auto* out = static_cast<uint16_t*>(t.raw_data());
  const int64_t n = t.numel();
  constexpr int64_t kBlock = 1 << 16;
  parallel_for((n + kBlock - 1) / kBlock, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      Random rng(seed ^ (static_cast<uint64_t>(b) * 0xD1B54A32D192ED03ull));
      for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i)
        out[i] = f32_to_bf16(p.center + p.spread * rng.uniform());
    }
  });
  return t;
}

// Copies a tokenizer directory's files into `out_dir`, with tokenizer.json's vocabulary padded by
// "<synthetic_ID>" entries so that every id below `vocab_size` decodes (a random model emits any id).
void write_padded_tokenizer(const std::string& from_dir, int64_t vocab_size, const std::string& out_dir) {
  const std::string source = join_path(from_dir, "tokenizer.json");
  nlohmann::ordered_json tokenizer =
      parse_ordered_json(read_input_file(source, InputKind::kTokenizer), source);
  LMX_REQUIRE(FormatError,
              tokenizer.is_object() && tokenizer.contains("model") && tokenizer["model"].is_object() &&
                  tokenizer["model"].contains("vocab") && tokenizer["model"]["vocab"].is_object(),
              "{}: --tokenizer needs a BPE or WordLevel tokenizer.json (model.vocab an object)", source);
  std::vector<bool> used(static_cast<size_t>(vocab_size), false);
  auto mark = [&](const nlohmann::ordered_json& id) {
    LMX_REQUIRE(FormatError, id.is_number_integer(), "{}: a token id is not an integer", source);
    const int64_t v = id.get<int64_t>();
    LMX_REQUIRE(FormatError, v >= 0 && v < vocab_size,
                "{}: token id {} is outside the model's vocabulary of {}", source, v, vocab_size);
    used[static_cast<size_t>(v)] = true;
  };
  nlohmann::ordered_json& vocab = tokenizer["model"]["vocab"];
  for (const auto& [piece, id] : vocab.items()) mark(id);
  if (tokenizer.contains("added_tokens") && tokenizer["added_tokens"].is_array())
    for (const auto& added : tokenizer["added_tokens"]) mark(added.value("id", nlohmann::ordered_json()));
  for (int64_t id = 0; id < vocab_size; ++id)
    if (!used[static_cast<size_t>(id)]) vocab[fmt::format("<synthetic_{}>", id)] = id;
  write_text_file(join_path(out_dir, "tokenizer.json"), tokenizer.dump() + "\n");
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
    const std::string path = join_path(from_dir, name);
    if (auto text = read_input_file_if_exists(path, InputKind::kConfig))
      write_text_file(join_path(out_dir, name), *text);
  }
}

}  // namespace

std::vector<std::string> gemma4_preset_names() {
  return {"gemma4-e2b", "gemma4-e4b", "gemma4-26b-a4b", "gemma4-31b"};
}

nlohmann::json gemma4_preset_config(const std::string& name) {
  nlohmann::json c = base_config();
  if (name == "gemma4-e2b") {
    c.update({{"hidden_size", 1536},
              {"num_hidden_layers", 35},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 1},
              {"intermediate_size", 6144},
              {"sliding_window", 512},
              {"num_kv_shared_layers", 20},
              {"hidden_size_per_layer_input", 256},
              {"use_double_wide_mlp", true}});
    c["layer_types"] = layer_types(35, 5);
  } else if (name == "gemma4-e4b") {
    c.update({{"hidden_size", 2560},
              {"num_hidden_layers", 42},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 2},
              {"intermediate_size", 10240},
              {"sliding_window", 512},
              {"num_kv_shared_layers", 18},
              {"hidden_size_per_layer_input", 256}});
    c["layer_types"] = layer_types(42, 6);
  } else if (name == "gemma4-26b-a4b") {
    c.update({{"hidden_size", 2816},
              {"num_hidden_layers", 30},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 8},
              {"num_global_key_value_heads", 2},
              {"attention_k_eq_v", true},
              {"intermediate_size", 2112},
              {"sliding_window", 1024},
              {"enable_moe_block", true},
              {"num_experts", 128},
              {"top_k_experts", 8},
              {"moe_intermediate_size", 704},
              {"max_position_embeddings", 262144}});
    c["layer_types"] = layer_types(30, 6);
  } else if (name == "gemma4-31b") {
    c.update({{"hidden_size", 5376},
              {"num_hidden_layers", 60},
              {"num_attention_heads", 32},
              {"num_key_value_heads", 16},
              {"num_global_key_value_heads", 4},
              {"attention_k_eq_v", true},
              {"intermediate_size", 21504},
              {"sliding_window", 1024},
              {"max_position_embeddings", 262144}});
    c["layer_types"] = layer_types(60, 6);
  } else {
    std::string known;
    for (const auto& n : gemma4_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw InvalidArgument(fmt::format("unknown preset '{}' (known: {})", name, known));
  }
  return c;
}

nlohmann::json gemma4_preset_config(const std::string& name, int layers) {
  nlohmann::json c = gemma4_preset_config(name);
  const int all = c["num_hidden_layers"].get<int>();
  LMX_REQUIRE(InvalidArgument, layers >= 1 && layers <= all, "preset '{}' has {} layers; cannot keep {}",
              name, all, layers);
  if (layers == all) return c;
  c["num_hidden_layers"] = layers;
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < layers; ++i) types.push_back(c["layer_types"][static_cast<size_t>(i)]);
  types.back() = "full_attention";
  c["layer_types"] = types;
  c["num_kv_shared_layers"] = 0;
  return c;
}

void write_synthetic_gemma4(const nlohmann::json& config_json, const std::string& out_dir, uint64_t seed,
                            const QuantizeOptions* quantize, size_t shard_bytes, bool replace_existing,
                            const std::string& tokenizer_dir) {
  Gemma4Config config = Gemma4Config::from_json(config_json, config_json, "synthetic config");
  StagedDirectory staged(out_dir, replace_existing);
  if (!tokenizer_dir.empty()) write_padded_tokenizer(tokenizer_dir, config.vocab_size, staged.path());
  nlohmann::json generation = {{"bos_token_id", 2}, {"eos_token_id", {1, 106}}, {"pad_token_id", 0}};
  write_text_file(join_path(staged.path(), "generation_config.json"), generation.dump(2) + "\n");

  ShardedWriter shards(staged.path(), shard_bytes);
  std::optional<QuantizingWriter> quantizer;
  if (quantize) quantizer.emplace(shards, *quantize);
  const std::vector<TensorPlan> plan = plan_tensors(config);
  for (size_t i = 0; i < plan.size(); ++i) {
    Tensor t = fill(plan[i], seed * 1000003ull + i);
    if (quantizer)
      quantizer->add(plan[i].name, t);
    else
      shards.add(plan[i].name, std::move(t));
  }
  shards.finish();
  // The weights are bf16 unless quantized here: a quantization block of the input does not apply.
  nlohmann::json written = config_json;
  written.erase("quantization");
  written.erase("quantization_config");
  if (quantizer) {
    written["quantization"] = quantizer->quantization_block();
    written["quantization_config"] = written["quantization"];
  }
  write_text_file(join_path(staged.path(), "config.json"), written.dump(2) + "\n");
  staged.commit();
}

}  // namespace lmx
