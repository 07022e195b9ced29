// Argument checks and output preparation shared by the CPU ops (every message names the op).
#pragma once

#include "lmx/core/error.h"
#include "lmx/core/tensor.h"

#include <cstdint>

namespace lmx::ops::cpu {

// A tensor seen as `rows` rows of `cols` elements with a constant row stride (in elements).
struct RowView {
  std::byte* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  template <typename T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(data) + r * stride;
  }
};

// Views t as rows of its last dim: any contiguous tensor, or a 2-D tensor whose last dim is
// contiguous (strided rows). Throws InvalidArgument naming `op` and `what` otherwise.
RowView row_view(const Tensor& t, const char* op, const char* what);

// Throws unless t is defined and has dtype `dtype`.
void require_dtype(const Tensor& t, DType dtype, const char* op, const char* what);
// Throws unless t is defined and f32 or bf16 (the weight dtypes).
void require_weight_dtype(const Tensor& t, const char* op, const char* what);

// Makes `out` ready to receive a result of `shape` and `dtype`: allocates it when undefined; otherwise
// requires that dtype, contiguity, the same element count and the same last dim.
void prepare_out(Tensor& out, const Shape& shape, DType dtype, const char* op);

// Whether a paged KV layer's storage fields (ops/paged_kv.h) name a format the host ops read and write:
// f32 or bf16 arrays; affine codes (4 or 8 bits, a group dividing head_dim, bf16 scales and biases); or
// TurboQuant rows (4- or 8-bit keys, 2- to 4-bit values, a power-of-two head_dim).
bool paged_kv_format_ok(DType dtype, int quant_bits, int quant_group, int value_bits, bool turbo,
                        int head_dim);

// Element i of an f32 or bf16 vector tensor, widened to f32 (contiguous 1-D or any contiguous).
float weight_at(const Tensor& w, int64_t i);

}  // namespace lmx::ops::cpu
