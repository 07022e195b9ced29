// Split-KV (flash-decoding) attention: one block per (query token, kv head, block of ≤16 heads of its
// group, 256-key chunk of the token's visible range), then a combine kernel that folds the chunk
// states in key order. Numerics: attention_kernels.cuh.
#include "lmx/ops/cuda/attention_kernels.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/cuda_check.h"

namespace lmx::cuda::attn {
namespace {

// Warps per block: 16 query rows, ≤ 64 output columns (and ≥ 8 keys of S) per warp. A block holds one
// 64-key tile and is latency-bound, so more warps per block finish it sooner (ncu, E4B at 512 keys:
// 2 warps of dim 256 ran 9.4 µs at 0.3 instructions per cycle per scheduler).
constexpr int decode_nw(int dim_tier) { return dim_tier <= 64 ? 1 : dim_tier / 64; }

// grid.x = token × kv head × head block, grid.y = chunk slot (chunk = first visible chunk + slot).
// Slots past the token's last visible chunk exit at once (the combine kernel never reads them), so
// the grid can be sized from a capacity bound and replayed in a CUDA graph as kv_len grows.
//
// The key and value tile is requested before waiting for the previous kernel (attention_inputs, which
// writes q and appends this call's keys): the step inputs (positions, lengths, sequence ids) are
// copied from the host before the step, and every cache row older than this call was written at least
// two kernels back, which launch.cuh's contract guarantees complete. With one query token the only new
// row is its own position; it is copied after the wait. With several, the whole tile waits.
template <int DT, int NW = decode_nw(DT)>
__global__ void __launch_bounds__(Layout<DT, NW, 1>::kThreads) decode_kernel(Params p) {
  static_assert(kChunkTiles == 1, "a decode block computes one chunk of one tile");
  using L = Layout<DT, NW, 1>;
  using D = Dims<DT, NW>;
  extern __shared__ __align__(16) char smem[];
  const int per_token = p.kv_heads * p.head_blocks;
  const int t = static_cast<int>(blockIdx.x) / per_token;
  const int rem = static_cast<int>(blockIdx.x) % per_token;
  const int kvh = rem / p.head_blocks, hb = rem % p.head_blocks;
  const int2 range = key_range(p, t);
  const int chunk = range.x / kChunkKeys + static_cast<int>(blockIdx.y);
  if (range.y <= range.x || chunk * kChunkKeys >= range.y) {
    wait_for_prior_kernels();  // (so that this kernel never completes before the previous one)
    return;
  }

  const int seq = p.q_seq[t];
  const uint16_t* kbase = p.k[seq];
  const uint16_t* vbase = p.v[seq];
  const int key0 = chunk * kTileKeys;
  const int pos = p.q_pos[t];
  const int fresh = p.tokens == 1 && pos >= range.x && pos < range.y ? pos : -1;  // appended by this call
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);
  if (p.tokens == 1) {
    load_tile<DT, L::kThreads>(ks, kbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y, fresh);
    load_tile<DT, L::kThreads>(vs, vbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y, fresh);
  }
  wait_for_prior_kernels();
  allow_next_kernel();
  if (p.tokens != 1) {
    load_tile<DT, L::kThreads>(ks, kbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y);
    load_tile<DT, L::kThreads>(vs, vbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y);
  } else if (fresh >= key0 && fresh < key0 + kTileKeys) {
    load_key_row<DT, L::kThreads>(ks, kbase, p.kv_heads, kvh, p.head_dim, key0, fresh);
    load_key_row<DT, L::kThreads>(vs, vbase, p.kv_heads, kvh, p.head_dim, key0, fresh);
  }
  cp_async_commit();
  setup_rows<DT, NW, 1>(p, smem, t, 1, kvh, hb);

  const int lane = threadIdx.x & 31, wn = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int4* info = reinterpret_cast<const int4*>(smem + L::kRowInfo);
  const int4 row[2] = {info[g], info[g + 8]};
  const int lo[2] = {row[0].z, row[1].z}, hi[2] = {row[0].w, row[1].w};

  ChunkState<DT, NW> st;
  st.reset();
  cp_async_wait<0>();
  __syncthreads();  // K, V and Q visible to every warp
  process_tile<DT, NW, 1>(smem, st, key0, lo, hi, p.scale_log2, [] {}, [] {});

