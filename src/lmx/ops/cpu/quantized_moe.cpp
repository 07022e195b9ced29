// quantized_moe_experts: MoE expert dispatch over MLX affine-quantized switch_glu stacks (gate, up, down).
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/expert_groups.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/quantized.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace lmx::ops {
namespace {


// One block of one expert's projection: rows [m0, m1) of its gathered tokens, outputs [n0, n1).
struct ExpertTask {
  int projection;  // index into the call's projections
  int64_t expert, m0, m1, n0, n1;
};

// A projection run for every expert with tokens: x rows (gathered, prepared for the stack), weights,
// output rows.
struct Projection {
  const cpu::PreparedRows* x;
  cpu::QuantizedMatrix stack;
  int64_t n;  // output rows per expert
  float* out;
  int64_t out_stride;
};

}  // namespace

void quantized_moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights,
                           const QuantizedWeight& gate, const QuantizedWeight& up,
                           const QuantizedWeight& down, Tensor& out) {
  constexpr const char* kOp = "quantized_moe_experts";
  const cpu::QuantizedMatrix gate_m = cpu::quantized_matrix(gate, 3, kOp, "gate");
  const cpu::QuantizedMatrix up_m = cpu::quantized_matrix(up, 3, kOp, "up");
  const cpu::QuantizedMatrix down_m = cpu::quantized_matrix(down, 3, kOp, "down");
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  cpu::require_dtype(experts, DType::kI32, kOp, "experts");
  cpu::require_dtype(weights, DType::kF32, kOp, "weights");
  LMX_REQUIRE(InvalidArgument, x.ndim() == 2, "quantized_moe_experts: x must be [T, H], got {}",
                           shape_string(x.shape()));
  const cpu::RowView xv = cpu::row_view(x, kOp, "x");
  const int64_t tokens = xv.rows, hidden = xv.cols;
  LMX_REQUIRE(InvalidArgument, 
      experts.ndim() == 2 && experts.dim(0) == tokens && experts.is_contiguous() &&
          weights.shape() == experts.shape() && weights.is_contiguous(),
      "quantized_moe_experts: experts {} and weights {} must both be contiguous [T={}, k]",
      shape_string(experts.shape()), shape_string(weights.shape()), tokens);
  const int64_t num_experts = gate.codes.dim(0), inter = gate.rows();
  LMX_REQUIRE(InvalidArgument, 
      gate_m.k == hidden && up.codes.dim(0) == num_experts && up.rows() == inter && up_m.k == hidden,
      "quantized_moe_experts: gate [E={}, I={}, K={}] and up [{}, {}, K={}] must both be "
      "[E, I, H={}]",
      num_experts, inter, gate_m.k, up.codes.dim(0), up.rows(), up_m.k, hidden);
  LMX_REQUIRE(InvalidArgument, down.codes.dim(0) == num_experts && down.rows() == hidden && down_m.k == inter,
                           "quantized_moe_experts: down [E={}, N={}, K={}] must be [E={}, H={}, I={}]",
                           down.codes.dim(0), down.rows(), down_m.k, num_experts, hidden, inter);
  const int64_t top_k = experts.dim(1);
  const int32_t* ex = experts.data<int32_t>();
  const float* wt = weights.data<float>();
  cpu::prepare_out(out, {tokens, hidden}, DType::kF32, kOp);
  float* o = out.data<float>();
  const int64_t slots = tokens * top_k;
  if (slots == 0) {
    std::fill(o, o + tokens * hidden, 0.0f);
    return;
  }

  cpu::ExpertGroups groups = cpu::group_by_expert(xv, ex, tokens, top_k, num_experts, kOp);
  const std::vector<int64_t>& start = groups.start;
  std::vector<float>& gathered = groups.gathered;  // reused as the down projection's output

  // Runs projections for every expert with tokens: the tasks of all experts (and projections) share
  // one parallel loop, so each expert's weights are read once; every value is a quantized_linear_block
  // value, so a row's result does not depend on the other rows of its expert.
  auto run = [&](const std::vector<Projection>& projections) {
    std::vector<ExpertTask> tasks;
    for (int p = 0; p < static_cast<int>(projections.size()); ++p)
      for (int64_t e = 0; e < num_experts; ++e) {
        const int64_t rows = start[static_cast<size_t>(e + 1)] - start[static_cast<size_t>(e)];
        if (rows == 0) continue;
        const cpu::LinearTiling tiling =
            cpu::quantized_linear_tiling(rows, projections[static_cast<size_t>(p)].n);
        for (int64_t t = 0; t < tiling.tasks(); ++t) {
          ExpertTask task{p, e, 0, 0, 0, 0};
          tiling.block(t, task.m0, task.m1, task.n0, task.n1);
          tasks.push_back(task);
        }
      }
    parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const ExpertTask& task = tasks[static_cast<size_t>(i)];
        const Projection& p = projections[static_cast<size_t>(task.projection)];
        const int64_t row0 = start[static_cast<size_t>(task.expert)];
        cpu::QuantizedLinearArgs a;
        p.x->bind(a, row0);
        a.w = cpu::expert_matrix(p.stack, p.n, task.expert);
        a.out = p.out + row0 * p.out_stride;
        a.out_stride = p.out_stride;
        cpu::quantized_linear_block(a, task.m0, task.m1, task.n0, task.n1);
      }
    });
  };

  // gate and up: hbuf[row, 0:I] = gate_e · gathered[row], hbuf[row, I:2I] = up_e · gathered[row].
  std::vector<float> hbuf(static_cast<size_t>(slots * 2 * inter));
  {
    const cpu::PreparedRows gate_x = cpu::prepare_rows(gathered.data(), hidden, slots, gate_m);
    cpu::PreparedRows up_x;
    const bool shared = cpu::same_preparation(gate_m, up_m);
    if (!shared) up_x = cpu::prepare_rows(gathered.data(), hidden, slots, up_m);
    const cpu::PreparedRows& ux = shared ? gate_x : up_x;
    run({Projection{&gate_x, gate_m, inter, hbuf.data(), 2 * inter},
         Projection{&ux, up_m, inter, hbuf.data() + inter, 2 * inter}});
  }
  // act = gelu_tanh(gate) * up, written over the gate half of each hbuf row.
  cpu::geglu_rows_inplace(hbuf.data(), slots, inter);
  // down: ybuf[row, 0:H] = down_e · act[row] (gathered is reused: same shape [slots, H]).
  float* ybuf = gathered.data();
  {
    const cpu::PreparedRows act = cpu::prepare_rows(hbuf.data(), 2 * inter, slots, down_m);
    run({Projection{&act, down_m, hidden, ybuf, hidden}});
  }
  cpu::combine_expert_outputs(groups, ybuf, wt, tokens, top_k, hidden, o);
}

}  // namespace lmx::ops
