// lmx::Sampler against slow obvious references: greedy, each filter's survivors, the empirical
// distribution of draws, seeds, penalties, and errors for invalid settings.
#include "lmx/engine/sampler.h"
#include "lmx/core/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <set>

namespace lmx {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> log_softmax(const std::vector<float>& logits) {
  std::vector<float> lp(logits.size());
  sampling::log_softmax(logits, lp);
  return lp;
}

// Survivor set of a filtered vector.
std::set<int32_t> survivors(const std::vector<float>& lp) {
  std::set<int32_t> s;
  for (size_t i = 0; i < lp.size(); ++i)
    if (lp[i] > kNegInf) s.insert(static_cast<int32_t>(i));
  return s;
}

// Whether j ranks before i (higher value, then lower id).
bool ranks_before(const std::vector<float>& lp, size_t j, size_t i) {
  return lp[j] > lp[i] || (lp[j] == lp[i] && j < i);
}

// Naive top-p: a token survives when the mass of itself and every token ranked after it exceeds
// 1 - top_p (mlx-lm's ascending cumulative sum), or when it is the most probable.
std::set<int32_t> naive_top_p(const std::vector<float>& lp, float top_p) {
  std::set<int32_t> keep;
  for (size_t i = 0; i < lp.size(); ++i) {
    if (!(lp[i] > kNegInf)) continue;
    double mass = 0;
    bool is_top = true;
    for (size_t j = 0; j < lp.size(); ++j) {
      if (j == i || ranks_before(lp, i, j)) mass += std::exp(static_cast<double>(lp[j]));
      if (ranks_before(lp, j, i)) is_top = false;
    }
    if (mass > 1.0 - top_p || is_top) keep.insert(static_cast<int32_t>(i));
  }
  return keep;
}

std::set<int32_t> naive_min_p(const std::vector<float>& lp, float min_p) {
  double p_max = 0;
  for (float v : lp) p_max = std::max(p_max, std::exp(static_cast<double>(v)));
  std::set<int32_t> keep;
  for (size_t i = 0; i < lp.size(); ++i)
    if (std::exp(static_cast<double>(lp[i])) >= min_p * p_max && lp[i] > kNegInf)
      keep.insert(static_cast<int32_t>(i));
  return keep;
}

std::set<int32_t> naive_top_k(const std::vector<float>& lp, int k) {
  std::set<int32_t> keep;
  for (size_t i = 0; i < lp.size(); ++i) {
    int before = 0;
    for (size_t j = 0; j < lp.size(); ++j) before += ranks_before(lp, j, i);
    if (before < k && lp[i] > kNegInf) keep.insert(static_cast<int32_t>(i));
  }
  return keep;
}

std::vector<float> random_logits(size_t n, float scale = 4.0f) {
  return test::random_floats(n, -scale, scale);
}

TEST(Sampler, GreedyIsFirstArgmax) {
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits = random_logits(500);
    SamplingParams params;
    params.temperature = 0;
    Sampler sampler(params);
    auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sampler.sample(logits), expected);
  }
  Sampler greedy(SamplingParams{.temperature = 0});
  EXPECT_EQ(greedy.sample(std::vector<float>{1, 3, 3, 2}), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(greedy.sample(std::vector<float>{nan, -1, 5, nan}), 2);
}

TEST(Sampler, LogSoftmaxNormalisesAndMapsNanToNegInf) {
  std::vector<float> logits = random_logits(1000, 20);
  logits[7] = std::numeric_limits<float>::quiet_NaN();
  logits[9] = kNegInf;
  std::vector<float> lp = log_softmax(logits);
  double total = 0;
  for (float v : lp) total += std::exp(static_cast<double>(v));
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_EQ(lp[7], kNegInf);
  EXPECT_EQ(lp[9], kNegInf);
  EXPECT_NEAR(lp[0] - lp[1], logits[0] - logits[1], 1e-4);
}

TEST(Sampler, TopPKeepsNaiveSet) {
  for (float top_p : {0.05f, 0.3f, 0.5f, 0.8f, 0.95f, 0.999f}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<float> lp = log_softmax(random_logits(200));
      std::set<int32_t> expected = naive_top_p(lp, top_p);
      sampling::apply_top_p(lp, top_p);
      EXPECT_EQ(survivors(lp), expected) << "top_p " << top_p;
      EXPECT_FALSE(expected.empty());
    }
  }
  // 1 is off; a tiny top_p keeps only the most probable token.
  std::vector<float> lp = log_softmax(random_logits(50));
  std::vector<float> unchanged = lp;
  sampling::apply_top_p(lp, 1.0f);
  EXPECT_EQ(lp, unchanged);
  sampling::apply_top_p(lp, 1e-9f);
  EXPECT_EQ(survivors(lp), std::set<int32_t>{sampling::argmax(unchanged)});
}

