// attention_inputs (attention.h): per-head RMSNorm, rotate-half RoPE and the KV-cache append of a
// layer's q, k and v in one kernel (the decode step's six small kernels before attention become one).
// Numerics are those of rms_norm, rope and kv_append (elementwise.h / attention.h): _rn intrinsics, no
// FMA contraction, sincosf of the f32 angle, bf16 round-to-nearest-even into the cache; only the order
// of the f32 sum of squares differs (one warp per head here).
#include "lmx/core/error.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/norm_rope_math.cuh"

#include <cuda_bf16.h>

#include <algorithm>

namespace lmx::cuda {
namespace {

constexpr int kMaxPairsPerLane = 8;  // head_dim ≤ 2 * 32 * 8 = 512
constexpr int kWarpsPerBlock = 4;

struct Jobs {
  HeadNormJob job[kMaxHeadNormJobs];
  int count = 0;
  int total_heads = 0;
};

// One warp per (token, head of some job): lane owns pairs (i, i + half) for i = lane + 32 j. Everything
// that does not depend on q, k or v — the position, the cache row, the norm weights and the RoPE
// angles' sines and cosines — is read and computed before waiting for the projection that writes them
// (step inputs and weights: launch.cuh), so only the norm and the stores follow the wait.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    attention_inputs_kernel(const Jobs jobs, int64_t tokens, int head_dim, float eps, const int32_t* positions,
                            const int32_t* q_seq, const float* inv_freq) {
  const int lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x;
  int head = static_cast<int>(blockIdx.y) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= tokens || head >= jobs.total_heads) {
    wait_for_prior_kernels();
    return;
  }
  int j = 0;
  while (head >= jobs.job[j].heads) head -= jobs.job[j++].heads;
  const HeadNormJob& job = jobs.job[j];
  const int half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  uint16_t* cache = nullptr;
  if (job.store != nullptr)
    cache = job.store[q_seq[t]] + (static_cast<int64_t>(positions[t]) * job.heads + head) * head_dim;
  float w0[kMaxPairsPerLane], w1[kMaxPairsPerLane], sn[kMaxPairsPerLane], cs[kMaxPairsPerLane];
  bool rotate[kMaxPairsPerLane];
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + 32 * p;
    w0[p] = w1[p] = 1.0f;
    sn[p] = 0.0f, cs[p] = 1.0f;
    rotate[p] = false;
    if (i >= half) continue;
    if (job.weight != nullptr) w0[p] = job.weight[i], w1[p] = job.weight[i + half];
    const float freq = job.rope ? inv_freq[i] : 0.0f;
    rotate[p] = freq != 0.0f;  // rope's rotation; pairs with inv_freq 0 stay as they are
    if (rotate[p]) sincosf(__fmul_rn(pos, freq), &sn[p], &cs[p]);
  }

  wait_for_prior_kernels();
  allow_next_kernel();
  const float* xr = job.x + t * job.token_stride + static_cast<int64_t>(head) * head_dim;
  float a[kMaxPairsPerLane], b[kMaxPairsPerLane];
  float ss = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + 32 * p;
    a[p] = i < half ? xr[i] : 0.0f;
    b[p] = i < half ? xr[i + half] : 0.0f;
    ss = fmaf(b[p], b[p], fmaf(a[p], a[p], ss));
  }
  const float inv = detail::inv_rms(detail::warp_sum(ss), static_cast<float>(head_dim), eps);
  float* out = job.store == nullptr ? job.x + t * job.token_stride + static_cast<int64_t>(head) * head_dim : nullptr;
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + 32 * p;
    if (i >= half) break;
    float x0 = __fmul_rn(a[p], inv), x1 = __fmul_rn(b[p], inv);
    if (job.weight != nullptr) x0 = __fmul_rn(x0, w0[p]), x1 = __fmul_rn(x1, w1[p]);
    if (rotate[p]) detail::rotate_pair(x0, x1, sn[p], cs[p]);
    if (cache != nullptr) {
      cache[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x0));
      cache[i + half] = __bfloat16_as_ushort(__float2bfloat16_rn(x1));
    } else {
      out[i] = x0;
      out[i + half] = x1;
    }
  }
}

}  // namespace

void attention_inputs(const HeadNormJob* jobs, int job_count, int64_t tokens, int head_dim, float eps,
                      const int32_t* positions, const int32_t* q_seq, const float* inv_freq, cudaStream_t stream) {
  LMX_REQUIRE(InvalidArgument, job_count >= 0 && job_count <= kMaxHeadNormJobs,
              "attention_inputs: {} jobs (at most {})", job_count, kMaxHeadNormJobs);
  LMX_REQUIRE(InvalidArgument, head_dim > 0 && head_dim % 2 == 0 && head_dim <= 64 * kMaxPairsPerLane,
              "attention_inputs: head_dim {} must be even and at most {}", head_dim, 64 * kMaxPairsPerLane);
  Jobs all;
  for (int i = 0; i < job_count; ++i) {
    LMX_REQUIRE(InvalidArgument, jobs[i].heads >= 0 && jobs[i].x != nullptr, "attention_inputs: bad job {}", i);
    all.job[all.count++] = jobs[i];
    all.total_heads += jobs[i].heads;
  }
  if (tokens <= 0 || all.total_heads == 0) return;
  LMX_REQUIRE(InvalidArgument, tokens <= 0x7fffffff, "attention_inputs: {} tokens", tokens);
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((all.total_heads + kWarpsPerBlock - 1) / kWarpsPerBlock));
  launch(attention_inputs_kernel, grid, kWarpsPerBlock * 32, 0, stream, all, tokens, head_dim, eps, positions, q_seq,
         inv_freq);
}

}  // namespace lmx::cuda
