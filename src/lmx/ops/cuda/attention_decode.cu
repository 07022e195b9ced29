// Split-KV (flash-decoding) attention: one block per (query token, kv head, block of ≤16 heads of its
// group, 64-key chunk of the token's visible range), then the chunk states folded in key order: by a
// combine kernel, or — when a token has at most kFoldMaxSlots chunk slots — by the blocks of the work
// item themselves, one thread-block cluster along the slots, through distributed shared memory (one kernel
// instead of two; the same operations in the same order, so the same bits). Numerics:
// attention_kernels.cuh.
#include "lmx/ops/cuda/attention_kernels.cuh"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/head_norm.cuh"
#include "lmx/ops/cuda/kv_codec.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

namespace lmx::cuda::attn {
namespace {

// Warps per block: 16 query rows, ≤ 64 output columns (and ≥ 8 keys of S) per warp. A block holds one
// 64-key tile and is latency-bound, so more warps per block finish it sooner (ncu, E4B at 512 keys:
// 2 warps of dim 256 ran 9.4 µs at 0.3 instructions per cycle per scheduler).
constexpr int decode_nw(int dim_tier) {
  return dim_tier <= 64 ? 1 : dim_tier / 64;
}

// grid.x = token × kv head × head block, grid.y = chunk slot (chunk = first visible chunk + slot).
// Slots past the token's last visible chunk exit at once (the combine kernel never reads them), so
// the grid can be sized from a capacity bound and replayed in a CUDA graph as kv_len grows.
//
// The key and value tile is requested before waiting for the previous kernel (attention_inputs, which
// writes q and appends this call's keys): the step inputs (positions, lengths, sequence ids) are
// copied from the host before the step, and every cache row older than this call was written at least
// two kernels back, which launch.cuh's contract guarantees complete. With one query token the only new
// row is its own position; it is copied after the wait. With several, the whole tile waits.
// Chunk slots a cluster folds at most: the H100/H200 non-portable cluster size (keys <= 1024, windows
// <= 960). Past the portable 8 only where clusters_fit says the device can hold such a cluster.
constexpr int kFoldMaxSlots = 16;

// Valid chunk slots of a token's key range (the combine kernel's count); 0 when it sees no key.
__device__ __forceinline__ int valid_slots(const Params& p, int2 range) {
  if (range.y <= range.x) return 0;
  const int first = range.x / kChunkKeys;
  return min((range.y - 1) / kChunkKeys - first + 1, p.n_slots);
}

// kFold: the work item's n_slots blocks form one cluster (along grid y) and fold their chunk states
// themselves (fold_cluster); a block whose chunk lies past the token's range computes nothing but still
// takes part in the fold's barriers. The chunk state then goes to the block's shared memory (over the
// K tile, which every warp has finished reading when process_tile returns), not to p.part_*.
template <int DT>
__device__ __forceinline__ void fold_cluster(const Params& p, char* smem, int t, int2 range);

// kInputs (p.inputs_fused; one query token): whether this block appends the call's key and value row to the
// caches — the head block 0 block of the row's chunk slot, or of slot 0 when the query does not see its own
// row (fresh < 0; then no block takes the row into its tiles). Exactly one block per kv head.
__device__ __forceinline__ bool appends_row(const Params& p, int2 range, int fresh, int hb) {
  if (p.k_in == nullptr || hb != 0) return false;
  const int slot = fresh >= 0 ? fresh / kChunkKeys - range.x / kChunkKeys : 0;
  return static_cast<int>(blockIdx.y) == slot;
}

// kInputs, before the PDL wait: the row table, zeros over the Q tile and over the new key row of the K and V
// tiles (fresh_row >= 0: its row in them), which take_inputs then fills up to head_dim.
template <int DT, int NW>
__device__ __forceinline__ void prepare_inputs(const Params& p, char* smem, int t, int kvh, int hb,
                                               int fresh_row) {
  using L = Layout<DT, NW, 1>;
  using D = Dims<DT, NW>;
  write_row_info(p, reinterpret_cast<int4*>(smem + L::kRowInfo), L::kRows, t, 1, kvh, hb);
  constexpr int kRowVecs = D::kStride * 2 / 16;  // 16-byte vectors per bf16 row of a tile
  uint4* q = reinterpret_cast<uint4*>(smem + L::kQ);
  for (int i = static_cast<int>(threadIdx.x); i < L::kRows * kRowVecs; i += L::kThreads)
    q[i] = make_uint4(0, 0, 0, 0);
  if (fresh_row >= 0 && p.k_in != nullptr) {
    uint4* k = reinterpret_cast<uint4*>(smem + L::kK) + fresh_row * kRowVecs;
    uint4* v = reinterpret_cast<uint4*>(smem + L::kV) + fresh_row * kRowVecs;
    for (int i = static_cast<int>(threadIdx.x); i < kRowVecs; i += L::kThreads)
      k[i] = v[i] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();  // the row table and the zeros before any warp reads or fills them
}

// kInputs, after the PDL wait: attention_inputs' work for this block, one warp per head (detail::norm_head,
// so attention_inputs' bits): warp w takes units w, w + NW, ...: the block's q rows (0 .. gh - 1; none
// without with_q), normed and rotated into its Q tile in bf16 (setup_rows' conversion of attention_inputs'
// f32 output), then — when the call appends keys and this block takes the new row into its tiles (fresh_row
// >= 0) or appends it — the key (normed, weighted, rotated) and the value (normed), into the tiles and/or the
// caches in bf16 (attention_inputs' append).
template <int DT, int NW>
__device__ __forceinline__ void take_inputs(const Params& p, char* smem, int t, int kvh, bool with_q,
                                            int fresh_row, bool appends, const detail::HeadAngles& angles) {
  using L = Layout<DT, NW, 1>;
  using D = Dims<DT, NW>;
  const int lane = threadIdx.x & 31, half = p.head_dim / 2;
  const int4* info = reinterpret_cast<const int4*>(smem + L::kRowInfo);
  const bool kv = p.k_in != nullptr && (fresh_row >= 0 || appends);
  const int q_units = with_q ? p.gh : 0;
  const int units = q_units + (kv ? 2 : 0);
  detail::HeadWeights w;
  for (int u = static_cast<int>(threadIdx.x >> 5); u < units; u += NW) {
    if (u < q_units) {
      const int4 ri = info[u];
      if (ri.x < 0) continue;
      w.load(p.q_norm, half, lane);
      __nv_bfloat16* row = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ) + u * D::kStride;
      const float* xr = p.q + ri.x * p.q_stride + static_cast<int64_t>(ri.y) * p.head_dim;
      detail::norm_head(xr, p.head_dim, p.eps, lane, w, p.q_norm != nullptr, true, angles,
                        [&](int i, float x0, float x1) {
                          row[i] = __float2bfloat16_rn(x0);
                          row[i + half] = __float2bfloat16_rn(x1);
                        });
      continue;
    }
    const bool key = u == q_units;
    w.load(key ? p.k_norm : nullptr, half, lane);
    __nv_bfloat16* tile = nullptr;
    if (fresh_row >= 0)
      tile = reinterpret_cast<__nv_bfloat16*>(smem + (key ? L::kK : L::kV)) + fresh_row * D::kStride;
    uint16_t* cache = nullptr;
    if (appends)
      cache =
          paged_row(key ? p.k : p.v, p.q_seq[t], p.q_pos[t], static_cast<int64_t>(p.kv_heads) * p.head_dim) +
          static_cast<int64_t>(kvh) * p.head_dim;
    const float* xr = (key ? p.k_in : p.v_in) + static_cast<int64_t>(kvh) * p.head_dim;  // (one token)
    detail::norm_head(xr, p.head_dim, p.eps, lane, w, key && p.k_norm != nullptr, key, angles,
                      [&](int i, float x0, float x1) {
                        const __nv_bfloat16 b0 = __float2bfloat16_rn(x0), b1 = __float2bfloat16_rn(x1);
                        if (tile != nullptr) tile[i] = b0, tile[i + half] = b1;
                        if (cache != nullptr)
                          cache[i] = __bfloat16_as_ushort(b0), cache[i + half] = __bfloat16_as_ushort(b1);
                      });
  }
}

// kInputs (p.inputs_fused): the kernel also does attention_inputs' work for its one query token
// (prepare_inputs, take_inputs) instead of reading it from the previous kernel's output.
template <int DT, bool kFold = false, bool kInputs = false, int NW = decode_nw(DT)>
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
  const int pos = p.q_pos[t];
  const int fresh = p.tokens == 1 && pos >= range.x && pos < range.y ? pos : -1;  // appended by this call
  detail::HeadAngles angles;  // kInputs: the RoPE angles of q and of the new key
  if (range.y <= range.x || chunk * kChunkKeys >= range.y) {
    const bool appends = kInputs && appends_row(p, range, fresh, hb);
    if (appends) angles.compute(static_cast<float>(pos), p.inv_freq, p.head_dim / 2, threadIdx.x & 31, true);
    wait_for_prior_kernels();  // (so that this kernel never completes before the previous one)
    if constexpr (kFold) {
      allow_next_kernel();
      setup_rows<DT, NW, 1>(p, smem, t, 1, kvh, hb);  // the row table the fold reads
    }
    if (appends) take_inputs<DT, NW>(p, smem, t, kvh, false, -1, true, angles);  // (the query sees no key)
    if constexpr (kFold) fold_cluster<DT>(p, smem, t, range);
    return;
  }

