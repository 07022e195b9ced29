// Synthetic Gemma 4 checkpoints: real shapes, seeded random weights, for benchmarks and tests.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace lmx {

struct QuantizeOptions;

// Names accepted by gemma4_preset_config.
std::vector<std::string> gemma4_preset_names();
// The config.json (Gemma4ForCausalLM text export) of a named preset with the released shapes and
// context lengths: gemma4-e2b, gemma4-e4b (131072), gemma4-26b-a4b, gemma4-31b (262144). Throws
// InvalidArgument for an unknown name.
nlohmann::json gemma4_preset_config(const std::string& name);

// A preset's config cut to its first `layers` layers (1 .. its num_hidden_layers), for quick benchmark
// proxies with the real per-layer shapes: the layer pattern's first layers with the last made full
// attention (as every Gemma 4 config ends), and no KV-sharing layers (a cut E-model would lack donors).
// Throws InvalidArgument for a count outside that range.
nlohmann::json gemma4_preset_config(const std::string& name, int layers);

// Writes config.json, generation_config.json and sharded bf16 safetensors (≤ shard_bytes each, with
// model.safetensors.index.json) holding seeded uniform random weights scaled so activations stay
// O(1): linear weights U(±sqrt(3 / fan_in)), norm weights and scalars near 1. Deterministic in seed.
// With `quantize`, matrices are MLX affine-quantized as `lmx convert` would (config gets the block;
// a quantization block in `config` is dropped otherwise). The config is checked
// (Gemma4Config::from_json) before anything is written, and the directory is written atomically
// (StagedDirectory): `out_dir` must be absent or empty unless `replace_existing`, which replaces it
// whole. With `tokenizer_dir`, its tokenizer files (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, chat_template.jinja) are copied in, tokenizer.json's vocabulary padded with
// "<synthetic_ID>" pieces up to the model's vocab_size so that every id the model emits decodes: the
// checkpoint can then be served and benchmarked on text. A tokenizer with an id at or past vocab_size is
// refused (FormatError).
void write_synthetic_gemma4(const nlohmann::json& config, const std::string& out_dir, uint64_t seed,
                            const QuantizeOptions* quantize = nullptr, size_t shard_bytes = size_t{2} << 30,
                            bool replace_existing = false, const std::string& tokenizer_dir = "");

}  // namespace lmx
