// LanguageModel: one model family's forward on one backend with its paged KV cache, and the
// model-independent step executor — row validation, KV block reservation, input staging, graph capture
// and replay of decode steps, outputs back to the host. The engine and the CLI drive it.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/kv/kv_cache.h"
#include "lmx/kv/sequence.h"
#include "lmx/model/forward.h"
#include "lmx/model/model_description.h"
#include "lmx/ops/backend.h"
#include "lmx/ops/sampling_rows.h"

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace lmx {

// One row of a step: a sequence (created by the same model) and the tokens it brings (a prefill chunk or
// one decode token).
struct StepRow {
  Sequence* sequence = nullptr;
  std::span<const int32_t> tokens;
};

// One choice's next token sampled on the backend (LanguageModel::forward_sampled): which row of the step,
// its settings (params.row, edits_begin and edits_count are filled in by forward_sampled) and its logit
// edits (distinct ids).
struct SamplingEntry {
  int64_t row = 0;
  SamplingRowParams params;
  std::vector<LogitEdit> edits;
};

struct ModelOptions {
  // The KV codec; unset: f32 on the CPU, bf16 on CUDA.
  std::optional<KvCodec> kv_codec;
  // The sliding-window layers' codec; unset: kv_codec's.
  std::optional<KvCodec> kv_sliding_codec;
  // Model layers with codecs of their own (read_kv_config: a model directory's kv_config.json).
  std::map<int, KvCodec> kv_layer_codecs;
  int kv_block_tokens = 0;     // 0: kDefaultKvBlockTokens
  size_t kv_budget_bytes = 0;  // 0: KvCacheOptions' default share of the backend's free memory
  // The prefix cache's cap on bytes of blocks no sequence references (KvCacheOptions::prefix_cache_bytes):
  // unset, up to the whole budget; 0, no prefix cache.
  std::optional<size_t> kv_prefix_cache_bytes;
  // > 0: sequences hold bf16 KV below this many tokens, then convert to the codecs above
  // (KvCacheOptions::quant_start).
  int64_t kv_quant_start = 0;
  // Record decode steps (one token per row) as graphs and replay them (backends that support it), one per
  // row count and power-of-two bucket of the rows' longest KV length.
  bool use_graphs = true;
};

// Tokens per KV block unless --kv-block-tokens says otherwise (a multiple of the CUDA attention's 64-key
// tiles; docs/architecture.md).
constexpr int kDefaultKvBlockTokens = 64;

class LanguageModel {
 public:
  // Loads the model directory `dir` (its family chosen by config.json's model_type) onto `backend`.
  static std::unique_ptr<LanguageModel> load(const std::string& dir, std::unique_ptr<Backend> backend,
                                             const ModelOptions& options = {});
  LanguageModel(std::unique_ptr<ModelForward> forward, std::unique_ptr<Backend> backend,
                const ModelOptions& options);
  ~LanguageModel();

  const ModelDescription& description() const { return forward_->description(); }
  // A new empty sequence whose KV lives on this model's backend.
  std::unique_ptr<Sequence> new_sequence();
  // A new sequence sharing the first `length` positions of `source` (KvCache::fork).
  std::unique_ptr<Sequence> fork(Sequence& source, int64_t length);

  // Runs one step: appends each row's tokens to its sequence and returns host f32 logits — one row per
  // StepRow (its last token) by default, or one per token ([Σ tokens, V], rows in order) when
  // `all_positions`. A row's logits do not depend on the other rows of the step (invariant 2). Throws
  // InvalidArgument for an empty row, a token id outside [0, vocab_size), a sequence in two rows or made by
  // another model; KvPoolExhausted (nothing appended) when the KV blocks of the step do not fit. Under a KV
  // quantization start, a step's rows must share one side of it (KvCache::step_phase) and none may cross
  // it, except that one row alone that crosses it runs as two steps split there.
  Tensor forward(std::span<const StepRow> rows, bool all_positions = false);
  // One step like forward(), returning each row's greedy token (the first maximum of its last logits);
  // only the ids leave the backend.
  std::vector<int32_t> forward_argmax(std::span<const StepRow> rows);
  // Whether the backend samples (forward_sampled); the CPU does not: its logits are on the host already.
  bool samples_on_backend() const { return backend_->supports_sampling(); }
  // One step like forward(), then each entry samples its row's last logits on the backend
  // (sampling_rows.h); only the results leave it. InvalidArgument for an entry row outside the step, an
  // edit id outside the vocabulary or top_logprobs outside [0, kSampledTopMax], or a backend that does not
  // sample.
  std::vector<SampledRow> forward_sampled(std::span<const StepRow> rows,
                                          std::span<const SamplingEntry> entries);
  // Entry `entry`'s processed logits of the last forward_sampled step, on the host (for kNeedsHost).
  std::vector<float> sampled_logits(int64_t entry);

  // Bytes of weights one decode step of one row reads.
  size_t weight_bytes_per_token() const { return forward_->weight_bytes_per_token(); }
  double prefill_flops(int64_t tokens) const { return forward_->prefill_flops(tokens); }
  // "cpu (AVX3_SPR, 2 threads)", "cuda:0 (NVIDIA H200, ...)".
  std::string device_description() const { return backend_->description(); }
  Device device() const { return backend_->device(); }

  const KvCache& kv_cache() const { return *kv_; }
  // The cache itself, for the engine's scheduler (it reserves each step's blocks before forward()).
  KvCache& kv_cache() { return *kv_; }
  // Bytes of KV blocks `sequence` references.
  size_t kv_bytes(const Sequence& sequence) const;

  // Graph replays and captures so far; fused ops taken.
  int graph_replays() const { return graph_replays_; }
  int graph_captures() const { return graph_captures_; }
  const BackendCounters& backend_counters() const { return backend_->counters(); }

 private:
  struct Plan;
  Plan plan(std::span<const StepRow> rows, bool all_positions);
  // A lone row crossing the KV quantization start, split there (its head, then its tail); else nothing.
  std::optional<std::pair<StepRow, StepRow>> split_at_quant_start(std::span<const StepRow> rows) const;
  // Stages the plan's inputs on the backend and returns the step as the forward sees it.
  StepView stage(const Plan& plan);
  StepOutputs run(const Plan& plan);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelForward> forward_;
  std::unique_ptr<KvCache> kv_;
  bool use_graphs_;
  std::vector<std::byte> staging_;
  std::vector<std::byte> sampling_staging_;
  int64_t sampled_entries_ = 0;  // of the last forward_sampled step
  struct Graph {
    int graph = -1;       // the backend's id
    StepOutputs outputs;  // where its replays leave the logits and ids
  };
  struct GraphKey {
    int64_t rows = 0, kv_bucket = 0;
    int phase = 1;  // KvCache::step_phase: the start layout's steps read other kernels
    auto operator<=>(const GraphKey&) const = default;
  };
  std::map<GraphKey, Graph> graphs_;  // (rows, KV-length bucket) → its recorded decode step
  int graphs_generation_ = 0;
  int graph_replays_ = 0, graph_captures_ = 0;
};

}  // namespace lmx
