// Mixture-of-experts routing (softmax top-k, renormalised, per-expert scale) and expert dispatch.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/expert_groups.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace lmx::ops {
namespace {


// One block of one expert's projection: rows [m0, m1) of its gathered tokens, outputs [n0, n1).
struct ExpertTask {
  int64_t expert, m0, m1, n0, n1;
};

}  // namespace

void moe_route(const Tensor& router_logits, int top_k, const Tensor* per_expert_scale, Tensor& experts,
               Tensor& weights) {
  constexpr const char* kOp = "moe_route";
  cpu::require_dtype(router_logits, DType::kF32, kOp, "router_logits");
  LMX_REQUIRE(InvalidArgument, router_logits.ndim() == 2, "moe_route: router_logits must be [T, E], got {}",
                           shape_string(router_logits.shape()));
  const cpu::RowView lv = cpu::row_view(router_logits, kOp, "router_logits");
  const int64_t tokens = lv.rows, num_experts = lv.cols;
  LMX_REQUIRE(InvalidArgument, top_k >= 1 && top_k <= num_experts, "moe_route: top_k {} outside [1, {}]", top_k,
                           num_experts);
  if (per_expert_scale) {
    cpu::require_weight_dtype(*per_expert_scale, kOp, "per_expert_scale");
    LMX_REQUIRE(InvalidArgument, per_expert_scale->is_contiguous() && per_expert_scale->numel() == num_experts,
                             "moe_route: per_expert_scale {} does not match {} experts",
                             shape_string(per_expert_scale->shape()), num_experts);
  }
  cpu::prepare_out(experts, {tokens, top_k}, DType::kI32, kOp);
  cpu::prepare_out(weights, {tokens, top_k}, DType::kF32, kOp);
  int32_t* ex = experts.data<int32_t>();
  float* wt = weights.data<float>();
  parallel_for(tokens, std::max<int64_t>(1, 4096 / num_experts), [&](int64_t begin, int64_t end) {
    std::vector<float> prob(static_cast<size_t>(num_experts));
    std::vector<int32_t> order(static_cast<size_t>(num_experts));
    for (int64_t t = begin; t < end; ++t) {
      const float* logits = lv.row<const float>(t);
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t e = 0; e < num_experts; ++e) max = std::max(max, logits[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < num_experts; ++e) {
        prob[static_cast<size_t>(e)] = std::exp(logits[e] - max);
        sum += prob[static_cast<size_t>(e)];
      }
      const float inv = 1.0f / sum;
      for (auto& p : prob) p *= inv;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
        const float pa = prob[static_cast<size_t>(a)], pb = prob[static_cast<size_t>(b)];
        return pa > pb || (pa == pb && a < b);
      });
      float top_sum = 0.0f;
      for (int j = 0; j < top_k; ++j) top_sum += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
      for (int j = 0; j < top_k; ++j) {
        const int32_t e = order[static_cast<size_t>(j)];
        float w = prob[static_cast<size_t>(e)] / top_sum;
        if (per_expert_scale) w *= cpu::weight_at(*per_expert_scale, e);
        ex[t * top_k + j] = e;
        wt[t * top_k + j] = w;
      }
    }
  });
}

