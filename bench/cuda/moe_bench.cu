// Benchmark of the CUDA MoE expert dispatch at decode sizes (lmx/ops/cuda/linear.h quantized_moe_experts),
// Gemma 4 26B-A4B shapes by default: 128 experts, top-8, hidden 2816, expert width 704, 4-bit codes with
// group-64 bf16 scales. For T tokens (1, 2, 4, 8) it times the dispatch alone and with the MoE block's
// output norms (MoeOutputNorms: the combine then norms and adds into a dense row), and prints the median µs
// per call and the GB/s of the distinct experts' weights it reads. Every call routes to fresh random experts
// (distinct within a token), so the weights come from HBM as in a forward pass (one layer's stack is
// ~430 MB; a call reads ~27 MB at T = 1).
// With `prefill` first, T is 2048 and 8192 instead (the grouped prefill GEMM; random routing, one per size)
// and the line gives TFLOP/s of the experts' useful work (2 · pairs · 3 · hidden · inter).
// Usage: bench_cuda_moe [prefill] [experts top_k hidden inter]
#include "bench_cuda_support.cuh"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/linear.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <string_view>
#include <vector>

namespace {

using lmx::cuda::DeviceBuffer;

// One quantized expert stack [experts, rows, cols] resident on the device.
struct Stack {
  DeviceBuffer codes, scales, biases;
  lmx::cuda::DeviceQuantized view;
};

Stack make_stack(int64_t experts, int64_t rows, int64_t cols, uint32_t seed) {
  constexpr int kGroup = 64;
  Stack s;
  const size_t words = static_cast<size_t>(experts * rows * cols / 8);
  const size_t groups = static_cast<size_t>(experts * rows * cols / kGroup);
  s.codes = DeviceBuffer(words * 4);
  s.scales = DeviceBuffer(groups * 2);
  s.biases = DeviceBuffer(groups * 2);
  lmx::bench::fill_random(s.codes.data(), words * 4, seed, false);
  lmx::bench::fill_random(s.scales.data(), groups * 2, seed + 1, true);
  lmx::bench::fill_random(s.biases.data(), groups * 2, seed + 2, true);
  s.view.codes = s.codes.as<const uint32_t>();
  s.view.scales = s.scales.data();
  s.view.biases = s.biases.data();
  s.view.scale_dtype = lmx::DType::kBF16;
  s.view.bits = 4;
  s.view.group_size = kGroup;
  s.view.batch = experts;
  s.view.rows = rows;
  s.view.cols = cols;
  s.view.small_scales = true;  // fill_bf16_kernel's values lie in [2^-9, 2^-5), as the uploader would find
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const bool prefill = argc > 1 && std::string_view(argv[1]) == "prefill";
  if (prefill) --argc, ++argv;
  const int experts = argc > 1 ? std::atoi(argv[1]) : 128;
  const int top_k = argc > 2 ? std::atoi(argv[2]) : 8;
  const int64_t hidden = argc > 3 ? std::atoll(argv[3]) : 2816;
  const int64_t inter = argc > 4 ? std::atoll(argv[4]) : 704;
  if (experts < 1 || top_k < 1 || top_k > experts || hidden % 64 != 0 || inter % 64 != 0) {
    fmt::print(stderr, "bench_cuda_moe: need 1 <= top_k <= experts and hidden, inter multiples of 64\n");
    return 2;
  }
  lmx::cuda::CudaContext ctx(0);
  const cudaStream_t stream = ctx.stream();
  const Stack gate_up = make_stack(experts, 2 * inter, hidden, 1), down = make_stack(experts, hidden, inter, 21);
  // Bytes of one expert's three matrices: codes, then bf16 scales and biases per 64 columns.
  const double expert_bytes = 3.0 * static_cast<double>(hidden * inter) * (0.5 + 4.0 / 64.0);
  fmt::print("lmx MoE expert dispatch: {} experts, top-{}, hidden {}, width {}, 4-bit g64 ({:.2f} MB per expert)\n\n",
             experts, top_k, hidden, inter, expert_bytes / 1e6);

  const int routings = prefill ? 1 : 64;  // distinct routings, used in turn
  std::mt19937 rng(5);
  const std::vector<int> sizes = prefill ? std::vector<int>{2048, 8192} : std::vector<int>{1, 2, 4, 8};
  for (int tokens : sizes) {
    // `routings` routings of `tokens` tokens: distinct experts within a token, weights summing to ~1.
    std::vector<int32_t> ids(static_cast<size_t>(routings) * tokens * top_k);
    std::vector<float> weights(ids.size());
    std::vector<int> distinct(routings);
    std::vector<int32_t> all(static_cast<size_t>(experts));
    std::iota(all.begin(), all.end(), 0);
    for (int r = 0; r < routings; ++r) {
      std::set<int32_t> used;
      for (int t = 0; t < tokens; ++t) {
        std::shuffle(all.begin(), all.end(), rng);
        for (int j = 0; j < top_k; ++j) {
          const size_t i = (static_cast<size_t>(r) * tokens + t) * top_k + j;
          ids[i] = all[static_cast<size_t>(j)];
          weights[i] = 1.0f / static_cast<float>(top_k);
          used.insert(ids[i]);
        }
      }
      distinct[static_cast<size_t>(r)] = static_cast<int>(used.size());
    }
    const DeviceBuffer d_ids = lmx::cuda::upload_vector(ids), d_weights = lmx::cuda::upload_vector(weights);
    DeviceBuffer x(static_cast<size_t>(tokens * hidden) * 4), out(static_cast<size_t>(tokens * hidden) * 4),
        dense(static_cast<size_t>(tokens * hidden) * 4), norm(static_cast<size_t>(hidden) * 4);
    lmx::bench::fill_f32_kernel<<<64, 256>>>(x.as<float>(), static_cast<size_t>(tokens * hidden), 3);
    lmx::bench::fill_f32_kernel<<<64, 256>>>(dense.as<float>(), static_cast<size_t>(tokens * hidden), 4);
    lmx::bench::fill_f32_kernel<<<64, 256>>>(norm.as<float>(), static_cast<size_t>(hidden), 5);
    LMX_CUDA_CHECK_LAUNCH();
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
    const double mean_distinct =
        std::accumulate(distinct.begin(), distinct.end(), 0.0) / static_cast<double>(routings);

    lmx::cuda::MoeOutputNorms norms;
    norms.dense_out = dense.as<float>();
    norms.dense_norm = norm.as<const float>();
    norms.expert_norm = norm.as<const float>();
    for (bool with_norms : {false, true}) {
      if (prefill && with_norms) continue;
      const double t = lmx::bench::median_seconds(stream, prefill ? 20 : 50, 1, [&](int call) {
        const size_t r = static_cast<size_t>(call % routings) * static_cast<size_t>(tokens * top_k);
        lmx::cuda::quantized_moe_experts(x.as<float>(), tokens, d_ids.as<int32_t>() + r, d_weights.as<float>() + r,
                                         top_k, gate_up.view, down.view, out.as<float>(), ctx,
                                         with_norms ? &norms : nullptr);
      });
      if (prefill) {
        const double flops = 2.0 * tokens * top_k * 3.0 * static_cast<double>(hidden * inter);
        fmt::print("T {:>5}  dispatch (plain combine) {:>9.1f} us  {:>6.1f} TFLOP/s\n", tokens, t * 1e6,
                   flops / t / 1e12);
        continue;
      }
      fmt::print("T {:>2}  {:<28} {:>8.1f} us  {:>7.1f} GB/s of {:.1f} distinct experts' weights\n", tokens,
                 with_norms ? "dispatch + output norms" : "dispatch (plain combine)", t * 1e6,
                 mean_distinct * expert_bytes / t / 1e9, mean_distinct);
    }
  }
  return 0;
}
