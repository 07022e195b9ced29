// A model directory read and checked as the model loaders read it, without building a model.
#include "lmx/model/model_files.h"

#include "lmx/model/gemma4_weights.h"

namespace lmx {

ModelFiles open_model_files(const std::string& dir) {
  ModelConfigFiles files = load_model_config(dir);
  Gemma4Config config = Gemma4Config::from_json(files.text, files.root, files.path);
  QuantizationConfig quantization = QuantizationConfig::from_json(files.root, files.path);
  Checkpoint checkpoint = Checkpoint::open_dir(dir);
  (void)Gemma4Weights::bind(checkpoint, config, quantization);
  return {std::move(files), std::move(config), std::move(quantization), std::move(checkpoint)};
}

}  // namespace lmx
