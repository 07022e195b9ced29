// The tiled prefill attention for head dims 129..512 (tiers 256 and 512) on Hopper's warpgroup MMA, built for
// sm_90a only. It computes exactly what prefill_kernel (attention_prefill.cu) computes for the same rows —
// the numerics of attention_kernels.cuh: 64-key tiles that are also the chunks, S = q·k chained over head_dim
// in k16 steps, p = ex2(s - m) rounded to bf16, the chunk's acc = P·V and l = P·1 chained over its keys in
// k16 steps from +0, chunk states folded in key order — and a chain of wgmma k16 steps gives the bits of the
// same chain of mma.sync m16n8k16 steps (bench/cuda/wgmma_probe.cu), so a row's output bits are those of the
// mma.sync kernel and of the split-KV decode kernel (the batch-invariance tests compare them).
//
// What differs is the issue. An item is 64 query rows (the mma.sync kernel's 32 rows use 8 warps); a
// warpgroup (4 warps, 128 threads) owns 256 of its output columns: a block is one warpgroup for tier 256, two
// for tier 512, which then each compute S for half of the tile's keys (m64n32k16: an element's chain over
// head_dim is the same), exchange their row maxima and P fragments through shared memory, and compute P·V for
// their own 256 columns from the whole P (each used to compute the whole S: 6-7 % slower). Q (converted to
// bf16 once per item), each K tile and each V tile sit in shared memory in wgmma's 128-byte swizzled layout,
// written by cp.async (K, V) and plain stores (Q, fenced to the async proxy):
//  - S = Q·Kᵀ is head_dim / 16 wgmma m64n64k16 (tier 512: m64n32k16) with both operands read by the tensor
//    cores from shared memory (K-major), so no warp loads Q or K fragments, and warp w holds full rows
//    16 w + g and 16 w + g + 8 of its S: the row maxima need no exchange between the warps of a warpgroup;
//  - P (bf16, from the S accumulators: the fragment layouts match) is the register A operand of P·V, whose
//    B operand is the V tile as stored (keys x dims, dims contiguous: MN-major, wgmma's transposed B);
//  - the chunk's P·V is computed 64 output columns at a time (4 wgmma m64n64k16 per 64 columns) and folded
//    into the running accumulators (the warpgroup's 256 columns: 128 floats per thread) before the next 64
//    columns, so the chunk state never holds more than 32 floats per thread; l = P·1 is 4 wgmma m64n8k16
//    against a shared tile of ones.
// K of tile t + 1 is copied while tile t's softmax and P·V run, V of tile t + 1 while tile t + 1's S runs
// (one buffer each, as the mma.sync kernel); an item's Q is loaded while its first K and V tiles are in
// flight, and tiles that every row of a warp sees whole skip the mask. Tier 256: ~100 KB of shared memory and
// 220 registers per thread, two blocks per SM, which overlap each other's waits; tier 512: ~205 KB, one block
// per SM. Measured on the H200: docs/benchmarks.md, "Prefill attention (wgmma)".
#include "lmx/ops/cuda/attention_kernels.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/sm90a/wgmma.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <algorithm>
#include <utility>

