// Shared by the dense and quantized MoE dispatch: (token, slot) pairs grouped by expert, and the
// scalar tanh GELU every expert activation uses.
#pragma once

#include "lmx/ops/cpu/checks.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace lmx::ops::cpu {

// 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) in this operation order (torch's kBeta, kKappa);
// ops::gelu_tanh and both MoE paths use exactly this function.
inline float gelu_tanh_scalar(float x) {
  constexpr float kGeluBeta = 0.7978845608028654f;
  constexpr float kGeluKappa = 0.044715f;
  const float cube = x * x * x;
  const float inner = kGeluBeta * (x + kGeluKappa * cube);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

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
