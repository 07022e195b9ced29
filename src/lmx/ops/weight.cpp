// A projection or embedding weight as the checkpoint stores it: dense (f32/bf16) or MLX affine-quantized.
#include "lmx/ops/weight.h"

#include "lmx/ops/ops.h"

namespace lmx {

int64_t Weight::rows() const { return is_quantized() ? quantized.rows() : dense.dim(-2); }
int64_t Weight::cols() const { return is_quantized() ? quantized.cols() : dense.dim(-1); }

size_t Weight::bytes() const {
  if (is_quantized()) return quantized.bytes();
  return dense.defined() ? dense.nbytes() : 0;
}

size_t Weight::row_bytes() const {
  if (!defined()) return 0;
  int64_t total_rows = is_quantized() ? quantized.codes.numel() / quantized.codes.dim(-1) : dense.numel() / dense.dim(-1);
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

}  // namespace lmx
