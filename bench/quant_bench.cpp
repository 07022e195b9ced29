// Benchmark of the MLX affine-quantized kernels: quantized_linear as GEMV (decode, M = 1) in GB/s of
// weight bytes read (codes + scales + biases) against the machine's measured read bandwidth, and as
// GEMM (prefill, M = 64 and 512, weights cache-resident) in GFLOP/s and as a share of the CPU's peak multiply-add
// rate for the instruction the path is built on (measured in the same run), for the f32 kernels and (4 and 8 bits on CPUs with AVX-512 VNNI) the
// integer kernels side by side (ops::cpu::set_quantized_integer_kernels switches between them). Prints a
// table; asserts nothing.
//
// Usage: bench_quant_bench [threads] [prefill]   (threads 0 or absent = hardware concurrency; "prefill": only
// the prefill table)
// Cold GEMV rows are also given as % of the read bandwidth measured right next to them ("adj").
// "hot" rows reuse one weight (it may sit in the last-level cache); "cold" rows rotate over enough
// distinct copies (≥ 1 GiB) that every call streams its weights from DRAM.
#include "lmx/core/half.h"
#include "lmx/core/tensor.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include "bench_support.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace lmx::bench;

// ---- Quantized weights ----------------------------------------------------------------------------------

// A [n, k] weight with random codes and bf16 scales/biases (values of a typical checkpoint's magnitude).
lmx::ops::QuantizedWeight random_weight(int64_t n, int64_t k, int bits, int group, uint64_t seed) {
  lmx::ops::QuantizedWeight w;
  w.bits = bits;
  w.group_size = group;
  w.codes = lmx::Tensor::zeros({n, k * bits / 32}, lmx::DType::kU32);
  w.scales = lmx::Tensor::zeros({n, k / group}, lmx::DType::kBF16);
  w.biases = lmx::Tensor::zeros({n, k / group}, lmx::DType::kBF16);
  uint32_t* codes = w.codes.data<uint32_t>();
  auto* scales = static_cast<uint16_t*>(w.scales.raw_data());
  auto* biases = static_cast<uint16_t*>(w.biases.raw_data());
  const int64_t words = w.codes.numel(), groups = w.scales.numel();
  lmx::parallel_for(words, 1 << 20, [&](int64_t b, int64_t e) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(b) + 1;
    for (int64_t i = b; i < e; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      codes[i] = static_cast<uint32_t>(s);
    }
  });
  for (int64_t g = 0; g < groups; ++g) {
    scales[g] = lmx::f32_to_bf16(0.002f * static_cast<float>(1 + g % 7));
    biases[g] = lmx::f32_to_bf16(-0.01f * static_cast<float>(1 + g % 5));
  }
  return w;
}

lmx::Tensor random_x(int64_t m, int64_t k) {
  lmx::Tensor x = lmx::Tensor::zeros({m, k}, lmx::DType::kF32);
  float* p = x.data<float>();
  for (int64_t i = 0; i < m * k; ++i) p[i] = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
  return x;
}

// One timing: microseconds per call, weight bytes read per second, multiply-adds per second (×2).
struct Timing {
  double us_per_call = 0, weight_gbs = 0, gflops = 0;
};

struct Row {
  std::string name;
  Timing f32, integer;  // integer.us_per_call == 0: no integer kernels for this format or CPU
  double adjacent_gbs = 0;  // cold GEMV rows: the read bandwidth measured right before and after (the best)
};

// Times out = x · dequant(w)ᵀ for one shape under both paths (the f32 kernels, then the integer ones when
// they serve these bits), alternating twice and keeping each path's best. cold: rotate over copies
// totalling ≥ 1 GiB.
Row time_quantized(int64_t m, int64_t n, int64_t k, int bits, int group, bool cold) {
  const lmx::ops::QuantizedWeight first = random_weight(n, k, bits, group, 1);
  const size_t weight_bytes = first.bytes();
  const int copies =
      cold ? static_cast<int>(std::max<size_t>(2, ((size_t{1} << 30) + weight_bytes - 1) / weight_bytes)) : 1;
  std::vector<lmx::ops::QuantizedWeight> weights{first};
  for (int c = 1; c < copies; ++c)
    weights.push_back(random_weight(n, k, bits, group, static_cast<uint64_t>(c + 1)));
  const lmx::Tensor x = random_x(m, k);
  lmx::Tensor out = lmx::Tensor::zeros({m, n}, lmx::DType::kF32);
  size_t next = 0;
  auto time_path = [&](bool integer) {
    lmx::ops::cpu::set_quantized_integer_kernels(integer);
    const auto probe = Clock::now();
    lmx::ops::quantized_linear(x, weights[0], out);
    const double one = std::max(seconds_since(probe), 1e-6);
    const int inner = std::max(1, static_cast<int>(0.2 / one));  // ~0.2 s per rep
    const double s = best_seconds(5, inner, [&] {
      lmx::ops::quantized_linear(x, weights[next], out);
      next = (next + 1) % weights.size();
    });
    return Timing{s * 1e6, static_cast<double>(weight_bytes) / s / 1e9,
                  2.0 * static_cast<double>(m * n * k) / s / 1e9};
  };
  auto best = [](const Timing& a, const Timing& b) { return a.us_per_call <= b.us_per_call ? a : b; };
  lmx::ops::cpu::set_quantized_integer_kernels(true);
  const bool has_integer = lmx::ops::cpu::quantized_integer_kernels(bits);
  Row row;
  row.name = fmt::format("q{} g{} M={} N={} K={} {}", bits, group, m, n, k, cold ? "cold" : "hot");
  for (int round = 0; round < 2; ++round) {
    const Timing f = time_path(false);
    row.f32 = round == 0 ? f : best(row.f32, f);
    if (has_integer) {
      const Timing i = time_path(true);
      row.integer = round == 0 ? i : best(row.integer, i);
    }
  }
  lmx::ops::cpu::set_quantized_integer_kernels(true);
  return row;
}

