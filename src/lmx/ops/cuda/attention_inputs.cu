// attention_inputs (attention.h): per-head RMSNorm, rotate-half RoPE and the KV-cache append of a
// layer's q, k and v in one kernel (the decode step's six small kernels before attention become one).
// Numerics are those of rms_norm, rope and kv_append (elementwise.h / attention.h): _rn intrinsics, no
// FMA contraction, sincosf of the f32 angle, bf16 round-to-nearest-even into the cache; only the order
// of the f32 sum of squares differs (one warp per head here).
#include "lmx/core/error.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/head_norm.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/paged_store.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <cuda_bf16.h>

#include <algorithm>

namespace lmx::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

struct Jobs {
  HeadNormJob job[kMaxHeadNormJobs];
  int count = 0;
  int total_heads = 0;
};

// One warp per token and run of `heads_per_warp` consecutive heads (over the jobs in order), each head normed
// by detail::norm_head: the same sum in the same order whatever the run length; the RoPE angles' sines and
// cosines are the token's, computed once per warp for its heads.
// Everything that does not depend on q, k or v — the position, the norm weights of the run's first job and
// the sines and cosines — is read and computed before waiting for the projection that writes them (step
// inputs and weights: launch.cuh), so in decode (runs of one head) only the norm and the stores follow the
// wait.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    attention_inputs_kernel(const Jobs jobs, int64_t tokens, int head_dim, float eps,
                            const int32_t* positions, const int32_t* q_seq, const float* inv_freq,
                            int heads_per_warp) {
  const int lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x;
  const int first = (static_cast<int>(blockIdx.y) * kWarpsPerBlock + (threadIdx.x >> 5)) * heads_per_warp;
  if (t >= tokens || first >= jobs.total_heads) {
    wait_for_prior_kernels();
    return;
  }
  const int count = min(heads_per_warp, jobs.total_heads - first);
  int j = 0, head = first;  // head: the run's first head within job j
  while (head >= jobs.job[j].heads) head -= jobs.job[j++].heads;
  bool rope = false;  // whether a job of the run rotates
  for (int jj = j, left = count + head; jj < jobs.count && left > 0; left -= jobs.job[jj++].heads)
    rope = rope || jobs.job[jj].rope;
  const int half = head_dim / 2;
  const int32_t position = positions[t];
  detail::HeadAngles angles;
  angles.compute(static_cast<float>(position), inv_freq, half, lane, rope);
  detail::HeadWeights weights;
  weights.load(jobs.job[j].weight, half, lane);

  wait_for_prior_kernels();
  allow_next_kernel();
  for (int n = 0; n < count; ++n, ++head) {
    if (head == jobs.job[j].heads) {  // the run continues in the next job with heads
      do ++j;
      while (jobs.job[j].heads == 0);
      head = 0;
      weights.load(jobs.job[j].weight, half, lane);
    }
    const HeadNormJob& job = jobs.job[j];
    float* xr = job.x + t * job.token_stride + static_cast<int64_t>(head) * head_dim;
    if (job.store.blocks != nullptr) {
      uint16_t* cache = paged_row(job.store, q_seq[t], position, static_cast<int64_t>(job.heads) * head_dim) +
                        static_cast<int64_t>(head) * head_dim;
      detail::norm_head(xr, head_dim, eps, lane, weights, job.weight != nullptr, job.rope, angles,
                        [&](int i, float x0, float x1) {
                          cache[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x0));
                          cache[i + half] = __bfloat16_as_ushort(__float2bfloat16_rn(x1));
                        });
    } else {
      detail::norm_head(xr, head_dim, eps, lane, weights, job.weight != nullptr, job.rope, angles,
                        [&](int i, float x0, float x1) {
                          xr[i] = x0;
                          xr[i + half] = x1;
                        });
    }
  }
}

// Heads per warp of a call: 1 while the call has fewer than kInputsTargetWarps (token, head) pairs (decode:
// a warp per head keeps every head's latency one norm), else runs that leave ~kInputsTargetWarps warps (~62
// per SM of an H200), at most a block's share of a token's heads. In prefill every warp of a token computed
// the same sines and cosines: ~40 % of the kernel's instructions at 32 heads per token.
constexpr int64_t kInputsTargetWarps = 8192;
int inputs_heads_per_warp(int64_t tokens, int total_heads) {
  const int64_t most = (total_heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(
      std::clamp<int64_t>(tokens * total_heads / kInputsTargetWarps, 1, std::max<int64_t>(most, 1)));
}

}  // namespace

void attention_inputs(const HeadNormJob* jobs, int job_count, int64_t tokens, int head_dim, float eps,
                      const int32_t* positions, const int32_t* q_seq, const float* inv_freq,
                      cudaStream_t stream, int heads_per_warp) {
  LMX_REQUIRE(InvalidArgument, job_count >= 0 && job_count <= kMaxHeadNormJobs,
              "attention_inputs: {} jobs (at most {})", job_count, kMaxHeadNormJobs);
  LMX_REQUIRE(InvalidArgument,
              head_dim > 0 && head_dim % 2 == 0 && head_dim <= 64 * detail::kMaxHeadPairsPerLane,
              "attention_inputs: head_dim {} must be even and at most {}", head_dim,
              64 * detail::kMaxHeadPairsPerLane);
  Jobs all;
  for (int i = 0; i < job_count; ++i) {
    LMX_REQUIRE(InvalidArgument, jobs[i].heads >= 0 && jobs[i].x != nullptr, "attention_inputs: bad job {}", i);
    all.job[all.count++] = jobs[i];
    all.total_heads += jobs[i].heads;
  }
  if (tokens <= 0 || all.total_heads == 0) return;
  LMX_REQUIRE(InvalidArgument, tokens <= 0x7fffffff, "attention_inputs: {} tokens", tokens);
  LMX_REQUIRE(InvalidArgument, heads_per_warp >= 0, "attention_inputs: {} heads per warp", heads_per_warp);
  // The tuning table's attention.inputs_heads_per_warp replaces the automatic choice (the same results).
  if (heads_per_warp == 0) heads_per_warp = tuning().attention.inputs_heads_per_warp;
  const int run = heads_per_warp > 0 ? std::min(heads_per_warp, all.total_heads)
                                     : inputs_heads_per_warp(tokens, all.total_heads);
  const int warps = (all.total_heads + run - 1) / run;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock));
  launch(attention_inputs_kernel, grid, kWarpsPerBlock * 32, 0, stream, all, tokens, head_dim, eps, positions,
         q_seq, inv_freq, run);
}

}  // namespace lmx::cuda
