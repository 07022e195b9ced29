// Host sampler benchmark: microseconds per Sampler::sample over one row of logits of a Gemma-sized vocabulary
// (262 144), for the settings a front end sends — what the engine's host sampling costs per row and step.
//
//   bench_sampler_bench [--vocab N] [--repeats N]
#include "lmx/engine/sampler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  size_t vocab = 262144;
  int repeats = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--vocab")) vocab = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
  }
  // Logits shaped like a language model's: most tokens far below a few likely ones.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& v : logits) v = normal(rng);
  for (int i = 0; i < 40; ++i) logits[rng() % vocab] += 12.0f;
  std::vector<int32_t> history(600);
  for (auto& t : history) t = static_cast<int32_t>(rng() % vocab);

  struct Case {
    const char* name;
    lmx::SamplingParams params;
  };
  std::vector<Case> cases = {
      {"greedy", {.temperature = 0}},
      {"temperature 0.8", {.temperature = 0.8f}},
      {"top_k 64", {.temperature = 0.8f, .top_k = 64}},
      {"top_p 0.95", {.temperature = 0.8f, .top_p = 0.95f}},
      {"top_p 0.95 + top_k 64 (Gemma)", {.temperature = 1.0f, .top_p = 0.95f, .top_k = 64}},
      {"min_p 0.05", {.temperature = 0.8f, .min_p = 0.05f}},
      {"penalties",
       {.temperature = 0.8f,
        .repetition_penalty = 1.1f,
        .presence_penalty = 0.5f,
        .frequency_penalty = 0.5f}},
  };
  std::printf("vocab %zu, median of %d\n%-32s %12s\n", vocab, repeats, "settings", "us per row");
  for (Case& c : cases) {
    c.params.seed = 1;
    lmx::Sampler sampler(c.params);
    std::vector<double> us;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      volatile int32_t token = sampler.sample(logits, history);
      (void)token;
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(us.begin(), us.begin() + static_cast<long>(us.size() / 2), us.end());
    std::printf("%-32s %12.0f\n", c.name, us[us.size() / 2]);
  }
  return 0;
}
