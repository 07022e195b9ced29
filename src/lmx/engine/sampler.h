// lmx::Sampler: turns one row of logits into a token, in mlx-lm's order: logit
// processors (bias, repetition / presence / frequency penalties), log-softmax, then greedy argmax or
// top-p → min-p → top-k filtering and a seeded categorical draw at the temperature.
#pragma once

#include "lmx/io/model_dir.h"
#include "lmx/ops/sampling_rows.h"

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace lmx {

// Sampling settings of one sequence. Defaults switch every filter and penalty off (plain sampling at
// temperature 1); sampling_from_generation_config() gives a model's own defaults.
struct SamplingParams {
  float temperature = 1.0f;  // ≥ 0; 0 = greedy (argmax, the first of equal maxima)
  float top_p = 1.0f;        // (0, 1]; 1 = off. Keeps the smallest most-probable set with mass ≥ top_p
  int32_t top_k = 0;         // ≥ 0; 0 = off. Keeps the k most probable (ties → lower id)
  float min_p = 0.0f;        // [0, 1); 0 = off. Keeps tokens with p ≥ min_p · p_max

  // Penalties look at the last `*_context_size` tokens of the history (0 = the whole history).
  float repetition_penalty = 1.0f;  // > 0; 1 = off. Per distinct token: logit < 0 → × p, else ÷ p
  int32_t repetition_context_size = 20;
  float presence_penalty = 0.0f;  // subtracted once per distinct token
  int32_t presence_context_size = 20;
  float frequency_penalty = 0.0f;  // subtracted once per occurrence
  int32_t frequency_context_size = 20;

  std::map<int32_t, float> logit_bias = {};  // token id → added to its logit (finite)

  // The same seed, params, logits and histories give the same tokens. nullopt = a random seed.
  std::optional<uint64_t> seed = std::nullopt;
};

// Whether `params` is plain greedy decoding: temperature 0 and no logit processors (bias, penalties), so
// the token is the first maximum of the raw logits — what a backend can pick without the logits leaving it.
bool is_plain_greedy(const SamplingParams& params);

// Throws InvalidArgument naming the first bad field (e.g. "sampling: top_p must be in (0, 1], got 0").
void validate(const SamplingParams& params);

// The model's defaults from generation_config.json: temperature (1 when absent; 0 when do_sample is
// explicitly false), top_p, top_k, min_p, repetition_penalty; absent keys leave the filter off.
// Not validated here (the Sampler validates the final settings).
SamplingParams sampling_from_generation_config(const GenerationConfig& config);

// The stages of Sampler::sample, exposed for tests and for engines that batch them. Filters work on
// log-probabilities in place and remove a token by setting it to -inf; the most probable token always
// survives. Token order for ties: a higher value first, then a lower id.
namespace sampling {

// logit_bias, then repetition, presence and frequency penalties, in place. Throws InvalidArgument
// for a bias or history id outside [0, logits.size()).
void apply_logit_processors(const SamplingParams& params, std::span<float> logits,
                            std::span<const int32_t> history);
// The same processing as sparse edits (sampling_rows.h), one per distinct id that the bias or a penalty
// window names, for a backend that applies them itself. Same errors as apply_logit_processors for a
// `vocab` of that size.
std::vector<LogitEdit> logit_edits(const SamplingParams& params, std::span<const int32_t> history,
                                   size_t vocab);
// Applies edits in place as a backend does: apply_logit_processors' values (a zero bias adds nothing).
void apply_logit_edits(std::span<const LogitEdit> edits, std::span<float> logits);
// logprobs = logits − logsumexp(logits) (computed in double), written to `logprobs` (same size).
// NaN logits count as -inf.
void log_softmax(std::span<const float> logits, std::span<float> logprobs);
// mlx-lm's apply_top_p: in ascending order of probability, keeps the tokens whose cumulative
// probability (themselves included) exceeds 1 − top_p.
void apply_top_p(std::span<float> logprobs, float top_p);
// Keeps lp ≥ max + log(min_p).
void apply_min_p(std::span<float> logprobs, float min_p);
// Keeps the `top_k` largest (no-op when top_k is 0 or ≥ the size).
void apply_top_k(std::span<float> logprobs, int32_t top_k);
// The ids of the finite values in rank order: a higher value first, then a lower id (-0 and +0 are equal).
std::vector<int32_t> ranked_finite(std::span<const float> values);
// The first index of the largest value (NaN never wins); 0 when every value is -inf or NaN.
int32_t argmax(std::span<const float> values);

}  // namespace sampling

// One sequence's sampler: settings plus its random generator. Not thread-safe; one per sequence.
class Sampler {
 public:
  // Throws InvalidArgument for invalid params (see validate()).
  explicit Sampler(SamplingParams params);

  const SamplingParams& params() const { return params_; }

  // The next token from the logits of one position and the sequence's tokens so far (prompt and
  // generated, oldest first; only penalties read it). Greedy (temperature 0) takes the first maximum of the
  // processed logits. Throws InvalidArgument for empty logits, a history or bias id outside the
  // vocabulary, or when no token is left with a finite logit.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});

  // The steps of sample() for an engine whose backend processes the logits: the next uniform draw in
  // [0, 1) (sample() takes one per token when temperature > 0, none when greedy), and the token from
  // already processed logits and that draw (what sample() does after the processors). Same errors.
  double next_uniform();
  int32_t sample_processed(std::span<const float> processed, double uniform);

  // Log-probabilities of the last sample() call: processed (bias, penalties) but not filtered nor
  // tempered — what a request for logprobs reports.
  std::span<const float> last_logprobs() const;

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  int32_t pick(double uniform);  // the token from processed_

  std::vector<float> processed_;         // logits after the processors
  mutable std::vector<float> logprobs_;  // log_softmax(processed_), computed when first needed after a sample
  mutable bool logprobs_ready_ = false;
  std::vector<float> filtered_;                      // logprobs_ after the filters
  std::vector<std::pair<int32_t, double>> weights_;  // the draw's survivors and their unnormalised weights
};

}  // namespace lmx
