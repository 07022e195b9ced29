// Internal to the CUDA attention (attention.cu, attention_decode.cu, attention_prefill.cu): the shared
// per-tile arithmetic of the split-KV decode kernel and the tiled prefill kernel.
//
// One numeric definition for both paths. A query row's result is a fixed function of its q and its
// visible keys, whichever kernel computes it and whatever else shares the call:
//  - keys are cut at absolute multiples of 64 (tiles) and kChunkKeys (chunks; one tile per chunk, so
//    batch-1 decode spreads over kv_len / 64 blocks: with 4-tile chunks a 512-key decode ran on 2
//    blocks and took ~31 us on an H200, latency-bound);
//  - inside a chunk, tiles are folded in key order with the online softmax (running max m, acc and l
//    rescaled by ex2(m_old - m_new), p = ex2(s - m) rounded to bf16, acc += P·V and l += P·1 on the
//    tensor cores, q rounded to bf16, S = q·k on the tensor cores chained over head_dim in order);
//  - chunk states are folded in key order, starting from the row's first non-empty chunk, by
//    m = max(m_r, m_c), a = ex2(m_r - m), b = ex2(m_c - m), x = fma(x_r, a, x_c * b) for acc and l;
//  - out = acc / l (zeros when the row sees no key).
// The decode kernel computes one chunk per block and stores the chunk state (partials); the combine
// kernel folds them. The prefill kernel folds chunk states in registers as it walks the keys. Tiles or
// chunks that a row cannot see leave its state bit-for-bit unchanged (m stays, alpha = ex2(0) = 1, p =
// 0), so skipping them (decode) or walking them (prefill, for other rows of the tile) is the same.
// Every rounding step is an explicit intrinsic (__fmul_rn, __fsub_rn, __fmaf_rn, __fdiv_rn,
// ex2.approx), so nvcc cannot contract differently in the two kernels.
#pragma once

#include "lmx/ops/cuda/kernel_limits.h"
#include "lmx/ops/cuda/paged_store.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace lmx::cuda::attn {

constexpr int kTileKeys = 64;
constexpr int kChunkTiles = 1;
constexpr int kChunkKeys = kTileKeys * kChunkTiles;
constexpr uint32_t kOnesBf16x2 = 0x3F803F80u;  // two bf16 1.0

struct Params {
  const float* q = nullptr;
  int64_t q_stride = 0;
  float* out = nullptr;
  int tokens = 0, heads = 0, kv_heads = 0, head_dim = 0, group = 0;
  const int32_t* q_pos = nullptr;
  const int32_t* q_seq = nullptr;
  PagedStore k, v;
  const int32_t* kv_len = nullptr;
  int window = 0;
  float scale_log2 = 0.0f;  // scale * log2(e): scores are kept in log2 units
  bool q_vec4 = false;      // q rows are 16-byte aligned (float4 loads)
  // Rows of a work item: heads [hb * gh, hb * gh + gh) ∩ [0, group) of tokens_per_item tokens.
  int gh = 0, head_blocks = 0, tokens_per_item = 0;
  // Decode: partial chunk states [tokens, heads, n_slots] of (m, l) and acc[head_dim].
  float* part_acc = nullptr;
  float2* part_ml = nullptr;
  int n_slots = 0;
  // Prefill: work[0] = item counter, work[1] = tile count, work[2 ..] = first token of each tile, then
  // `tokens` as a sentinel.
  int* work = nullptr;
  // Batch-1 decode that takes attention_inputs' work itself (attention_with_inputs; inputs_fused): q holds
  // the raw projection, which the kernel norms (q_norm; nullptr: no weight) and rotates; k_in / v_in, when
  // set, the call's raw key and value rows, which it norms (k_norm; values without a weight), rotates
  // (keys), appends to the caches k / v and takes as the new key row.
  bool inputs_fused = false;
  const float* q_norm = nullptr;
  const float* k_in = nullptr;
  const float* v_in = nullptr;
  const float* k_norm = nullptr;
  const float* inv_freq = nullptr;
  float eps = 0.0f;
};

