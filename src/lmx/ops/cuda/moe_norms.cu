// The MoE block's row-wise kernels around the expert projections: its input norms (linear.h moe_inputs)
// and the combine of the experts' outputs, plain or followed by the block's output norms (moe_experts.cuh
// launch_combine, linear.h MoeOutputNorms). Rows follow rms_norm's schedule (norm_rope_math.cuh), so each
// norm sums its squares in the order rms_norm would, and every output is the bits of the unfused ops.
#include "lmx/core/error.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/moe_experts.cuh"
#include "lmx/ops/cuda/norm_rope_math.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <algorithm>
#include <cstdint>

namespace lmx::cuda {
namespace {

using detail::added;
using detail::inv_rms;
using detail::kThreads;
using detail::RowSchedule;
using detail::scaled;
using detail::sum_sq;
using detail::weighted;

// Element c (of n per row, floats or float4s) of w, or an unused value when w is null.
template <typename V>
__device__ __forceinline__ V element_or_none(const V* w, int c) {
  return w != nullptr ? w[c] : V{};
}

// r = rms_norm(x[t]); routed[t] = (r · router_scale) · router_mul, expert_in[t] = r · expert_norm (rms_norm,
// mul_rows, scale, rms_norm). Weights may be null (none).
template <typename V, bool kBlock>
__global__ void moe_inputs_kernel(const V* x, int64_t rows, int n, const V* router_scale, float router_mul,
                                  const V* expert_norm, float dim, float eps, V* routed, V* expert_in) {
  using Rows = RowSchedule<kBlock>;
  Rows::prefetch(router_scale, n);
  Rows::prefetch(expert_norm, n);
  wait_for_prior_kernels();
  allow_next_kernel();
  __shared__ float shared[32];
  for (int64_t r = Rows::first_row(); r < rows; r += Rows::row_step()) {
    const V* xr = x + r * n;
    float ss = 0.0f;
    for (int c = Rows::first(); c < n; c += Rows::step()) ss = sum_sq(xr[c], ss);
    const float inv = inv_rms(Rows::sum(ss, shared), dim, eps);
    for (int c = Rows::first(); c < n; c += Rows::step()) {
      const V normed = scaled(xr[c], inv);
      routed[r * n + c] =
          scaled(weighted(normed, element_or_none(router_scale, c), router_scale != nullptr), router_mul);
      expert_in[r * n + c] = weighted(normed, element_or_none(expert_norm, c), expert_norm != nullptr);
    }
  }
}

// The row of y that pair (t, j) reads, or -1 when it contributes nothing: an expert outside [0, E), or
// no row (row = row_of[t·k + j], or t·k + j when row_of is null: ungrouped).
__device__ __forceinline__ int64_t pair_row(const moe::CombineParams& p, int64_t pair) {
  const int e = p.experts[pair];
  if (e < 0 || e >= p.num_experts) return -1;
  return p.row_of != nullptr ? p.row_of[pair] : pair;
}

// The plain combine: out[t, c] = Σ_j weights[t, j] · y[row(t, j), c] in slot order, one product and one add
// per term from 0 (ops::moe_experts's combine); one thread per element.
__global__ void combine_kernel(const moe::CombineParams p) {
  wait_for_prior_kernels();
  allow_next_kernel();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.hidden) return;
  const int64_t t = blockIdx.y;
  float acc = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    const int64_t pair = t * p.top_k + j, row = pair_row(p, pair);
    if (row >= 0) acc = __fadd_rn(acc, __fmul_rn(p.weights[pair], p.y[row * p.hidden + c]));
  }
  p.out[t * p.hidden + c] = acc;
}

// Pairs per token the fused kernels below take (their table of rows and weights in shared memory).
constexpr int kFusedMaxTopK = 32;

// Lane j of a full warp: the table of token t's contributing pairs in slot order (their y rows and weights,
// the skipped pairs left out) and its length.
__device__ __forceinline__ void fill_pair_table(const moe::CombineParams& p, int64_t t, int j, int32_t* rows,
                                                float* weights, int* count) {
  const int64_t pair = t * p.top_k + j;
  const int64_t row = j < p.top_k ? pair_row(p, pair) : -1;
  const unsigned valid = __ballot_sync(0xFFFFFFFFu, row >= 0);
  if (row >= 0) {
    const int at = __popc(valid & ((1u << j) - 1u));
    rows[at] = static_cast<int32_t>(row);
    weights[at] = p.weights[pair];
  }
  if (j == 0) *count = __popc(valid);
}

