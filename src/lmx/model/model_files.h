// A model directory read and checked as the model loaders read it, without building a model.
#pragma once

#include "lmx/io/model_dir.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/gemma4_config.h"
#include "lmx/model/quantization_config.h"

#include <string>

namespace lmx {

struct ModelFiles {
  ModelConfigFiles config_files;
  Gemma4Config config;
  QuantizationConfig quantization;
  Checkpoint checkpoint;
};

// Reads dir/config.json, its quantization block and the weights, and binds every weight as
// Gemma4Model::load does (shapes, dtypes, quantized parts and unexpected text-model tensors
// checked). Throws the lmx::Error loading the model would throw. Weights stay mapped, not copied
// (MLX dense expert stacks are joined once, as loading does).
ModelFiles open_model_files(const std::string& dir);

}  // namespace lmx