namespace lmx::cuda::attn {
namespace {

using sm90a::swizzled_offset;

constexpr int kRows = 64;                    // query rows per item (one warpgroup's M)
constexpr int kGroupColumns = 256;           // output columns per warpgroup
constexpr int kSlices = kGroupColumns / 64;  // 64-column P·V steps per warpgroup
static_assert(kTileKeys == kRows, "a K or V tile has as many rows as Q");

// Block shape and shared memory (from a 1024-byte aligned base) of head-dim tier kDims.
template <int kDims>
struct WgCfg {
  static_assert(kDims == 256 || kDims == 512, "tiers 256 and 512");
  static constexpr int kGroups = kDims / kGroupColumns;  // warpgroups: each owns 256 output columns
  static constexpr int kThreads = 128 * kGroups;
  static constexpr int kMinBlocks = 2 / kGroups;           // two blocks per SM at 256, one at 512
  static constexpr int kOperandBytes = kRows * kDims * 2;  // Q, a K tile or a V tile (64 rows each)
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kOperandBytes;
  static constexpr int kV = kK + kOperandBytes;
  static constexpr int kOnes = kV + kOperandBytes;  // 8 rows x 128 bytes of bf16 1.0: l's B operand
  static constexpr int kRowInfo = kOnes + 1024;     // int4 per row: token (-1: padding), head, lo, hi
  static constexpr int kItemSlot = kRowInfo + kRows * 16;
  // Two warpgroups split S's keys (kSKeys each) and exchange row maxima (float per group and row) and P (the
  // 2 k16 steps' A fragments: 8 words per group and thread, word w of thread t at w * 128 + t).
  static constexpr int kSKeys = kTileKeys / kGroups;
  static constexpr int kXMax = kItemSlot + 16;
  static constexpr int kXP = kXMax + (kGroups == 2 ? 2 * kRows * 4 : 0);
  static constexpr int kSmemBytes = kXP + (kGroups == 2 ? 2 * 8 * 128 * 4 : 0) + 1024;  // + slack to align

  static_assert(kSmemBytes <= 227 * 1024);
};

#if defined(LMX_HAS_WGMMA)
using sm90a::fence_proxy_async;
using sm90a::fence_registers;
using sm90a::kmajor_descriptor;
using sm90a::mnmajor_descriptor;
using sm90a::wgmma_rs_m64n8k16;
using sm90a::wgmma_commit;
using sm90a::wgmma_fence;
using sm90a::wgmma_wait;

// S[64 x 64] += A[64 x 16] · B[64 x 16]ᵀ, both from shared memory (K-major descriptors a and b, each advanced
// by kStep 16-byte units inside the instruction: descriptors computed in C++ get hoisted and held in
// registers). d[4 nt + i]: row 16 warp + g + 8 (i / 2), column 8 nt + 2 q4 + (i % 2).
template <int kStep>
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %34, 0;\n"
      "add.s64 da, %32, %35;\nadd.s64 db, %33, %35;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31}, da, db, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(1), "n"(kStep)
      : "memory");
}
// S[64 x 32] += A[64 x 16] · B[32 x 16]ᵀ (wgmma m64n32k16), as above: d[4 nt + i], nt < 4.
template <int kStep>
__device__ __forceinline__ void wgmma_ss_m64n32k16(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %18, 0;\n"
      "add.s64 da, %16, %19;\nadd.s64 db, %17, %19;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15}, da, db, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(1), "n"(kStep)
      : "memory");
}
// O[64 x 64] += P[64 x 16] · V[16 x 64]: P from registers (an mma.sync m16n8k16 A fragment per warp), V from
// shared memory MN-major (transposed B; descriptor b advanced by kStep 16-byte units, as above).
template <int kStep>
__device__ __forceinline__ void wgmma_rs_m64n64k16_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, %37, 0;\nadd.s64 db, %36, %38;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31}, {%32, %33, %34, %35}, db, p, 1, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(kStep)
      : "memory");
}

// f(std::integral_constant<int, i>) for i = 0 .. N - 1 (compile-time indices for the templated wgmma steps).
template <int N, class F, int... I>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl<N>(f, std::make_integer_sequence<int, N>{});
}

