// Device arithmetic shared by the RMSNorm / RoPE kernels (norm_rope.cu), the fused attention inputs
// (attention_inputs.cu) and the MoE block's norms (moe_norms.cu), with the CPU ops' f32 roundings
// (explicit _rn intrinsics: no FMA contraction), and the row schedule that fixes the order in which a
// row's squares are summed.
#pragma once

#include "lmx/ops/cuda/elementwise_util.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda::detail {

// 1 / sqrt(Σx² / dim + eps) with the CPU's f32 roundings (the sum itself is f32 here, double there).
__device__ __forceinline__ float inv_rms(float ss, float dim, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, dim), eps)));
}

// Rotates the rotate-half pair (a, b) by the angle whose sine and cosine are s and c.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float s, float c) {
  const float ra = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  const float rb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  a = ra, b = rb;
}

// acc + Σ v² over the lanes of v (x, y, z, w in order), one fma each.
__device__ __forceinline__ float sum_sq(float v, float acc) { return fmaf(v, v, acc); }
__device__ __forceinline__ float sum_sq(float4 v, float acc) {
  return fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, acc))));
}

// Lane-wise products and sums, each rounded once: x * s, y * w (y itself when !has), x + a.
__device__ __forceinline__ float scaled(float x, float s) { return __fmul_rn(x, s); }
__device__ __forceinline__ float4 scaled(float4 x, float s) {
  return make_float4(__fmul_rn(x.x, s), __fmul_rn(x.y, s), __fmul_rn(x.z, s), __fmul_rn(x.w, s));
}
__device__ __forceinline__ float weighted(float y, float w, bool has) { return has ? __fmul_rn(y, w) : y; }
__device__ __forceinline__ float4 weighted(float4 y, float4 w, bool has) {
  if (!has) return y;
  return make_float4(__fmul_rn(y.x, w.x), __fmul_rn(y.y, w.y), __fmul_rn(y.z, w.z), __fmul_rn(y.w, w.w));
}
__device__ __forceinline__ float added(float x, float a) { return __fadd_rn(x, a); }
__device__ __forceinline__ float4 added(float4 x, float4 a) {
  return make_float4(__fadd_rn(x.x, a.x), __fadd_rn(x.y, a.y), __fadd_rn(x.z, a.z), __fadd_rn(x.w, a.w));
}

// The row schedule of the row-wise norm kernels (rms_norm and the MoE norms share it, so the same row
// gets the same sum of squares from each): rows of at most kWarpRowMaxDim floats are one warp's
// (kThreads / 32 rows per block), wider rows one block's, of row_block_threads(n) threads for n
// elements (floats or float4s). Within a row, thread `first()` takes elements first, first + step, ...
// in order, and the partial sums are reduced by warp_sum (or block_sum).
constexpr int kWarpRowMaxDim = 1024;

inline int row_block_threads(int n) { return n >= 4096 ? 1024 : n >= 1024 ? 512 : 256; }

template <bool kBlock>
struct RowSchedule {
  __device__ static int64_t first_row() {
    return kBlock ? blockIdx.x : static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  }
  __device__ static int64_t row_step() {
    return kBlock ? gridDim.x : static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  }
  __device__ static int first() { return kBlock ? threadIdx.x : threadIdx.x & 31; }
  __device__ static int step() { return kBlock ? blockDim.x : 32; }
  // Σ v over the row's threads; `shared` holds 32 floats (block rows only). Every thread of the row gets it.
  __device__ static float sum(float v, float* shared) { return kBlock ? block_sum(v, shared) : warp_sum(v); }
  // The row's threads' barrier (shared memory written by some is then read by all).
  __device__ static void sync() {
    if constexpr (kBlock)
      __syncthreads();
    else
      __syncwarp();
  }
  // This row's slot among the rows a block holds at once (0 .. kThreads / 32 - 1).
  __device__ static int slot() { return kBlock ? 0 : threadIdx.x >> 5; }
  // Requests this thread's elements of a weight row (n elements; null: none) into L1 — constant data, so
  // a kernel may do it before waiting for the previous one.
  template <typename V>
  __device__ static void prefetch(const V* w, int n) {
    if (w == nullptr) return;
    for (int c = first(); c < n; c += step()) asm volatile("prefetch.global.L1 [%0];" ::"l"(w + c));
  }
};

// Grid and block of a row-wise norm kernel over `rows` rows of `dim` floats held as n elements.
struct RowNormLaunch {
  bool block = false;  // RowSchedule<true>
  unsigned grid = 1;
  int threads = kThreads;
};
inline RowNormLaunch row_norm_launch(int64_t rows, int dim, int n) {
  if (dim <= kWarpRowMaxDim) return {false, grid_blocks(rows, kThreads / 32, kMaxRowBlocks), kThreads};
  return {true, grid_blocks(rows, 1, kMaxRowBlocks), row_block_threads(n)};
}

}  // namespace lmx::cuda::detail