// Per head-dim tier DT (head_dim ≤ DT, zero-padded in shared memory): NW warps share 16 query rows;
// for S each takes 64/NW keys of the tile, for P·V each takes DT/NW output columns. The split is
// free to differ between kernels: every S element, P·V element and row sum is the same chain of
// tensor-core steps whichever warp runs it, and the row max is exact.
template <int DT, int NW>
struct Dims {
  static constexpr int kNW = NW;
  static constexpr int kDW = DT / kNW;         // output columns per warp
  static constexpr int kNB = kDW / 8;          // n8 blocks of acc per warp
  static constexpr int kKW = kTileKeys / kNW;  // keys of S per warp
  static constexpr int kSNB = kKW / 8;         // n8 blocks of S per warp
  static constexpr int kStride = DT + 8;       // bf16 per shared row of Q, K, V (16-byte pad: no bank conflicts)
  static constexpr int kPStride = kTileKeys + 8;
  static_assert(kNB % 2 == 0 && kSNB >= 1, "acc fragments are loaded in pairs");
};

// Shared memory of a block with RG row groups (16 * RG query rows).
template <int DT, int NW, int RG>
struct Layout {
  using D = Dims<DT, NW>;
  static constexpr int kRows = 16 * RG;
  static constexpr int kThreads = 32 * NW * RG;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kRows * D::kStride * 2;
  static constexpr int kV = kK + kTileKeys * D::kStride * 2;
  static constexpr int kP = kV + kTileKeys * D::kStride * 2;
  static constexpr int kRed = kP + kRows * D::kPStride * 2;
  static constexpr int kRowInfo = kRed + kRows * NW * 4;
  static constexpr int kBytes = kRowInfo + kRows * 16;
};

// ---- PTX wrappers ---------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// c += a · b (m16n8k16, bf16 inputs, f32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// 16 bytes global → shared; the bytes past src_bytes (0 or 16) are zero-filled.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// 2^x (ex2.approx: a fixed hardware function, so the same input gives the same bits everywhere).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- Chunk fold (shared with the combine kernel) ------------------------------------------------------------

__device__ __forceinline__ void merge_coeffs(float m_r, float m_c, float& m, float& a, float& b) {
  m = fmaxf(m_r, m_c);
  a = ex2(__fsub_rn(m_r, m));
  b = ex2(__fsub_rn(m_c, m));
}
__device__ __forceinline__ float merge_apply(float x_r, float a, float x_c, float b) {
  return __fmaf_rn(x_r, a, __fmul_rn(x_c, b));
}

// How one row's chunk state (row max mc, row sum lc) joins its running state (rm, rl), which this updates;
// the accumulators then follow with fold_apply: kept (the chunk sees no key of the row: its state is
// neutral), taken over (the row's first non-empty chunk), or merged with the coefficients a and b.
struct FoldStep {
  enum Kind { kKeep, kTake, kMerge } kind;
  float a, b;
};
__device__ __forceinline__ FoldStep fold_step(float& rm, float& rl, float mc, float lc) {
  if (mc == -INFINITY) return {FoldStep::kKeep, 0.0f, 0.0f};
  if (rm == -INFINITY) {
    rm = mc;
    rl = lc;
    return {FoldStep::kTake, 0.0f, 0.0f};
  }
  FoldStep f{FoldStep::kMerge, 0.0f, 0.0f};
  float m;
  merge_coeffs(rm, mc, m, f.a, f.b);
  rl = merge_apply(rl, f.a, lc, f.b);
  rm = m;
  return f;
}
// (The merge is computed in every case and the result selected: no branch per element.)
__device__ __forceinline__ float fold_apply(const FoldStep& f, float x_r, float x_c) {
  const float merged = merge_apply(x_r, f.a, x_c, f.b);
  return f.kind == FoldStep::kKeep ? x_r : f.kind == FoldStep::kTake ? x_c : merged;
}

