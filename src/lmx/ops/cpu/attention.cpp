// Attention for one sequence over f32 q/k/v (GQA, causal by position, optional sliding window).
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace lmx::ops {
namespace {

// Queries scored together against the keys (one linear tile walk over the block's key range).
constexpr int64_t kQueryBlock = 16;

void require_qkv(const Tensor& t, const char* what) {
  cpu::require_dtype(t, DType::kF32, "attention", what);
  LMX_REQUIRE(InvalidArgument, t.ndim() == 3 && t.strides()[2] == 1,
                           "attention: {} must be [T, H, D] with a contiguous last dim, got {}", what,
                           shape_string(t.shape()));
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const int32_t> q_pos,
               std::span<const int32_t> k_pos, int window, float scale, Tensor& out) {
  require_qkv(q, "q");
  require_qkv(k, "k");
  require_qkv(v, "v");
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t tk = k.dim(0), hkv = k.dim(1), dv = v.dim(2);
  LMX_REQUIRE(InvalidArgument, k.dim(2) == d && v.dim(0) == tk && v.dim(1) == hkv && hkv > 0 && hq % hkv == 0,
                           "attention: incompatible shapes q {} k {} v {}", shape_string(q.shape()),
                           shape_string(k.shape()), shape_string(v.shape()));
  LMX_REQUIRE(InvalidArgument, 
      static_cast<int64_t>(q_pos.size()) == tq && static_cast<int64_t>(k_pos.size()) == tk,
      "attention: {} query positions and {} key positions for q {} k {}", q_pos.size(), k_pos.size(),
      shape_string(q.shape()), shape_string(k.shape()));
  cpu::prepare_out(out, {tq, hq, dv}, DType::kF32, "attention");
  const int64_t group = hq / hkv;
  const float* qb = q.data<float>();
  const float* kb = k.data<float>();
  const float* vb = v.data<float>();
  float* ob = out.data<float>();
  const int64_t q_st = q.strides()[0], q_sh = q.strides()[1];
  const int64_t k_st = k.strides()[0], k_sh = k.strides()[1];
  const int64_t v_st = v.strides()[0], v_sh = v.strides()[1];
  auto visible = [&](int64_t i, int64_t j) {
    const int64_t qp = q_pos[static_cast<size_t>(i)], kp = k_pos[static_cast<size_t>(j)];
    return kp <= qp && (window <= 0 || qp - kp < window);
  };
  const int64_t q_blocks = (tq + kQueryBlock - 1) / kQueryBlock;
  // Tasks: (query head, block of queries). A query's scores are linear-tile values (each depends only
  // on D), its softmax and its Σ p·v run over its own visible keys in storage order: nothing depends
  // on the other queries of the block.
  const int64_t work_per_task = kQueryBlock * std::max<int64_t>(tk, 1) * (d + dv);
  parallel_for(hq * q_blocks, std::max<int64_t>(1, (int64_t{1} << 16) / work_per_task),
               [&](int64_t begin, int64_t end) {
                 std::vector<float> scores;
                 for (int64_t task = begin; task < end; ++task) {
                   const int64_t h = task / q_blocks, g = h / group;
                   const int64_t i0 = task % q_blocks * kQueryBlock, i1 = std::min(tq, i0 + kQueryBlock);
                   // Key index range [lo, hi) holding every key visible to some query of the block.
                   int64_t lo = tk, hi = 0;
                   for (int64_t i = i0; i < i1; ++i) {
                     for (int64_t j = 0; j < tk; ++j)
                       if (visible(i, j)) {
                         lo = std::min(lo, j);
                         break;
                       }
                     for (int64_t j = tk; j-- > 0;)
                       if (visible(i, j)) {
                         hi = std::max(hi, j + 1);
                         break;
                       }
                   }
                   const int64_t span = hi > lo ? hi - lo : 0;
                   if (span > 0) {
                     scores.resize(static_cast<size_t>((i1 - i0) * span));
                     cpu::LinearArgs args;
                     args.x = qb + i0 * q_st + h * q_sh;
                     args.x_stride = q_st;
                     args.w = kb + lo * k_st + g * k_sh;
                     args.w_bf16 = false;
                     args.w_stride = k_st;
                     args.out = scores.data();
                     args.out_stride = span;
                     args.k = d;
                     cpu::linear_block(args, 0, i1 - i0, 0, span);
                   }
                   for (int64_t i = i0; i < i1; ++i) {
                     float* orow = ob + (i * hq + h) * dv;
                     std::memset(orow, 0, static_cast<size_t>(dv) * sizeof(float));
                     if (span == 0) continue;
                     float* s = scores.data() + (i - i0) * span;
                     float max = -std::numeric_limits<float>::infinity();
                     bool any = false;
                     for (int64_t j = lo; j < hi; ++j) {
                       if (!visible(i, j)) continue;
                       s[j - lo] *= scale;
                       max = std::max(max, s[j - lo]);
                       any = true;
                     }
                     if (!any) continue;
                     float sum = 0.0f;
                     for (int64_t j = lo; j < hi; ++j) {
                       if (!visible(i, j)) continue;
                       const float p = std::exp(s[j - lo] - max);
                       sum += p;
                       cpu::axpy(p, vb + j * v_st + g * v_sh, orow, dv);
                     }
                     const float inv = 1.0f / sum;
                     for (int64_t c = 0; c < dv; ++c) orow[c] *= inv;
                   }
                 }
               });
}

}  // namespace lmx::ops