// Issues the cp.async copies of one 64-key tile of K or V (its first row at `tile`: paged_row) into the
// swizzled layout at `dst`; keys outside
// [lo, hi) and columns past head_dim are zero-filled (never-written cache slots cannot put NaN into P·V).
// kDims / 8 threads copy one key's row per pass: thread i takes column 8 (i % (kDims / 8)) of keys
// i / (kDims / 8) + 4 s.
template <int kDims>
__device__ __forceinline__ void load_tile_swizzled(uint32_t dst, const uint16_t* tile, int kv_heads, int kvh,
                                                   int head_dim, int key0, int lo, int hi) {
  constexpr int kPerKey = kDims / 8;
  constexpr int kStep = WgCfg<kDims>::kThreads / kPerKey;  // keys per pass
  const int c = static_cast<int>(threadIdx.x % kPerKey) * 8;
  const int key = static_cast<int>(threadIdx.x / kPerKey);
  const int64_t key_elems = static_cast<int64_t>(kv_heads) * head_dim;
  const bool col_ok = c < head_dim;
  const uint16_t* src = tile + (static_cast<int64_t>(key) * kv_heads + kvh) * head_dim + c;
  // Rows key + 4 s: the swizzle (row % 8) alternates between two values, so two offsets and an immediate.
  static_assert(kStep == 4, "two swizzle phases");
  const uint32_t at[2] = {dst + swizzled_offset(kRows, key, c), dst + swizzled_offset(kRows, key + kStep, c)};
#pragma unroll
  for (int s = 0; s < kTileKeys / kStep; ++s) {
    const int row = key + s * kStep, j = key0 + row;
    const bool ok = col_ok && j >= lo && j < hi;
    cp_async16(at[s & 1] + (s >> 1) * (2 * kStep * 128), ok ? src : tile, ok ? 16 : 0);
    src += kStep * key_elems;
  }
}

// The item's rows (write_row_info) into shared memory; published by a block barrier.
template <int kDims>
__device__ __forceinline__ void setup_rows(const Params& p, char* smem, int t0, int ntok, int kvh, int hb) {
  write_row_info(p, reinterpret_cast<int4*>(smem + WgCfg<kDims>::kRowInfo), kRows, t0, ntok, kvh, hb);
  __syncthreads();
}

// The item's Q (bf16, zero-padded) into the swizzled layout. Each thread has 32 float4 loads; they are issued
// kBatch at a time before any is converted (one load per round trip — the loop as written — was ~15-20 % of
// the kernel's stall samples at 26B-A4B's shapes: ncu on the H200, 2026-12-02).
template <int kDims>
__device__ __forceinline__ void load_q_swizzled(const Params& p, char* smem) {
  using C = WgCfg<kDims>;
  const int4* info = reinterpret_cast<const int4*>(smem + C::kRowInfo);
  constexpr int kQuads = kDims / 4;
  constexpr int kPerThread = kRows * kQuads / C::kThreads;
  constexpr int kBatch = 16;
  static_assert(kPerThread % kBatch == 0);
#pragma unroll 1
  for (int b = 0; b < kPerThread; b += kBatch) {
    float4 x[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = static_cast<int>(threadIdx.x) + (b + j) * C::kThreads;
      x[j] = load_q_quad(p, info[i / kQuads], (i % kQuads) * 4);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = static_cast<int>(threadIdx.x) + (b + j) * C::kThreads;
      const int r = i / kQuads, c = (i % kQuads) * 4;
      *reinterpret_cast<uint2*>(smem + C::kQ + swizzled_offset(kRows, r, c)) =
          make_uint2(pack_bf16x2(x[j].x, x[j].y), pack_bf16x2(x[j].z, x[j].w));
    }
  }
  fence_proxy_async();  // Q is read by wgmma (published by the first tile's barrier)
}
#endif

