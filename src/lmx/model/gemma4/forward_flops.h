// The floating-point work of a Gemma 4 prefill, counted from the config's shapes: the yardstick that
// turns a measured prefill rate into TFLOP/s and a share of a tensor-core peak (`lmx bench`,
// docs/benchmarks.md). One multiply-add counts as 2 FLOPs; norms, activations, RoPE, softmax and other
// elementwise work are not counted.
#pragma once

#include "lmx/model/gemma4/gemma4_config.h"

#include <cstdint>

namespace lmx {

struct ForwardFlops {
  // Weight matmuls of every prompt token: q/k/v/o (no k/v on KV-sharing layers, no v where k = v), the dense
  // MLP, the MoE router and the top-k experts' gate/up/down, and the PLE projections.
  double projections = 0;
  // q·kᵀ and p·v over the keys each token attends to: itself and the tokens before it, at most the
  // sliding window on sliding layers.
  double attention = 0;
  // The output head on the prompt's last token (the only logits a prefill makes).
  double head = 0;

  double total() const { return projections + attention + head; }
};

// The FLOPs of prefilling `prompt_tokens` tokens into an empty sequence in one step. InvalidArgument for a
// negative count.
ForwardFlops prefill_flops(const Gemma4Config& config, int64_t prompt_tokens);

}  // namespace lmx
