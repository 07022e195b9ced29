// Tiled flash attention for many query tokens per sequence. A one-block kernel cuts the tokens into
// tiles (runs of one sequence, at most tokens_per_item long, also cut at multiples of it); a
// persistent kernel then takes (tile, kv head, head block) items from an atomic counter, most
// expensive (latest) tiles first, and walks each item's keys in 64-key tiles, folding each tile's chunk
// state (kChunkKeys = 64) into the running state in registers. Numerics: attention_kernels.cuh (identical to
// the split-KV path).
#include "lmx/ops/cuda/attention_kernels.cuh"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/kv_codec.cuh"
#include "lmx/ops/cuda/launch.cuh"

#include <algorithm>

namespace lmx::cuda::attn {
namespace {

constexpr int kListThreads = 1024;

// work[0] = 0 (item counter), work[1] = tile count, work[2 + i] = first token of tile i, then a
// `tokens` sentinel. Token t starts a tile iff t == 0, t % tpt == 0 or q_seq[t] != q_seq[t - 1].
__global__ void __launch_bounds__(kListThreads)
    tile_list_kernel(const int32_t* q_seq, int tokens, int tpt, int* work) {
  wait_for_prior_kernels();
  allow_next_kernel();
  __shared__ int warp_sums[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (tokens + kListThreads - 1) / kListThreads;
  const int t0 = min(tokens, tid * per), t1 = min(tokens, t0 + per);
  auto starts = [&](int t) { return t == 0 || t % tpt == 0 || q_seq[t] != q_seq[t - 1]; };
  int count = 0;
  for (int t = t0; t < t1; ++t) count += starts(t) ? 1 : 0;
  int incl = count;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += o;
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  int offset = incl - count + (warp > 0 ? warp_sums[warp - 1] : 0);
  for (int t = t0; t < t1; ++t)
    if (starts(t)) work[2 + offset++] = t;
  if (tid == 0) {
    const int total = warp_sums[31];
    work[0] = 0;
    work[1] = total;
    work[2 + total] = tokens;
  }
}

// Folds a finished chunk state into the running state (rm, rl, racc) of the thread's two rows.
template <int DT, int NW>
__device__ __forceinline__ void fold_chunk(const ChunkState<DT, NW>& st, float (&rm)[2], float (&rl)[2],
                                           float (&racc)[Dims<DT, NW>::kNB][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const FoldStep f = fold_step(rm[r], rl[r], st.m[r], st.l[2 * r]);
#pragma unroll
    for (int n = 0; n < Dims<DT, NW>::kNB; ++n) {
      racc[n][2 * r] = fold_apply(f, racc[n][2 * r], st.acc[n][2 * r]);
      racc[n][2 * r + 1] = fold_apply(f, racc[n][2 * r + 1], st.acc[n][2 * r + 1]);
    }
  }
}

// Block shape per head-dim tier: NW warps per 16 query rows, RG row groups. Chosen so that the chunk
// and running accumulators (2 × 16 × DT/NW f32 per warp) stay in registers without spills, except
// DT = 512 (a few spilled words; 64 rows would need more shared memory or registers than an SM has).
template <int DT>
struct PrefillCfg {
  static constexpr int kNW = DT <= 64 ? 1 : (DT == 128 ? 2 : 4);
  static constexpr int kRG = DT <= 128 ? 4 : 2;
  static constexpr int kMinBlocks = 1;
};

template <int DT, int NW, int RG, int MINB>
__global__ void __launch_bounds__(Layout<DT, NW, RG>::kThreads, MINB) prefill_kernel(Params p) {
  wait_for_prior_kernels();
  allow_next_kernel();
  using L = Layout<DT, NW, RG>;
  using D = Dims<DT, NW>;
  extern __shared__ __align__(16) char smem[];
  __shared__ int s_item;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rg = warp / D::kNW, wn = warp % D::kNW;
  const int g = lane >> 2, q4 = lane & 3;
  const int4* info = reinterpret_cast<const int4*>(smem + L::kRowInfo);
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);

  PrefillItem it;
  while (take_prefill_item(p, &s_item, it)) {
    const int t0 = it.t0, kvh = it.kvh;
    setup_rows<DT, NW, RG>(p, smem, t0, it.ntok, kvh, it.hb);
    const int2 span = item_key_span(info, L::kRows);
    const int blo = span.x, bhi = span.y;
    const int lo[2] = {info[rg * 16 + g].z, info[rg * 16 + g + 8].z};
    const int hi[2] = {info[rg * 16 + g].w, info[rg * 16 + g + 8].w};
    float rm[2] = {-INFINITY, -INFINITY}, rl[2] = {0.0f, 0.0f};
    float racc[D::kNB][4];
#pragma unroll
    for (int n = 0; n < D::kNB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) racc[n][e] = 0.0f;

    if (bhi > blo) {
      const int seq = p.q_seq[t0];
      const int64_t row_elems = static_cast<int64_t>(p.kv_heads) * p.head_dim;
      // The first rows of tile `tile`'s keys and values (one block holds a whole tile).
      // Tile `tile` of the keys (values) into ks (vs): cp.async copies of bf16 rows, or a coded store's rows
      // decoded by plain stores (kv_codec.cuh), which the next barrier makes visible like a waited copy.
      auto load = [&](__nv_bfloat16* dst, const PagedStore& store, int tile) {
        if (store.codec != StoreCodec::kBf16)
          codec::load_coded_tile<DT, L::kThreads>(dst, store, seq, p.kv_heads, kvh, p.head_dim,
                                                  tile * kTileKeys, blo, bhi);
        else
          load_tile<DT, L::kThreads>(dst, paged_row(store, seq, tile * kTileKeys, row_elems), p.kv_heads, kvh,
                                     p.head_dim, tile * kTileKeys, blo, bhi);
      };
      const int tile_lo = blo / kTileKeys, tile_hi = (bhi + kTileKeys - 1) / kTileKeys;
      load(ks, p.k, tile_lo);
      cp_async_commit();
      load(vs, p.v, tile_lo);
      cp_async_commit();
      ChunkState<DT, NW> st;
      st.reset();
      for (int tile = tile_lo; tile < tile_hi; ++tile) {
        const bool more = tile + 1 < tile_hi;
        cp_async_wait<1>();
        __syncthreads();
        process_tile<DT, NW, RG>(
            smem, st, tile * kTileKeys, lo, hi, p.scale_log2,
            [&] {
              if (more) load(ks, p.k, tile + 1);
              cp_async_commit();
            },
            [] { cp_async_wait<1>(); });
        if (more) load(vs, p.v, tile + 1);
        cp_async_commit();
        if (!more || (tile + 1) % kChunkTiles == 0) {
          fold_chunk<DT, NW>(st, rm, rl, racc);
          st.reset();
        }
      }
      cp_async_wait<0>();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int4 ri = info[rg * 16 + g + 8 * r];
      if (ri.x < 0) continue;
      float* dst = p.out + (static_cast<int64_t>(ri.x) * p.heads + ri.y) * p.head_dim;
      const bool any = rm[r] != -INFINITY;
#pragma unroll
      for (int n = 0; n < D::kNB; ++n) {
        const int col = wn * D::kDW + n * 8 + 2 * q4;
        if (col < p.head_dim) {
          const float2 o =
              any ? make_float2(__fdiv_rn(racc[n][2 * r], rl[r]), __fdiv_rn(racc[n][2 * r + 1], rl[r]))
                  : make_float2(0.0f, 0.0f);
          *reinterpret_cast<float2*>(dst + col) = o;
        }
      }
    }
  }
}

template <int DT>
void launch_prefill_dt(const Params& p, cudaStream_t stream) {
  using C = PrefillCfg<DT>;
  using L = Layout<DT, C::kNW, C::kRG>;
  const void* kernel = reinterpret_cast<const void*>(&prefill_kernel<DT, C::kNW, C::kRG, C::kMinBlocks>);
  ensure_smem(kernel, L::kBytes);
  const int64_t max_items = static_cast<int64_t>(p.tokens) * p.kv_heads * p.head_blocks;
  const int grid =
      static_cast<int>(std::min<int64_t>(resident_blocks(kernel, L::kThreads, L::kBytes), max_items));
  launch(prefill_kernel<DT, C::kNW, C::kRG, C::kMinBlocks>, grid, L::kThreads, L::kBytes, stream, p);
}

}  // namespace

void launch_prefill(const Params& p, int dim_tier, bool wgmma, cudaStream_t stream) {
  launch(tile_list_kernel, 1, kListThreads, 0, stream, p.q_seq, p.tokens, p.tokens_per_item, p.work);
  if (wgmma) {
    launch_prefill_wgmma(p, dim_tier, stream);
    return;
  }
  switch (dim_tier) {
    case 32:
      launch_prefill_dt<32>(p, stream);
      break;
    case 64:
      launch_prefill_dt<64>(p, stream);
      break;
    case 128:
      launch_prefill_dt<128>(p, stream);
      break;
    case 256:
      launch_prefill_dt<256>(p, stream);
      break;
    default:
      launch_prefill_dt<512>(p, stream);
      break;
  }
}

}  // namespace lmx::cuda::attn
