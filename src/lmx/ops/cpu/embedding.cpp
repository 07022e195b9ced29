// Token embedding lookup (f32 or bf16 table) with a scale.
#include "lmx/core/half.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/ops.h"

namespace lmx::ops {

void embedding(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out) {
  constexpr const char* kOp = "embedding";
  cpu::require_weight_dtype(table, kOp, "table");
  LMX_REQUIRE(InvalidArgument, table.ndim() == 2, "embedding: table must be 2-D [V, D], got {}",
                           shape_string(table.shape()));
  const cpu::RowView tv = cpu::row_view(table, kOp, "table");
  const int64_t vocab = tv.rows, dim = tv.cols;
  for (size_t t = 0; t < ids.size(); ++t)
    LMX_REQUIRE(InvalidArgument, ids[t] >= 0 && ids[t] < vocab,
                             "embedding: token id {} (at index {}) outside [0, {})", ids[t], t, vocab);
  cpu::prepare_out(out, {static_cast<int64_t>(ids.size()), dim}, DType::kF32, kOp);
  float* o = out.data<float>();
  const bool bf16 = table.dtype() == DType::kBF16;
  parallel_for(static_cast<int64_t>(ids.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t t = begin; t < end; ++t) {
                   float* orow = o + t * dim;
                   const int64_t id = ids[static_cast<size_t>(t)];
                   if (bf16) {
                     const uint16_t* src = tv.row<const uint16_t>(id);
                     for (int64_t c = 0; c < dim; ++c) orow[c] = bf16_to_f32(src[c]) * scale;
                   } else {
                     const float* src = tv.row<const float>(id);
                     for (int64_t c = 0; c < dim; ++c) orow[c] = src[c] * scale;
                   }
                 }
               });
}

}  // namespace lmx::ops
