// CUDA rms_norm, the fused residual_norm and rotate-half RoPE (elementwise.h), rounding like the CPU ops in cpu/norm.cpp and
// cpu/rope.cpp (explicit _rn intrinsics: no FMA contraction; IEEE sqrt and division).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/norm_rope_math.cuh"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/elementwise_util.cuh"

#include <fmt/format.h>

#include <algorithm>

namespace lmx::cuda {
namespace {

using detail::grid_blocks;
using detail::inv_rms;
using detail::kMaxRowBlocks;
using detail::kThreads;
using detail::added;
using detail::RowSchedule;
using detail::scaled;
using detail::sum_sq;
using detail::weighted;

// One row per warp or per block (RowSchedule). V = float or float4 (n, strides in units of V). out may
// alias x: every element is read and written by the same thread, and all reads of a row end (the
// reduction) before its writes.
template <typename V, bool kWeight, bool kBlock>
__global__ void rms_norm_kernel(const V* x, int64_t x_stride, V* out, int64_t out_stride, int64_t rows, int n,
                                const V* weight, float dim, float eps) {
  using Rows = RowSchedule<kBlock>;
  wait_for_prior_kernels();
  allow_next_kernel();
  __shared__ float shared[32];
  for (int64_t r = Rows::first_row(); r < rows; r += Rows::row_step()) {
    const V* xr = x + r * x_stride;
    V* orow = out + r * out_stride;
    float ss = 0.0f;
    for (int c = Rows::first(); c < n; c += Rows::step()) ss = sum_sq(xr[c], ss);
    const float inv = inv_rms(Rows::sum(ss, shared), dim, eps);
    for (int c = Rows::first(); c < n; c += Rows::step())
      orow[c] = weighted(scaled(xr[c], inv), kWeight ? weight[c] : V{}, kWeight);
  }
}

template <typename V, bool kWeight>
void launch_rms_norm(const float* x, int64_t x_stride, float* out, int64_t out_stride, int64_t rows, int dim,
                     const float* weight, float eps, cudaStream_t stream) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const V* xv = reinterpret_cast<const V*>(x);
  V* ov = reinterpret_cast<V*>(out);
  const V* wv = reinterpret_cast<const V*>(weight);
  const int n = dim / kLanes;
  const detail::RowNormLaunch l = detail::row_norm_launch(rows, dim, n);
  launch(l.block ? rms_norm_kernel<V, kWeight, true> : rms_norm_kernel<V, kWeight, false>, l.grid, l.threads, 0,
         stream, xv, x_stride / kLanes, ov, out_stride / kLanes, rows, n, wv, static_cast<float>(dim), eps);
}

// residual_norm (elementwise.h): one block per row, every thread holding its kPer columns (c = threadIdx.x
// + i * blockDim.x) in registers, so each row costs one round of loads and the two block reductions. The
// weights (constant data) are loaded before waiting for the previous kernel (programmatic dependent
// launch). Weights are optional (nullptr = none); the branches on them are uniform.
template <typename V>
constexpr int residual_norm_per_thread() { return sizeof(V) == sizeof(float) ? 16 : 4; }

template <typename V>
__global__ void residual_norm_kernel(V* x, const V* a, const V* a_weight, float scale, V* normed_out,
                                     const V* normed_weight, int64_t rows, int n, float dim, float eps) {
  constexpr int kPer = residual_norm_per_thread<V>();
  __shared__ float shared[32];
  V aw[kPer], nw[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c < n) {
      if (a_weight) aw[i] = a_weight[c];
      if (normed_weight) nw[i] = normed_weight[c];
    }
  }
  wait_for_prior_kernels();
  allow_next_kernel();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    V* xr = x + r * n;
    const V* ar = a + r * n;
    V av[kPer], xv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      if (c < n) av[i] = ar[c], xv[i] = xr[c];
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (threadIdx.x + i * blockDim.x < n) ss = sum_sq(av[i], ss);
    const float inv_a = inv_rms(detail::block_sum(ss, shared), dim, eps);
    float ss_x = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      if (c < n) {
        V v = added(xv[i], weighted(scaled(av[i], inv_a), aw[i], a_weight != nullptr));
        if (scale != 1.0f) v = scaled(v, scale);
        xr[c] = xv[i] = v;
        ss_x = sum_sq(v, ss_x);
      }
    }
    if (normed_out == nullptr) continue;
    const float inv_x = inv_rms(detail::block_sum(ss_x, shared), dim, eps);
    V* orow = normed_out + r * n;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = threadIdx.x + i * blockDim.x;
      if (c < n) orow[c] = weighted(scaled(xv[i], inv_x), nw[i], normed_weight != nullptr);
    }
  }
}