// ranked_finite (a radix sort from 4096 entries on) orders exactly as a comparison sort by (value descending,
// id ascending): ties, -0 against +0, tiny and huge magnitudes; non-finite values left out.
TEST(Sampler, RankedFiniteMatchesAComparisonSort) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{4096}, size_t{5000}, size_t{262144}}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      switch (test::rng()() % 8) {
        case 0:
          v[i] = 0.0f;
          break;
        case 1:
          v[i] = -0.0f;
          break;
        case 2:
          v[i] = static_cast<float>(static_cast<int>(test::rng()() % 5)) - 2.0f;
          break;  // ties
        case 3:
          v[i] = (test::rng()() % 2 ? 1 : -1) * std::ldexp(1.0f, -140 + static_cast<int>(test::rng()() % 20));
          break;
        case 4:
          v[i] = (test::rng()() % 2 ? 1 : -1) * 3e38f;
          break;
        case 5:
          v[i] = test::rng()() % 3 == 0 ? -inf : (test::rng()() % 2 ? nan : inf);
          break;
        default:
          v[i] = test::random_floats(1, -30.0f, 5.0f)[0];
      }
    }
    std::vector<int32_t> expected;
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(v[i])) expected.push_back(static_cast<int32_t>(i));
    std::sort(expected.begin(), expected.end(),
              [&](int32_t a, int32_t b) { return v[a] != v[b] ? v[a] > v[b] : a < b; });
    EXPECT_EQ(sampling::ranked_finite(v), expected) << "n " << n;
  }
}

TEST(Sampler, MinPKeepsNaiveSet) {
  for (float min_p : {0.001f, 0.05f, 0.2f, 0.7f}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<float> lp = log_softmax(random_logits(300));
      std::set<int32_t> expected = naive_min_p(lp, min_p);
      sampling::apply_min_p(lp, min_p);
      EXPECT_EQ(survivors(lp), expected) << "min_p " << min_p;
    }
  }
}

TEST(Sampler, TopKKeepsNaiveSet) {
  for (int k : {1, 2, 10, 199, 200, 500}) {
    std::vector<float> lp = log_softmax(random_logits(200));
    std::set<int32_t> expected = k >= 200 ? survivors(lp) : naive_top_k(lp, k);
    sampling::apply_top_k(lp, k);
    EXPECT_EQ(survivors(lp), expected) << "k " << k;
    EXPECT_EQ(survivors(lp).size(), static_cast<size_t>(std::min(k, 200)));
  }
  // Ties at the boundary keep the lower ids.
  std::vector<float> tied = {0, 1, 1, 1, 0};
  sampling::apply_top_k(tied, 2);
  EXPECT_EQ(survivors(tied), (std::set<int32_t>{1, 2}));
}

// Expected draw probabilities: naive filters in mlx-lm order, then softmax(lp / T) over survivors.
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<float> lp = log_softmax(logits);
  std::set<int32_t> keep = survivors(lp);
  auto restrict_to = [&](const std::set<int32_t>& allowed) {
    for (size_t i = 0; i < lp.size(); ++i)
      if (!allowed.count(static_cast<int32_t>(i))) lp[i] = kNegInf;
  };
  if (p.top_p < 1) restrict_to(naive_top_p(lp, p.top_p));
  if (p.min_p > 0) restrict_to(naive_min_p(lp, p.min_p));
  if (p.top_k > 0) restrict_to(naive_top_k(lp, p.top_k));
  std::vector<double> probs(lp.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < lp.size(); ++i)
    if (lp[i] > kNegInf) total += probs[i] = std::exp(static_cast<double>(lp[i]) / p.temperature);
  for (double& q : probs) q /= total;
  return probs;
}

// Draws `draws` tokens and checks every count within 5 standard deviations of draws · p (and
// zero for filtered tokens).
void check_distribution(const std::vector<float>& logits, const SamplingParams& params, int draws) {
  std::vector<double> expected = expected_distribution(logits, params);
  Sampler sampler(params);
  std::vector<int> counts(logits.size(), 0);
  for (int d = 0; d < draws; ++d) ++counts[sampler.sample(logits)];
  for (size_t i = 0; i < logits.size(); ++i) {
    const double mean = draws * expected[i];
    const double sigma = std::sqrt(draws * expected[i] * (1 - expected[i]));
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " was filtered out";
    } else {
      EXPECT_NEAR(counts[i], mean, 5 * sigma + 1) << "token " << i << " p=" << expected[i];
    }
  }
}

