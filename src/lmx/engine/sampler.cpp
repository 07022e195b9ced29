// lmx::Sampler: logit processors, log-softmax, top-p / min-p / top-k filters and a seeded draw.
#include "lmx/engine/sampler.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

namespace lmx {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The last `context_size` tokens of `history` (all of it for 0).
std::span<const int32_t> recent(std::span<const int32_t> history, int32_t context_size) {
  if (context_size <= 0 || static_cast<size_t>(context_size) >= history.size()) return history;
  return history.subspan(history.size() - static_cast<size_t>(context_size));
}

void check_ids(std::span<const int32_t> ids, size_t vocab, const char* what) {
  for (int32_t id : ids)
    LMX_REQUIRE(InvalidArgument, id >= 0 && static_cast<size_t>(id) < vocab,
                "sampling: {} token id {} is outside the vocabulary [0, {})", what, id, vocab);
}

// Whether token a ranks before token b: the higher value first, then the lower id.
struct RanksBefore {
  std::span<const float> values;
  bool operator()(int32_t a, int32_t b) const {
    return values[a] != values[b] ? values[a] > values[b] : a < b;
  }
};

}  // namespace

namespace sampling {

std::vector<int32_t> ranked_finite(std::span<const float> values) {
  // Large vocabularies: a stable LSD radix sort (two passes of 16 bits) of an order key: the ids enter in
  // ascending order, so equal values stay in id order. The key of v is its bits made order-preserving as an
  // unsigned integer (sign bit set: all bits flipped; else the sign bit set), complemented for descending
  // order; -0 counts as +0, as == does.
  std::vector<uint32_t> keys;
  std::vector<int32_t> ids;
  keys.reserve(values.size());
  ids.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    const uint32_t bits = std::bit_cast<uint32_t>(values[i] + 0.0f);
    keys.push_back(~((bits & 0x80000000u) ? ~bits : (bits | 0x80000000u)));
    ids.push_back(static_cast<int32_t>(i));
  }
  // Below a few thousand entries the radix passes' 64 Ki-entry histograms cost more than a comparison sort.
  if (ids.size() < 4096) {
    std::sort(ids.begin(), ids.end(), RanksBefore{values});
    return ids;
  }
  std::vector<uint32_t> keys_out(keys.size());
  std::vector<int32_t> ids_out(ids.size());
  std::vector<uint32_t> offsets(65536);
  for (int shift : {0, 16}) {
    std::fill(offsets.begin(), offsets.end(), 0u);
    for (uint32_t k : keys) ++offsets[(k >> shift) & 0xFFFFu];
    uint32_t total = 0;
    for (uint32_t& o : offsets) total += std::exchange(o, total);
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t at = offsets[(keys[i] >> shift) & 0xFFFFu]++;
      keys_out[at] = keys[i];
      ids_out[at] = ids[i];
    }
    keys.swap(keys_out);
    ids.swap(ids_out);
  }
  return ids;
}

}  // namespace sampling

void validate(const SamplingParams& p) {
  LMX_REQUIRE(InvalidArgument, std::isfinite(p.temperature) && p.temperature >= 0,
              "sampling: temperature must be ≥ 0, got {}", p.temperature);
  LMX_REQUIRE(InvalidArgument, p.top_p > 0 && p.top_p <= 1, "sampling: top_p must be in (0, 1], got {}",
              p.top_p);
  LMX_REQUIRE(InvalidArgument, p.top_k >= 0, "sampling: top_k must be ≥ 0, got {}", p.top_k);
  LMX_REQUIRE(InvalidArgument, p.min_p >= 0 && p.min_p < 1, "sampling: min_p must be in [0, 1), got {}",
              p.min_p);
  LMX_REQUIRE(InvalidArgument, std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0,
              "sampling: repetition_penalty must be > 0, got {}", p.repetition_penalty);
  LMX_REQUIRE(InvalidArgument, std::isfinite(p.presence_penalty),
              "sampling: presence_penalty must be finite, got {}", p.presence_penalty);
  LMX_REQUIRE(InvalidArgument, std::isfinite(p.frequency_penalty),
              "sampling: frequency_penalty must be finite, got {}", p.frequency_penalty);
  LMX_REQUIRE(InvalidArgument, p.repetition_context_size >= 0,
              "sampling: repetition_context_size must be ≥ 0, got {}", p.repetition_context_size);
  LMX_REQUIRE(InvalidArgument, p.presence_context_size >= 0,
              "sampling: presence_context_size must be ≥ 0, got {}", p.presence_context_size);
  LMX_REQUIRE(InvalidArgument, p.frequency_context_size >= 0,
              "sampling: frequency_context_size must be ≥ 0, got {}", p.frequency_context_size);
  for (const auto& [id, bias] : p.logit_bias) {
    LMX_REQUIRE(InvalidArgument, id >= 0, "sampling: logit_bias token id {} is negative", id);
    LMX_REQUIRE(InvalidArgument, std::isfinite(bias),
                "sampling: logit_bias for token {} must be finite, got {}", id, bias);
  }
}

