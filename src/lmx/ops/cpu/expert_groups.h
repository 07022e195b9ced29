// Shared by the dense and quantized MoE dispatch: (token, slot) pairs grouped by expert, and the GeGLU
// of their hidden rows (cpu::gelu_tanh_mul_row, the GELU of every CPU path).
#pragma once

#include "lmx/ops/cpu/checks.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace lmx::ops::cpu {

// The step's (token, slot) pairs grouped by expert. Rows [start[e], start[e+1]) of `gathered` belong
// to expert e, in increasing (token, slot) order; row_of[t·k + j] is pair (t, j)'s row; gathered holds
// the token's x row for each pair ([slots, hidden]).
struct ExpertGroups {
  std::vector<int64_t> start;
  std::vector<int64_t> row_of;
  std::vector<float> gathered;

  int64_t rows(int64_t expert) const { return start[static_cast<size_t>(expert + 1)] - start[static_cast<size_t>(expert)]; }
};

// Validates every expert id (InvalidArgument naming `op`, the id, token and slot) and groups x's rows.
ExpertGroups group_by_expert(const RowView& x, const int32_t* experts, int64_t tokens, int64_t top_k,
                             int64_t num_experts, const char* op);

// act = gelu_tanh(gate) · up per row of hbuf ([slots, 2I]: gate then up), written over the gate half.
void geglu_rows_inplace(float* hbuf, int64_t slots, int64_t inter);

// out[t] = Σ_j weights[t, j] · y[row_of[t·k + j]] in slot order (y: [slots, hidden] expert outputs).
// The fixed order keeps a token's result independent of the other tokens of the call.
void combine_expert_outputs(const ExpertGroups& groups, const float* y, const float* weights, int64_t tokens,
                            int64_t top_k, int64_t hidden, float* out);

}  // namespace lmx::ops::cpu