// Visible key range [lo, hi) of query token t; lo = hi = 0 when it sees no key.
__device__ __forceinline__ int2 key_range(const Params& p, int t) {
  const int64_t pos = p.q_pos[t];
  const int64_t kvl = p.kv_len[p.q_seq[t]];
  const int64_t hi = pos + 1 < kvl ? pos + 1 : kvl;
  int64_t lo = 0;
  if (p.window > 0 && pos - p.window + 1 > 0) lo = pos - p.window + 1;
  if (hi <= lo) return make_int2(0, 0);
  return make_int2(static_cast<int>(lo), static_cast<int>(hi));
}

// ---- Work-item setup ----------------------------------------------------------------------------------------

// Rows of an item: tokens [t0, t0 + ntok) of one sequence × heads hb * gh + [0, gh) of kv head kvh.
// Row r: token t0 + r / gh, head-in-group hb * gh + r % gh. Threads [0, rows) write (token, head, lo, hi) of
// their row to `info` (token -1 for padding rows).
__device__ __forceinline__ void write_row_info(const Params& p, int4* info, int rows, int t0, int ntok,
                                               int kvh, int hb) {
  const int tid = threadIdx.x;
  if (tid < rows) {
    const int tok = tid / p.gh, hh = hb * p.gh + tid % p.gh;
    int4 r = make_int4(-1, -1, 0, 0);
    if (tok < ntok && hh < p.group) {
      const int t = t0 + tok;
      const int2 range = key_range(p, t);
      r = make_int4(t, kvh * p.group + hh, range.x, range.y);
    }
    info[tid] = r;
  }
}

// Elements c .. c + 3 of the q row of row info `ri` (zeros for a padding row or columns past head_dim; c is a
// multiple of 4).
__device__ __forceinline__ float4 load_q_quad(const Params& p, int4 ri, int c) {
  float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
  if (ri.x >= 0 && c < p.head_dim) {
    const float* src = p.q + ri.x * p.q_stride + static_cast<int64_t>(ri.y) * p.head_dim + c;
    x = p.q_vec4 ? *reinterpret_cast<const float4*>(src) : make_float4(src[0], src[1], src[2], src[3]);
  }
  return x;
}

// The item's row info (write_row_info) and Q (bf16, zero-padded) into shared memory.
template <int DT, int NW, int RG>
__device__ __forceinline__ void setup_rows(const Params& p, char* smem, int t0, int ntok, int kvh, int hb) {
  using L = Layout<DT, NW, RG>;
  using D = Dims<DT, NW>;
  int4* info = reinterpret_cast<int4*>(smem + L::kRowInfo);
  write_row_info(p, info, L::kRows, t0, ntok, kvh, hb);
  __syncthreads();
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);
  constexpr int kQuads = DT / 4;
  for (int i = static_cast<int>(threadIdx.x); i < L::kRows * kQuads; i += L::kThreads) {
    const int r = i / kQuads, c = (i % kQuads) * 4;
    const float4 x = load_q_quad(p, info[r], c);
    uint2 packed = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
    *reinterpret_cast<uint2*>(qs + r * D::kStride + c) = packed;
  }
}

// One prefill work item: tokens [t0, t0 + ntok) of tile list entry ti, kv head kvh, head block hb.
struct PrefillItem {
  int t0, ntok, kvh, hb;
};
// Takes the block's next item from the counter p.work[0] (through the shared slot `slot`), latest (most
// expensive) tiles first; false when none is left. Contains the block barriers that end the previous item.
__device__ __forceinline__ bool take_prefill_item(const Params& p, int* slot, PrefillItem& it) {
  __syncthreads();  // the previous item is done with shared memory
  if (threadIdx.x == 0) *slot = atomicAdd(p.work, 1);
  __syncthreads();
  const int item = *slot;
  const int n_tiles = p.work[1], per_tile = p.kv_heads * p.head_blocks;
  if (item >= n_tiles * per_tile) return false;
  const int ti = n_tiles - 1 - item / per_tile;
  const int rem = item % per_tile;
  it.kvh = rem / p.head_blocks;
  it.hb = rem % p.head_blocks;
  it.t0 = p.work[2 + ti];
  it.ntok = p.work[3 + ti] - it.t0;
  return true;
}
// The union [lo, hi) of the visible key ranges of an item's `rows` rows (lo >= hi: no row sees a key).
__device__ __forceinline__ int2 item_key_span(const int4* info, int rows) {
  int lo = INT_MAX, hi = 0;
#pragma unroll 1
  for (int r = 0; r < rows; ++r) {
    const int4 ri = info[r];
    if (ri.w > ri.z) {
      lo = min(lo, ri.z);
      hi = max(hi, ri.w);
    }
  }
  return make_int2(lo, hi);
}

