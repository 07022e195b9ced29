// Conversion of dense checkpoints to MLX affine-quantized ones (lmx convert, lmx synth --quantize).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace lmx {

class ShardedWriter;
class Tensor;

struct QuantizeOptions {
  int bits = 4;
  int group_size = 64;
  std::vector<std::string> keep_dense;                  // glob patterns (fnmatch) of module paths left unquantized
  std::vector<std::pair<std::string, int>> bits_for;    // glob pattern → bits (the first match wins)
};

// Parses "BITS[:GROUP]" (e.g. "4", "4:32"); InvalidArgument for anything else.
QuantizeOptions parse_quantize_spec(const std::string& spec);
// Parses "PATTERN=BITS"; InvalidArgument for anything else.
std::pair<std::string, int> parse_bits_for(const std::string& spec);

// Receives a checkpoint's tensors one by one and writes them in MLX layout: quantizable matrices
// (projections, embeddings, expert stacks) become .weight (U32 codes) / .scales / .biases with bf16
// scales; HF expert stacks (experts.gate_up_proj / down_proj) become experts.switch_glu.*; every other
// float tensor is stored as bf16. Modules whose input dim is not a multiple of the group stay dense.
class QuantizingWriter {
 public:
  QuantizingWriter(ShardedWriter& out, QuantizeOptions options);
  void add(const std::string& name, const Tensor& tensor);
  // The config.json "quantization" block for what was written (default + per-module overrides).
  nlohmann::json quantization_block() const;

 private:
  void add_matrix(const std::string& module, const Tensor& weight);
  ShardedWriter& out_;
  QuantizeOptions options_;
  nlohmann::json overrides_ = nlohmann::json::object();
};

// Reads the checkpoint in `in_dir` (bf16/f32, HF or MLX naming, not already quantized) and writes an
// MLX-format quantized checkpoint to `out_dir`: weights, config.json with the quantization block
// (also as quantization_config), and the tokenizer, template and generation files copied.
// The source is first loaded and checked as the model loaders would (open_model_family); nothing
// is written when that fails. The output is written atomically (StagedDirectory): `out_dir` must
// be absent or empty unless `replace_existing`, which replaces it whole, and it may not be or
// contain `in_dir`.
void convert_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& options,
                        bool replace_existing = false);

}  // namespace lmx
