// Argument checks and output preparation shared by the CPU ops.
#include "lmx/ops/cpu/checks.h"

#include "lmx/core/half.h"
#include "lmx/quant/turbo.h"

namespace lmx::ops::cpu {

RowView row_view(const Tensor& t, const char* op, const char* what) {
  LMX_REQUIRE(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  LMX_REQUIRE(InvalidArgument, t.ndim() >= 1, "{}: {} must have at least one dimension", op, what);
  RowView v;
  v.data = static_cast<std::byte*>(t.raw_data());
  v.cols = t.dim(-1);
  if (t.is_contiguous()) {
    v.rows = v.cols == 0 ? 0 : t.numel() / v.cols;
    v.stride = v.cols;
    return v;
  }
  LMX_REQUIRE(InvalidArgument, t.ndim() == 2 && t.strides()[1] == 1,
              "{}: {} {} must be contiguous, or 2-D with a contiguous last dim", op, what,
              shape_string(t.shape()));
  v.rows = t.dim(0);
  v.stride = t.strides()[0];
  return v;
}

void require_dtype(const Tensor& t, DType dtype, const char* op, const char* what) {
  LMX_REQUIRE(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  LMX_REQUIRE(InvalidArgument, t.dtype() == dtype, "{}: {} {} has dtype {}, expected {}", op, what,
              shape_string(t.shape()), dtype_name(t.dtype()), dtype_name(dtype));
}

void require_weight_dtype(const Tensor& t, const char* op, const char* what) {
  LMX_REQUIRE(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  LMX_REQUIRE(InvalidArgument, t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
              "{}: {} {} has dtype {}, expected F32 or BF16", op, what, shape_string(t.shape()),
              dtype_name(t.dtype()));
}

void prepare_out(Tensor& out, const Shape& shape, DType dtype, const char* op) {
  if (!out.defined()) {
    out = Tensor::zeros(shape, dtype);
    return;
  }
  LMX_REQUIRE(InvalidArgument,
              out.dtype() == dtype && out.is_contiguous() && out.numel() == shape_numel(shape) &&
                  out.ndim() >= 1 && (shape.empty() || out.dim(-1) == shape.back()),
              "{}: output is {} {}{}, expected {} {}", op, dtype_name(out.dtype()), shape_string(out.shape()),
              out.is_contiguous() ? "" : " (non-contiguous)", dtype_name(dtype), shape_string(shape));
}

float weight_at(const Tensor& w, int64_t i) {
  if (w.dtype() == DType::kBF16) return bf16_to_f32(w.data_u16()[i]);
  return w.data<float>()[i];
}

bool paged_kv_format_ok(DType dtype, int quant_bits, int quant_group, int value_bits, bool turbo,
                        int head_dim) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) return false;
  if (quant_bits == 0) return !turbo;
  if (turbo)
    return (quant_bits == 4 || quant_bits == 8) && value_bits >= 2 && value_bits <= 4 &&
           quant::turbo_head_dim_ok(head_dim);
  return (quant_bits == 4 || quant_bits == 8) && quant_group > 0 && head_dim % quant_group == 0 &&
         dtype == DType::kBF16;
}

}  // namespace lmx::ops::cpu
