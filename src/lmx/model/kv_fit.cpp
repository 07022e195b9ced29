// Fitted KV codecs (kv_fit.h): measurement, divergence and the knapsack.
#include "lmx/model/kv_fit.h"

#include "lmx/core/error.h"
#include "lmx/model/language_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

namespace lmx {

std::vector<float> teacher_forced_logprobs(LanguageModel& model, std::span<const int32_t> ids) {
  auto sequence = model.new_sequence();
  const auto vocab = static_cast<size_t>(model.description().vocab_size);
  std::vector<float> out(ids.size() * vocab);
  for (size_t t = 0; t < ids.size(); ++t) {
    const StepRow row{sequence.get(), ids.subspan(t, 1)};
    const Tensor logits = model.forward(std::span(&row, 1));
    const float* l = logits.data<float>();
    double max_value = -INFINITY, sum = 0;
    for (size_t i = 0; i < vocab; ++i) max_value = std::max<double>(max_value, l[i]);
    for (size_t i = 0; i < vocab; ++i) sum += std::exp(l[i] - max_value);
    const double lse = max_value + std::log(sum);
    for (size_t i = 0; i < vocab; ++i) out[t * vocab + i] = static_cast<float>(l[i] - lse);
  }
  return out;
}

KvDivergence kv_divergence(std::span<const float> reference, std::span<const float> candidate, size_t vocab) {
  LMX_REQUIRE(InvalidArgument,
              vocab > 0 && reference.size() == candidate.size() && reference.size() % vocab == 0,
              "kv_divergence: {} and {} log-probabilities over a vocabulary of {}", reference.size(),
              candidate.size(), vocab);
  const size_t positions = reference.size() / vocab;
  KvDivergence d;
  if (positions == 0) return d;
  size_t agree = 0;
  for (size_t t = 0; t < positions; ++t) {
    const float* p = reference.data() + t * vocab;
    const float* q = candidate.data() + t * vocab;
    double row = 0;
    for (size_t i = 0; i < vocab; ++i) row += std::exp(static_cast<double>(p[i])) * (p[i] - q[i]);
    d.mean_kl += row;
    agree += std::max_element(p, p + vocab) - p == std::max_element(q, q + vocab) - q ? 1 : 0;
  }
  d.mean_kl /= static_cast<double>(positions);
  d.top1 = static_cast<double>(agree) / static_cast<double>(positions);
  return d;
}

KvFitPlan plan_kv_codecs(std::span<const KvFitOption> options, size_t budget_bytes_per_token) {
  std::map<int, std::vector<const KvFitOption*>> by_layer;
  size_t unit = 0;
  for (const KvFitOption& o : options) {
    by_layer[o.layer].push_back(&o);
    unit = std::gcd(unit, o.bytes_per_token);
  }
  LMX_REQUIRE(InvalidArgument, !by_layer.empty() && unit > 0, "plan_kv_codecs: no options");
  const size_t slots = budget_bytes_per_token / unit;
  LMX_REQUIRE(InvalidArgument, slots <= (size_t{1} << 26),
              "plan_kv_codecs: a budget of {} bytes is too fine to plan", budget_bytes_per_token);
  // best[b]: least summed KL of the layers so far using exactly b units; choice[layer][b]: the option taken.
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<double> best(slots + 1, kNone), next(slots + 1);
  best[0] = 0;
  std::vector<std::vector<int>> choice;
  for (const auto& [layer, layer_options] : by_layer) {
    std::fill(next.begin(), next.end(), kNone);
    std::vector<int> taken(slots + 1, -1);
    for (size_t b = 0; b <= slots; ++b) {
      if (best[b] == kNone) continue;
      for (size_t i = 0; i < layer_options.size(); ++i) {
        const size_t nb = b + layer_options[i]->bytes_per_token / unit;
        if (nb > slots) continue;
        const double kl = best[b] + layer_options[i]->kl;
        if (kl < next[nb]) {
          next[nb] = kl;
          taken[nb] = static_cast<int>(i);
        }
      }
    }
    best.swap(next);
    choice.push_back(std::move(taken));
  }
  const auto end = std::min_element(best.begin(), best.end());
  LMX_REQUIRE(InvalidArgument, *end != kNone,
              "no assignment of the candidate codecs fits {} bytes per token (the smallest needs more)",
              budget_bytes_per_token);
  KvFitPlan plan;
  plan.predicted_kl = *end;
  size_t b = static_cast<size_t>(end - best.begin());
  plan.bytes_per_token = b * unit;
  // Walk back from the last layer: each step's option and the units before it.
  size_t li = by_layer.size();
  for (auto it = by_layer.rbegin(); it != by_layer.rend(); ++it) {
    --li;
    const KvFitOption* o = it->second[static_cast<size_t>(choice[li][b])];
    plan.layer_codecs[o->layer] = o->codec;
    b -= o->bytes_per_token / unit;
  }
  return plan;
}

KvFitMeasurements measure_kv_reference(const KvFitInputs& in) {
  LMX_REQUIRE(InvalidArgument, in.ids.size() >= 2 && in.load, "kv fit: needs at least 2 calibration tokens");
  KvFitMeasurements m;
  std::unique_ptr<LanguageModel> reference = in.load({});
  m.reference = teacher_forced_logprobs(*reference, in.ids);
  m.vocab = static_cast<size_t>(reference->description().vocab_size);
  const KvLayout& layout = reference->kv_cache().layout();
  m.f32_bytes_per_token = layout.bytes_per_token();
  for (int c = 0; c < layout.num_cache_layers(); ++c) {
    m.cache_layers.push_back(layout.layer(c));
    m.bf16_bytes_per_token +=
        KvCodec(KvCodecKind::kBf16).token_bytes(layout.layer(c).num_kv_heads, layout.layer(c).head_dim) * 2;
  }
  return m;
}

KvFitMeasurements measure_kv_options(const KvFitInputs& in) {
  LMX_REQUIRE(InvalidArgument, !in.candidates.empty(), "kv fit: needs at least one candidate codec");
  KvFitMeasurements m = measure_kv_reference(in);
  // Every (owning layer, candidate) the layer's geometry takes.
  std::vector<std::tuple<int, KvCodec, size_t>> work;
  for (const KvCacheLayer& layer : m.cache_layers) {
    for (const KvCodec& codec : in.candidates) {
      size_t bytes = 0;
      try {
        bytes = codec.token_bytes(layer.num_kv_heads, layer.head_dim) +
                codec.token_bytes(layer.num_kv_heads, layer.head_dim, true);
      } catch (const InvalidArgument&) {
        continue;  // this layer's geometry does not take the codec
      }
      work.emplace_back(layer.model_layer, codec, bytes);
    }
  }
  for (size_t i = 0; i < work.size(); ++i) {
    const auto& [model_layer, codec, bytes] = work[i];
    std::unique_ptr<LanguageModel> model = in.load({{model_layer, codec}});
    KvFitOption o;
    o.layer = model_layer;
    o.codec = codec;
    o.bytes_per_token = bytes;
    o.kl = kv_divergence(m.reference, teacher_forced_logprobs(*model, in.ids), m.vocab).mean_kl;
    m.options.push_back(o);
    if (in.progress) in.progress(o, i + 1, work.size());
  }
  return m;
}

}  // namespace lmx