// Issues the cp.async copies of one 64-key tile of K or V whose first row (key0, a multiple of 64) is at
// `tile` (paged_row; keys outside [lo, hi) and columns past head_dim are zero-filled, so never-written slots
// cannot put NaN into P·V). Thread i copies the 16
// bytes at column 8 (i % (DT / 8)) of keys i / (DT / 8) + s · THREADS / (DT / 8): its column is fixed,
// so its source pointer only steps (the 64-bit index arithmetic per copy was two thirds of the
// batch-1 decode kernel's instructions).
// Key `skip` (if in the tile) is left untouched, for a caller that copies that row later
// (load_key_row).
template <int DT, int THREADS>
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const uint16_t* tile, int kv_heads, int kvh,
                                          int head_dim, int key0, int lo, int hi, int skip = -1) {
  constexpr int kStride = DT + 8;
  constexpr int kChunks = DT / 8;
  static_assert(THREADS % kChunks == 0 && kTileKeys % (THREADS / kChunks) == 0,
                "load_tile: the block's threads must cover whole key rows of the tile");
  constexpr int kStep = THREADS / kChunks;  // keys per pass of the block
  const int c = static_cast<int>(threadIdx.x % kChunks) * 8;
  const int key = static_cast<int>(threadIdx.x / kChunks);
  const int64_t key_elems = static_cast<int64_t>(kv_heads) * head_dim;
  const bool col_ok = c < head_dim;
  const uint16_t* src = tile + (static_cast<int64_t>(key) * kv_heads + kvh) * head_dim + c;
  const uint32_t to = smem_addr(dst + key * kStride + c);
#pragma unroll
  for (int s = 0; s < kTileKeys / kStep; ++s) {
    const int j = key0 + key + s * kStep;
    const bool ok = col_ok && j >= lo && j < hi;
    if (j != skip) cp_async16(to + s * kStep * kStride * 2, ok ? src : tile, ok ? 16 : 0);
    src += kStep * key_elems;
  }
}

// Copies the one row of key j (in the tile starting at key0, whose first row is at `tile`) that load_tile
// skipped; columns past head_dim zero-filled.
template <int DT, int THREADS>
__device__ __forceinline__ void load_key_row(__nv_bfloat16* dst, const uint16_t* tile, int kv_heads, int kvh,
                                             int head_dim, int key0, int j) {
  constexpr int kStride = DT + 8;
  const uint16_t* src = tile + (static_cast<int64_t>(j - key0) * kv_heads + kvh) * head_dim;
  for (int c = static_cast<int>(threadIdx.x) * 8; c < DT; c += THREADS * 8) {
    const bool ok = c < head_dim;
    cp_async16(smem_addr(dst + (j - key0) * kStride + c), ok ? src + c : tile, ok ? 16 : 0);
  }
}

// Per-thread online-softmax state of one chunk for the thread's two rows (g = lane / 4 and g + 8 of
// its row group) and its kDW output columns.
template <int DT, int NW>
struct ChunkState {
  static constexpr int kNB = Dims<DT, NW>::kNB;
  float acc[kNB][4];
  float l[4];  // P·1: every column holds the row sum; l[0] row g, l[2] row g + 8
  float m[2];
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int n = 0; n < kNB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) l[e] = 0.0f;
    m[0] = m[1] = -INFINITY;
  }
};

