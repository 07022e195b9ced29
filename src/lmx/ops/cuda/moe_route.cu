// CUDA MoE routing (linear.h moe_route): softmax, top-k, renormalisation and per-expert scale, one
// warp per token, in the CPU op's operation order (ops::moe_route in ops/cpu/moe.cpp).
#include "lmx/core/error.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda {
namespace {

constexpr int kMaxExperts = 256;
constexpr int kMaxTopK = 16;
constexpr int kPerLane = kMaxExperts / 32;
constexpr int kRouteWarps = 4;

// Token t = one warp. Lane l holds experts l, l + 32, ...; the Σexp is summed sequentially in expert
// order by lane 0 (as the CPU does), the top-k is k rounds of a warp arg-max (probability descending,
// ties → lower index), the top-k sum is sequential in selection order, then p / sum (* scale[e]).
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const float* __restrict__ logits, int64_t tokens, int num_experts, int top_k,
                     const float* __restrict__ per_expert_scale, int32_t* __restrict__ experts,
                     float* __restrict__ weights) {
  wait_for_prior_kernels();
  allow_next_kernel();
  extern __shared__ float route_smem[];  // [kRouteWarps][num_experts]: exp(logit - max)
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= tokens) return;  // warp-uniform; no block barrier below
  const float* row = logits + t * num_experts;
  float* exps = route_smem + warp * num_experts;

  float v[kPerLane];
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < num_experts ? row[e] : -INFINITY;
    max = fmaxf(max, v[i]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) max = fmaxf(max, __shfl_xor_sync(0xFFFFFFFFu, max, offset));
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < num_experts) {
      v[i] = expf(__fsub_rn(v[i], max));
      exps[e] = v[i];
    }
  }
  __syncwarp();
  // Σexp in expert order by lane 0, its loads batched (16-byte loads where the row allows: the adds stay
  // sequential, the loads no longer wait for them one by one).
  float sum = 0.0f;
  if (lane == 0) {
    int e = 0;
    if ((num_experts & 3) == 0 && (reinterpret_cast<uintptr_t>(exps) & 15) == 0) {
      for (; e < num_experts; e += 16) {
        float4 q[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          q[i] = e + 4 * i < num_experts ? *reinterpret_cast<const float4*>(exps + e + 4 * i)
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (e + 4 * i < num_experts) {
            sum = __fadd_rn(sum, q[i].x);
            sum = __fadd_rn(sum, q[i].y);
            sum = __fadd_rn(sum, q[i].z);
            sum = __fadd_rn(sum, q[i].w);
          }
      }
    } else {
      for (; e < num_experts; ++e) sum = __fadd_rn(sum, exps[e]);
    }
  }
  sum = __shfl_sync(0xFFFFFFFFu, sum, 0);
  const float inv = __fdiv_rn(1.0f, sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) v[i] = lane + 32 * i < num_experts ? __fmul_rn(v[i], inv) : -1.0f;

  // Lane j keeps the j-th selection. Each round: the largest probability over the warp (the bits of
  // non-negative floats order as unsigned integers; removed experts hold -1, below every probability),
  // then the lowest expert holding it.
  float mine_p = 0.0f;
  int mine_e = 0;
  for (int j = 0; j < top_k; ++j) {
    float best = -1.0f;
    int best_e = 0x7FFFFFFF;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (v[i] > best) {  // increasing e within the lane: strict > keeps the lower index on ties
        best = v[i];
        best_e = lane + 32 * i;
      }
    const unsigned key = best >= 0.0f ? __float_as_uint(best) : 0u;
    const unsigned top = __reduce_max_sync(0xFFFFFFFFu, key);
    best_e = static_cast<int>(__reduce_min_sync(0xFFFFFFFFu, key == top ? static_cast<unsigned>(best_e) : 0xFFFFFFFFu));
    best = best_e == 0x7FFFFFFF ? -1.0f : __uint_as_float(top);  // (nothing left to select: as before)
    if ((best_e & 31) == lane) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i == best_e) v[i] = -1.0f;
    }
    if (lane == j) {
      mine_p = best;
      mine_e = best_e;
    }
  }
  float top_sum = 0.0f;
  for (int j = 0; j < top_k; ++j) top_sum = __fadd_rn(top_sum, __shfl_sync(0xFFFFFFFFu, mine_p, j));
  if (lane < top_k) {
    float w = __fdiv_rn(mine_p, top_sum);
    if (per_expert_scale != nullptr) w = __fmul_rn(w, per_expert_scale[mine_e]);
    experts[t * top_k + lane] = mine_e;
    weights[t * top_k + lane] = w;
  }
}

}  // namespace

void moe_route(const float* logits, int64_t tokens, int num_experts, int top_k, const float* per_expert_scale,
               int32_t* experts, float* weights, cudaStream_t stream) {
  LMX_REQUIRE(InvalidArgument, num_experts >= 1 && num_experts <= kMaxExperts,
              "cuda::moe_route: {} experts outside [1, {}]", num_experts, kMaxExperts);
  LMX_REQUIRE(InvalidArgument, top_k >= 1 && top_k <= num_experts && top_k <= kMaxTopK,
              "cuda::moe_route: top_k {} outside [1, min({}, {})]", top_k, num_experts, kMaxTopK);
  LMX_REQUIRE(InvalidArgument, tokens >= 0, "cuda::moe_route: negative token count {}", tokens);
  if (tokens == 0) return;
  const int64_t blocks = (tokens + kRouteWarps - 1) / kRouteWarps;
  const size_t smem = sizeof(float) * kRouteWarps * static_cast<size_t>(num_experts);
  launch(moe_route_kernel, static_cast<unsigned>(blocks), kRouteWarps * 32, smem, stream, logits, tokens,
      num_experts, top_k, per_expert_scale, experts, weights);
}

}  // namespace lmx::cuda
