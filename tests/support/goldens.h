// The transformers goldens of a reference model directory (goldens.safetensors, written by
// tools/make_reference_models.py and tools/make_quantized_goldens.py).
#pragma once

#include "lmx/core/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lmx::test {

struct Golden {
  std::vector<int32_t> prompt;
  Tensor logits;  // [T, V] f32, every prompt position
  std::vector<int32_t> greedy;
};

// Every prompt_i / logits_i / greedy_i triple of dir/goldens.safetensors, in order.
std::vector<Golden> load_goldens(const std::string& dir);

// A tiny reference model's directory (a name under tests/data/models) or a path from the source root.
std::string reference_model_dir(const std::string& name);

}  // namespace lmx::test