SamplingParams sampling_from_generation_config(const GenerationConfig& config) {
  SamplingParams p;
  p.temperature = config.temperature.value_or(1.0f);
  if (config.do_sample.has_value() && !*config.do_sample) p.temperature = 0;
  if (config.top_p) p.top_p = *config.top_p;
  if (config.top_k) p.top_k = *config.top_k;
  if (config.min_p) p.min_p = *config.min_p;
  if (config.repetition_penalty) p.repetition_penalty = *config.repetition_penalty;
  return p;
}

namespace sampling {

void apply_logit_processors(const SamplingParams& params, std::span<float> logits,
                            std::span<const int32_t> history) {
  const size_t vocab = logits.size();
  for (const auto& [id, bias] : params.logit_bias) {
    LMX_REQUIRE(InvalidArgument, id >= 0 && static_cast<size_t>(id) < vocab,
                "sampling: logit_bias token id {} is outside the vocabulary [0, {})", id, vocab);
    logits[id] += bias;
  }
  if (params.repetition_penalty != 1.0f) {
    auto tokens = recent(history, params.repetition_context_size);
    check_ids(tokens, vocab, "history");
    // Gather then scatter, as mlx-lm does: a repeated id is penalised once.
    std::vector<std::pair<int32_t, float>> updates;
    updates.reserve(tokens.size());
    for (int32_t id : tokens) {
      float v = logits[id];
      updates.emplace_back(id, v < 0 ? v * params.repetition_penalty : v / params.repetition_penalty);
    }
    for (auto [id, v] : updates) logits[id] = v;
  }
  if (params.presence_penalty != 0.0f) {
    auto tokens = recent(history, params.presence_context_size);
    check_ids(tokens, vocab, "history");
    std::vector<std::pair<int32_t, float>> updates;
    updates.reserve(tokens.size());
    for (int32_t id : tokens) updates.emplace_back(id, logits[id] - params.presence_penalty);
    for (auto [id, v] : updates) logits[id] = v;
  }
  if (params.frequency_penalty != 0.0f) {
    auto tokens = recent(history, params.frequency_context_size);
    check_ids(tokens, vocab, "history");
    for (int32_t id : tokens) logits[id] -= params.frequency_penalty;
  }
}

std::vector<LogitEdit> logit_edits(const SamplingParams& params, std::span<const int32_t> history,
                                   size_t vocab) {
  std::vector<LogitEdit> edits;
  std::unordered_map<int32_t, size_t> at;
  auto edit = [&](int32_t id) -> LogitEdit& {
    const auto [it, added] = at.try_emplace(id, edits.size());
    if (added) edits.push_back({.id = id});
    return edits[it->second];
  };
  for (const auto& [id, bias] : params.logit_bias) {
    LMX_REQUIRE(InvalidArgument, id >= 0 && static_cast<size_t>(id) < vocab,
                "sampling: logit_bias token id {} is outside the vocabulary [0, {})", id, vocab);
    edit(id).bias = bias;
  }
  if (params.repetition_penalty != 1.0f) {
    auto tokens = recent(history, params.repetition_context_size);
    check_ids(tokens, vocab, "history");
    for (int32_t id : tokens) edit(id).repetition = params.repetition_penalty;
  }
  if (params.presence_penalty != 0.0f) {
    auto tokens = recent(history, params.presence_context_size);
    check_ids(tokens, vocab, "history");
    for (int32_t id : tokens) edit(id).presence = params.presence_penalty;
  }
  if (params.frequency_penalty != 0.0f) {
    auto tokens = recent(history, params.frequency_context_size);
    check_ids(tokens, vocab, "history");
    for (int32_t id : tokens) {
      LogitEdit& e = edit(id);
      e.frequency = params.frequency_penalty;
      ++e.frequency_count;
    }
  }
  return edits;
}

void apply_logit_edits(std::span<const LogitEdit> edits, std::span<float> logits) {
  for (const LogitEdit& e : edits) {
    float v = logits[static_cast<size_t>(e.id)];
    if (e.bias != 0.0f) v += e.bias;
    if (e.repetition != 1.0f) v = v < 0 ? v * e.repetition : v / e.repetition;
    if (e.presence != 0.0f) v -= e.presence;
    for (int32_t i = 0; i < e.frequency_count; ++i) v -= e.frequency;
    logits[static_cast<size_t>(e.id)] = v;
  }
}

void log_softmax(std::span<const float> logits, std::span<float> logprobs) {
  double max_value = -std::numeric_limits<double>::infinity();
  for (float v : logits)
    if (!std::isnan(v)) max_value = std::max<double>(max_value, v);
  if (!std::isfinite(max_value)) {
    // All -inf / NaN: nothing is possible. A +inf logit: the +inf tokens share all the mass
    // equally (each reported as log 1, so a draw picks among them uniformly).
    for (size_t i = 0; i < logits.size(); ++i)
      logprobs[i] = max_value > 0 && logits[i] == max_value ? 0.0f : kNegInf;
    return;
  }
  double sum = 0;
  for (float v : logits)
    if (!std::isnan(v)) sum += std::exp(static_cast<double>(v) - max_value);
  const double log_total = max_value + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i)
    logprobs[i] =
        std::isnan(logits[i]) ? kNegInf : static_cast<float>(static_cast<double>(logits[i]) - log_total);
}

