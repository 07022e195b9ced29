// Benchmark of the CUDA projections (lmx/ops/cuda/linear.h): quantized_linear (4/8-bit, group 64, bf16
// scales) and dense_linear (bf16) on LLM-sized matrices for decode and prefill row counts; 4-bit weights
// twice, the second time ("q4 g64 s") flagged DeviceQuantized::small_scales (the fill's scales are all below
// kSmallScaleLimit). Prints one table row per case: median time of back-to-back calls (CUDA events),
// weight bytes read per second and its share of the device's read bandwidth, and TFLOP/s for M >= 64.
//
// The ceiling: the read bandwidth of a read-only kernel (sum of 16-byte loads over a 4 GiB buffer, the
// same access width as the kernels). A 2 GiB cudaMemcpy device-to-device is printed too, as (read + write)
// bytes / time. Each timed call reads a different copy of the weight (copies totalling >= 4x the L2), so
// weights come from HBM, as in a real forward pass. LMX_BENCH_WARM_L2=1 in the environment reads one copy
// instead (as much of it from L2 as fits: what an L2 prefetch ahead of the projection could give at best).
//
// Usage: bench_cuda_linear [N K [bits [M]]]   (bits 4, 8 or 16 = bf16; without arguments: every case)
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
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using lmx::bench::fill_random;
using lmx::bench::median_seconds;
using lmx::cuda::CudaContext;
using lmx::cuda::DeviceBuffer;

__global__ void read_sum_kernel(const uint4* data, size_t count, unsigned long long* sink) {
  uint32_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Four independent loads in flight per thread per iteration.
  for (; i + 3 * stride < count; i += 4 * stride) {
    const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride), c = __ldcs(data + i + 2 * stride),
                d = __ldcs(data + i + 3 * stride);
    acc += a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < count; i += stride) {
    const uint4 a = __ldcs(data + i);
    acc += a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);  // keeps the loads alive
}

double read_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{4} << 30;
  DeviceBuffer buffer(bytes);
  DeviceBuffer sink(sizeof(unsigned long long));
  fill_random(buffer.data(), bytes, 1, false);
  int sms = 0;
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double s = median_seconds(stream, 10, 1, [&](int) {
    read_sum_kernel<<<sms * 8, 512, 0, stream>>>(buffer.as<uint4>(), bytes / 16, sink.as<unsigned long long>());
  });
  return bytes / s;
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer a(bytes), b(bytes);
  fill_random(a.data(), bytes, 2, false);
  const double s = median_seconds(stream, 10, 1, [&](int) {
    LMX_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * bytes / s;
}

struct Case {
  int64_t n, k;
};

}  // namespace