  // Chunk state of each valid row: (m, l) and acc.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r].x < 0) continue;
    const int64_t slot = (static_cast<int64_t>(t) * p.heads + row[r].y) * p.n_slots + blockIdx.y;
    if (wn == 0 && q4 == 0) p.part_ml[slot] = make_float2(st.m[r], st.l[2 * r]);
    float* dst = p.part_acc + slot * p.head_dim;
#pragma unroll
    for (int n = 0; n < D::kNB; ++n) {
      const int col = wn * D::kDW + n * 8 + 2 * q4;
      if (col < p.head_dim)
        *reinterpret_cast<float2*>(dst + col) = make_float2(st.acc[n][2 * r], st.acc[n][2 * r + 1]);
    }
  }
}

constexpr int kCombineThreads = 128;

// One block per (token, head): folds the chunk states of the token's visible chunks in key order.
// The running maxima (an exact prefix max) and the merge coefficients come first; each output
// element then runs its own chain x = fma(x, a_k, x_k * b_k), as the prefill kernel does in registers.
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(Params p) {
  extern __shared__ float coef[];  // [4][n_slots]: m_k, a_k, b_k, l_k
  const int t = static_cast<int>(blockIdx.x) / p.heads, h = static_cast<int>(blockIdx.x) % p.heads;
  float* out = p.out + (static_cast<int64_t>(t) * p.heads + h) * p.head_dim;
  const int2 range = key_range(p, t);  // step inputs: no kernel writes them
  wait_for_prior_kernels();
  allow_next_kernel();
  if (range.y <= range.x) {
    for (int d = threadIdx.x; d < p.head_dim; d += kCombineThreads) out[d] = 0.0f;
    return;
  }
  const int first = range.x / kChunkKeys;
  const int n = min((range.y - 1) / kChunkKeys - first + 1, p.n_slots);
  const int64_t base = (static_cast<int64_t>(t) * p.heads + h) * p.n_slots;
  float* mk = coef;
  float* ak = coef + p.n_slots;
  float* bk = ak + p.n_slots;
  float* lk = bk + p.n_slots;
  for (int k = threadIdx.x; k < n; k += kCombineThreads) {
    const float2 ml = p.part_ml[base + k];
    mk[k] = ml.x;
    lk[k] = ml.y;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float carry = -INFINITY;
    for (int k0 = 0; k0 < n; k0 += 32) {
      const int k = k0 + lane;
      const float mc = k < n ? mk[k] : -INFINITY;
      float run = mc;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float o = __shfl_up_sync(0xffffffffu, run, off);
        if (lane >= off) run = fmaxf(run, o);
      }
      run = fmaxf(run, carry);
      float prev = __shfl_up_sync(0xffffffffu, run, 1);
      if (lane == 0) prev = carry;
      if (k > 0 && k < n) {
        float m, a, b;
        merge_coeffs(prev, mc, m, a, b);
        ak[k] = a;
        bk[k] = b;
      }
      carry = __shfl_sync(0xffffffffu, run, 31);
    }
  }
  __syncthreads();
  float l = lk[0];
  for (int k = 1; k < n; ++k) l = merge_apply(l, ak[k], lk[k], bk[k]);
  const float* src = p.part_acc + base * p.head_dim;
  for (int d = threadIdx.x; d < p.head_dim; d += kCombineThreads) {
    float acc = src[d];
#pragma unroll 4
    for (int k = 1; k < n; ++k) acc = merge_apply(acc, ak[k], src[static_cast<int64_t>(k) * p.head_dim + d], bk[k]);
    out[d] = __fdiv_rn(acc, l);
  }
}

template <int DT>
void launch_decode_dt(const Params& p, cudaStream_t stream) {
  using L = Layout<DT, decode_nw(DT), 1>;
  ensure_smem(reinterpret_cast<const void*>(&decode_kernel<DT>), L::kBytes);
  const dim3 grid(static_cast<unsigned>(p.tokens * p.kv_heads * p.head_blocks), static_cast<unsigned>(p.n_slots));
  launch(decode_kernel<DT>, grid, L::kThreads, L::kBytes, stream, p);
}

}  // namespace

void launch_decode(const Params& p, int dim_tier, cudaStream_t stream) {
  switch (dim_tier) {
    case 32: launch_decode_dt<32>(p, stream); break;
    case 64: launch_decode_dt<64>(p, stream); break;
    case 128: launch_decode_dt<128>(p, stream); break;
    case 256: launch_decode_dt<256>(p, stream); break;
    default: launch_decode_dt<512>(p, stream); break;
  }
  const size_t smem = sizeof(float) * 4 * static_cast<size_t>(p.n_slots);
  launch(combine_kernel, static_cast<unsigned>(p.tokens * p.heads), kCombineThreads, smem, stream, p);
}

}  // namespace lmx::cuda::attn