void apply_top_p(std::span<float> logprobs, float top_p) {
  if (top_p >= 1.0f) return;
  std::vector<int32_t> ids = ranked_finite(logprobs);
  if (ids.empty()) return;
  // Walk from the least probable up; a token survives when the mass up to and including it
  // exceeds 1 - top_p.
  const double threshold = 1.0 - static_cast<double>(top_p);
  double cumulative = 0;
  for (size_t r = ids.size(); r-- > 1;) {  // the most probable (r = 0) always survives
    cumulative += std::exp(static_cast<double>(logprobs[ids[r]]));
    if (!(cumulative > threshold)) logprobs[ids[r]] = kNegInf;
  }
}

void apply_min_p(std::span<float> logprobs, float min_p) {
  if (min_p <= 0.0f || logprobs.empty()) return;
  const float top = logprobs[argmax(logprobs)];
  if (!std::isfinite(top)) return;
  const double floor = static_cast<double>(top) + std::log(static_cast<double>(min_p));
  for (float& v : logprobs)
    if (static_cast<double>(v) < floor) v = kNegInf;
}

void apply_top_k(std::span<float> logprobs, int32_t top_k) {
  if (top_k <= 0 || static_cast<size_t>(top_k) >= logprobs.size()) return;
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  // NaN was mapped to -inf by log_softmax, so the rank order is a strict weak order.
  std::nth_element(ids.begin(), ids.begin() + top_k, ids.end(), RanksBefore{logprobs});
  for (size_t r = static_cast<size_t>(top_k); r < ids.size(); ++r) logprobs[ids[r]] = kNegInf;
}

int32_t argmax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best] || (std::isnan(values[best]) && !std::isnan(values[i])))
      best = static_cast<int32_t>(i);
  return best;
}

}  // namespace sampling

bool is_plain_greedy(const SamplingParams& p) {
  return p.temperature == 0.0f && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
}

std::span<const float> Sampler::last_logprobs() const {
  if (!logprobs_ready_) {
    logprobs_.resize(processed_.size());
    sampling::log_softmax(processed_, logprobs_);
    logprobs_ready_ = true;
  }
  return logprobs_;
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)) {
  validate(params_);
  rng_.seed(params_.seed ? *params_.seed : std::random_device{}());
}

double Sampler::next_uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  LMX_REQUIRE(InvalidArgument, !logits.empty(), "sampling: empty logits");
  processed_.assign(logits.begin(), logits.end());
  sampling::apply_logit_processors(params_, processed_, history);
  return pick(params_.temperature > 0.0f ? next_uniform() : 0.0);
}

int32_t Sampler::sample_processed(std::span<const float> processed, double uniform) {
  LMX_REQUIRE(InvalidArgument, !processed.empty(), "sampling: empty logits");
  processed_.assign(processed.begin(), processed.end());
  return pick(uniform);
}

int32_t Sampler::pick(double uniform) {
  logprobs_ready_ = false;
  // Greedy: the first maximum of the processed logits (as a backend's argmax picks it; two logits that
  // differ may round to one log-probability). Its log-probabilities are computed only when asked for.
  if (params_.temperature == 0.0f) {
    const int32_t best = sampling::argmax(processed_);
    LMX_REQUIRE(InvalidArgument, processed_[best] > kNegInf, "sampling: no token has a finite logit");
    return best;
  }
  last_logprobs();
  const int32_t best = sampling::argmax(logprobs_);
  LMX_REQUIRE(InvalidArgument, logprobs_[best] > kNegInf, "sampling: no token has a finite logit");

  filtered_ = logprobs_;
  sampling::apply_top_p(filtered_, params_.top_p);
  sampling::apply_min_p(filtered_, params_.min_p);
  sampling::apply_top_k(filtered_, params_.top_k);

  // Categorical draw from softmax(filtered / T): inverse CDF in id order, in double. The uniform
  // comes from the top 53 bits of one mt19937_64 output (next_uniform), so a seed gives the same draw
  // everywhere.
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  const double top = static_cast<double>(filtered_[best]) * inv_t;
  // The survivors' weights, in id order, computed once for the total and the walk.
  weights_.clear();
  double total = 0;
  for (size_t i = 0; i < filtered_.size(); ++i)
    if (filtered_[i] > kNegInf) {
      const double w = std::exp(static_cast<double>(filtered_[i]) * inv_t - top);
      weights_.emplace_back(static_cast<int32_t>(i), w);
      total += w;
    }
  const double target = uniform * total;
  double cumulative = 0;
  int32_t last = best;
  for (const auto& [id, w] : weights_) {
    cumulative += w;
    last = id;
    if (cumulative > target) return last;
  }
  return last;  // rounding left the target at the very end
}

}  // namespace lmx
