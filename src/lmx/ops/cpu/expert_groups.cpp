// Shared by the dense and quantized MoE dispatch: (token, slot) pairs grouped by expert.
#include "lmx/ops/cpu/expert_groups.h"

#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/kernels.h"

#include <algorithm>

namespace lmx::ops::cpu {

ExpertGroups group_by_expert(const RowView& x, const int32_t* experts, int64_t tokens, int64_t top_k,
                             int64_t num_experts, const char* op) {
  const int64_t slots = tokens * top_k, hidden = x.cols;
  for (int64_t i = 0; i < slots; ++i)
    LMX_REQUIRE(InvalidArgument, experts[i] >= 0 && experts[i] < num_experts,
                "{}: expert id {} (token {}, slot {}) outside [0, {})", op, experts[i], i / top_k, i % top_k,
                num_experts);
  ExpertGroups g;
  g.start.assign(static_cast<size_t>(num_experts + 1), 0);
  for (int64_t i = 0; i < slots; ++i) ++g.start[static_cast<size_t>(experts[i]) + 1];
  for (int64_t e = 0; e < num_experts; ++e) g.start[static_cast<size_t>(e + 1)] += g.start[static_cast<size_t>(e)];
  g.row_of.resize(static_cast<size_t>(slots));
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  for (int64_t i = 0; i < slots; ++i) g.row_of[static_cast<size_t>(i)] = fill[static_cast<size_t>(experts[i])]++;
  g.gathered.resize(static_cast<size_t>(slots * hidden));
  parallel_for(slots, std::max<int64_t>(1, 16384 / std::max<int64_t>(hidden, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      std::copy_n(x.row<const float>(i / top_k), hidden, g.gathered.data() + g.row_of[static_cast<size_t>(i)] * hidden);
  });
  return g;
}

void geglu_rows_inplace(float* hbuf, int64_t slots, int64_t inter) {
  parallel_for(slots, std::max<int64_t>(1, 16384 / std::max<int64_t>(inter, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = hbuf + r * 2 * inter;
      gelu_tanh_mul_row(row, row + inter, row, inter);
    }
  });
}

void combine_expert_outputs(const ExpertGroups& groups, const float* y, const float* weights, int64_t tokens,
                            int64_t top_k, int64_t hidden, float* out) {
  parallel_for(tokens, std::max<int64_t>(1, 16384 / std::max<int64_t>(hidden * top_k, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* orow = out + t * hidden;
      std::fill(orow, orow + hidden, 0.0f);
      for (int64_t j = 0; j < top_k; ++j) {
        const float w = weights[t * top_k + j];
        const float* yrow = y + groups.row_of[static_cast<size_t>(t * top_k + j)] * hidden;
        for (int64_t c = 0; c < hidden; ++c) {
          const float term = w * yrow[c];
          orow[c] = orow[c] + term;
        }
      }
    }
  });
}

}  // namespace lmx::ops::cpu