// Element c of the combine from a pair table: the plain combine's terms in its order (no branch: the loads
// can all be in flight together).
template <typename V>
__device__ __forceinline__ V combined(const V* y, int n, int c, int count, const int32_t* rows,
                                      const float* weights) {
  V e{};
#pragma unroll 8
  for (int j = 0; j < count; ++j) e = added(e, scaled(y[static_cast<int64_t>(rows[j]) * n + c], weights[j]));
  return e;
}

// The combine with the block's output norms (MoeOutputNorms): e = the plain combine's sum (same terms, same
// order; top_k <= kFusedMaxTopK), then out[t] = rms_norm(e) · expert_norm and dense_out[t] =
// rms_norm(dense_out[t]) · dense_norm + out[t] (rms_norm, rms_norm, add), in rms_norm's row schedule.
template <typename V, bool kBlock>
__global__ void combine_norms_kernel(const moe::CombineParams p, const MoeOutputNorms norms) {
  using Rows = RowSchedule<kBlock>;
  const int n = static_cast<int>(p.hidden / (sizeof(V) / sizeof(float)));
  Rows::prefetch(reinterpret_cast<const V*>(norms.expert_norm), n);
  Rows::prefetch(reinterpret_cast<const V*>(norms.dense_norm), n);
  __shared__ float shared[32];
  // The row's contributing pairs in slot order (y row, weight) and their count.
  __shared__ int32_t rows_of_slot[kThreads / 32][kFusedMaxTopK];
  __shared__ float weights_of_slot[kThreads / 32][kFusedMaxTopK];
  __shared__ int count_of_slot[kThreads / 32];
  int32_t* pair_rows = rows_of_slot[Rows::slot()];
  float* pair_weights = weights_of_slot[Rows::slot()];
  const float dim = static_cast<float>(p.hidden);
  const V* y = reinterpret_cast<const V*>(p.y);
  const V* expert_norm = reinterpret_cast<const V*>(norms.expert_norm);
  const V* dense_norm = reinterpret_cast<const V*>(norms.dense_norm);
  bool waited = false;
  for (int64_t t = Rows::first_row(); t < p.tokens; t += Rows::row_step()) {
    V* out = reinterpret_cast<V*>(p.out) + t * n;
    V* dense = reinterpret_cast<V*>(norms.dense_out) + t * n;
    Rows::sync();  // the previous row's table is no longer read
    if (Rows::first() < 32) fill_pair_table(p, t, Rows::first(), pair_rows, pair_weights, &count_of_slot[Rows::slot()]);
    Rows::sync();
    const int count = count_of_slot[Rows::slot()];
    float ss_dense = 0.0f;
    for (int c = Rows::first(); c < n; c += Rows::step()) ss_dense = sum_sq(dense[c], ss_dense);
    // All read so far are the dispatch's inputs (expert ids, weights, dense_out) or its grouping, written
    // before its gate/up and down projections, so at least two launches back: complete when this kernel
    // starts (launch.cuh). Only y, the down projection's output, needs the wait.
    if (!waited) {
      wait_for_prior_kernels();
      allow_next_kernel();
      waited = true;
    }
    float ss_expert = 0.0f;
    for (int c = Rows::first(); c < n; c += Rows::step()) {
      const V e = combined(y, n, c, count, pair_rows, pair_weights);
      out[c] = e;
      ss_expert = sum_sq(e, ss_expert);
    }
    const float inv_expert = inv_rms(Rows::sum(ss_expert, shared), dim, norms.eps);
    const float inv_dense = inv_rms(Rows::sum(ss_dense, shared), dim, norms.eps);
    for (int c = Rows::first(); c < n; c += Rows::step()) {
      const V e = weighted(scaled(out[c], inv_expert), element_or_none(expert_norm, c), expert_norm != nullptr);
      out[c] = e;
      dense[c] = added(weighted(scaled(dense[c], inv_dense), element_or_none(dense_norm, c), dense_norm != nullptr), e);
    }
  }
  if (!waited) {  // no row here: wait anyway (a kernel allows the next only after its own wait)
    wait_for_prior_kernels();
    allow_next_kernel();
  }
}