// Dense bf16 GEMV for comparison (same protocol).
Row time_dense_bf16(int64_t n, int64_t k, bool cold) {
  const size_t weight_bytes = static_cast<size_t>(n * k) * 2;
  const int copies =
      cold ? static_cast<int>(std::max<size_t>(2, ((size_t{1} << 30) + weight_bytes - 1) / weight_bytes)) : 1;
  std::vector<lmx::Tensor> weights;
  for (int c = 0; c < copies; ++c) {
    lmx::Tensor w = lmx::Tensor::zeros({n, k}, lmx::DType::kBF16);
    auto* p = static_cast<uint16_t*>(w.raw_data());
    for (int64_t i = 0; i < n * k; ++i)
      p[i] = lmx::f32_to_bf16(static_cast<float>((i + c) % 97 - 48) * 1e-3f);
    weights.push_back(w);
  }
  const lmx::Tensor x = random_x(1, k);
  lmx::Tensor out = lmx::Tensor::zeros({1, n}, lmx::DType::kF32);
  size_t next = 0;
  const double s = best_seconds(5, 20, [&] {
    lmx::ops::linear(x, weights[next], out);
    next = (next + 1) % weights.size();
  });
  Row row;
  row.name = fmt::format("dense bf16 M=1 N={} K={} {}", n, k, cold ? "cold" : "hot");
  row.f32 = {s * 1e6, static_cast<double>(weight_bytes) / s / 1e9, 2.0 * static_cast<double>(n * k) / s / 1e9};
  return row;
}

// Dense bf16 GEMM (prefill), weights cache-resident: linear() with bf16 weights.
Row time_dense_gemm(int64_t m, int64_t n, int64_t k) {
  lmx::Tensor w = lmx::Tensor::zeros({n, k}, lmx::DType::kBF16);
  auto* p = static_cast<uint16_t*>(w.raw_data());
  for (int64_t i = 0; i < n * k; ++i) p[i] = lmx::f32_to_bf16(static_cast<float>(i % 97 - 48) * 1e-3f);
  const lmx::Tensor x = random_x(m, k);
  lmx::Tensor out = lmx::Tensor::zeros({m, n}, lmx::DType::kF32);
  const auto probe = Clock::now();
  lmx::ops::linear(x, w, out);
  const int inner = std::max(1, static_cast<int>(0.2 / std::max(seconds_since(probe), 1e-6)));
  const double s = best_seconds(5, inner, [&] { lmx::ops::linear(x, w, out); });
  Row row;
  row.name = fmt::format("dense bf16 M={} N={} K={} hot", m, n, k);
  row.f32 = {s * 1e6, static_cast<double>(n * k * 2) / s / 1e9, 2.0 * static_cast<double>(m * n * k) / s / 1e9};
  return row;
}