template <int kDims>
__global__ void __launch_bounds__(WgCfg<kDims>::kThreads, WgCfg<kDims>::kMinBlocks)
    prefill_wgmma_kernel(Params p) {
#if defined(LMX_HAS_WGMMA)
  using C = WgCfg<kDims>;
  wait_for_prior_kernels();
  allow_next_kernel();
  extern __shared__ __align__(1024) char smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t base = (raw_addr + 1023) & ~1023u;
  char* smem = smem_raw + (base - raw_addr);
  const int4* info = reinterpret_cast<const int4*>(smem + C::kRowInfo);
  int* s_item = reinterpret_cast<int*>(smem + C::kItemSlot);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  // The warpgroup: output columns 256 group .. (a literal 0 for one warpgroup keeps the descriptors that depend
  // on it uniform: no R2UR before each wgmma).
  const int group = C::kGroups == 1 ? 0 : warp >> 2;
  const int row0 = 16 * (warp & 3) + g;  // the thread's rows: row0 and row0 + 8
  const int col0 = kGroupColumns * group;
  for (int i = tid; i < 256; i += C::kThreads) reinterpret_cast<uint32_t*>(smem + C::kOnes)[i] = kOnesBf16x2;
  fence_proxy_async();

  // +0 that ptxas cannot see is zero: with a literal it turns a chain's first wgmma onto zeroed accumulators
  // into a no-accumulate step, whose sum of all-negative-zero products could be -0 where mma.sync's +0 + (-0)
  // is +0.
  const float zero = __int_as_float(min(p.tokens, 0));  // (tokens >= 0)
  PrefillItem it;
  while (take_prefill_item(p, s_item, it)) {
    const int t0 = it.t0, kvh = it.kvh;
    setup_rows<kDims>(p, smem, t0, it.ntok, kvh, it.hb);
    const int2 span = item_key_span(info, kRows);
    const int blo = span.x, bhi = span.y;
    const int lo[2] = {info[row0].z, info[row0 + 8].z};
    const int hi[2] = {info[row0].w, info[row0 + 8].w};
    float rm[2] = {-INFINITY, -INFINITY}, rl[2] = {0.0f, 0.0f};
    float racc[kSlices][32];  // the running acc: slice c's wgmma accumulator layout, columns col0 + 64 c ..
#pragma unroll
    for (int c = 0; c < kSlices; ++c)
#pragma unroll
      for (int i = 0; i < 32; ++i) racc[c][i] = 0.0f;

    if (bhi > blo) {
      const int seq = p.q_seq[t0];
      const int64_t row_elems = static_cast<int64_t>(p.kv_heads) * p.head_dim;
      // The first rows of the keys and values of the tile starting at key0 (one block holds a whole tile).
      auto k_tile = [&](int key0) { return paged_row(p.k, seq, key0, row_elems); };
      auto v_tile = [&](int key0) { return paged_row(p.v, seq, key0, row_elems); };
      const int tile_lo = blo / kTileKeys, tile_hi = (bhi + kTileKeys - 1) / kTileKeys;
      load_tile_swizzled<kDims>(base + C::kK, k_tile(tile_lo * kTileKeys), p.kv_heads, kvh, p.head_dim,
                                tile_lo * kTileKeys, blo, bhi);
      cp_async_commit();
      load_tile_swizzled<kDims>(base + C::kV, v_tile(tile_lo * kTileKeys), p.kv_heads, kvh, p.head_dim,
                                tile_lo * kTileKeys, blo, bhi);
      cp_async_commit();
      load_q_swizzled<kDims>(p, smem);  // while the first K and V tiles are in flight
      for (int tile = tile_lo; tile < tile_hi; ++tile) {
        const bool more = tile + 1 < tile_hi;
        const int key0 = tile * kTileKeys;
        cp_async_wait<1>();  // this thread's K copies landed
        fence_proxy_async();
        __syncthreads();  // everyone's K (and Q) visible to wgmma

        // S = Q Kᵀ, chained over head_dim in k16 steps (block kk / 4, 32 bytes per step into its rows); with
        // two warpgroups each computes the S of its half of the tile's keys (rows kSKeys group .. of K).
        constexpr int kSKeys = C::kSKeys, kSAcc = kSKeys / 2;
        float s[kSAcc];
#pragma unroll
        for (int i = 0; i < kSAcc; ++i) s[i] = zero;
        wgmma_fence();
        {
          const uint64_t dq = kmajor_descriptor(base + C::kQ),
                         dk = kmajor_descriptor(base + C::kK + group * kSKeys * 128);
          static_for<kDims / 16>([&](auto kk) {
            constexpr uint32_t kOff = (kk >> 2) * (kRows * 128) + (kk & 3) * 32;
            if constexpr (kSKeys == 64)
              wgmma_ss_m64n64k16<kOff / 16>(s, dq, dk);
            else
              wgmma_ss_m64n32k16<kOff / 16>(s, dq, dk);
          });
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(s);

        // Scale to log2 units, mask, row max (the quad holds the row's keys). Keys that every row of the
        // warp sees need no mask (the same values).
        const int skey0 = key0 + group * kSKeys;
        float mx[2] = {-INFINITY, -INFINITY};
        const bool whole = __all_sync(0xffffffffu, skey0 >= max(lo[0], lo[1]) &&
                                                       skey0 + kSKeys <= min(hi[0], hi[1]));
        if (whole) {
#pragma unroll
          for (int i = 0; i < kSAcc; ++i) {
            s[i] = __fmul_rn(s[i], p.scale_log2);
            mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
          }
        } else {
#pragma unroll
          for (int i = 0; i < kSAcc; ++i) {
            const int key = skey0 + 8 * (i >> 2) + 2 * q4 + (i & 1), r = (i >> 1) & 1;
            const bool vis = key >= lo[r] && key < hi[r];
            const float scaled = __fmul_rn(s[i], p.scale_log2);
            s[i] = vis ? scaled : -INFINITY;
            mx[r] = fmaxf(mx[r], s[i]);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
        if constexpr (C::kGroups == 2) {  // the whole row's max: the other half's through shared memory
          float* xmax = reinterpret_cast<float*>(smem + C::kXMax);  // [group][row]
          if (q4 == 0) {
            xmax[group * kRows + row0] = mx[0];
            xmax[group * kRows + row0 + 8] = mx[1];
          }
          __syncthreads();
#pragma unroll
          for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], xmax[(1 - group) * kRows + row0 + 8 * r]);
        }
        // The chunk's p = ex2(s - m) in bf16 as the A fragments of its 4 k16 steps of keys (with two
        // warpgroups, each computes its own 2 and takes the other's through shared memory).
        const float mu[2] = {mx[0] == -INFINITY ? 0.0f : mx[0], mx[1] == -INFINITY ? 0.0f : mx[1]};
        uint32_t own[kSKeys / 16][4];
#pragma unroll
        for (int kk = 0; kk < kSKeys / 16; ++kk)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float* sn = s + 4 * (2 * kk + h);  // n8 block 2 kk + h: keys 16 kk + 8 h ..
            own[kk][2 * h] = pack_bf16x2(ex2(__fsub_rn(sn[0], mu[0])), ex2(__fsub_rn(sn[1], mu[0])));
            own[kk][2 * h + 1] = pack_bf16x2(ex2(__fsub_rn(sn[2], mu[1])), ex2(__fsub_rn(sn[3], mu[1])));
          }
        uint32_t pa[4][4];
        if constexpr (C::kGroups == 1) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j) pa[kk][j] = own[kk][j];
          __syncthreads();  // every warp's S is done: K's buffer is free (issued after P: fewer live registers)
        } else {
          uint32_t* xp = reinterpret_cast<uint32_t*>(smem + C::kXP);
          const int t = tid & 127;
#pragma unroll
          for (int w = 0; w < 8; ++w) xp[(group * 8 + w) * 128 + t] = own[w >> 2][w & 3];
          __syncthreads();  // P exchanged, and every warp's S is done: K's buffer is free
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const uint32_t other = xp[((1 - group) * 8 + (kk & 1) * 4 + j) * 128 + t];
              pa[kk][j] = (kk >> 1) == group ? own[kk & 1][j] : other;
            }
        }

        if (more)
          load_tile_swizzled<kDims>(base + C::kK, k_tile(key0 + kTileKeys), p.kv_heads, kvh, p.head_dim,
                                    key0 + kTileKeys, blo, bhi);
        cp_async_commit();

        cp_async_wait<1>();  // this thread's V copies landed
        fence_proxy_async();
        __syncthreads();  // everyone's V visible to wgmma
        // l = P·1 and the first 64 columns of P·V in one group, then 64 columns per group, each folded in.
        float l[4] = {zero, zero, zero, zero};
        FoldStep fold[2] = {};
        static_for<kSlices>([&](auto c) {
          float o[32];
#pragma unroll
          for (int i = 0; i < 32; ++i) o[i] = zero;
          wgmma_fence();
          if (c == 0) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64n8k16(l, pa[kk], kmajor_descriptor(base + C::kOnes));
          }
          const uint64_t dv = mnmajor_descriptor(base + C::kV + group * (kSlices * kRows * 128));
          static_for<4>(
              [&](auto kk) { wgmma_rs_m64n64k16_tb<(c * (kRows * 128) + kk * 2048) / 16>(o, pa[kk], dv); });
          wgmma_commit();
          wgmma_wait<0>();
          fence_registers(o);
          if (c == 0) {
            fence_registers(l);
            fold[0] = fold_step(rm[0], rl[0], mx[0], l[0]);
            fold[1] = fold_step(rm[1], rl[1], mx[1], l[2]);
          }
          if (fold[0].kind == FoldStep::kMerge && fold[1].kind == FoldStep::kMerge) {  // the common case
#pragma unroll
            for (int i = 0; i < 32; ++i) {
              const FoldStep& f = fold[(i >> 1) & 1];
              racc[c][i] = merge_apply(racc[c][i], f.a, o[i], f.b);
            }
          } else {
#pragma unroll
            for (int i = 0; i < 32; ++i) racc[c][i] = fold_apply(fold[(i >> 1) & 1], racc[c][i], o[i]);
          }
        });
        __syncthreads();  // every warp's P·V is done: V's buffer is free
        if (more)
          load_tile_swizzled<kDims>(base + C::kV, v_tile(key0 + kTileKeys), p.kv_heads, kvh, p.head_dim,
                                    key0 + kTileKeys, blo, bhi);
        cp_async_commit();
      }
      cp_async_wait<0>();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int4 ri = info[row0 + 8 * r];
      if (ri.x < 0) continue;
      float* dst = p.out + (static_cast<int64_t>(ri.x) * p.heads + ri.y) * p.head_dim;
      const bool any = rm[r] != -INFINITY;
