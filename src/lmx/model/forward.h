// The interface between a model family's forward pass (written once against the Backend op set) and the
// model-independent step executor (LanguageModel): what one step looks like to the family, and what the
// family provides.
#pragma once

#include "lmx/kv/kv_layout.h"
#include "lmx/model/model_description.h"
#include "lmx/ops/backend.h"
#include "lmx/ops/paged_kv.h"

#include <cstdint>
#include <span>
#include <vector>

namespace lmx {

// Backend::workspace / stage slots: the executor stages a step's inputs in slot kStepInputsSlot and keeps
// backend sampling's inputs, processed rows and results in the next three; a family numbers its own
// buffers from kFirstFamilySlot.
constexpr int kStepInputsSlot = 0;
constexpr int kSamplingInputsSlot = 1;
constexpr int kSamplingProcessedSlot = 2;
constexpr int kSampledSlot = 3;
constexpr int kFirstFamilySlot = 4;

// One engine step as a family forward sees it. Every tensor lives on the backend; the step's inputs sit
// at the same addresses in every step of one graph bucket, so a forward recorded once can be replayed.
struct StepView {
  Backend* backend = nullptr;
  int64_t tokens = 0, rows = 0;
  bool all_positions = false;       // logits for every token, else for each row's last token
  int64_t out_rows = 0;             // tokens when all_positions, else rows
  std::vector<int64_t> last_index;  // host: each row's last token's index in the step
  Tensor ids, positions;            // [tokens] int32
  std::vector<Tensor> extras;       // the family's per-token int32 arrays (ModelForward::extra_token_arrays)
  PagedKvStep kv;                   // the rows' KV view
  std::vector<PagedKvTables> kv_tables;  // per cache group
  const KvLayout* kv_layout = nullptr;

  // The KV view of the cache layer model layer `layer` appends to or reads.
  PagedKvLayer kv_layer(int layer) const;
};

// What a step leaves behind for the executor: logits [out_rows, vocab] f32 and their argmax [out_rows]
// int32, as backend tensors valid until the next step.
struct StepOutputs {
  Tensor logits, argmax;
};

// A model family's math, config and weights, stated once for every backend.
class ModelForward {
 public:
  virtual ~ModelForward() = default;
  virtual const ModelDescription& description() const = 0;
  // Prepares the weights for `backend` (uploads, stacking); called once, before any step.
  virtual void prepare(Backend& backend) = 0;
  // Per-token int32 arrays the family stages beside ids and positions, filled on the host every step.
  virtual int extra_token_arrays() const { return 0; }
  virtual void fill_extra(int index, std::span<const int32_t> ids, std::span<int32_t> out) const {}
  // Enqueues one step on the backend. Enqueue only: no host reads of backend memory, no waiting, the same
  // ops for the same step shape (graph capture records it).
  virtual StepOutputs enqueue(const StepView& step) = 0;
  // Bytes of weights one decode step of one row reads (every matrix once, one embedding row each).
  virtual size_t weight_bytes_per_token() const = 0;
  // The matmul and attention FLOPs of a prefill of `tokens` tokens.
  virtual double prefill_flops(int64_t tokens) const = 0;
};

}  // namespace lmx
