// Device GELU (tanh approximation) shared by the elementwise op, the MoE expert kernels and the batch-1
// 4-bit GEMV that applies it while staging its input: one definition, so every path rounds alike.
#pragma once

#include <cuda_runtime.h>

namespace lmx::cuda::detail {

// 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) in the CPU's operation order (cpu::gelu_tanh_mul_row),
// each step rounded (explicit _rn intrinsics: no FMA contraction).
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kGeluBeta = 0.7978845608028654f;
  constexpr float kGeluKappa = 0.044715f;
  const float cube = __fmul_rn(__fmul_rn(x, x), x);
  const float inner = __fmul_rn(kGeluBeta, __fadd_rn(x, __fmul_rn(kGeluKappa, cube)));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

// gelu_tanh(gate) * up, as the gelu_tanh_mul op computes it.
__device__ __forceinline__ float gelu_tanh_mul(float gate, float up) { return __fmul_rn(gelu_tanh(gate), up); }

}  // namespace lmx::cuda::detail
