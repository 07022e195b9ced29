// linear (x · wᵀ) for f32 activations and f32/bf16 weights: argument checks, work split, threading.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"

#include <algorithm>

namespace lmx::ops {
namespace cpu {
namespace {
// Fewer x rows than kGemvRows (decode): a task is kGemvRowsPerTask weight rows, all x rows.
constexpr int64_t kGemvRows = 4;
constexpr int64_t kGemvRowsPerTask = 16;
// Otherwise a task is up to kMaxRowsPerTask x rows (their K pass stays in L2) × kWeightRowsPerTask
// weight rows (a multiple of every target's tile width).
constexpr int64_t kMaxRowsPerTask = 64;
constexpr int64_t kWeightRowsPerTask = 48;
}  // namespace

void LinearTiling::block(int64_t task, int64_t& m0, int64_t& m1, int64_t& n0, int64_t& n1) const {
  const int64_t nb = n_blocks();
  m0 = task / nb * m_block;
  m1 = std::min(m, m0 + m_block);
  n0 = task % nb * n_block;
  n1 = std::min(n, n0 + n_block);
}

LinearTiling linear_tiling(int64_t m, int64_t n) {
  LinearTiling t;
  t.m = m;
  t.n = n;
  if (m < kGemvRows) {
    t.m_block = std::max<int64_t>(m, 1);
    t.n_block = kGemvRowsPerTask;
  } else {
    const int64_t m_blocks = (m + kMaxRowsPerTask - 1) / kMaxRowsPerTask;
    t.m_block = ((m + m_blocks - 1) / m_blocks + 3) / 4 * 4;
    t.n_block = kWeightRowsPerTask;
  }
  return t;
}

void linear_threaded(const LinearArgs& args, int64_t m, int64_t n) {
  if (m <= 0 || n <= 0) return;
  run_tiles(linear_tiling(m, n), args.k,
            [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) { linear_block(args, m0, m1, n0, n1); });
}

}  // namespace cpu

void linear(const Tensor& x, const Tensor& w, Tensor& out) {
  constexpr const char* kOp = "linear";
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  cpu::require_weight_dtype(w, kOp, "w");
  LMX_REQUIRE(InvalidArgument, w.ndim() == 2, "linear: w must be 2-D [N, K], got {}", shape_string(w.shape()));
  LMX_REQUIRE(InvalidArgument, x.ndim() >= 1 && x.dim(-1) == w.dim(1), "linear: x {} does not match w {} (K)",
                           shape_string(x.shape()), shape_string(w.shape()));
  const cpu::RowView xv = cpu::row_view(x, kOp, "x");
  const cpu::RowView wv = cpu::row_view(w, kOp, "w");
  Shape out_shape = x.shape();
  out_shape.back() = w.dim(0);
  cpu::prepare_out(out, out_shape, DType::kF32, kOp);
  if (w.dim(1) == 0) {  // empty reduction: all zeros
    std::fill_n(out.data<float>(), out.numel(), 0.0f);
    return;
  }
  cpu::LinearArgs args;
  args.x = xv.row<const float>(0);
  args.x_stride = xv.stride;
  args.w = wv.data;
  args.w_bf16 = w.dtype() == DType::kBF16;
  args.w_stride = wv.stride;
  args.out = out.data<float>();
  args.out_stride = w.dim(0);
  args.k = w.dim(1);
  cpu::linear_threaded(args, xv.rows, w.dim(0));
}

Tensor linear(const Tensor& x, const Tensor& w) {
  Tensor out;
  linear(x, w, out);
  return out;
}

}  // namespace lmx::ops
