// Lists the batch-1 4-bit GEMV launches of a model's steps on a CUDA device, each distinct (shape, kind,
// pairs) once with the plan it took under the tuning table in use (LMX_TUNING) — the shapes to sweep with
// the table's q4_gemv.shapes (scripts/plan_sweep_gpu.sh) — through the plan observer (cuda/linear.h).
// "launches" counts host-side launches: a decode step captured as a CUDA graph counts once, not per replay.
// Usage: bench_cuda_q4_plans MODEL_DIR [PROMPT_TOKENS [DECODE_STEPS [DEVICE]]]   (defaults: 16, 4, 0)
#include "lmx/core/device.h"
#include "lmx/core/error.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/backends.h"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/tuning.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {

using Key = std::tuple<int64_t, int64_t, bool, bool, int>;  // n, k, GeGLU output, GeGLU input, pairs

std::mutex g_mutex;
std::map<Key, std::pair<lmx::cuda::Q4PlanEvent, int64_t>> g_plans;  // the plan and its launches

void observe(const lmx::cuda::Q4PlanEvent& e) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  auto [it, fresh] = g_plans.try_emplace(Key{e.n, e.k, e.geglu_output, e.gelu_input, e.pairs}, e, 0);
  ++it->second.second;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [PROMPT_TOKENS [DECODE_STEPS [DEVICE]]]\n", argv[0]);
    return 2;
  }
  const int prompt_tokens = argc > 2 ? std::atoi(argv[2]) : 16;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 4;
  const int device = argc > 4 ? std::atoi(argv[4]) : 0;
  try {
    lmx::cuda::set_q4_plan_observer(observe);
    auto model = lmx::LanguageModel::load(argv[1], lmx::make_backend(lmx::Device::cuda(device)));
    auto sequence = model->new_sequence();
    std::vector<int32_t> prompt(static_cast<size_t>(std::max(prompt_tokens, 1)));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + i % 1000);
    lmx::StepRow row{sequence.get(), prompt};
    int32_t token = model->forward_argmax({&row, 1})[0];
    for (int i = 0; i < steps; ++i) {
      lmx::StepRow step{sequence.get(), {&token, 1}};
      token = model->forward_argmax({&step, 1})[0];
    }
    lmx::cuda::set_q4_plan_observer(nullptr);
    std::printf("%s, tuning table %s\n", model->device_description().c_str(),
                lmx::cuda::device_tuning_name(device));
    std::printf("%-14s %-14s %5s  %-8s %8s %9s %7s %9s\n", "shape", "kind", "pairs", "S/T/P", "segments",
                "chunks/seg", "blocks", "launches");
    for (const auto& [key, entry] : g_plans) {
      const lmx::cuda::Q4PlanEvent& e = entry.first;
      const std::string shape = std::to_string(e.n) + "x" + std::to_string(e.k);
      const char* kind = e.geglu_output ? "GeGLU output" : e.gelu_input ? "GeGLU input" : "plain";
      const std::string plan = e.stages == 0 ? "generic"
                                             : std::to_string(e.stages) + "/" + std::to_string(e.tiles) +
                                                   "/" + std::to_string(e.split);
      std::printf("%-14s %-14s %5d  %-8s %8d %9d %7lld %9lld\n", shape.c_str(), kind, e.pairs, plan.c_str(),
                  e.segments, e.max_segment_chunks, static_cast<long long>(e.blocks),
                  static_cast<long long>(entry.second));
    }
  } catch (const lmx::Error& e) {
    std::fprintf(stderr, "bench_cuda_q4_plans: %s\n", e.what());
    return 1;
  }
  return 0;
}
