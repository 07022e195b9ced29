// A projection or embedding weight as the checkpoint stores it: dense (f32/bf16) or MLX affine-quantized.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/ops/quantized.h"

#include <cstdint>
#include <span>
#include <string>

namespace lmx {

struct Weight {
  Tensor dense;                    // [N, K] (or [E, N, K]) f32/bf16 when not quantized
  ops::QuantizedWeight quantized;  // MLX layout when quantized.bits > 0

  bool defined() const { return dense.defined() || quantized.bits > 0; }
  bool is_quantized() const { return quantized.bits > 0; }
  // Output and input features of one matrix (last two dims).
  int64_t rows() const;
  int64_t cols() const;
  // Bytes stored (codes + scales + biases when quantized).
  size_t bytes() const;
  // Bytes read to fetch one row (an embedding lookup).
  size_t row_bytes() const;
};

// x [M, K] f32 → [M, N] f32 through either representation (same batch-invariance contract).
Tensor apply_linear(const Tensor& x, const Weight& w);
// out [T, D] = table[ids] · scale for a dense or quantized [V, D] table.
void lookup_rows(const Weight& table, std::span<const int32_t> ids, float scale, Tensor& out);

// [E, Na, K] and [E, Nb, K] stacks of one dtype as [E, Na + Nb, K]: expert e's rows of a, then its rows of b
// (MLX's separate expert gate and up stacks in the HF gate_up layout). FormatError names `what` otherwise.
Tensor join_expert_rows(const Tensor& a, const Tensor& b, const std::string& what);

}  // namespace lmx