// The prefill table: many x rows, weights cache-resident; multiply-adds per second against the CPU's peak for
// the instruction each path is built on (the integer kernels: vpdpbusd; the f32 kernels and dense bf16: f32 FMA).
void print_prefill(int pool_threads) {
  const ComputePeak peak = compute_peak(pool_threads);
  fmt::print("\ncompute peak, {} threads: vpdpbusd {:.0f} G int8 MAC/s, f32 FMA {:.0f} G MAC/s, vdpbf16ps {:.0f} G "
             "MAC/s\n",
             pool_threads, peak.vnni_int8 / 1e9, peak.fma_f32 / 1e9, peak.bf16_dot / 1e9);
  fmt::print("{:<36} | {:>9} {:>8} {:>7} | {:>9} {:>8} {:>7}\n", "prefill (hot)", "f32 us", "GFLOP/s",
             "% FMA", "int us", "GFLOP/s", "% VNNI");
  auto share = [](const Timing& t, double peak_macs) {
    if (t.us_per_call == 0 || peak_macs == 0) return fmt::format("{:>9} {:>8} {:>7}", "—", "—", "—");
    return fmt::format("{:>9.1f} {:>8.1f} {:>6.1f}%", t.us_per_call, t.gflops, 100.0 * t.gflops * 1e9 / 2 / peak_macs);
  };
  // Gemma 4 E2B's projection shapes (hidden 1536, MLP 6144) and a square one, at prompt chunk sizes.
  const std::pair<int64_t, int64_t> shapes[] = {{6144, 1536}, {1536, 6144}, {4096, 4096}};
  for (int64_t m : {64, 512})
    for (auto [n, k] : shapes)
      for (int bits : {4, 8}) {
        const Row r = time_quantized(m, n, k, bits, 64, false);
        fmt::print("{:<36} | {} | {}\n", r.name, share(r.f32, peak.fma_f32), share(r.integer, peak.vnni_int8));
      }
  for (int64_t m : {64, 512})
    for (auto [n, k] : shapes) {
      const Row r = time_dense_gemm(m, n, k);
      fmt::print("{:<36} | {} | {}\n", r.name, share(r.f32, peak.fma_f32), share(Timing{}, 0));
    }

}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const bool prefill_only = argc > 2 && std::strcmp(argv[2], "prefill") == 0;
  lmx::set_default_threads(threads);
  const int pool_threads = lmx::default_pool().threads();
  fmt::print("lmx quant bench: {} threads ({} hardware)\n\n", pool_threads,
             std::thread::hardware_concurrency());

  if (prefill_only) {
    print_prefill(pool_threads);
    return 0;
  }
  BandwidthProbe probe;  // one 1 GiB buffer for every bandwidth measurement of the run
  const Bandwidth bw = read_bandwidth(probe, pool_threads, 5);
  fmt::print(
      "memory read bandwidth (best of 5 passes over 1 GiB): {:.1f} GB/s ({} thread(s) × {} streams)\n\n",
      bw.gbs, bw.threads, bw.streams);

  // Cold GEMV rows also get the bandwidth measured next to them (best of two passes just before and just
  // after, in the best configuration above): on a shared machine it drifts during the run.
  auto gemv = [&](int64_t n, int64_t k, int bits, int group, bool cold) {
    const double before = cold ? probe.gbs(bw.threads, bw.streams, 2) : 0.0;
    Row row = time_quantized(1, n, k, bits, group, cold);
    if (cold) row.adjacent_gbs = std::max(before, probe.gbs(bw.threads, bw.streams, 2));
    return row;
  };
  std::vector<Row> rows;
  for (int bits : {4, 8})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}, {14336, 4096}})
      for (bool cold : {false, true}) rows.push_back(gemv(n, k, bits, 64, cold));
  for (int bits : {4, 8}) {
    rows.push_back(gemv(8192, 4096, bits, 64, true));
    rows.push_back(gemv(4096, 4096, bits, 32, true));
    rows.push_back(gemv(4096, 4096, bits, 128, true));
  }
  rows.push_back(gemv(4096, 4096, 3, 64, true));
  rows.push_back(gemv(4096, 4096, 6, 64, true));
  for (int bits : {4, 8}) rows.push_back(time_quantized(4, 4096, 4096, bits, 64, true));
  rows.push_back(time_dense_bf16(4096, 4096, true));

  // Side by side: the f32 kernels and the integer (VNNI) kernels on the same weights in the same run.
  // "% BW": of the bandwidth measured at the start; "% adj": of the bandwidth measured next to the row.
  fmt::print("{:<36} | {:>9} {:>8} {:>6} {:>8} | {:>9} {:>8} {:>6} {:>8} | {:>7} {:>6} {:>6}\n", "op", "f32 us",
             "GB/s", "% BW", "GFLOP/s", "int us", "GB/s", "% BW", "GFLOP/s", "adj BW", "f32 %", "int %");
  auto cells = [&](const Timing& t) {
    if (t.us_per_call == 0) return fmt::format("{:>9} {:>8} {:>6} {:>8}", "—", "—", "—", "—");
    return fmt::format("{:>9.1f} {:>8.1f} {:>5.0f}% {:>8.1f}", t.us_per_call, t.weight_gbs,
                       100.0 * t.weight_gbs / bw.gbs, t.gflops);
  };
  auto adjacent = [&](const Row& r) {
    if (r.adjacent_gbs == 0) return std::string();
    auto pct = [&](const Timing& t) {
      return t.us_per_call == 0 ? fmt::format("{:>6}", "—") : fmt::format("{:>5.0f}%", 100.0 * t.weight_gbs / r.adjacent_gbs);
    };
    return fmt::format(" | {:>7.1f} {} {}", r.adjacent_gbs, pct(r.f32), pct(r.integer));
  };
  for (const Row& r : rows) fmt::print("{:<36} | {} | {}{}\n", r.name, cells(r.f32), cells(r.integer), adjacent(r));

  print_prefill(pool_threads);

  // On a shared machine the bandwidth drifts: measure it again (best configuration only) to show by how much.
  fmt::print("\nread bandwidth again after the kernels ({} thread(s) × {} streams):\n", bw.threads,
             bw.streams);
  read_bandwidth(probe, bw.threads, 5, bw.threads, bw.streams);
  return 0;
}
