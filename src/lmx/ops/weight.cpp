// A projection or embedding weight as the checkpoint stores it: dense (f32/bf16) or MLX affine-quantized.
#include "lmx/ops/weight.h"

#include "lmx/ops/ops.h"

#include <cstring>

namespace lmx {

int64_t Weight::rows() const {
  return is_quantized() ? quantized.rows() : dense.dim(-2);
}
int64_t Weight::cols() const {
  return is_quantized() ? quantized.cols() : dense.dim(-1);
}

size_t Weight::bytes() const {
  if (is_quantized()) return quantized.bytes();
  return dense.defined() ? dense.nbytes() : 0;
}

size_t Weight::row_bytes() const {
  if (!defined()) return 0;
  int64_t total_rows =
      is_quantized() ? quantized.codes.numel() / quantized.codes.dim(-1) : dense.numel() / dense.dim(-1);
  return bytes() / static_cast<size_t>(total_rows);
}

Tensor apply_linear(const Tensor& x, const Weight& w) {
  return w.is_quantized() ? ops::quantized_linear(x, w.quantized) : ops::linear(x, w.dense);
}

void lookup_rows(const Weight& table, std::span<const int32_t> ids, float scale, Tensor& out) {
  if (table.is_quantized())
    ops::quantized_embedding(table.quantized, ids, scale, out);
  else
    ops::embedding(table.dense, ids, scale, out);
}

Tensor join_expert_rows(const Tensor& a, const Tensor& b, const std::string& what) {
  if (a.dtype() != b.dtype()) throw FormatError(fmt::format("{}: expert stacks differ in dtype", what));
  if (a.ndim() != 3 || b.ndim() != 3 || a.dim(0) != b.dim(0) || a.dim(2) != b.dim(2))
    throw FormatError(fmt::format("{}: expert stacks {} and {} cannot be joined by rows", what,
                                  shape_string(a.shape()), shape_string(b.shape())));
  const int64_t experts = a.dim(0);
  Tensor joined = Tensor::zeros({experts, a.dim(1) + b.dim(1), a.dim(2)}, a.dtype());
  const size_t a_bytes = static_cast<size_t>(a.dim(1) * a.dim(2)) * dtype_size(a.dtype());
  const size_t b_bytes = static_cast<size_t>(b.dim(1) * b.dim(2)) * dtype_size(b.dtype());
  auto* dst = static_cast<std::byte*>(joined.raw_data());
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  for (int64_t e = 0; e < experts; ++e) {
    std::memcpy(dst + e * (a_bytes + b_bytes), static_cast<const std::byte*>(ac.raw_data()) + e * a_bytes,
                a_bytes);
    std::memcpy(dst + e * (a_bytes + b_bytes) + a_bytes,
                static_cast<const std::byte*>(bc.raw_data()) + e * b_bytes, b_bytes);
  }
  return joined;
}

}  // namespace lmx