  const int seq = p.q_seq[t];
  const int key0 = chunk * kTileKeys;
  const int64_t row_elems = static_cast<int64_t>(p.kv_heads) * p.head_dim;
  const uint16_t* kbase = paged_row(p.k, seq, key0, row_elems);  // the tile's first rows
  const uint16_t* vbase = paged_row(p.v, seq, key0, row_elems);
  const bool fresh_here = fresh >= key0 && fresh < key0 + kTileKeys;
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);
  // Coded stores (kv_codec.cuh) are decoded by plain loads after the wait, the whole tile at once.
  const bool coded = p.k.codec != StoreCodec::kBf16;
  if (p.tokens == 1 && !coded) {
    load_tile<DT, L::kThreads>(ks, kbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y, fresh);
    load_tile<DT, L::kThreads>(vs, vbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y, fresh);
  }
  if constexpr (kInputs) {
    prepare_inputs<DT, NW>(p, smem, t, kvh, hb, fresh_here ? fresh - key0 : -1);
    angles.compute(static_cast<float>(pos), p.inv_freq, p.head_dim / 2, threadIdx.x & 31, true);
  }
  wait_for_prior_kernels();
  allow_next_kernel();
  const bool computes_row = kInputs && p.k_in != nullptr;  // the new key row comes from take_inputs
  if (coded) {
    codec::load_coded_tile<DT, L::kThreads>(ks, p.k, seq, p.kv_heads, kvh, p.head_dim, key0, range.x,
                                            range.y);
    codec::load_coded_tile<DT, L::kThreads>(vs, p.v, seq, p.kv_heads, kvh, p.head_dim, key0, range.x,
                                            range.y);
  } else if (p.tokens != 1) {
    load_tile<DT, L::kThreads>(ks, kbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y);
    load_tile<DT, L::kThreads>(vs, vbase, p.kv_heads, kvh, p.head_dim, key0, range.x, range.y);
  } else if (fresh_here && !computes_row) {
    load_key_row<DT, L::kThreads>(ks, kbase, p.kv_heads, kvh, p.head_dim, key0, fresh);
    load_key_row<DT, L::kThreads>(vs, vbase, p.kv_heads, kvh, p.head_dim, key0, fresh);
  }
  cp_async_commit();
  if constexpr (kInputs)
    take_inputs<DT, NW>(p, smem, t, kvh, true, fresh_here ? fresh - key0 : -1,
                        appends_row(p, range, fresh, hb), angles);
  else
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
  process_tile<DT, NW, 1>(
      smem, st, key0, lo, hi, p.scale_log2, [] {}, [] {});

