// Tiny Gemma 4 configs for tests (the three reference shapes: E2B-like, 26B-like MoE, 31B-like),
// written as synthetic checkpoints so invariant tests need no golden files.
#pragma once

#include "lmx/core/device.h"
#include "lmx/model/language_model.h"

#include <nlohmann/json.hpp>

#include <memory>

#include <string>
#include <vector>

namespace lmx::test {

// Names: "e2b" (PLE, KV sharing, double-wide MLP, one KV head), "moe" (MoE, k_eq_v, separate
// global KV heads), "dense" (k_eq_v, no softcapping); "e2b-q4" and "moe-q4" are the same shapes
// MLX-quantized at 4 bits, group 32 (modules whose input is not a multiple of 32 stay dense).
std::vector<std::string> tiny_config_names();
// "ple-q4": E2B's layout at widths the batch-1 CUDA kernels take whole (hidden 256, per-layer inputs 128,
// 4-bit group 32), so that its decode steps run the fused per-layer-input kernel
// (cuda::per_layer_input_step). GPU tests only.
std::vector<std::string> gpu_tiny_config_names();
nlohmann::json tiny_config(const std::string& name);
// Writes the synthetic checkpoint once per process into a temp dir and returns its path.
std::string tiny_model_dir(const std::string& name);

// The model in `dir` on `device` (the CPU by default) with `options`.
std::unique_ptr<LanguageModel> load_model(const std::string& dir, const Device& device = Device::cpu(),
                                          const ModelOptions& options = {});

}  // namespace lmx::test
