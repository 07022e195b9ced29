// The interface the engine and CLI drive, implemented by each backend's model (Gemma4Model on the
// CPU, Gemma4CudaModel on CUDA): sequences, one forward step over a ragged batch, and facts about
// the model.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/kv/sequence.h"
#include "lmx/model/gemma4_config.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

// One row of a step: a sequence (created by the same model) and the tokens it brings (a prefill
// chunk or one decode token).
struct StepRow {
  Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  virtual const Gemma4Config& config() const = 0;
  // A new empty sequence whose state lives on this model's backend.
  virtual std::unique_ptr<Sequence> new_sequence() = 0;
  // Runs one step: appends each row's tokens to its sequence and returns host f32 logits — one row
  // per StepRow (its last token) by default, or one per token ([Σ tokens, V], rows in order) when
  // `all_positions`. A row's logits do not depend on the other rows of the step (invariant 2).
  // Throws InvalidArgument for an empty row, a token id outside [0, vocab_size), or a sequence
  // that another model created.
  virtual Tensor forward(std::span<const StepRow> rows, bool all_positions = false) = 0;
  // One step like forward(), returning each row's greedy token (the first maximum of its last
  // logits). Backends override it to skip copying logits to the host.
  virtual std::vector<int32_t> forward_argmax(std::span<const StepRow> rows);
  // Bytes of weights one decode step of one row reads (every matrix once, one embedding row each).
  virtual size_t weight_bytes_per_token() const = 0;
  // "cpu (AVX3_SPR, 2 threads)", "cuda:0 (NVIDIA H200, ...)".
  virtual std::string device_description() const = 0;
};

}  // namespace lmx