TEST(Sampler, DrawsFollowTemperedFilteredDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, 0.9f, -2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams plain{.temperature = 1.0f, .seed = 11};
  check_distribution(logits, plain, 100000);
  SamplingParams hot{.temperature = 2.5f, .seed = 12};
  check_distribution(logits, hot, 100000);
  SamplingParams filtered{.temperature = 0.7f, .top_p = 0.9f, .top_k = 5, .min_p = 0.08f, .seed = 13};
  check_distribution(logits, filtered, 100000);
  SamplingParams nucleus{.temperature = 1.3f, .top_p = 0.6f, .seed = 14};
  check_distribution(logits, nucleus, 100000);
}

TEST(Sampler, SeedReproducible) {
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 50; ++i) rows.push_back(random_logits(1000, 2));
  auto run = [&](uint64_t seed) {
    Sampler sampler(SamplingParams{.temperature = 1.0f, .top_p = 0.95f, .top_k = 100, .seed = seed});
    std::vector<int32_t> out;
    for (const auto& row : rows) out.push_back(sampler.sample(row, out));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, RepetitionPenaltyScalesBySign) {
  SamplingParams p{.repetition_penalty = 2.0f};
  std::vector<float> logits = {2, -2, 1, 0.5f};
  std::vector<int32_t> history = {0, 1, 1};  // a repeated id is penalised once
  sampling::apply_logit_processors(p, logits, history);
  EXPECT_EQ(logits, (std::vector<float>{1, -4, 1, 0.5f}));

  // Only the last context_size tokens count; 0 means the whole history.
  p.repetition_context_size = 1;
  logits = {2, -2, 1, 0.5f};
  sampling::apply_logit_processors(p, logits, std::vector<int32_t>{0, 2});
  EXPECT_EQ(logits, (std::vector<float>{2, -2, 0.5f, 0.5f}));
  p.repetition_context_size = 0;
  logits = {2, -2, 1, 0.5f};
  sampling::apply_logit_processors(p, logits, std::vector<int32_t>{0, 2});
  EXPECT_EQ(logits, (std::vector<float>{1, -2, 0.5f, 0.5f}));
}

TEST(Sampler, PresenceOncePerTokenFrequencyPerOccurrence) {
  std::vector<int32_t> history = {0, 0, 0, 2};
  SamplingParams presence{.presence_penalty = 0.5f};
  std::vector<float> logits = {1, 1, 1};
  sampling::apply_logit_processors(presence, logits, history);
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 1, 0.5f}));
  SamplingParams frequency{.frequency_penalty = 0.5f};
  logits = {1, 1, 1};
  sampling::apply_logit_processors(frequency, logits, history);
  EXPECT_EQ(logits, (std::vector<float>{-0.5f, 1, 0.5f}));
  frequency.frequency_context_size = 2;  // sees {0, 2}
  logits = {1, 1, 1};
  sampling::apply_logit_processors(frequency, logits, history);
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 1, 0.5f}));
}

TEST(Sampler, ProcessorOrderBiasThenPenalties) {
  // Bias first turns logit 1 into -1, so the repetition penalty multiplies: -1 · 2 = -2; then
  // presence -0.25 and frequency -0.5 · 2.
  SamplingParams p{.repetition_penalty = 2.0f, .presence_penalty = 0.25f, .frequency_penalty = 0.5f};
  p.logit_bias = {{0, -2.0f}, {1, 3.0f}};
  std::vector<float> logits = {1, 0};
  sampling::apply_logit_processors(p, logits, std::vector<int32_t>{0, 0});
  EXPECT_FLOAT_EQ(logits[0], -2.0f - 0.25f - 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 3.0f);
}

TEST(Sampler, PenaltiesChangeGreedyChoiceAndLogprobs) {
  Sampler sampler(SamplingParams{.temperature = 0, .repetition_penalty = 1.5f});
  std::vector<float> logits = {1.0f, 0.9f, -3.0f};
  EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{0}), 1);
  auto lp = sampler.last_logprobs();
  ASSERT_EQ(lp.size(), 3u);
  // Processed (1/1.5, 0.9, -3), normalised, not filtered.
  std::vector<float> expected = log_softmax({1.0f / 1.5f, 0.9f, -3.0f});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(lp[i], expected[i], 1e-6);
  // Bias decides too.
  Sampler biased(SamplingParams{.temperature = 0, .logit_bias = {{2, 10.0f}}});
  EXPECT_EQ(biased.sample(logits), 2);
  // A filtered sampler still reports the unfiltered distribution.
  Sampler filtered(SamplingParams{.temperature = 1, .top_k = 1, .seed = 1});
  EXPECT_EQ(filtered.sample(logits), 0);
  EXPECT_GT(filtered.last_logprobs()[2], kNegInf);
}