// combine_norms_kernel for rows a block normalises (RowSchedule<true>, `schedule` threads) with at most 1024
// elements: one thread per element (blockDim.x >= n), so the combine's loads are one round per row instead of
// one per strided element. The row and the dense row are staged in shared memory, where the first `schedule`
// threads sum their squares in the schedule's order; the other threads add zeros to the block sum, which leaves
// its bits unchanged (their warps' sums are +0, as the lanes past the schedule's warps are in rms_norm).
template <typename V>
__device__ __forceinline__ void combine_norms_row(const moe::CombineParams& p, const MoeOutputNorms& norms,
                                                  int schedule) {
  const int n = static_cast<int>(p.hidden / (sizeof(V) / sizeof(float)));
  const int c = threadIdx.x;
  const bool mine = c < n;
  const V* expert_norm = reinterpret_cast<const V*>(norms.expert_norm);
  const V* dense_norm = reinterpret_cast<const V*>(norms.dense_norm);
  V ew{}, dw{};
  if (mine && expert_norm != nullptr) ew = expert_norm[c];
  if (mine && dense_norm != nullptr) dw = dense_norm[c];
  extern __shared__ __align__(16) unsigned char row_smem[];
  V* staged_e = reinterpret_cast<V*>(row_smem);  // [n]
  V* staged_d = staged_e + n;                     // [n]
  __shared__ float shared[32];
  __shared__ int32_t pair_rows[kFusedMaxTopK];
  __shared__ float pair_weights[kFusedMaxTopK];
  __shared__ int count;
  const float dim = static_cast<float>(p.hidden);
  const V* y = reinterpret_cast<const V*>(p.y);
  bool waited = false;
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    V* out = reinterpret_cast<V*>(p.out) + t * n;
    V* dense = reinterpret_cast<V*>(norms.dense_out) + t * n;
    __syncthreads();  // the previous row's table and staging are no longer read
    if (c < 32) fill_pair_table(p, t, c, pair_rows, pair_weights, &count);
    V d{};
    if (mine) staged_d[c] = d = dense[c];
    // As in combine_norms_kernel: everything so far is the dispatch's input, two launches back.
    if (!waited) {
      wait_for_prior_kernels();
      allow_next_kernel();
      waited = true;
    }
    __syncthreads();
    V e{};
    if (mine) staged_e[c] = e = combined(y, n, c, count, pair_rows, pair_weights);
    __syncthreads();
    float ss_expert = 0.0f, ss_dense = 0.0f;
    for (int k = c; k < n && c < schedule; k += schedule) {
      ss_expert = sum_sq(staged_e[k], ss_expert);
      ss_dense = sum_sq(staged_d[k], ss_dense);
    }
    const float inv_expert = inv_rms(detail::block_sum(ss_expert, shared), dim, norms.eps);
    const float inv_dense = inv_rms(detail::block_sum(ss_dense, shared), dim, norms.eps);
    if (mine) {
      const V en = weighted(scaled(e, inv_expert), ew, expert_norm != nullptr);
      out[c] = en;
      dense[c] = added(weighted(scaled(d, inv_dense), dw, dense_norm != nullptr), en);
    }
  }
  if (!waited) {
    wait_for_prior_kernels();
    allow_next_kernel();
  }
}

template <typename V>
__global__ void combine_norms_row_kernel(const moe::CombineParams p, const MoeOutputNorms norms,
                                         int schedule) {
  combine_norms_row<V>(p, norms, schedule);
}
// The same with at most 40 registers per thread, so that two blocks of up to 768 threads are resident per SM
// (a block of 704 threads at 52 registers kept one row in flight per SM); the tuning table's
// moe.combine_capped chooses it.
template <typename V>
__global__ void __maxnreg__(40)
    combine_norms_row_capped_kernel(const moe::CombineParams p, const MoeOutputNorms norms, int schedule) {
  combine_norms_row<V>(p, norms, schedule);
}