#pragma unroll
      for (int c = 0; c < kSlices; ++c)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int col = col0 + 64 * c + 8 * nt + 2 * q4;
          if (col < p.head_dim) {
            const float* a = &racc[c][4 * nt + 2 * r];
            *reinterpret_cast<float2*>(dst + col) =
                any ? make_float2(__fdiv_rn(a[0], rl[r]), __fdiv_rn(a[1], rl[r])) : make_float2(0.0f, 0.0f);
          }
        }
    }
  }
#else
  __trap();  // (built only for sm_90a; prefill_wgmma_runs checks the device)
#endif
}

template <int kDims>
void launch_dims(const Params& p, cudaStream_t stream) {
  using C = WgCfg<kDims>;
  const void* kernel = reinterpret_cast<const void*>(&prefill_wgmma_kernel<kDims>);
  ensure_smem(kernel, C::kSmemBytes);
  const int64_t max_items = static_cast<int64_t>(p.tokens) * p.kv_heads * p.head_blocks;
  const int grid =
      static_cast<int>(std::min<int64_t>(resident_blocks(kernel, C::kThreads, C::kSmemBytes), max_items));
  launch(prefill_wgmma_kernel<kDims>, grid, C::kThreads, C::kSmemBytes, stream, p);
}

}  // namespace

bool prefill_wgmma_runs(int dim_tier) {
  return (dim_tier == 256 || dim_tier == 512) && tuning().attention.prefill_wgmma && sm90a::device_is_sm90();
}

void launch_prefill_wgmma(const Params& p, int dim_tier, cudaStream_t stream) {
  if (dim_tier == 256)
    launch_dims<256>(p, stream);
  else
    launch_dims<512>(p, stream);
}

}  // namespace lmx::cuda::attn
