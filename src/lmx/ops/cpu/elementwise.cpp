// Elementwise and row-wise f32 ops: gelu_tanh, gelu_tanh_mul, softmax, softcap, add/scale/mul, argmax.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lmx::ops {
namespace {

// Elements per parallel chunk for cheap elementwise loops.
constexpr int64_t kElementGrain = int64_t{1} << 15;
// Elements per work item of GELU loops (a decode row is split over the pool too).
constexpr int64_t kGeluPiece = 1024;


float* contiguous_f32(Tensor& x, const char* op, const char* what) {
  cpu::require_dtype(x, DType::kF32, op, what);
  LMX_REQUIRE(InvalidArgument, x.is_contiguous(), "{}: {} {} must be contiguous", op, what,
                           shape_string(x.shape()));
  return x.data<float>();
}

// Calls fn(i) for every element index of an n-element loop, split over the pool.
template <typename Fn>
void for_each_index(int64_t n, Fn fn) {
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

// Calls fn(begin, count) for consecutive pieces of `piece` elements (the last may be shorter) of an
// n-element array, the pieces split over the pool.
template <typename Fn>
void for_each_piece(int64_t n, int64_t piece, Fn fn) {
  parallel_for((n + piece - 1) / piece, 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) fn(k * piece, std::min(piece, n - k * piece));
  });
}

// The operand of add_inplace / mul_inplace: same element count, or a vector of the last dim.
const float* broadcast_operand(const Tensor& target, const Tensor& a, const char* op, bool& per_row) {
  cpu::require_dtype(a, DType::kF32, op, "operand");
  LMX_REQUIRE(InvalidArgument, a.is_contiguous(), "{}: operand {} must be contiguous", op,
                           shape_string(a.shape()));
  const int64_t cols = target.ndim() ? target.dim(-1) : 1;
  per_row = a.numel() != target.numel();
  LMX_REQUIRE(InvalidArgument, !per_row || (a.numel() == cols && target.ndim() >= 1),
                           "{}: operand {} matches neither {} nor its last dim", op, shape_string(a.shape()),
                           shape_string(target.shape()));
  return a.data<float>();
}

}  // namespace

void gelu_tanh(Tensor& x) {
  float* p = contiguous_f32(x, "gelu_tanh", "x");
  for_each_piece(x.numel(), kGeluPiece,
                 [p](int64_t i, int64_t count) { cpu::gelu_tanh_mul_row(p + i, nullptr, p + i, count); });
}

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* kOp = "gelu_tanh_mul";
  cpu::require_dtype(gate, DType::kF32, kOp, "gate");
  cpu::require_dtype(up, DType::kF32, kOp, "up");
  LMX_REQUIRE(InvalidArgument, gate.shape() == up.shape(), "gelu_tanh_mul: gate {} and up {} differ",
                           shape_string(gate.shape()), shape_string(up.shape()));
  const cpu::RowView g = cpu::row_view(gate, kOp, "gate");
  const cpu::RowView u = cpu::row_view(up, kOp, "up");
  if (!out.defined()) out = Tensor::zeros(gate.shape(), DType::kF32);
  cpu::require_dtype(out, DType::kF32, kOp, "out");
  const cpu::RowView o = cpu::row_view(out, kOp, "out");
  LMX_REQUIRE(InvalidArgument, o.rows == g.rows && o.cols == g.cols,
                           "gelu_tanh_mul: out {} does not match gate {}", shape_string(out.shape()),
                           shape_string(gate.shape()));
  // Work items are pieces of rows, so that one row (a decode step) is split over the pool too.
  const int64_t cols = g.cols;
  const int64_t pieces = std::max<int64_t>(1, (cols + kGeluPiece - 1) / kGeluPiece);
  parallel_for(g.rows * pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / pieces, c0 = item % pieces * kGeluPiece, c1 = std::min(cols, c0 + kGeluPiece);
      cpu::gelu_tanh_mul_row(g.row<const float>(r) + c0, u.row<const float>(r) + c0, o.row<float>(r) + c0, c1 - c0);
    }
  });
}

void softmax(Tensor& x) {
  constexpr const char* kOp = "softmax";
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  const cpu::RowView v = cpu::row_view(x, kOp, "x");
  const int64_t cols = v.cols;
  if (cols == 0) return;
  parallel_for(v.rows, std::max<int64_t>(1, kElementGrain / cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = v.row<float>(r);
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < cols; ++c) max = std::max(max, row[c]);
      float sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) {
        row[c] = std::exp(row[c] - max);
        sum += row[c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < cols; ++c) row[c] *= inv;
    }
  });
}

void softcap(Tensor& x, float cap) {
  LMX_REQUIRE(InvalidArgument, cap > 0.0f && std::isfinite(cap),
                           "softcap: cap must be positive and finite, got {}", cap);
  float* p = contiguous_f32(x, "softcap", "x");
  for_each_piece(x.numel(), kElementGrain, [p, cap](int64_t i, int64_t count) { cpu::softcap_row(p + i, count, cap); });
}

void add_inplace(Tensor& out, const Tensor& a) {
  float* o = contiguous_f32(out, "add_inplace", "out");
  bool per_row;
  const float* s = broadcast_operand(out, a, "add_inplace", per_row);
  if (per_row) {
    const int64_t cols = out.dim(-1);
    for_each_index(out.numel(), [o, s, cols](int64_t i) { o[i] += s[i % cols]; });
  } else {
    for_each_index(out.numel(), [o, s](int64_t i) { o[i] += s[i]; });
  }
}

void scale_inplace(Tensor& x, float s) {
  float* p = contiguous_f32(x, "scale_inplace", "x");
  for_each_index(x.numel(), [p, s](int64_t i) { p[i] *= s; });
}

void mul_inplace(Tensor& x, const Tensor& y) {
  float* o = contiguous_f32(x, "mul_inplace", "x");
  bool per_row;
  const float* s = broadcast_operand(x, y, "mul_inplace", per_row);
  if (per_row) {
    const int64_t cols = x.dim(-1);
    for_each_index(x.numel(), [o, s, cols](int64_t i) { o[i] *= s[i % cols]; });
  } else {
    for_each_index(x.numel(), [o, s](int64_t i) { o[i] *= s[i]; });
  }
}

int argmax(std::span<const float> row) {
  LMX_REQUIRE(InvalidArgument, !row.empty(), "argmax: empty row");
  int best = 0;
  float best_value = row[0];
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] > best_value || (std::isnan(best_value) && !std::isnan(row[i]))) {
      best_value = row[i];
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace lmx::ops