void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const Tensor& gate_up,
                 const Tensor& down, Tensor& out) {
  constexpr const char* kOp = "moe_experts";
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  cpu::require_dtype(experts, DType::kI32, kOp, "experts");
  cpu::require_dtype(weights, DType::kF32, kOp, "weights");
  cpu::require_weight_dtype(gate_up, kOp, "gate_up");
  cpu::require_weight_dtype(down, kOp, "down");
  LMX_REQUIRE(InvalidArgument, x.ndim() == 2, "moe_experts: x must be [T, H], got {}", shape_string(x.shape()));
  const cpu::RowView xv = cpu::row_view(x, kOp, "x");
  const int64_t tokens = xv.rows, hidden = xv.cols;
  LMX_REQUIRE(InvalidArgument, experts.ndim() == 2 && experts.dim(0) == tokens && experts.is_contiguous() &&
                               weights.shape() == experts.shape() && weights.is_contiguous(),
                           "moe_experts: experts {} and weights {} must both be contiguous [T={}, k]",
                           shape_string(experts.shape()), shape_string(weights.shape()), tokens);
  LMX_REQUIRE(InvalidArgument, 
      gate_up.ndim() == 3 && gate_up.is_contiguous() && gate_up.dim(2) == hidden && gate_up.dim(1) % 2 == 0,
      "moe_experts: gate_up must be contiguous [E, 2I, H={}], got {}", hidden, shape_string(gate_up.shape()));
  const int64_t num_experts = gate_up.dim(0), inter = gate_up.dim(1) / 2;
  LMX_REQUIRE(InvalidArgument, down.ndim() == 3 && down.is_contiguous() && down.dim(0) == num_experts &&
                               down.dim(1) == hidden && down.dim(2) == inter,
                           "moe_experts: down must be contiguous [E={}, H={}, I={}], got {}", num_experts,
                           hidden, inter, shape_string(down.shape()));
  const int64_t top_k = experts.dim(1);
  const int32_t* ex = experts.data<int32_t>();
  const float* wt = weights.data<float>();
  cpu::prepare_out(out, {tokens, hidden}, DType::kF32, kOp);
  float* o = out.data<float>();
  const int64_t slots = tokens * top_k;
  if (slots == 0 || hidden == 0) {
    std::fill(o, o + tokens * hidden, 0.0f);
    return;
  }

  cpu::ExpertGroups groups = cpu::group_by_expert(xv, ex, tokens, top_k, num_experts, kOp);
  const std::vector<int64_t>& start = groups.start;
  std::vector<float>& gathered = groups.gathered;  // reused as the down projection's output

  const bool gate_up_bf16 = gate_up.dtype() == DType::kBF16;
  const bool down_bf16 = down.dtype() == DType::kBF16;
  const size_t gate_up_esize = dtype_size(gate_up.dtype()), down_esize = dtype_size(down.dtype());
  const auto* gate_up_base = static_cast<const std::byte*>(gate_up.raw_data());
  const auto* down_base = static_cast<const std::byte*>(down.raw_data());

  // Runs one projection for every expert with tokens: the tasks of all experts share one parallel
  // loop, so each expert's weights are read once; every value is a linear_block value.
  auto run_experts = [&](int64_t n_out, auto make_args) {
    std::vector<ExpertTask> tasks;
    for (int64_t e = 0; e < num_experts; ++e) {
      const int64_t rows = start[static_cast<size_t>(e + 1)] - start[static_cast<size_t>(e)];
      if (rows == 0) continue;
      const cpu::LinearTiling tiling = cpu::linear_tiling(rows, n_out);
      for (int64_t t = 0; t < tiling.tasks(); ++t) {
        ExpertTask task{e, 0, 0, 0, 0};
        tiling.block(t, task.m0, task.m1, task.n0, task.n1);
        tasks.push_back(task);
      }
    }
    parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const ExpertTask& task = tasks[static_cast<size_t>(i)];
        cpu::linear_block(make_args(task.expert), task.m0, task.m1, task.n0, task.n1);
      }
    });
  };

  // gate_up: hbuf[row, 0:2I] = gathered[row] · gate_up[e]ᵀ.
  std::vector<float> hbuf(static_cast<size_t>(slots * 2 * inter));
  run_experts(2 * inter, [&](int64_t e) {
    cpu::LinearArgs a;
    const int64_t row0 = start[static_cast<size_t>(e)];
    a.x = gathered.data() + row0 * hidden;
    a.x_stride = hidden;
    a.w = gate_up_base + static_cast<size_t>(e * 2 * inter * hidden) * gate_up_esize;
    a.w_bf16 = gate_up_bf16;
    a.w_stride = hidden;
    a.out = hbuf.data() + row0 * 2 * inter;
    a.out_stride = 2 * inter;
    a.k = hidden;
    return a;
  });
  // act = gelu_tanh(gate) * up, written over the gate half of each hbuf row.
  cpu::geglu_rows_inplace(hbuf.data(), slots, inter);
  // down: ybuf[row, 0:H] = act[row] · down[e]ᵀ (gathered is reused: same shape [slots, H]).
  float* ybuf = gathered.data();
  run_experts(hidden, [&](int64_t e) {
    cpu::LinearArgs a;
    const int64_t row0 = start[static_cast<size_t>(e)];
    a.x = hbuf.data() + row0 * 2 * inter;
    a.x_stride = 2 * inter;
    a.w = down_base + static_cast<size_t>(e * hidden * inter) * down_esize;
    a.w_bf16 = down_bf16;
    a.w_stride = inter;
    a.out = ybuf + row0 * hidden;
    a.out_stride = hidden;
    a.k = inter;
    return a;
  });
  cpu::combine_expert_outputs(groups, ybuf, wt, tokens, top_k, hidden, o);
}

}  // namespace lmx::ops