// Rows too wide for residual_norm_kernel's block (its registers cap the threads per block): the same
// steps with the columns read again from memory instead of held in registers. Rounds exactly like it,
// up to the order of the f32 sums of squares (each thread strides over more columns).
template <typename V>
__global__ void residual_norm_wide_kernel(V* x, const V* a, const V* a_weight, float scale, V* normed_out,
                                          const V* normed_weight, int64_t rows, int n, float dim, float eps) {
  wait_for_prior_kernels();
  allow_next_kernel();
  __shared__ float shared[32];
  const V none{};
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    V* xr = x + r * n;
    const V* ar = a + r * n;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) ss = sum_sq(ar[c], ss);
    const float inv_a = inv_rms(detail::block_sum(ss, shared), dim, eps);
    float ss_x = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
      V v = added(xr[c], weighted(scaled(ar[c], inv_a), a_weight ? a_weight[c] : none, a_weight != nullptr));
      if (scale != 1.0f) v = scaled(v, scale);
      xr[c] = v;
      ss_x = sum_sq(v, ss_x);
    }
    if (normed_out == nullptr) continue;
    const float inv_x = inv_rms(detail::block_sum(ss_x, shared), dim, eps);
    V* orow = normed_out + r * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x)
      orow[c] = weighted(scaled(xr[c], inv_x), normed_weight ? normed_weight[c] : none, normed_weight != nullptr);
  }
}

// Threads per block (a multiple of 32) a compiled kernel can be launched with: its register use decides.
int max_block_threads(const void* kernel) {
  cudaFuncAttributes attributes{};
  LMX_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.maxThreadsPerBlock / 32 * 32;
}

// Threads per block of residual_norm_kernel<V> for rows of n V-columns (kPer each).
template <typename V>
int residual_norm_threads(int n) {
  constexpr int kPer = residual_norm_per_thread<V>();
  return std::max(32, (n + kPer - 1) / kPer + 31) / 32 * 32;
}

// Register-limited block size of residual_norm_kernel<V> (the build targets one architecture, sm_90).
template <typename V>
int residual_norm_fitting() {
  static const int fitting = max_block_threads(reinterpret_cast<const void*>(&residual_norm_kernel<V>));
  return fitting;
}

template <typename V>
void launch_residual_norm(float* x, const float* a, const float* a_weight, float scale, float* normed,
                          const float* normed_weight, int64_t rows, int dim, float eps, cudaStream_t stream) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const int n = dim / kLanes;
  const int threads = residual_norm_threads<V>(n);
  const int fitting = residual_norm_fitting<V>();
  static const int fitting_wide = max_block_threads(reinterpret_cast<const void*>(&residual_norm_wide_kernel<V>));
  const unsigned grid = grid_blocks(rows, 1, kMaxRowBlocks);
  auto* xv = reinterpret_cast<V*>(x);
  const auto* av = reinterpret_cast<const V*>(a);
  const auto* awv = reinterpret_cast<const V*>(a_weight);
  auto* nv = reinterpret_cast<V*>(normed);
  const auto* nwv = reinterpret_cast<const V*>(normed_weight);
  if (threads <= fitting) {
    launch(residual_norm_kernel<V>, grid, threads, 0, stream, xv, av, awv, scale, nv, nwv, rows, n,
           static_cast<float>(dim), eps);
  } else {
    const int wide = std::min({fitting_wide, 1024, (n + 31) / 32 * 32});
    launch(residual_norm_wide_kernel<V>, grid, wide, 0, stream, xv, av, awv, scale, nv, nwv, rows, n,
           static_cast<float>(dim), eps);
  }
}

