// One warp's per-head RMSNorm and rotate-half RoPE of one head: the arithmetic of attention_inputs
// (attention_inputs.cu) and of the batch-1 decode attention that takes attention_inputs' work itself
// (attention_decode.cu). Both call these functions, so a head gets the same bits from either.
// Numerics are rms_norm's and rope's (elementwise.h): _rn intrinsics, no FMA contraction, sincosf of the f32
// angle; the head's f32 sum of squares is one warp's: lane-wise in pair order, then warp_sum.
#pragma once

#include "lmx/ops/cuda/norm_rope_math.cuh"

#include <cuda_runtime.h>

namespace lmx::cuda::detail {

constexpr int kMaxHeadPairsPerLane = 8;  // head_dim ≤ 2 * 32 * 8 = 512

// A lane's pairs of a head are (i, i + head_dim / 2) for i = lane + 32 p, p < kMaxHeadPairsPerLane.

// RoPE of one position for a lane's pairs: sines, cosines, and whether the pair rotates (pairs with
// inv_freq 0 stay as they are). Reads only inv_freq, so a kernel may compute it before its PDL wait.
struct HeadAngles {
  float sn[kMaxHeadPairsPerLane], cs[kMaxHeadPairsPerLane];
  bool rotates[kMaxHeadPairsPerLane];

  // rope false: no pair rotates (and no sine is computed).
  __device__ __forceinline__ void compute(float pos, const float* inv_freq, int half, int lane, bool rope) {
#pragma unroll
    for (int p = 0; p < kMaxHeadPairsPerLane; ++p) {
      const int i = lane + 32 * p;
      sn[p] = 0.0f, cs[p] = 1.0f;
      rotates[p] = false;
      if (i >= half || !rope) continue;
      const float freq = inv_freq[i];
      rotates[p] = freq != 0.0f;
      if (rotates[p]) sincosf(__fmul_rn(pos, freq), &sn[p], &cs[p]);
    }
  }
};

// A norm weight [head_dim] for the lane's pairs (w0 for i, w1 for i + half); 1 without a weight.
struct HeadWeights {
  float w0[kMaxHeadPairsPerLane], w1[kMaxHeadPairsPerLane];

  __device__ __forceinline__ void load(const float* weight, int half, int lane) {
#pragma unroll
    for (int p = 0; p < kMaxHeadPairsPerLane; ++p) {
      const int i = lane + 32 * p;
      w0[p] = w1[p] = 1.0f;
      if (i < half && weight != nullptr) w0[p] = weight[i], w1[p] = weight[i + half];
    }
  }
};

// The warp's head at xr (head_dim floats): x ← x / rms(x) (Σx² in f32), times the weight when `weighted`,
// rotated when `rope` (and the pair's angle rotates); each finished pair goes to store(i, x_i, x_{i+half}).
// Every lane of the warp calls it (the sum is a warp_sum).
template <class Store>
__device__ __forceinline__ void norm_head(const float* xr, int head_dim, float eps, int lane,
                                          const HeadWeights& w, bool weighted, bool rope,
                                          const HeadAngles& angles, Store&& store) {
  const int half = head_dim / 2;
  float a[kMaxHeadPairsPerLane], b[kMaxHeadPairsPerLane];
  float ss = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxHeadPairsPerLane; ++p) {
    const int i = lane + 32 * p;
    a[p] = i < half ? xr[i] : 0.0f;
    b[p] = i < half ? xr[i + half] : 0.0f;
    ss = fmaf(b[p], b[p], fmaf(a[p], a[p], ss));
  }
  const float inv = inv_rms(warp_sum(ss), static_cast<float>(head_dim), eps);
#pragma unroll
  for (int p = 0; p < kMaxHeadPairsPerLane; ++p) {
    const int i = lane + 32 * p;
    if (i >= half) break;
    float x0 = __fmul_rn(a[p], inv), x1 = __fmul_rn(b[p], inv);
    if (weighted) x0 = __fmul_rn(x0, w.w0[p]), x1 = __fmul_rn(x1, w.w1[p]);
    if (rope && angles.rotates[p]) rotate_pair(x0, x1, angles.sn[p], angles.cs[p]);
    store(i, x0, x1);
  }
}

}  // namespace lmx::cuda::detail