// One 64-key tile (K and V already in shared memory, async copies tracked by the caller): scores,
// masking, online-softmax update and P·V for the thread's rows. `lo`/`hi` are the visible key
// ranges of the thread's two rows. Contains the block barriers between the S and P·V phases; calls
// `after_s()` once every warp has finished reading K and `before_pv()` before waiting for V.
template <int DT, int NW, int RG, typename AfterS, typename BeforePV>
__device__ __forceinline__ void process_tile(char* smem, ChunkState<DT, NW>& st, int key0, const int (&lo)[2],
                                             const int (&hi)[2], float scale_log2, AfterS after_s,
                                             BeforePV before_pv) {
  using D = Dims<DT, NW>;
  using L = Layout<DT, NW, RG>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rg = warp / D::kNW, wn = warp % D::kNW;
  const int g = lane >> 2, q4 = lane & 3;
  const __nv_bfloat16* qs = reinterpret_cast<const __nv_bfloat16*>(smem + L::kQ);
  const __nv_bfloat16* ks = reinterpret_cast<const __nv_bfloat16*>(smem + L::kK);
  const __nv_bfloat16* vs = reinterpret_cast<const __nv_bfloat16*>(smem + L::kV);
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(smem + L::kP);
  float* red = reinterpret_cast<float*>(smem + L::kRed);

  // S = Q Kᵀ for the warp's kKW keys, chained over head_dim in k16 steps.
  float s[D::kSNB][4];
#pragma unroll
  for (int n = 0; n < D::kSNB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  {
    const uint32_t q_addr = smem_addr(qs + (rg * 16 + (lane & 15)) * D::kStride + (lane >> 4) * 8);
    const uint32_t k_addr =
        smem_addr(ks + (wn * D::kKW + (lane & 7) + ((lane >> 4) << 3)) * D::kStride + ((lane >> 3) & 1) * 8);
#pragma unroll 4
    for (int kk = 0; kk < DT / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(q_addr + kk * 32, a);
#pragma unroll
      for (int j = 0; j < D::kSNB / 2; ++j) {
        uint32_t b[4];
        ldsm_x4(k_addr + (j * 16 * D::kStride) * 2 + kk * 32, b);
        mma_bf16(s[2 * j], a, b[0], b[1]);
        mma_bf16(s[2 * j + 1], a, b[2], b[3]);
      }
      if constexpr (D::kSNB % 2 == 1) {
        uint32_t b[2];
        ldsm_x2(k_addr + ((D::kSNB - 1) * 8 * D::kStride) * 2 + kk * 32, b);
        mma_bf16(s[D::kSNB - 1], a, b[0], b[1]);
      }
    }
  }
  // Scale to log2 units, mask, row max.
  float mx[2] = {-INFINITY, -INFINITY};
  const int kbase = key0 + wn * D::kKW + 2 * q4;
#pragma unroll
  for (int n = 0; n < D::kSNB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = kbase + n * 8 + (e & 1), r = e >> 1;
      const bool vis = key >= lo[r] && key < hi[r];
      s[n][e] = vis ? __fmul_rn(s[n][e], scale_log2) : -INFINITY;
      mx[r] = fmaxf(mx[r], s[n][e]);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
  }
  if constexpr (D::kNW > 1) {
    if (q4 == 0) {
      red[(rg * 16 + g) * D::kNW + wn] = mx[0];
      red[(rg * 16 + g + 8) * D::kNW + wn] = mx[1];
    }
  }
  __syncthreads();  // every warp is done with K; the partial maxima are visible
  after_s();
  if constexpr (D::kNW > 1) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float* row = red + (rg * 16 + g + 8 * r) * D::kNW;
      float v = row[0];
#pragma unroll
      for (int w = 1; w < D::kNW; ++w) v = fmaxf(v, row[w]);
      mx[r] = v;
    }
  }
  // Online-softmax update: m_new, alpha, p (bf16) → shared P.
  float mu[2], alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(st.m[r], mx[r]);
    mu[r] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = ex2(__fsub_rn(st.m[r], mu[r]));
    st.m[r] = m_new;
  }
