// Shared by the CUDA bench programs: deterministic device fills and event-timed medians.
#pragma once

#include "lmx/ops/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lmx::bench {

// A 32-bit hash of (index, seed): the fills' source of bits.
__device__ __forceinline__ uint32_t hash_word(size_t i, uint32_t seed) {
  uint32_t v = static_cast<uint32_t>(i) * 2654435761u + seed;
  v ^= v >> 15;
  v *= 0x5bd1e995u;
  v ^= v >> 13;
  return v;
}

// Arbitrary words (e.g. quantized codes: every word is valid).
__global__ void fill_words_kernel(uint32_t* data, size_t count, uint32_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    data[i] = hash_word(i, seed);
}

// f32 in [-1, 1).
__global__ void fill_f32_kernel(float* data, size_t count, uint32_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    data[i] = static_cast<float>(hash_word(i, seed) & 0xFFFFu) / 32768.0f - 1.0f;
}

// Small finite bf16 values (2^-9 <= |v| < 2^-5, i.e. ≈ 0.002 .. 0.031, random sign and mantissa): scales
// (below cuda::kSmallScaleLimit), biases, dense weights, K/V caches.
__global__ void fill_bf16_kernel(uint16_t* data, size_t count, uint32_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t v = hash_word(i, seed);
    data[i] = static_cast<uint16_t>((v & 0x807Fu) | (0x3B00u + ((v >> 8) & 0x0180u)));
  }
}

// Fills `bytes` (a multiple of 4) at p with fill_words_kernel or, when bf16, fill_bf16_kernel.
inline void fill_random(void* p, size_t bytes, uint32_t seed, bool bf16) {
  if (bf16)
    fill_bf16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(p), bytes / 2, seed);
  else
    fill_words_kernel<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed);
  LMX_CUDA_CHECK_LAUNCH();
}

// Median seconds per call of fn(call) over `samples` samples of `inner` back-to-back calls on `stream`,
// after one warm-up sample; `call` counts every call from 0 (so fn can rotate over copies of its data).
template <class Fn>
double median_seconds(cudaStream_t stream, int samples, int inner, Fn fn) {
  cudaEvent_t start, stop;
  LMX_CUDA_CHECK(cudaEventCreate(&start));
  LMX_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  int call = 0;
  for (int s = -1; s < samples; ++s) {
    LMX_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < inner; ++i) fn(call++);
    LMX_CUDA_CHECK(cudaEventRecord(stop, stream));
    LMX_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LMX_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (s >= 0) times.push_back(ms * 1e-3 / inner);
  }
  LMX_CUDA_CHECK(cudaEventDestroy(start));
  LMX_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace lmx::bench
