// Device arithmetic shared by the RMSNorm / RoPE kernels (norm_rope.cu) and the fused attention inputs
// (attention_inputs.cu), with the CPU ops' f32 roundings (explicit _rn intrinsics: no FMA contraction).
#pragma once

#include <cuda_runtime.h>

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

}  // namespace lmx::cuda::detail