#pragma unroll
  for (int n = 0; n < D::kSNB; ++n) {
    const int col = wn * D::kKW + n * 8 + 2 * q4;
    const uint32_t p0 = pack_bf16x2(ex2(__fsub_rn(s[n][0], mu[0])), ex2(__fsub_rn(s[n][1], mu[0])));
    const uint32_t p1 = pack_bf16x2(ex2(__fsub_rn(s[n][2], mu[1])), ex2(__fsub_rn(s[n][3], mu[1])));
    *reinterpret_cast<uint32_t*>(ps + (rg * 16 + g) * D::kPStride + col) = p0;
    *reinterpret_cast<uint32_t*>(ps + (rg * 16 + g + 8) * D::kPStride + col) = p1;
  }
#pragma unroll
  for (int n = 0; n < D::kNB; ++n) {
    st.acc[n][0] = __fmul_rn(st.acc[n][0], alpha[0]);
    st.acc[n][1] = __fmul_rn(st.acc[n][1], alpha[0]);
    st.acc[n][2] = __fmul_rn(st.acc[n][2], alpha[1]);
    st.acc[n][3] = __fmul_rn(st.acc[n][3], alpha[1]);
  }
  st.l[0] = __fmul_rn(st.l[0], alpha[0]);
  st.l[1] = __fmul_rn(st.l[1], alpha[0]);
  st.l[2] = __fmul_rn(st.l[2], alpha[1]);
  st.l[3] = __fmul_rn(st.l[3], alpha[1]);
  before_pv();
  __syncthreads();  // P and V visible
  // acc += P V (the warp's kDW columns), l += P 1; chained over the tile's keys in k16 steps.
  {
    const uint32_t p_addr = smem_addr(ps + (rg * 16 + (lane & 15)) * D::kPStride + (lane >> 4) * 8);
    const uint32_t v_addr = smem_addr(vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * D::kStride + wn * D::kDW +
                                      (lane >> 4) * 8);
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(p_addr + kk * 32, a);
#pragma unroll
      for (int j = 0; j < D::kNB / 2; ++j) {
        uint32_t b[4];
        ldsm_x4_trans(v_addr + (kk * 16 * D::kStride + j * 16) * 2, b);
        mma_bf16(st.acc[2 * j], a, b[0], b[1]);
        mma_bf16(st.acc[2 * j + 1], a, b[2], b[3]);
      }
      mma_bf16(st.l, a, kOnesBf16x2, kOnesBf16x2);
    }
  }
  __syncthreads();  // every warp is done with V and P
}

// ---- Launchers (attention_decode.cu, attention_prefill.cu) and host helpers (attention.cu) -----------------

// Split-KV kernel + combine; p.part_acc, p.part_ml, p.n_slots, p.gh = min(group, 16), p.head_blocks set.
void launch_decode(const Params& p, int dim_tier, cudaStream_t stream);
// Blocks of the split-KV grid when launch_decode would fold its chunk states in thread-block clusters, else
// 0.
int decode_cluster_blocks(const Params& p, int dim_tier);
// Whether tier dim_tier's prefill runs the wgmma kernel (sm90a/attention_prefill_wgmma.cu: tiers 256 and 512
// on a device of compute capability 9.0, unless LMX_ATTN_WGMMA=0 in the environment), and its launcher (after
// the tile list).
bool prefill_wgmma_runs(int dim_tier);
void launch_prefill_wgmma(const Params& p, int dim_tier, cudaStream_t stream);
// Query rows per prefill work item for a head-dim tier and kernel (the wgmma kernel's items are one
// warpgroup's 64).
constexpr int prefill_rows(int dim_tier, bool wgmma) {
  return dim_tier <= 128 || wgmma ? 64 : 32;
}
// Tile list + persistent tiled kernel (the wgmma one when `wgmma`, from prefill_wgmma_runs); p.work, p.gh,
// p.head_blocks, p.tokens_per_item set for prefill_rows(dim_tier, wgmma) rows per item.
void launch_prefill(const Params& p, int dim_tier, bool wgmma, cudaStream_t stream);

}  // namespace lmx::cuda::attn
