// CUDA per-request sampling: one block of 1024 threads per entry over its processed row — the logit edits,
// the first maximum and finite count, the log-sum-exp (double), a radix select of the best
// kSamplingCandidates tokens, the candidate cut and the draw (sampling_rows.h).
//
// Determinism: the strided passes give thread t the elements t, t + 1024, …; the ordered passes (the
// candidates' ties, the whole-vocabulary draw) give it the contiguous chunk [t·chunk, (t+1)·chunk). Sums
// of doubles go through fixed shuffle trees and scans, counts through integer atomics; so an entry's
// result depends only on its row, settings and edits.
#include "lmx/ops/cuda/sampling.h"

#include "lmx/ops/cuda/launch.cuh"

#include <climits>
#include <cstdint>

namespace lmx::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCandidates = kSamplingCandidates;
static_assert((kCandidates & (kCandidates - 1)) == 0 && kCandidates <= kThreads,
              "the bitonic sort takes a power of two of at most one element per thread");

// Ascending key = descending value (-0 and +0 equal): the value's bits made order-preserving, complemented.
__device__ __forceinline__ uint32_t rank_key(float v) {
  const uint32_t bits = __float_as_uint(__fadd_rn(v, 0.0f));
  return ~((bits & 0x80000000u) ? ~bits : (bits | 0x80000000u));
}

// lp = processed − lse, rounded as the host's log_softmax.
__device__ __forceinline__ float logprob(float v, double lse) {
  return static_cast<float>(static_cast<double>(v) - lse);
}

// Whether (v, i) beats (best_v, best_i) for the first maximum: a non-NaN beats a NaN, then the larger
// value, then the lower index (a total order, so any reduction tree finds the host's argmax).
__device__ __forceinline__ bool beats(float v, int i, float best_v, int best_i) {
  const bool nan = isnan(v), best_nan = isnan(best_v);
  if (nan != best_nan) return best_nan;
  if (!nan && v != best_v) return v > best_v;
  return i < best_i;
}

// Calls f(i, row[i]) for this thread's strided elements (float4 loads when `vec4`).
template <class F>
__device__ __forceinline__ void for_strided(const float* row, int vocab, bool vec4, F&& f) {
  if (vec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int c = static_cast<int>(threadIdx.x); c < vocab / 4; c += kThreads) {
      const float4 v = row4[c];
      f(4 * c, v.x);
      f(4 * c + 1, v.y);
      f(4 * c + 2, v.z);
      f(4 * c + 3, v.w);
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < vocab; i += kThreads) f(i, row[i]);
  }
}

__device__ __forceinline__ double block_sum(double v, double* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = shared[lane];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const double total = shared[0];
  __syncthreads();
  return total;
}

// The sum of the values of the threads before this one (thread order); `total` gets all of them.
template <class T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* shared, T& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  T exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = T(0);
  if (lane == 31) shared[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T w = shared[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const T up = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += up;
    }
    shared[lane] = w;
  }
  __syncthreads();
  const T before = warp > 0 ? shared[warp - 1] : T(0);
  total = shared[kWarps - 1];
  __syncthreads();
  return before + exclusive;
}