// Rotates pairs (i, i + half) of every head of token t. blockDim.x threads along pairs (each computes
// its angle's sin/cos once), blockDim.y along heads; grid.x over tokens, grid.y over pair chunks.
__global__ void rope_kernel(float* x, int64_t token_stride, int64_t tokens, int heads, int head_dim, int half,
                            const int32_t* positions, const float* inv_freq) {
  wait_for_prior_kernels();
  allow_next_kernel();
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const float pos = static_cast<float>(positions[t]);
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < half; i += gridDim.y * blockDim.x) {
      const float freq = inv_freq[i];
      if (freq == 0.0f) continue;  // unrotated pair: left bit-unchanged
      float s, c;
      sincosf(__fmul_rn(pos, freq), &s, &c);
      float* pair = x + t * token_stride + i;
      for (int h = threadIdx.y; h < heads; h += blockDim.y) {
        float* p = pair + static_cast<int64_t>(h) * head_dim;
        float a = p[0], b = p[half];
        detail::rotate_pair(a, b, s, c);
        p[0] = a, p[half] = b;
      }
    }
  }
}

}  // namespace

void rms_norm(const float* x, int64_t x_stride, float* out, int64_t out_stride, int64_t rows, int dim,
              const float* weight, float eps, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  const bool vec4 = dim % 4 == 0 && x_stride % 4 == 0 && out_stride % 4 == 0 && detail::aligned16_or_null({x, out, weight});
  if (vec4) {
    if (weight)
      launch_rms_norm<float4, true>(x, x_stride, out, out_stride, rows, dim, weight, eps, stream);
    else
      launch_rms_norm<float4, false>(x, x_stride, out, out_stride, rows, dim, weight, eps, stream);
  } else {
    if (weight)
      launch_rms_norm<float, true>(x, x_stride, out, out_stride, rows, dim, weight, eps, stream);
    else
      launch_rms_norm<float, false>(x, x_stride, out, out_stride, rows, dim, weight, eps, stream);
  }
}

int residual_norm_float4_threads(int dim) {
  if (dim <= 0 || dim % 4 != 0) return 0;
  const int threads = residual_norm_threads<float4>(dim / 4);
  return threads <= residual_norm_fitting<float4>() ? threads : 0;
}

void residual_norm(float* x, const float* a, const float* a_weight, float scale, float* normed,
                   const float* normed_weight, int64_t rows, int dim, float eps, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  const bool vec4 = dim % 4 == 0 && detail::aligned16_or_null({x, a, a_weight, normed, normed_weight});
  if (vec4)
    launch_residual_norm<float4>(x, a, a_weight, scale, normed, normed_weight, rows, dim, eps, stream);
  else
    launch_residual_norm<float>(x, a, a_weight, scale, normed, normed_weight, rows, dim, eps, stream);
}

void rope(float* x, int64_t token_stride, int64_t tokens, int heads, int head_dim, const int32_t* positions,
          const float* inv_freq, cudaStream_t stream) {
  const int half = head_dim / 2;
  if (tokens <= 0 || heads <= 0 || half <= 0) return;
  const int bx = half >= kThreads ? kThreads : (half + 31) / 32 * 32;
  const int by = std::max(1, std::min(kThreads / bx, heads));
  const dim3 grid(grid_blocks(tokens, 1, int64_t{1} << 20), grid_blocks(half, bx, 65535));
  launch(rope_kernel, grid, dim3(bx, by), 0, stream, x, token_stride, tokens, heads, head_dim, half, positions,
      inv_freq);
}

}  // namespace lmx::cuda
