// A timing-only knob for finding where a CUDA decode step goes: LMX_DEBUG_SKIP=part[,part...] makes the
// CUDA model leave those parts out of its single-token steps (decode), so that same-run A/Bs against a plain
// run measure each part's marginal cost inside the captured graph (docs/cuda.md, "Profiling"). The logits
// and tokens of such a run are meaningless; the model says so on stderr when the knob is set.
#pragma once

#include <string>
#include <string_view>

namespace lmx {

struct DecodeSkips {
  bool residual = false;   // rn: the residual steps (residual_norm)
  bool qkv = false;        // qkv: the q/k/v projections
  bool inputs = false;     // inputs: attention_inputs (per-head norms, RoPE, cache append)
  bool attention = false;  // attention: the attention kernels
  bool o_proj = false;     // o: the attention output projection
  bool mlp = false;        // mlp: the dense MLP (gate/up and down projections)
  bool experts = false;    // experts: the MoE routing and experts
  bool ple = false;        // ple: each layer's per-layer-input block (gate, projection, its residual step)
  bool layers = false;     // layers: every kernel of every layer

  bool any() const {
    return residual || qkv || inputs || attention || o_proj || mlp || experts || ple || layers;
  }
  // Parses a comma-separated list of the part names above (empty: nothing skipped); InvalidArgument naming
  // the first unknown part.
  static DecodeSkips parse(std::string_view list);
  // parse(LMX_DEBUG_SKIP), or nothing skipped when it is unset.
  static DecodeSkips from_env();
  // The parts as parse() spells them, comma-separated.
  std::string describe() const;
};

}  // namespace lmx
