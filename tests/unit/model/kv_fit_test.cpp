// Fitted KV codecs (model/kv_fit.h): the knapsack against brute force over every assignment, its refusal of
// an impossible budget, the divergence measure, and a fit of the committed tiny E2B end to end (every owning
// layer measured, the plan within budget, the measured KL of the plan near the predicted sum).
#include "lmx/model/kv_fit.h"
#include "lmx/core/error.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/cpu/cpu_backend.h"
#include "support/goldens.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace lmx {
namespace {

// The least summed KL of one option per layer within the budget, by trying every assignment.
double brute_force(const std::vector<KvFitOption>& options, int layers, size_t budget) {
  std::vector<std::vector<const KvFitOption*>> by_layer(static_cast<size_t>(layers));
  for (const auto& o : options) by_layer[static_cast<size_t>(o.layer)].push_back(&o);
  double best = INFINITY;
  std::vector<size_t> pick(static_cast<size_t>(layers), 0);
  while (true) {
    size_t bytes = 0;
    double kl = 0;
    for (int l = 0; l < layers; ++l) {
      bytes += by_layer[static_cast<size_t>(l)][pick[static_cast<size_t>(l)]]->bytes_per_token;
      kl += by_layer[static_cast<size_t>(l)][pick[static_cast<size_t>(l)]]->kl;
    }
    if (bytes <= budget) best = std::min(best, kl);
    int l = 0;
    while (l < layers && ++pick[static_cast<size_t>(l)] == by_layer[static_cast<size_t>(l)].size())
      pick[static_cast<size_t>(l++)] = 0;
    if (l == layers) break;
  }
  return best;
}

TEST(KvFit, PlanIsTheBestAssignmentWithinTheBudget) {
  std::mt19937 rng(7);
  const KvCodec codecs[] = {KvCodec(KvCodecKind::kBf16), KvCodec::turbo(8, 4), KvCodec::turbo(8, 3),
                            KvCodec::turbo(4, 3)};
  for (int trial = 0; trial < 20; ++trial) {
    const int layers = 2 + trial % 4;
    std::vector<KvFitOption> options;
    for (int l = 0; l < layers; ++l)
      for (const KvCodec& c : codecs)
        options.push_back({l, c, 8 * (4 + rng() % 30), std::uniform_real_distribution<double>(0, 0.05)(rng)});
    for (size_t budget : {size_t{100}, size_t{300}, size_t{700}}) {
      const double best = brute_force(options, layers, budget);
      if (std::isinf(best)) {
        EXPECT_THROW(plan_kv_codecs(options, budget), InvalidArgument);
        continue;
      }
      const KvFitPlan plan = plan_kv_codecs(options, budget);
      EXPECT_NEAR(plan.predicted_kl, best, 1e-12);
      EXPECT_LE(plan.bytes_per_token, budget);
      ASSERT_EQ(plan.layer_codecs.size(), static_cast<size_t>(layers));
      // The plan's bytes and KL are those of the options it names.
      size_t bytes = 0;
      double kl = 0;
      for (const auto& [layer, codec] : plan.layer_codecs)
        for (const auto& o : options)
          if (o.layer == layer && o.codec == codec) bytes += o.bytes_per_token, kl += o.kl;
      EXPECT_EQ(bytes, plan.bytes_per_token);
      EXPECT_NEAR(kl, plan.predicted_kl, 1e-12);
    }
  }
}

TEST(KvFit, DivergenceOfIdenticalAndOfDifferentDistributions) {
  // Two positions over a vocabulary of 2: log(0.5) both, against 0.9/0.1 and 0.5/0.5.
  const float h = std::log(0.5f);
  const std::vector<float> p = {h, h, h, h}, q = {std::log(0.9f), std::log(0.1f), h, h};
  EXPECT_EQ(kv_divergence(p, p, 2).mean_kl, 0.0);
  const KvDivergence d = kv_divergence(p, q, 2);
  EXPECT_NEAR(d.mean_kl, 0.5 * (0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1)), 1e-6);
  EXPECT_THROW(kv_divergence(p, std::vector<float>(3), 2), InvalidArgument);
}

TEST(KvFit, FitsTheTinyModelWithinItsBudget) {
  const std::string dir = test::reference_model_dir("tiny-e2b");
  KvFitInputs in;
  for (int i = 0; i < 24; ++i) in.ids.push_back(3 + (i * 37) % 200);
  in.candidates = {KvCodec(KvCodecKind::kBf16), KvCodec::turbo(8, 4), KvCodec::turbo(4, 3),
                   KvCodec::affine(4, 32)};
  in.load = [&](const std::map<int, KvCodec>& layer_codecs) {
    ModelOptions o;
    o.kv_codec = KvCodec(KvCodecKind::kF32);
    o.kv_layer_codecs = layer_codecs;
    return LanguageModel::load(dir, make_cpu_backend(), o);
  };
  size_t seen = 0;
  in.progress = [&](const KvFitOption&, size_t done, size_t total) { EXPECT_EQ(done, ++seen) << total; };
  const KvFitMeasurements m = measure_kv_options(in);
  auto reference = in.load({});
  const KvLayout& layout = reference->kv_cache().layout();
  EXPECT_EQ(m.options.size(), static_cast<size_t>(layout.num_cache_layers()) * in.candidates.size());
  std::map<int, std::map<std::string, double>> kl;
  for (const KvFitOption& o : m.options) {
    EXPECT_TRUE(layout.owns_cache(o.layer));
    EXPECT_GE(o.kl, -1e-9);
    kl[o.layer][o.codec.name()] = o.kl;
  }
  // Per layer, bf16 costs less than the coarsest codec.
  for (const auto& [layer, by_codec] : kl) EXPECT_LT(by_codec.at("bf16"), by_codec.at("turbo:k4v3")) << layer;
  const size_t budget = m.bf16_bytes_per_token / 3;
  const KvFitPlan plan = plan_kv_codecs(m.options, budget);
  auto fitted = in.load(plan.layer_codecs);
  EXPECT_EQ(fitted->kv_cache().layout().bytes_per_token(), plan.bytes_per_token);
  EXPECT_LE(plan.bytes_per_token, budget);
  const double measured =
      kv_divergence(m.reference, teacher_forced_logprobs(*fitted, in.ids), m.vocab).mean_kl;
  EXPECT_GT(measured, 0.0);
  EXPECT_LT(measured, 4 * plan.predicted_kl + 1e-3) << "predicted " << plan.predicted_kl;
}

}  // namespace
}  // namespace lmx
