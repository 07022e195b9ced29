// Benchmark of the CPU op set's hot path: linear as GEMV (decode, M = 1) and GEMM (prefill) with
// bf16/f32 weights, against the machine's memory read bandwidth. Prints a table; asserts nothing.
//
// Usage: bench_ops_bench [threads]   (0 or absent = hardware concurrency)
// "hot" rows reuse one weight matrix (it may sit in the last-level cache); "cold" rows rotate over
// enough distinct matrices (≥ 1 GiB) that every call streams its weights from DRAM.
#include "lmx/core/half.h"
#include "lmx/core/tensor.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include "bench_support.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace lmx::bench;

lmx::Tensor random_weights(int64_t n, int64_t k, lmx::DType dtype, uint64_t seed) {
  lmx::Tensor w = lmx::Tensor::zeros({n, k}, dtype);
  const int64_t count = n * k;
  lmx::parallel_for(count, 1 << 20, [&](int64_t begin, int64_t end) {
    std::mt19937 gen(static_cast<uint32_t>(seed * 7919 + static_cast<uint64_t>(begin)));
    std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
    if (dtype == lmx::DType::kBF16) {
      auto* p = static_cast<uint16_t*>(w.raw_data());
      for (int64_t i = begin; i < end; ++i) p[i] = lmx::f32_to_bf16(dist(gen));
    } else {
      float* p = w.data<float>();
      for (int64_t i = begin; i < end; ++i) p[i] = dist(gen);
    }
  });
  return w;
}


struct Row {
  std::string name;
  double us_per_call, weight_gbs, gflops;
};

// Times out = x · wᵀ for one shape. cold: rotate over copies totalling ≥ 1 GiB.
Row time_linear(int64_t m, int64_t n, int64_t k, lmx::DType dtype, bool cold) {
  const size_t weight_bytes = static_cast<size_t>(n * k) * lmx::dtype_size(dtype);
  const int copies =
      cold ? static_cast<int>(std::max<size_t>(2, ((size_t{1} << 30) + weight_bytes - 1) / weight_bytes)) : 1;
  std::vector<lmx::Tensor> weights;
  for (int c = 0; c < copies; ++c)
    weights.push_back(random_weights(n, k, dtype, static_cast<uint64_t>(c + 1)));
  lmx::Tensor x = random_weights(m, k, lmx::DType::kF32, 99);
  lmx::Tensor out = lmx::Tensor::zeros({m, n}, lmx::DType::kF32);
  size_t next = 0;
  const double flops_per_call = 2.0 * static_cast<double>(m * n * k);
  // Aim at ~0.2 s per rep.
  const auto probe = Clock::now();
  lmx::ops::linear(x, weights[0], out);
  const double one = std::max(seconds_since(probe), 1e-6);
  const int inner = std::max(1, static_cast<int>(0.2 / one));
  const double s = best_seconds(5, inner, [&] {
    lmx::ops::linear(x, weights[next], out);
    next = (next + 1) % weights.size();
  });
  const std::string name =
      fmt::format("linear {} M={} N={} K={} {}", lmx::dtype_name(dtype), m, n, k, cold ? "cold" : "hot");
  return {name, s * 1e6, static_cast<double>(weight_bytes) / s / 1e9, flops_per_call / s / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  lmx::set_default_threads(threads);
  fmt::print("lmx ops bench: {} threads ({} hardware)\n\n", lmx::default_pool().threads(),
             std::thread::hardware_concurrency());

  const Bandwidth best = [] {  // the probe's 1 GiB is released before the benchmarks
    BandwidthProbe probe;
    return read_bandwidth(probe, lmx::default_pool().threads(), 5);
  }();
  const double bandwidth = best.gbs;
  fmt::print("memory read bandwidth (best of 5 passes over 1 GiB): {:.1f} GB/s ({} thread(s) × {} streams)\n\n",
             bandwidth, best.threads, best.streams);

  std::vector<Row> rows;
  using lmx::DType;
  rows.push_back(time_linear(1, 4096, 4096, DType::kBF16, false));
  rows.push_back(time_linear(1, 4096, 4096, DType::kBF16, true));
  rows.push_back(time_linear(1, 8192, 4096, DType::kBF16, false));
  rows.push_back(time_linear(1, 8192, 4096, DType::kBF16, true));
  rows.push_back(time_linear(1, 4096, 4096, DType::kF32, true));
  rows.push_back(time_linear(4, 4096, 4096, DType::kBF16, true));
  rows.push_back(time_linear(8, 4096, 4096, DType::kBF16, true));
  rows.push_back(time_linear(16, 4096, 4096, DType::kBF16, true));
  rows.push_back(time_linear(64, 4096, 4096, DType::kBF16, false));
  rows.push_back(time_linear(64, 4096, 4096, DType::kF32, false));
  rows.push_back(time_linear(256, 4096, 4096, DType::kBF16, false));

  fmt::print("{:<44} {:>12} {:>14} {:>10} {:>10}\n", "op", "us/call", "weights GB/s", "% of BW", "GFLOP/s");
  for (const Row& r : rows)
    fmt::print("{:<44} {:>12.1f} {:>14.1f} {:>9.0f}% {:>10.1f}\n", r.name, r.us_per_call, r.weight_gbs,
               100.0 * r.weight_gbs / bandwidth, r.gflops);
  return 0;
}
