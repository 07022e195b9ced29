// Fitted KV codecs: a codec per cache layer, chosen from measurements on calibration text so that the cache
// meets a byte budget per token with the least loss of quality.
//
// Quality is the mean KL divergence of the next-token distributions against the f32 cache, teacher-forced
// one token per step (every prediction attends over stored KV). On the models measured, the KL of quantizing
// several layers is close to the sum of each layer's KL alone (docs/benchmarks.md), so the fit measures each
// (cache layer, candidate codec) alone — every other layer f32 — and picks one candidate per layer minimizing
// the summed KL under the budget (a multiple-choice knapsack, solved exactly by dynamic programming over
// bytes), then measures the chosen assignment as a whole. Layers whose KV other layers share, and layers the
// model leans on, get the bits; the rest give them up.
#pragma once

#include "lmx/kv/kv_codec.h"
#include "lmx/kv/kv_config.h"
#include "lmx/kv/kv_layout.h"

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

class LanguageModel;

// Next-token log-probabilities [ids.size(), vocab] of a model fed `ids` one token per step from a new
// sequence.
std::vector<float> teacher_forced_logprobs(LanguageModel& model, std::span<const int32_t> ids);

struct KvDivergence {
  double mean_kl = 0;  // mean over positions of KL(reference ‖ candidate)
  double top1 = 0;     // share of positions whose most likely token agrees
};
// Compares two teacher_forced_logprobs results of the same positions.
KvDivergence kv_divergence(std::span<const float> reference, std::span<const float> candidate, size_t vocab);

struct KvFitPlan {
  std::map<int, KvCodec> layer_codecs;  // by model layer
  size_t bytes_per_token = 0;
  double predicted_kl = 0;  // the sum of the chosen options' KL
};

// The assignment of one option per layer (every layer among the options gets one) with the least summed KL
// whose bytes stay within budget_bytes_per_token. InvalidArgument when no assignment fits the budget.
KvFitPlan plan_kv_codecs(std::span<const KvFitOption> options, size_t budget_bytes_per_token);

// The measurement: `load(layer_codecs)` loads the model with those layers' codecs and f32 for the rest.
struct KvFitInputs {
  std::function<std::unique_ptr<LanguageModel>(const std::map<int, KvCodec>&)> load;
  std::vector<int32_t> ids;         // calibration tokens
  std::vector<KvCodec> candidates;  // codecs each layer may take
  // Called after each measured option (for progress lines).
  std::function<void(const KvFitOption&, size_t done, size_t total)> progress;
};
struct KvFitMeasurements {
  std::vector<KvFitOption> options;
  std::vector<float> reference;  // the f32 cache's log-probabilities
  size_t vocab = 0;
  size_t f32_bytes_per_token = 0, bf16_bytes_per_token = 0;
  std::vector<KvCacheLayer> cache_layers;  // the model's cache layers (geometry), in order
};
// The reference half of a fit: the f32 cache's log-probabilities on inputs.ids and the bytes per token, no
// options (planning again from recorded options needs only this).
KvFitMeasurements measure_kv_reference(const KvFitInputs& inputs);
// Measures every (KV-owning layer, candidate) pair. Candidates a layer's geometry does not take (an affine
// group that does not divide head_dim, TurboQuant over a head_dim that is not a power of two) are skipped.
KvFitMeasurements measure_kv_options(const KvFitInputs& inputs);

}  // namespace lmx