  // Chunk state of each valid row: (m, l) and acc — in global partials, or (kFold) in this block's shared
  // memory: acc [16 rows][DT] floats, then (m, l) [16 rows].
  float* fold_acc = reinterpret_cast<float*>(smem + L::kK);
  float2* fold_ml = reinterpret_cast<float2*>(fold_acc + 16 * DT);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r].x < 0) continue;
    const int64_t slot = (static_cast<int64_t>(t) * p.heads + row[r].y) * p.n_slots + blockIdx.y;
    const float2 ml = make_float2(st.m[r], st.l[2 * r]);
    float* dst = kFold ? fold_acc + (g + 8 * r) * DT : p.part_acc + slot * p.head_dim;
    if (wn == 0 && q4 == 0) {
      if constexpr (kFold)
        fold_ml[g + 8 * r] = ml;
      else
        p.part_ml[slot] = ml;
    }
#pragma unroll
    for (int n = 0; n < D::kNB; ++n) {
      const int col = wn * D::kDW + n * 8 + 2 * q4;
      if (col < p.head_dim)
        *reinterpret_cast<float2*>(dst + col) = make_float2(st.acc[n][2 * r], st.acc[n][2 * r + 1]);
    }
  }
  if constexpr (kFold) fold_cluster<DT>(p, smem, t, range);
}

