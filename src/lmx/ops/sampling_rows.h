// Per-request sampling on a backend (Backend::sample_rows): the plain data a step stages for it and gets
// back, and the candidate cut both the backend and the host tests use. The host sampler
// (lmx/engine/sampler.h) states the semantics; a backend reproduces them up to f32 rounding of the
// log-softmax, from the same uniform draw, so that only sampled ids and requested logprobs leave it.
//
// What a backend computes for one entry (one choice's next token from one row of the step's logits):
//   processed = the row with the entry's logit edits applied (bias and penalties, sampler.h's order);
//   lse = logsumexp(processed); lp = processed − lse;
//   the kSamplingCandidates best finite tokens in rank order (higher value first, then lower id);
//   greedy (temperature 0): the first maximum of processed;
//   else the survivors of top-p → min-p → top-k — always a prefix of the rank order — and the
//   inverse-CDF draw at `uniform` over them in id order, with weights exp((lp − lp_max) / temperature).
// When the filters cut the rank order past the candidates (top_k above them, or a nucleus wider than
// them), the entry returns kNeedsHost and the caller samples the processed row on the host (same
// uniform). Without any cut, or with only min-p, the backend draws over the whole vocabulary itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define LMX_SAMPLING_HD __host__ __device__
#else
#define LMX_SAMPLING_HD
#endif

namespace lmx {

// Tokens a backend ranks per entry; top_k up to this and nuclei within this stay on the backend.
constexpr int kSamplingCandidates = 256;
// Most top logprobs an entry reports (the engine's kMaxTopLogprobs).
constexpr int kSampledTopMax = 20;

// One sparse change of a logit: logit += bias; then, when repetition != 1, ×repetition if negative else
// ÷repetition; then −presence; then −frequency, frequency_count times (one subtraction per occurrence,
// as the host sampler rounds). An entry's edits name distinct ids.
struct LogitEdit {
  int32_t id = 0;
  int32_t frequency_count = 0;
  float bias = 0.0f;
  float repetition = 1.0f;
  float presence = 0.0f;
  float frequency = 0.0f;
};

// One entry's settings, staged as an array followed by every entry's edits.
struct SamplingRowParams {
  int32_t row = 0;  // row of the step's logits
  int32_t edits_begin = 0, edits_count = 0;
  int32_t top_logprobs = 0;  // 0..kSampledTopMax alternatives to report
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;
  double uniform = 0.0;  // in [0, 1): the entry's draw (unused when greedy)
};

enum class SampledStatus : int32_t {
  kSampled = 0,
  kNeedsHost = 1,      // the caller samples the processed row on the host (see above)
  kNoFiniteLogit = 2,  // every processed logit is −inf or NaN
};

// What a backend returns per entry.
struct SampledRow {
  int32_t token = 0;
  float logprob = 0.0f;  // lp[token]
  SampledStatus status = SampledStatus::kSampled;
  int32_t top_count = 0;  // min(top_logprobs, finite tokens)
  int32_t top_ids[kSampledTopMax] = {};
  float top_logprobs[kSampledTopMax] = {};
};
static_assert(sizeof(SampledRow) % 4 == 0, "backends write SampledRow as 32-bit words");

// Where the filters cut the rank order, judged from the first `count` candidates' log-probabilities
// `lp` (rank order) of `finite` finite tokens.
struct CandidateCut {
  enum Kind : int32_t {
    kWithin = 0,  // the survivors are the first `survivors` candidates
    kFloor = 1,   // every token with lp ≥ floor survives (min-p alone, or no filter: floor −inf)
    kHost = 2,    // a rank cut past the candidates: sample on the host
  };
  Kind kind = kWithin;
  int32_t survivors = 0;
  double floor = 0.0;
};

// top-p keeps rank r while the mass of the ranks before it is below top_p (mlx-lm's ascending
// cumulative sum, read from the top); min-p keeps lp ≥ lp_max + log(min_p); top-k keeps k ranks.
LMX_SAMPLING_HD inline CandidateCut cut_candidates(const float* lp, int32_t count, int64_t finite,
                                                   float top_p, float min_p, int32_t top_k) {
  CandidateCut cut;
  cut.floor = min_p > 0.0f ? static_cast<double>(lp[0]) + log(static_cast<double>(min_p))
                           : -std::numeric_limits<double>::infinity();
  double mass = 0.0;
  int32_t r = 0;
  for (; r < count; ++r) {
    if (r > 0) {
      if (top_k > 0 && r >= top_k) break;
      if (static_cast<double>(lp[r]) < cut.floor) break;
      if (top_p < 1.0f && !(mass < static_cast<double>(top_p))) break;
    }
    mass += exp(static_cast<double>(lp[r]));
  }
  cut.survivors = r;
  if (r < count || count == finite || (top_k > 0 && top_k <= count)) return cut;
  // Every candidate survives and tokens remain past them.
  const bool rank_cut_beyond = top_p < 1.0f || (top_k > 0 && top_k < finite);
  cut.kind = rank_cut_beyond ? CandidateCut::kHost : CandidateCut::kFloor;
  return cut;
}

}  // namespace lmx