template <typename V>
void launch_combine_norms(const moe::CombineParams& p, const MoeOutputNorms& norms, cudaStream_t stream) {
  const int n = static_cast<int>(p.hidden / (sizeof(V) / sizeof(float)));
  const detail::RowNormLaunch l = detail::row_norm_launch(p.tokens, static_cast<int>(p.hidden), n);
  if (l.block && n <= 1024) {
    const int threads = std::max(l.threads, (n + 31) / 32 * 32);
    const bool capped = tuning().moe.combine_capped;
    launch(capped ? combine_norms_row_capped_kernel<V> : combine_norms_row_kernel<V>, l.grid, threads,
           2 * sizeof(V) * static_cast<size_t>(n), stream, p, norms, l.threads);
    return;
  }
  launch(l.block ? combine_norms_kernel<V, true> : combine_norms_kernel<V, false>, l.grid, l.threads, 0, stream, p,
         norms);
}

template <typename V>
void launch_moe_inputs(const float* x, int64_t tokens, int hidden, const float* router_scale, float router_mul,
                       const float* expert_norm, float eps, float* routed, float* expert_in, cudaStream_t stream) {
  const int n = hidden / static_cast<int>(sizeof(V) / sizeof(float));
  const detail::RowNormLaunch l = detail::row_norm_launch(tokens, hidden, n);
  launch(l.block ? moe_inputs_kernel<V, true> : moe_inputs_kernel<V, false>, l.grid, l.threads, 0, stream,
         reinterpret_cast<const V*>(x), tokens, n, reinterpret_cast<const V*>(router_scale), router_mul,
         reinterpret_cast<const V*>(expert_norm), static_cast<float>(hidden), eps, reinterpret_cast<V*>(routed),
         reinterpret_cast<V*>(expert_in));
}

}  // namespace

void moe::launch_combine(const CombineParams& p, const MoeOutputNorms* norms, cudaStream_t stream) {
  if (p.tokens <= 0 || p.hidden <= 0) return;
  if (norms == nullptr || p.top_k > kFusedMaxTopK) {
    constexpr int kCombineThreads = 256;
    const dim3 grid(static_cast<unsigned>((p.hidden + kCombineThreads - 1) / kCombineThreads),
                    static_cast<unsigned>(p.tokens));
    launch(combine_kernel, grid, kCombineThreads, 0, stream, p);
    if (norms != nullptr) {  // the same bits from the unfused ops
      const int hidden = static_cast<int>(p.hidden);
      rms_norm(p.out, hidden, p.out, hidden, p.tokens, hidden, norms->expert_norm, norms->eps, stream);
      rms_norm(norms->dense_out, hidden, norms->dense_out, hidden, p.tokens, hidden, norms->dense_norm, norms->eps,
               stream);
      add(norms->dense_out, p.out, p.tokens * p.hidden, stream);
    }
    return;
  }
  const bool vec4 = p.hidden % 4 == 0 && detail::aligned16_or_null({p.y, p.out, norms->dense_out, norms->dense_norm,
                                                        norms->expert_norm});
  if (vec4)
    launch_combine_norms<float4>(p, *norms, stream);
  else
    launch_combine_norms<float>(p, *norms, stream);
}

void moe_inputs(const float* x, int64_t tokens, int hidden, const float* router_scale, float router_mul,
                const float* expert_norm, float eps, float* routed, float* expert_in, cudaStream_t stream) {
  LMX_REQUIRE(InvalidArgument, tokens >= 0 && hidden >= 0, "cuda::moe_inputs: negative shape [{}, {}]", tokens,
              hidden);
  if (tokens == 0 || hidden == 0) return;
  const bool vec4 = hidden % 4 == 0 && detail::aligned16_or_null({x, router_scale, expert_norm, routed, expert_in});
  if (vec4)
    launch_moe_inputs<float4>(x, tokens, hidden, router_scale, router_mul, expert_norm, eps, routed, expert_in,
                              stream);
  else
    launch_moe_inputs<float>(x, tokens, hidden, router_scale, router_mul, expert_norm, eps, routed, expert_in,
                             stream);
}

}  // namespace lmx::cuda