// The combine kernel's fold of a work item's chunk states, by the item's cluster: block k's shared memory
// holds slot k's state (decode_kernel). Every block computes the merge coefficients of the item's rows
// (exactly as combine_kernel: running maximum, then a_k, b_k from merge_coeffs, l chained with
// merge_apply), then folds its share of the (row, column) outputs, reading the other blocks' states
// through distributed shared memory. The last cluster barrier keeps every block's shared memory alive
// until all reads are done.
template <int DT>
__device__ __forceinline__ void fold_cluster(const Params& p, char* smem, int t, int2 range) {
  using L = Layout<DT, decode_nw(DT), 1>;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  float* fold_acc = reinterpret_cast<float*>(smem + L::kK);
  float2* fold_ml = reinterpret_cast<float2*>(fold_acc + 16 * DT);
  // Coefficients over the P tile (free once every warp is past the first barrier): a, b [16][slots], l [16].
  float* coef_a = reinterpret_cast<float*>(smem + L::kP);
  float* coef_b = coef_a + 16 * kFoldMaxSlots;
  float* coef_l = coef_b + 16 * kFoldMaxSlots;
  static_assert(sizeof(float) * (2 * kFoldMaxSlots + 1) * 16 <= L::kRed - L::kP,
                "the P tile holds the coefficients");
  static_assert(sizeof(float) * 16 * (DT + 2) <= L::kV - L::kK, "the K tile holds a chunk state");
  const int4* info = reinterpret_cast<const int4*>(smem + L::kRowInfo);
  const int n = valid_slots(p, range);

  cluster.sync();  // every block's chunk state is in its shared memory
  if (threadIdx.x < 16 && n > 0 && info[threadIdx.x].x >= 0) {
    const int row = threadIdx.x;
    const float2 first = *cluster.map_shared_rank(fold_ml + row, 0);
    float run = fmaxf(first.x, -INFINITY), l = first.y;  // (the combine's scan starts from -inf too)
    for (int k = 1; k < n; ++k) {
      const float2 mk = *cluster.map_shared_rank(fold_ml + row, k);
      float m, a, b;
      merge_coeffs(run, mk.x, m, a, b);
      run = m;
      l = merge_apply(l, a, mk.y, b);
      coef_a[row * kFoldMaxSlots + k] = a;
      coef_b[row * kFoldMaxSlots + k] = b;
    }
    coef_l[row] = l;
  }
  __syncthreads();
  const int outputs = p.gh * p.head_dim;
  const int threads = static_cast<int>(blockDim.x);
  for (int i = static_cast<int>(blockIdx.y) * threads + static_cast<int>(threadIdx.x); i < outputs;
       i += static_cast<int>(gridDim.y) * threads) {
    const int row = i / p.head_dim, d = i % p.head_dim;
    const int4 ri = info[row];
    if (ri.x < 0) continue;
    float* out = p.out + (static_cast<int64_t>(t) * p.heads + ri.y) * p.head_dim + d;
    if (n == 0) {
      *out = 0.0f;
      continue;
    }
    const float* own = fold_acc + row * DT + d;
    float acc = *cluster.map_shared_rank(own, 0);
#pragma unroll
    for (int k = 1; k < kFoldMaxSlots; ++k)
      if (k < n)
        acc = merge_apply(acc, coef_a[row * kFoldMaxSlots + k], *cluster.map_shared_rank(own, k),
                          coef_b[row * kFoldMaxSlots + k]);
    *out = __fdiv_rn(acc, coef_l[row]);
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
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
    for (int k = 1; k < n; ++k)
      acc = merge_apply(acc, ak[k], src[static_cast<int64_t>(k) * p.head_dim + d], bk[k]);
    out[d] = __fdiv_rn(acc, l);
  }
}

