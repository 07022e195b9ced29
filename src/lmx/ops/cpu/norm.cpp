// Row-wise RMSNorm (Gemma 4 flavour: multiply by weight directly, or no weight).
#include "lmx/core/half.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/ops.h"

#include <cmath>

namespace lmx::ops {

void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  constexpr const char* kOp = "rms_norm";
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  const cpu::RowView xv = cpu::row_view(x, kOp, "x");
  const int64_t cols = xv.cols;
  const float* w_f32 = nullptr;
  const uint16_t* w_bf16 = nullptr;
  if (weight) {
    cpu::require_weight_dtype(*weight, kOp, "weight");
    LMX_REQUIRE(InvalidArgument, weight->is_contiguous() && weight->numel() == cols,
                             "rms_norm: weight {} does not match x {} (last dim)",
                             shape_string(weight->shape()), shape_string(x.shape()));
    if (weight->dtype() == DType::kBF16)
      w_bf16 = weight->data_u16();
    else
      w_f32 = weight->data<float>();
  }
  if (!out.defined()) out = Tensor::zeros(x.shape(), DType::kF32);
  cpu::require_dtype(out, DType::kF32, kOp, "out");
  const cpu::RowView ov = cpu::row_view(out, kOp, "out");
  LMX_REQUIRE(InvalidArgument, ov.rows == xv.rows && ov.cols == cols, "rms_norm: out {} does not match x {}",
                           shape_string(out.shape()), shape_string(x.shape()));
  if (cols == 0) return;
  parallel_for(xv.rows, std::max<int64_t>(1, 8192 / cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xv.row<const float>(r);
      float* orow = ov.row<float>(r);
      double sum_sq = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum_sq += static_cast<double>(xr[c]) * xr[c];
      const float mean = static_cast<float>(sum_sq / static_cast<double>(cols));
      const float inv = 1.0f / std::sqrt(mean + eps);
      if (w_f32) {
        for (int64_t c = 0; c < cols; ++c) orow[c] = xr[c] * inv * w_f32[c];
      } else if (w_bf16) {
        for (int64_t c = 0; c < cols; ++c) orow[c] = xr[c] * inv * bf16_to_f32(w_bf16[c]);
      } else {
        for (int64_t c = 0; c < cols; ++c) orow[c] = xr[c] * inv;
      }
    }
  });
}

}  // namespace lmx::ops
