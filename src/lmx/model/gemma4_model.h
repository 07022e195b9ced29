// Gemma 4 text model: the forward pass over a ragged batch of sequences, on the CPU op set.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/kv/kv_cache.h"
#include "lmx/model/gemma4_config.h"
#include "lmx/model/gemma4_weights.h"

#include <memory>
#include <span>
#include <string>

namespace lmx {

class Checkpoint;

// One row of a step: a sequence's KV and the tokens it brings (prefill chunk or one decode token).
struct StepRow {
  SequenceKv* kv = nullptr;
  std::span<const int32_t> tokens;
};

class Gemma4Model {
 public:
  // Loads config.json and the weights of a model directory (weights stay memory-mapped).
  static std::unique_ptr<Gemma4Model> load(const std::string& dir);

  const Gemma4Config& config() const { return config_; }
  const KvCache& kv_cache() const { return *kv_; }
  std::unique_ptr<SequenceKv> new_sequence() const { return kv_->new_sequence(); }
  // Bytes of weights one decode step of one row reads (every matrix once, one embedding row each).
  size_t weight_bytes_per_token() const;

  // Runs one step: appends each row's tokens to its sequence and returns f32 logits — one row per
  // StepRow (its last token) by default, or one per token ([Σ tokens, V], rows in order) when
  // `all_positions`. A row's logits do not depend on the other rows of the step (invariant 2).
  // Throws InvalidArgument for an empty row or a token id outside [0, vocab_size).
  Tensor forward(std::span<const StepRow> rows, bool all_positions = false);

 private:
  Gemma4Model(Gemma4Config config, std::shared_ptr<Checkpoint> checkpoint, const QuantizationConfig& quantization);
  Tensor per_layer_inputs(const Tensor& embeds, std::span<const int32_t> ids) const;
  void attention_block(int layer, std::span<const KvRow> rows, const Tensor& x, Tensor& out);
  Tensor mlp_block(int layer, const Tensor& x) const;

  Gemma4Config config_;
  std::shared_ptr<Checkpoint> checkpoint_;  // keeps the mapped weights alive
  Gemma4Weights weights_;
  std::unique_ptr<KvCache> kv_;
  std::vector<std::vector<float>> rope_inv_freq_;  // per layer
};

}  // namespace lmx