// Chunk slots up to which the work items' clusters fold their own chunk states (no combine kernel): the
// tuning table's attention.cluster_fold_slots (0 = never; same bits either way), at most kFoldMaxSlots.
int fold_slot_limit() {
  return std::min(tuning().attention.cluster_fold_slots, kFoldMaxSlots);
}

// The split-KV kernel for a head-dim tier; true when its clusters folded the chunk states (then no
// combine kernel runs).
// Whether the split-KV kernel (with or without attention_inputs' work) folds in clusters of n_slots blocks.
template <int DT, bool kInputs>
bool folds_in_clusters(const Params& p) {
  using L = Layout<DT, decode_nw(DT), 1>;
  if (p.n_slots > fold_slot_limit()) return false;
  const void* folding = reinterpret_cast<const void*>(&decode_kernel<DT, true, kInputs>);
  ensure_smem(folding, L::kBytes);
  return clusters_fit(folding, L::kThreads, L::kBytes, p.n_slots);
}

template <int DT, bool kInputs>
bool launch_decode_dt(const Params& p, cudaStream_t stream) {
  using L = Layout<DT, decode_nw(DT), 1>;
  const dim3 grid(static_cast<unsigned>(p.tokens * p.kv_heads * p.head_blocks),
                  static_cast<unsigned>(p.n_slots));
  if (folds_in_clusters<DT, kInputs>(p)) {
    launch_with_clusters(decode_kernel<DT, true, kInputs>, grid, L::kThreads, L::kBytes, stream,
                         dim3(1, static_cast<unsigned>(p.n_slots), 1), p);
    return true;
  }
  ensure_smem(reinterpret_cast<const void*>(&decode_kernel<DT, false, kInputs>), L::kBytes);
  launch(decode_kernel<DT, false, kInputs>, grid, L::kThreads, L::kBytes, stream, p);
  return false;
}

// f(std::integral_constant<int, DT>{}) for the head-dim tier DT.
template <class F>
bool for_tier(int dim_tier, F&& f) {
  switch (dim_tier) {
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    case 256:
      return f(std::integral_constant<int, 256>{});
    default:
      return f(std::integral_constant<int, 512>{});
  }
}

}  // namespace

int decode_cluster_blocks(const Params& p, int dim_tier) {
  const bool folds =
      for_tier(dim_tier, [&](auto dt) { return folds_in_clusters<decltype(dt)::value, true>(p); });
  return folds ? p.tokens * p.kv_heads * p.head_blocks * p.n_slots : 0;
}

void launch_decode(const Params& p, int dim_tier, cudaStream_t stream) {
  const bool folded = for_tier(dim_tier, [&](auto dt) {
    constexpr int DT = decltype(dt)::value;
    return p.inputs_fused ? launch_decode_dt<DT, true>(p, stream) : launch_decode_dt<DT, false>(p, stream);
  });
  if (folded) return;
  const size_t smem = sizeof(float) * 4 * static_cast<size_t>(p.n_slots);
  launch(combine_kernel, static_cast<unsigned>(p.tokens * p.heads), kCombineThreads, smem, stream, p);
}

}  // namespace lmx::cuda::attn