// Sorts keys[0, kCandidates) ascending, carrying payload.
__device__ void bitonic_sort(uint64_t* keys, float* payload) {
  const int i = static_cast<int>(threadIdx.x);
  for (int size = 2; size <= kCandidates; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      __syncthreads();
      const int j = i ^ stride;
      if (i < kCandidates && j > i) {
        const bool ascending = (i & size) == 0;
        if ((keys[i] > keys[j]) == ascending) {
          const uint64_t k = keys[i];
          keys[i] = keys[j];
          keys[j] = k;
          const float p = payload[i];
          payload[i] = payload[j];
          payload[j] = p;
        }
      }
    }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* logits, int64_t logits_stride, int vocab, const SamplingRowParams* params,
                       const LogitEdit* edits, float* processed, SampledRow* out) {
  __shared__ uint32_t hist[256];
  __shared__ uint64_t cand_key[kCandidates];
  __shared__ float cand_lp[kCandidates];
  __shared__ double scan_d[kWarps];
  __shared__ int scan_i[kWarps];
  __shared__ float best_vs[kWarps];
  __shared__ int best_is[kWarps], finite_counts[kWarps];
  __shared__ uint32_t select_prefix, select_remaining;
  __shared__ int cut_kind, cut_survivors, found_id, last_id;
  __shared__ double cut_floor;

  wait_for_prior_kernels();  // the step wrote the logits
  allow_next_kernel();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const SamplingRowParams p = params[blockIdx.x];
  SampledRow& result = out[blockIdx.x];
  float* row = processed + static_cast<int64_t>(blockIdx.x) * vocab;
  const float* src = logits + static_cast<int64_t>(p.row) * logits_stride;
  const bool vec4 = vocab % 4 == 0 && logits_stride % 4 == 0 &&
                    (reinterpret_cast<uintptr_t>(src) & 15) == 0 &&
                    (reinterpret_cast<uintptr_t>(processed) & 15) == 0;

  // Every byte of the result is written (unused top slots and fields stay zero), so results compare bytewise.
  for (int w = tid; w < static_cast<int>(sizeof(SampledRow) / 4); w += kThreads)
    reinterpret_cast<uint32_t*>(&result)[w] = 0;
  // The processed row: a copy with the edits (distinct ids) applied.
  if (vec4) {
    for (int c = tid; c < vocab / 4; c += kThreads)
      reinterpret_cast<float4*>(row)[c] = reinterpret_cast<const float4*>(src)[c];
  } else {
    for (int i = tid; i < vocab; i += kThreads) row[i] = src[i];
  }
  __syncthreads();
  for (int j = tid; j < p.edits_count; j += kThreads) {
    const LogitEdit e = edits[p.edits_begin + j];
    float v = row[e.id];
    if (e.bias != 0.0f) v = __fadd_rn(v, e.bias);
    if (e.repetition != 1.0f) v = v < 0.0f ? __fmul_rn(v, e.repetition) : __fdiv_rn(v, e.repetition);
    if (e.presence != 0.0f) v = __fsub_rn(v, e.presence);
    for (int32_t k = 0; k < e.frequency_count; ++k) v = __fsub_rn(v, e.frequency);
    row[e.id] = v;
  }
  __syncthreads();

  // The first maximum and the finite count.
  float best_v = __int_as_float(0x7fc00000);  // NaN: anything beats it
  int best_i = INT_MAX, finite = 0;
  for_strided(row, vocab, vec4, [&](int i, float v) {
    if (beats(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
    finite += isfinite(v) ? 1 : 0;
  });
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best_v, o);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (beats(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
    finite += __shfl_xor_sync(0xffffffffu, finite, o);
  }
  if (lane == 0) {
    best_vs[warp] = best_v;
    best_is[warp] = best_i;
    finite_counts[warp] = finite;
  }
  __syncthreads();
  best_v = best_vs[0];
  best_i = best_is[0];
  finite = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (beats(best_vs[w], best_is[w], best_v, best_i)) {
      best_v = best_vs[w];
      best_i = best_is[w];
    }
    finite += finite_counts[w];
  }
  if (!(best_v > -INFINITY) || best_v == INFINITY) {
    // Nothing finite to sample, or +inf logits (the host's rule: they share the mass).
    if (tid == 0) {
      result.status = best_v == INFINITY ? SampledStatus::kNeedsHost : SampledStatus::kNoFiniteLogit;
      result.token = 0;
      result.top_count = 0;
    }
    return;
  }

  // lse = max + log Σ exp(v − max), in double.
  double partial = 0.0;
  const double max_value = best_v;
  for_strided(row, vocab, vec4, [&](int, float v) {
    if (!isnan(v)) partial += exp(static_cast<double>(v) - max_value);
  });
  const double lse = max_value + log(block_sum(partial, scan_d));

  const bool greedy = p.temperature == 0.0f;
  const int top_wanted = min(max(p.top_logprobs, 0), kSampledTopMax);
  if (greedy && top_wanted == 0) {
    if (tid == 0) {
      result.status = SampledStatus::kSampled;
      result.token = best_i;
      result.logprob = logprob(best_v, lse);
      result.top_count = 0;
    }
    return;
  }

  // The candidates: the n best finite tokens, ranked by log-probability as the host ranks them (two
  // logits may round to one log-probability; then the lower id ranks first). A radix select (8 bits per
  // pass) finds the key of the n-th; the keys before it all enter, and of the keys equal to it, the lowest
  // ids.
  const int n = min(kCandidates, finite);
  if (tid == 0) {
    select_prefix = 0;
    select_remaining = static_cast<uint32_t>(n);
  }
  uint32_t mask = 0;
  if (n < finite) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) hist[b] = 0;
      __syncthreads();
      const uint32_t prefix = select_prefix;
      for_strided(row, vocab, vec4, [&](int, float v) {
        if (!isfinite(v)) return;
        const uint32_t key = rank_key(logprob(v, lse));
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
      });
      __syncthreads();
      if (tid == 0) {
        uint32_t before = 0;
        for (uint32_t b = 0; b < 256; ++b) {
          if (before + hist[b] >= select_remaining) {
            select_prefix |= b << shift;
            select_remaining -= before;
            break;
          }
          before += hist[b];
        }
      }
      mask |= 255u << shift;
      __syncthreads();
    }
  } else {
    if (tid == 0) {
      select_prefix = 0xffffffffu;  // every finite key is ≤ it; none is equal (it is NaN's pattern)
      select_remaining = 0;
    }
    __syncthreads();
  }
  const uint32_t pivot = select_prefix;
  const int ties_wanted = static_cast<int>(select_remaining);
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, tid * chunk), end = min(vocab, begin + chunk);
  int below = 0, ties = 0;
  for (int i = begin; i < end; ++i) {
    const float v = row[i];
    if (!isfinite(v)) continue;
    const uint32_t key = rank_key(logprob(v, lse));
    below += key < pivot ? 1 : 0;
    ties += key == pivot ? 1 : 0;
  }
  int below_total = 0, ties_total = 0;
  int below_at = block_exclusive_scan(below, scan_i, below_total);
  int tie_at = block_exclusive_scan(ties, scan_i, ties_total);
  for (int c = tid; c < kCandidates; c += kThreads) cand_key[c] = ~uint64_t{0};
  __syncthreads();
  for (int i = begin; i < end; ++i) {
    const float v = row[i];
    if (!isfinite(v)) continue;
    const uint32_t key = rank_key(logprob(v, lse));
    if (key < pivot) {
      cand_key[below_at++] = (uint64_t{key} << 32) | static_cast<uint32_t>(i);
    } else if (key == pivot) {
      if (tie_at < ties_wanted)
        cand_key[below_total + tie_at] = (uint64_t{key} << 32) | static_cast<uint32_t>(i);
      ++tie_at;
    }
  }
  bitonic_sort(cand_key, cand_lp);
  for (int c = tid; c < n; c += kThreads) cand_lp[c] = logprob(row[static_cast<uint32_t>(cand_key[c])], lse);
  __syncthreads();
  const float lp_max = cand_lp[0];
  if (tid == 0) {
    result.top_count = min(top_wanted, n);
    for (int c = 0; c < result.top_count; ++c) {
      result.top_ids[c] = static_cast<int32_t>(static_cast<uint32_t>(cand_key[c]));
      result.top_logprobs[c] = cand_lp[c];
    }
    result.status = SampledStatus::kSampled;
  }
  if (greedy) {
    if (tid == 0) {
      result.token = best_i;
      result.logprob = logprob(best_v, lse);
    }
    return;
  }

  // The cut of the filters, then the draw in id order with weights exp(lp / T − lp_max / T).
  if (tid == 0) {
    const CandidateCut cut = cut_candidates(cand_lp, n, finite, p.top_p, p.min_p, p.top_k);
    cut_kind = cut.kind;
    cut_survivors = cut.survivors;
    cut_floor = cut.floor;
    found_id = INT_MAX;
    last_id = -1;
  }
  __syncthreads();
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  const double top = static_cast<double>(lp_max) * inv_t;
  int token = 0;
  if (cut_kind == CandidateCut::kHost) {
    if (tid == 0) result.status = SampledStatus::kNeedsHost;
    return;
  }
  if (cut_kind == CandidateCut::kWithin) {
    // The survivors re-sorted by id.
    const int survivors = cut_survivors;
    __syncthreads();
    for (int c = tid; c < kCandidates; c += kThreads)
      cand_key[c] = c < survivors ? static_cast<uint32_t>(cand_key[c]) : ~uint64_t{0};
    bitonic_sort(cand_key, cand_lp);
    if (tid == 0) {
      double total = 0.0;
      for (int c = 0; c < survivors; ++c) total += exp(static_cast<double>(cand_lp[c]) * inv_t - top);
      const double target = p.uniform * total;
      double cumulative = 0.0;
      token = static_cast<int>(cand_key[survivors - 1]);
      for (int c = 0; c < survivors; ++c) {
        cumulative += exp(static_cast<double>(cand_lp[c]) * inv_t - top);
        if (cumulative > target) {
          token = static_cast<int>(cand_key[c]);
          break;
        }
      }
      found_id = token;
    }
  } else {
    // Every token with lp ≥ floor, over the whole vocabulary. Each thread whose chunk starts at or below the
    // target walks it; a chunk past the target offers its first survivor (rounding may leave the walk
    // short of the target); the lowest id offered wins.
    const double floor = cut_floor;
    auto survives = [&](float v) { return isfinite(v) && static_cast<double>(logprob(v, lse)) >= floor; };
    auto weight = [&](float v) { return exp(static_cast<double>(logprob(v, lse)) * inv_t - top); };
    double mine = 0.0;
    int first = -1, last = -1;
    for (int i = begin; i < end; ++i) {
      const float v = row[i];
      if (!survives(v)) continue;
      mine += weight(v);
      if (first < 0) first = i;
      last = i;
    }
    double total = 0.0;
    double cumulative = block_exclusive_scan(mine, scan_d, total);
    const double target = p.uniform * total;
    if (last >= 0) atomicMax(&last_id, last);
    if (cumulative > target) {
      if (first >= 0) atomicMin(&found_id, first);
    } else {
      for (int i = begin; i < end; ++i) {
        const float v = row[i];
        if (!survives(v)) continue;
        cumulative += weight(v);
        if (cumulative > target) {
          atomicMin(&found_id, i);
          break;
        }
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    token = found_id != INT_MAX ? found_id : last_id;
    result.token = token;
    result.logprob = logprob(row[token], lse);
  }
}

}  // namespace

void sample_rows(const float* logits, int64_t logits_stride, int vocab, int64_t entries,
                 const SamplingRowParams* params, const LogitEdit* edits, float* processed, SampledRow* out,
                 cudaStream_t stream) {
  if (entries <= 0 || vocab <= 0) return;
  launch(sample_rows_kernel, dim3(static_cast<unsigned>(entries)), dim3(kThreads), 0, stream, logits,
         logits_stride, vocab, params, edits, processed, out);
}

}  // namespace lmx::cuda