TEST(Sampler, InvalidParamsNameTheField) {
  auto expect_error = [](SamplingParams p, const std::string& field) {
    try {
      Sampler sampler(p);
      ADD_FAILURE() << "no error for " << field;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_error({.temperature = -0.1f}, "temperature");
  expect_error({.temperature = nan}, "temperature");
  expect_error({.top_p = 0.0f}, "top_p");
  expect_error({.top_p = 1.5f}, "top_p");
  expect_error({.top_p = nan}, "top_p");
  expect_error({.top_k = -1}, "top_k");
  expect_error({.min_p = 1.0f}, "min_p");
  expect_error({.min_p = -0.1f}, "min_p");
  expect_error({.repetition_penalty = 0.0f}, "repetition_penalty");
  expect_error({.repetition_penalty = -1.0f}, "repetition_penalty");
  expect_error({.repetition_context_size = -1}, "repetition_context_size");
  expect_error({.presence_penalty = nan}, "presence_penalty");
  expect_error({.frequency_penalty = std::numeric_limits<float>::infinity()}, "frequency_penalty");
  expect_error({.logit_bias = {{-1, 1.0f}}}, "logit_bias");
  expect_error({.logit_bias = {{3, nan}}}, "logit_bias");
}

TEST(Sampler, BadInputsAtSampleTime) {
  Sampler biased(SamplingParams{.logit_bias = {{10, 1.0f}}, .seed = 1});
  EXPECT_THROW(biased.sample(std::vector<float>{0, 1}), InvalidArgument);
  Sampler penalised(SamplingParams{.repetition_penalty = 1.2f, .seed = 1});
  EXPECT_THROW(penalised.sample(std::vector<float>{0, 1}, std::vector<int32_t>{5}), InvalidArgument);
  EXPECT_THROW(penalised.sample(std::vector<float>{0, 1}, std::vector<int32_t>{-1}), InvalidArgument);
  EXPECT_THROW(penalised.sample(std::vector<float>{}), InvalidArgument);
  EXPECT_THROW(penalised.sample(std::vector<float>{kNegInf, kNegInf}), InvalidArgument);
  // Out-of-range history ids are ignored when no penalty reads the history.
  Sampler plain(SamplingParams{.seed = 1});
  EXPECT_NO_THROW(plain.sample(std::vector<float>{0, 1}, std::vector<int32_t>{5}));
}

TEST(Sampler, DefaultsFromGenerationConfig) {
  GenerationConfig demo = load_generation_config(test::source_path("models/demo"));
  SamplingParams p = sampling_from_generation_config(demo);
  EXPECT_FLOAT_EQ(p.temperature, 0.8f);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.top_k, 64);
  EXPECT_EQ(p.min_p, 0.0f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_NO_THROW(Sampler{p});

  GenerationConfig empty;
  EXPECT_EQ(sampling_from_generation_config(empty).temperature, 1.0f);
  GenerationConfig greedy;
  greedy.do_sample = false;
  greedy.temperature = 0.7f;
  EXPECT_EQ(sampling_from_generation_config(greedy).temperature, 0.0f);
  GenerationConfig other;
  other.min_p = 0.05f;
  other.repetition_penalty = 1.1f;
  EXPECT_FLOAT_EQ(sampling_from_generation_config(other).min_p, 0.05f);
  EXPECT_FLOAT_EQ(sampling_from_generation_config(other).repetition_penalty, 1.1f);
}

// The edits a backend applies give the host processors' logits bit for bit.
TEST(Sampler, LogitEditsReproduceTheProcessors) {
  for (int trial = 0; trial < 40; ++trial) {
    SamplingParams p;
    p.repetition_penalty = trial % 3 ? 1.0f + static_cast<float>(trial % 5) * 0.15f : 1.0f;
    p.presence_penalty = trial % 4 ? 0.3f * static_cast<float>(trial % 3) : 0.0f;
    p.frequency_penalty = trial % 5 ? -0.2f + 0.1f * static_cast<float>(trial % 4) : 0.0f;
    p.repetition_context_size = trial % 7;
    p.presence_context_size = 3 + trial % 5;
    p.frequency_context_size = trial % 2 ? 0 : 9;
    for (int b = 0; b < trial % 6; ++b)
      p.logit_bias[static_cast<int32_t>(test::rng()() % 50)] = 0.5f + static_cast<float>(b);
    std::vector<int32_t> history(test::rng()() % 40);
    for (auto& id : history) id = static_cast<int32_t>(test::rng()() % 50);
    std::vector<float> expected = random_logits(50);
    std::vector<float> edited = expected;
    sampling::apply_logit_processors(p, expected, history);
    const std::vector<LogitEdit> edits = sampling::logit_edits(p, history, edited.size());
    std::set<int32_t> ids;
    for (const LogitEdit& e : edits) EXPECT_TRUE(ids.insert(e.id).second) << "edit ids are distinct";
    sampling::apply_logit_edits(edits, edited);
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(edited[i]), std::bit_cast<uint32_t>(expected[i]))
          << "trial " << trial;
  }
  EXPECT_THROW(sampling::logit_edits(SamplingParams{.presence_penalty = 1}, std::vector<int32_t>{7}, 5),
               InvalidArgument);
}

// The candidate cut against the host filters: kWithin names the host's survivors, kFloor a floor that
// keeps exactly them, kHost a survivor set past the candidates.
TEST(Sampler, CandidateCutMatchesTheFilters) {
  const int kCount = 32;
  int kinds[3] = {};
  for (int trial = 0; trial < 600; ++trial) {
    std::vector<float> logits = random_logits(200, trial % 3 == 0 ? 0.5f : 6.0f);
    for (int i = 0; i < trial % 4 * 10; ++i) logits[test::rng()() % logits.size()] = kNegInf;
    const float top_p = trial % 5 == 0 ? 1.0f : 0.3f + 0.1f * static_cast<float>(trial % 7);
    const float min_p = trial % 4 == 1 ? 0.02f * static_cast<float>(1 + trial % 3) : 0.0f;
    const int top_k = trial % 6 == 2 ? 0 : (trial % 6 == 3 ? 150 : 1 + trial % 40);
    const std::vector<float> lp = log_softmax(logits);
    std::vector<float> filtered = lp;
    sampling::apply_top_p(filtered, top_p);
    sampling::apply_min_p(filtered, min_p);
    sampling::apply_top_k(filtered, top_k);
    const std::set<int32_t> expected = survivors(filtered);
    const std::vector<int32_t> ranked = sampling::ranked_finite(lp);
    std::vector<float> candidates;
    for (size_t r = 0; r < std::min<size_t>(kCount, ranked.size()); ++r) candidates.push_back(lp[ranked[r]]);
    const CandidateCut cut = cut_candidates(candidates.data(), static_cast<int32_t>(candidates.size()),
                                            static_cast<int64_t>(ranked.size()), top_p, min_p, top_k);
    ++kinds[cut.kind];
    if (cut.kind == CandidateCut::kWithin) {
      EXPECT_EQ(expected, std::set<int32_t>(ranked.begin(), ranked.begin() + cut.survivors))
          << "trial " << trial;
    } else if (cut.kind == CandidateCut::kFloor) {
      std::set<int32_t> floor;
      for (int32_t id : ranked)
        if (static_cast<double>(lp[id]) >= cut.floor) floor.insert(id);
      EXPECT_EQ(expected, floor) << "trial " << trial;
    } else {
      EXPECT_GT(expected.size(), static_cast<size_t>(kCount)) << "trial " << trial;
    }
  }
  for (int kind = 0; kind < 3; ++kind) EXPECT_GT(kinds[kind], 10) << "kind " << kind;
}

// A backend's processing plus sample_processed draws what sample() draws from the same generator state.
TEST(Sampler, SampleProcessedMatchesSample) {
  const SamplingParams p{
      .temperature = 0.8f, .top_p = 0.9f, .top_k = 40, .repetition_penalty = 1.2f, .seed = 5};
  Sampler whole(p), split(p);
  std::vector<int32_t> history = {3, 4, 5};
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> logits = random_logits(500, 3);
    std::vector<float> processed = logits;
    sampling::apply_logit_edits(sampling::logit_edits(p, history, logits.size()), processed);
    const int32_t token = whole.sample(logits, history);
    ASSERT_EQ(token, split.sample_processed(processed, split.next_uniform())) << "step " << i;
    history.push_back(token);
  }
}
}  // namespace
}  // namespace lmx
