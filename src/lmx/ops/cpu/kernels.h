// Internal CPU kernels behind ops.h: runtime-dispatched SIMD (Highway) entry points and the threaded
// linear driver shared by linear and moe_experts. Not part of the public op set.
#pragma once

#include <cstdint>

namespace lmx::ops::cpu {

// out[m, n] = Σ_k x[m, k] * w[n, k] over raw row pointers. Strides count elements between rows.
struct LinearArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const void* w = nullptr;  // float rows, or bf16 rows (raw uint16_t bits) when w_bf16
  bool w_bf16 = false;
  int64_t w_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t k = 0;
};

// Computes the block out[m0:m1, n0:n1] on the calling thread.
// Reduction order contract: out[m, n] is accumulated as one vector of L f32 lanes (L = the SIMD
// target's f32 lane count), element k landing in lane k % L, blocks of L added by FMA in increasing k;
// the K % L tail is one more FMA step with both operands zero-padded; then one fixed horizontal sum.
// So the value depends only on K and the target — never on the block bounds, M, or the other rows.
void linear_block(const LinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

// Work split for out[0:m, 0:n]: `tasks()` independent blocks, `block(t, ...)` gives task t's bounds.
// Consecutive tasks share their rows of x (so a chunk of tasks reuses x from cache).
struct LinearTiling {
  int64_t m = 0, n = 0;
  int64_t m_block = 1, n_block = 1;
  int64_t n_blocks() const { return (n + n_block - 1) / n_block; }
  int64_t tasks() const { return (m + m_block - 1) / m_block * n_blocks(); }
  void block(int64_t task, int64_t& m0, int64_t& m1, int64_t& n0, int64_t& n1) const;
};
LinearTiling linear_tiling(int64_t m, int64_t n);

// out[0:m, 0:n] over the default thread pool (values as linear_block).
void linear_threaded(const LinearArgs& args, int64_t m, int64_t n);

// Σ a[i] * b[i] in f32 (SIMD, fixed order for a given n and target).
float dot(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i].
void axpy(float alpha, const float* x, float* y, int64_t n);

}  // namespace lmx::ops::cpu
