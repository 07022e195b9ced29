// Gemma 4 text model: the forward pass over a ragged batch of sequences, on the CPU op set.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/kv/kv_cache.h"
#include "lmx/model/gemma4_config.h"
#include "lmx/model/gemma4_weights.h"
#include "lmx/model/language_model.h"

#include <memory>
#include <span>
#include <string>

namespace lmx {

class Checkpoint;

class Gemma4Model final : public LanguageModel {
 public:
  // Loads config.json and the weights of a model directory (weights stay memory-mapped).
  static std::unique_ptr<Gemma4Model> load(const std::string& dir);

  const Gemma4Config& config() const override { return config_; }
  const Gemma4Weights& weights() const { return weights_; }
  const KvCache& kv_cache() const { return *kv_; }
  std::unique_ptr<Sequence> new_sequence() override { return kv_->new_sequence(); }
  size_t weight_bytes_per_token() const override;
  Tensor forward(std::span<const StepRow> rows, bool all_positions = false) override;
  std::string device_description() const override;

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