int main(int argc, char** argv) {
  // Optional filter (for profiling one case): N K [bits [M]].
  int64_t only_n = 0, only_k = 0, only_m = 0;
  int only_bits = 0;
  if (argc >= 3) only_n = std::atoll(argv[1]), only_k = std::atoll(argv[2]);
  if (argc >= 4) only_bits = std::atoi(argv[3]);
  if (argc >= 5) only_m = std::atoll(argv[4]);
  if (argc == 2 || argc > 5 || (argc >= 3 && (only_n <= 0 || only_k <= 0))) {
    fmt::print(stderr, "usage: bench_cuda_linear [N K [bits [M]]]\n");
    return 2;
  }
  if (lmx::cuda::device_count() == 0) {
    fmt::print("no CUDA device\n");
    return 0;
  }
  CudaContext ctx(0);
  cudaStream_t stream = ctx.stream();
  int l2 = 0;
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  fmt::print("{}\n", lmx::cuda::device_description(0));
  const double read_bw = read_bandwidth(stream);
  const double copy_bw = copy_bandwidth(stream);
  fmt::print("read ceiling (16-byte loads, 4 GiB): {:.0f} GB/s; cudaMemcpy D2D 2 GiB (read+write): {:.0f} GB/s; "
             "L2 {} MiB\n\n",
             read_bw / 1e9, copy_bw / 1e9, l2 >> 20);

  std::vector<Case> cases = {{4096, 4096}, {16384, 4096}, {4096, 14336}, {14336, 4096}};
  if (only_n > 0) cases = {{only_n, only_k}};
  const int64_t ms[] = {1, 2, 4, 8, 16, 32, 64, 128, 512, 2048};
  const int group = 64;
  const int64_t max_m = 2048;

  fmt::print("{:>14} {:>10} {:>5} {:>10} {:>9} {:>7} {:>9}\n", "N x K", "weight", "M", "time us", "GB/s",
             "% read", "TFLOP/s");
  for (const Case& c : cases) {
    DeviceBuffer x(static_cast<size_t>(max_m * c.k) * sizeof(float));
    DeviceBuffer out(static_cast<size_t>(max_m * c.n) * sizeof(float));
    {
      std::vector<float> host(static_cast<size_t>(max_m * c.k));
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
      for (float& v : host) v = pick(rng);
      LMX_CUDA_CHECK(cudaMemcpy(x.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    for (int bits : {4, 8, 16}) {
      if (only_bits != 0 && bits != only_bits) continue;
      // Weight copies: codes, scales, biases (quantized) or bf16 data (bits 16 = dense bf16).
      const size_t code_bytes = static_cast<size_t>(c.n * c.k) * bits / 8;
      const size_t scale_bytes = bits == 16 ? 0 : static_cast<size_t>(c.n * (c.k / group)) * 2;
      const size_t weight_bytes = code_bytes + 2 * scale_bytes;
      const char* warm_env = std::getenv("LMX_BENCH_WARM_L2");
      const bool warm = warm_env != nullptr && std::strcmp(warm_env, "1") == 0;
      const int copies = warm ? 1
                              : static_cast<int>(std::clamp<size_t>(
                                    (4 * static_cast<size_t>(l2) + weight_bytes - 1) / weight_bytes, 2, 64));
      std::vector<DeviceBuffer> codes, scales, biases;
      for (int i = 0; i < copies; ++i) {
        codes.emplace_back(code_bytes);
        fill_random(codes.back().data(), code_bytes, 100 + i, bits == 16);
        if (bits != 16) {
          scales.emplace_back(scale_bytes);
          biases.emplace_back(scale_bytes);
          fill_random(scales.back().data(), scale_bytes, 200 + i, true);
          fill_random(biases.back().data(), scale_bytes, 300 + i, true);
        }
      }
      LMX_CUDA_CHECK(cudaDeviceSynchronize());
      for (int64_t m : ms) {
        // 4-bit weights also with DeviceQuantized::small_scales (the same data).
        for (const bool small : {false, true}) {
          if (only_m != 0 && m != only_m) continue;
          if (small && bits != 4) continue;
          auto call = [&](int i) {
            const int copy = i % copies;
            if (bits == 16) {
              lmx::cuda::DeviceDense w;
              w.data = codes[copy].data();
              w.dtype = lmx::DType::kBF16;
              w.rows = c.n;
              w.cols = c.k;
              lmx::cuda::dense_linear(x.as<float>(), c.k, m, w, out.as<float>(), c.n, ctx);
            } else {
              lmx::cuda::DeviceQuantized w;
              w.codes = codes[copy].as<uint32_t>();
              w.scales = scales[copy].data();
              w.biases = biases[copy].data();
              w.scale_dtype = lmx::DType::kBF16;
              w.bits = bits;
              w.group_size = group;
              w.rows = c.n;
              w.cols = c.k;
              w.small_scales = small;
              lmx::cuda::quantized_linear(x.as<float>(), c.k, m, w, out.as<float>(), c.n, ctx);
            }
          };
          call(0);  // scratch growth outside the timed region
          ctx.synchronize();
          const int inner = std::max(copies, m >= 512 ? 2 : 20);
          const double s = median_seconds(stream, 21, inner, call);
          const double gbs = weight_bytes / s / 1e9;
          const std::string label = fmt::format(
              "{}{}", bits == 16 ? "bf16" : fmt::format("q{} g{}{}", bits, group, small ? " s" : ""),
              warm ? " warm" : "");
          std::string tflops = "";
          if (m >= 64) tflops = fmt::format("{:.1f}", 2.0 * m * c.n * c.k / s / 1e12);
          fmt::print("{:>14} {:>10} {:>5} {:>10.2f} {:>9.0f} {:>6.1f}% {:>9}\n", fmt::format("{}x{}", c.n, c.k), label,
                     m, s * 1e6, gbs, 100.0 * gbs * 1e9 / read_bw, tflops);
        }
      }
    }
  }
  return 0;
}
