// Ops over MLX affine-quantized weights (quant/affine.h layout): linear, embedding lookup and MoE experts
// that read the packed codes directly — no op ever dequantizes a whole matrix.
//
// Weight semantics: element k of row n is w = fma(scale, q, bias) in f32 (q the code, scale and bias of
// its group widened exactly from F32/BF16/F16) — the values quant::dequantize_affine returns. The f32
// kernels compute with exactly these values and f32 accumulation, so they match ops::linear over the
// dequantized matrix to f32 rounding (bit for bit when its columns are given in the same order; see
// quantized_linear). On CPUs without FMA (SSE4 targets) scale * q and + bias round separately.
// Exception: on CPUs with AVX-512 VNNI, 4- and 8-bit weights run integer kernels that quantize x to 24-bit
// fixed point per 8 columns and center the codes on z = 2^(bits - 1) (8 or 128):
// out = Σ_g s_g Σ (q - z) x̂ + Σ_g fma(z, s_g, b_g) Σ x with |x - x̂| ≤ 1.008 * 2^-23 * max|x over its 8
// columns| per element (ops/cpu/quantized_vnni.cpp).
// Argument errors are InvalidArgument naming the op, like the ops in ops.h.
#pragma once

#include "lmx/core/tensor.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace lmx::ops {

// A [N, K] matrix, or an [E, N, K] stack of expert matrices, in MLX affine layout: codes U32
// [..., N, K*bits/32], scales and biases [..., N, K/group_size] (one F32/BF16/F16 dtype). All three
// contiguous (they may be windows of a mapped file). Validity is checked by the ops that take it.
struct QuantizedWeight {
  Tensor codes, scales, biases;
  int bits = 0, group_size = 0;

  int64_t rows() const;  // N: codes.dim(-2)
  int64_t cols() const;  // K: codes.dim(-1) * 32 / bits
  size_t bytes() const;  // bytes of codes + scales + biases (what one pass over the weight reads)
};

// out[M, N] = x[M, K] · dequant(w)ᵀ with f32 accumulation; x f32 rows [.., K] (leading dims flatten into
// M; contiguous, or 2-D with a contiguous last dim); w a 2-D QuantizedWeight. out gets x's leading shape
// with last dim N (or is an f32 buffer of that size, as in ops.h).
// Contract (batch invariance, as ops::linear): out[m, n] is bit-identical whatever M, m, the other rows
// of x and the thread count. Its reduction order depends only on K, bits, the group size and the SIMD
// target. f32 kernels: the products x[k] * w[n, k] are accumulated into L f32 lanes in a fixed column
// order, then summed horizontally; the order is the natural one (column k in lane k % L) except for
// 4-bit weights, whose columns are visited per block of 2L as the L even columns then the L odd ones.
// Decode (M < 16) unpacks codes in registers, parallel over N; prefill dequantizes each weight panel
// once per pass of up to 64 rows of x and runs register tiles over it. Integer kernels (4 and 8 bits
// with VNNI): the same kernels serve every M, with x quantized row by row.
void quantized_linear(const Tensor& x, const QuantizedWeight& w, Tensor& out);
Tensor quantized_linear(const Tensor& x, const QuantizedWeight& w);

// out[T, D] = dequant(table)[ids[t], :] * scale (f32 multiply of the dequantized value) from a [V, D]
// table. An id outside [0, V) is an InvalidArgument naming the id and its index.
void quantized_embedding(const QuantizedWeight& table, std::span<const int32_t> ids, float scale,
                         Tensor& out);

// MoE experts over quantized stacks in MLX switch_glu layout: gate [E, I, H], up [E, I, H], down [E, H, I]
// (each with its own bits and group size). out[t] = Σ_j weights[t,j] * down_e(gelu_tanh(gate_e x[t]) *
// up_e x[t]) with e = experts[t,j]; x [T, H] f32; experts [T, k] int32 in [0, E); weights [T, k] f32.
// Same math and contract as ops::moe_experts: each expert's weights are read once per call, and a
// token's output is bit-identical whatever the other tokens in the call. out [T, H].
void quantized_moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights,
                           const QuantizedWeight& gate, const QuantizedWeight& up,
                           const QuantizedWeight& down, Tensor& out);

}  // namespace lmx::ops
