// Batch-1 decode kernel for 4-bit weights (WeightFormat::kQ4, M == 1): the hot path of single-sequence
// decode. It computes exactly what linear_decode_kernel<F, 1> computes (F a FormatQ4) — the same operands
// into the same mma steps in the same order, the same segment sums added in the same order — so every
// output is bit-identical to that kernel and to the prefill kernel (linear_tiles.cuh), and the
// batch-invariance contract holds across all three. What differs is how the bytes arrive:
// - weights come through a per-warp ring of kStages chunks in shared memory, filled by cp.async (16-byte
//   copies, lane-private slots): a warp keeps kStages chunks in flight without holding them in registers,
//   and the first kStages are requested before waiting for the previous kernel (programmatic dependent
//   launch, launch.cuh), so they stream in while it finishes. The ring is short (2 chunks by default) on
//   purpose: a small shared-memory footprint lets the next kernel's blocks become resident early too;
// - each warp copies the scales and biases of its segment once, as the 16-byte blocks that hold each row's
//   window (coalesced), instead of two 2-byte loads per row, lane and chunk (ncu: those loads were the main
//   L1 stall of the register-fed version, and 40 % of its L2 sectors were excess). 16-byte blocks, not
//   4-byte words: the copy was 30 % of the instructions of a 32-row kernel (ncu, 20480 x 2560);
// - x is converted once per warp into shared memory as the lane-ordered bf16 pairs of its mma B fragments
//   (256 bytes per 128-column chunk; lanes of equal c read the same 64 bytes, a broadcast);
// - each warp runs kTiles independent mma chains (16-row tiles) that share the x fragment: one (16 rows
//   per block), two for matrices taller than 16384 rows or of at least 4096 rows of 4096-8192 columns
//   (q4_gemv_plan); weight rows past n read row n - 1 (valid addresses; never stored);
// - the ragged last chunk of K, if any, uses the generic predicated register loads;
// - with Q4Io::kGeluInput the input is gelu_tanh(x) * x_up, formed while staging (the GeGLU before a down
//   projection: one kernel instead of two, and the same f32 values the gelu_tanh_mul op writes);
// - with Q4Io::kGegluOutput the weight is a stacked [gate; up] projection (2I rows): a block's tile 0 holds
//   gate rows 16 b .. 16 b + 15 and its tile 1 the up rows I + 16 b .., and the block writes gelu_tanh(gate)
//   * up for its 16 rows into out[0, I) (the gelu_tanh_mul op's bits on the projection's bits). The GeGLU is
//   then formed once, not by every block of the down projection that reads it (160 times for E4B).
// - with Q4Pairs (the MoE decode, moe_experts.cu) blockIdx.z is a (token, slot) pair: the weight is its
//   expert's matrix of a stack, x and out its rows; a pair's outputs are the plain projection's bits.
// Shared memory: the segment partials ([segments][16 kTiles] f32), then per warp: the weight ring
// ([kStages][tile][half][lane] 16 bytes), the staged x, the scale and the bias windows
// ([16 kTiles rows][scale_blocks] 16-byte blocks each); q4_gemv_smem_bytes. The kernel's limits are the
// number of segments (a block is one warp per segment, or per half of them when the plan splits a row tile
// over a cluster of two blocks; the segment sums then meet in the first block's partials) and 227 KiB of
// shared memory per block.
#pragma once

#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"

#include <cooperative_groups.h>

namespace lmx::cuda::linear {

constexpr int kGemvMaxSmem = 227 * 1024;  // the H100/H200 per-block opt-in limit

// How q4_gemv_kernel runs a problem: the ring depth (chunks in flight per warp), the 16-row mma tiles per
// warp (the block's weight rows are 16 * tiles) and the blocks a row tile's segments are split over
// (`split` = 2: a cluster of two blocks, the second handing its segment sums to the first through
// distributed shared memory — twice the blocks for matrices of few row tiles, the same sums in the same
// order).
struct Q4GemvPlan {
  int stages = 0;  // 0: the kernel does not apply
  int tiles = 2;
  int split = 1;
};

// Row blocks of q4_gemv_kernel (grid y): 16 * tiles weight rows each, or 16 gate and 16 up rows (geglu).
__host__ __device__ inline int64_t q4_gemv_row_blocks(const Problem& p, int tiles, bool geglu) {
  return geglu ? (p.n / 2 + 15) / 16 : (p.n + 16 * tiles - 1) / (16 * tiles);
}
// Row block counts for which the plan splits each row tile over two blocks: between one and two per SM
// of an H200 (132 SMs), where one wave leaves SMs with one block idle while others run two. Measured
// (same-run A/Bs on the H200, 2026-11-30): E4B's 160-block projections +3.7 % decode; E2B's 96 blocks -0.8 %
// (not split); 26B-A4B's 176, neutral.
constexpr int64_t kSplitRowBlocksFrom = 132, kSplitRowBlocksBelow = 264;
// Chunks per segment from which a grid of fewer than kSplitRowBlocksFrom blocks (one wave, at most one block
// per SM) runs a ring of 4 chunks instead of 2 (q4_gemv_plan).
constexpr int kDeepRingMinChunks = 4;

// Warps per block of q4_gemv_kernel: the segments of a row tile over `split` blocks.
__host__ __device__ inline int q4_gemv_warps(const Problem& p, int split) {
  return (p.segments + split - 1) / split;
}

// Chunks of the problem's longest K segment.
__host__ __device__ inline int q4_max_segment_chunks(const Problem& p) {
  return (p.chunks + p.segments - 1) / p.segments;
}

// 16-byte blocks that cover one row's scale window in the longest segment: its groups span max_chunks * 128 /
// group scales, and the window of aligned blocks may start up to 15 bytes before the first.
__host__ __device__ inline int q4_window_blocks(const Problem& p) {
  const int scale_size = p.scale_dtype == DType::kF32 ? 4 : 2;
  return (q4_max_segment_chunks(p) * (kChunk >> p.group_shift) * scale_size + 15 + 15) / 16;
}

// Per-warp shared-memory layout of q4_gemv_kernel, a function of the problem and its plan. Every part is a
// multiple of 16 bytes, so each warp's windows start 16-byte aligned (the 16-byte copies need it).
struct Q4GemvLayout {
  int x_chunks = 0;      // staged x chunks
  int scale_blocks = 0;  // 16-byte blocks per row of the scale (and of the bias) window; odd (bank spread)
  int ring_bytes = 0, x_bytes = 0, scale_bytes = 0;
  __host__ __device__ int warp_bytes() const { return ring_bytes + x_bytes + scale_bytes; }
};

__host__ __device__ inline Q4GemvLayout q4_gemv_layout(const Problem& p, int stages, int tiles) {
  Q4GemvLayout l;
  const int rows = 16 * tiles;
  l.x_chunks = q4_max_segment_chunks(p) + 1;
  // An odd row stride (in blocks) puts the 8 rows g of an mma fragment in 8 different bank groups.
  l.scale_blocks = q4_window_blocks(p) | 1;
  l.ring_bytes = stages * rows * 64;  // a chunk of a row is 64 bytes
  l.x_bytes = 64 * 4 * l.x_chunks;
  l.scale_bytes = 2 * rows * 16 * l.scale_blocks;
  return l;
}

inline size_t q4_gemv_smem_bytes(const Problem& p, int stages, int tiles, int split = 1) {
  return sizeof(float) * static_cast<size_t>(p.segments) * 16 * tiles +
         static_cast<size_t>(q4_gemv_warps(p, split)) * q4_gemv_layout(p, stages, tiles).warp_bytes();
}

// The plan for this problem (quantized_gemv.cu; stages 0: the kernel does not apply, the generic decode
// kernel runs, without x_up). The tiles only decide which warp computes which rows, so every plan gives
// the same bits. LMX_Q4_STAGES=2|4, LMX_Q4_TILES=1|2 and LMX_Q4_SPLIT=1|2 in the environment force a
// choice, for A/B measurements. `geglu` (Q4Io::kGegluOutput): 2 tiles and an even row count, else stages 0.
// pair_count: the gathered GEMVs of that many pairs (Q4Pairs) run in one grid.
// LMX_Q4_SHAPE_PLAN (linear.h) sets the plan of single [N, K] projections (A/B runs).
Q4GemvPlan q4_gemv_plan(const Problem& p, bool geglu = false, int pair_count = 1);

inline bool q4_gemv_applies(const Problem& p) {
  return q4_gemv_plan(p).stages > 0;
}

// Scale or bias element at p in shared memory (raw bytes of the checkpoint's dtype), widened to f32 exactly
// (for bf16, the f32 whose high half is the bf16: what FormatQ4's dequant expects).
template <class Scale>
__device__ __forceinline__ float shared_scale(const unsigned char* p) {
  if constexpr (std::is_same_v<Scale, __nv_bfloat16>)
    return __uint_as_float(static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p)) << 16);
  else if constexpr (std::is_same_v<Scale, __half>)
    return __half2float(*reinterpret_cast<const __half*>(p));
  else
    return *reinterpret_cast<const float*>(p);
}

// 16-byte asynchronous weight copy, bypassing L1, with a 256-byte L2 prefetch (the row's next chunks).
__device__ __forceinline__ void cp_async_stream16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// What q4_gemv_kernel reads and writes besides x and out = x · Wᵀ (see the comment at the top).
enum class Q4Io : int { kPlain, kGeluInput, kGegluOutput };

// The MoE decode's gathered GEMVs (moe_experts.cu): blockIdx.z is a (token, slot) pair, whose weight is
// expert experts[pair] of a stack of `experts` matrices of p.n rows each (the problem's weight, scales and
// biases are the stack's), whose x row is p.x + (pair / x_div) * x_stride (x_up likewise) and whose output
// row is p.out + pair * out_stride. A pair whose expert id is outside [0, experts) writes nothing. Each
// pair's outputs are the bits of the plain projection of its expert's matrix.
struct Q4Pairs {
  const int32_t* ids = nullptr;  // null: one plain projection (gridDim.z = 1)
  int experts = 0;
  int x_div = 1;
  int64_t x_stride = 0, out_stride = 0;
  // Whether ids may be read before the PDL wait: written at least two launches back (launch.cuh), as the
  // routing is for the down projection.
  bool ids_early = false;
};

// Lanes per row of q4_gemv_kernel's scale and bias window copy, as a shift (2^shift lanes, from 32 / rows to
// 32): two lanes per row for 16-row blocks (each lane's row offsets computed once; E4B decode +2.2 % with
// 4-byte words, H200, 2026-11-30), else the power of two that covers a row's window blocks, so
// that a warp's copy reads whole rows (coalesced). LMX_Q4_WINDOW_LANES=1|2|..|32 forces a lane count (A/B
// runs; at least 32 / rows).
int q4_window_shift(int rows, int blocks);

// x_up, pairs and window_shift are parameters of their own, not Problem fields (a larger Problem cost
// registers in an earlier, register-fed version of this kernel).
template <class F, Q4Io kIo, int kStages, int kTiles>
__global__ void __launch_bounds__(kMaxSegments * 32)
    q4_gemv_kernel(const Problem p, const float* x_up, const Q4Pairs pairs, const int window_shift) {
  using Scale = typename F::ScaleType;
  constexpr bool kGelu = kIo == Q4Io::kGeluInput;
  constexpr bool kGeglu = kIo == Q4Io::kGegluOutput;
  static_assert(!kGeglu || kTiles == 2, "the GeGLU output pairs a gate tile with an up tile");
  constexpr int kRows = 16 * kTiles;
  constexpr int kScaleSize = sizeof(Scale);
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int segments = p.segments;
  // Split over a cluster of gridDim.x blocks (1 or 2): block `rank` runs segments rank * warps + warp.
  const int rank = static_cast<int>(blockIdx.x), segment = rank * static_cast<int>(blockDim.x >> 5) + warp;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * (kGeglu ? 16 : kRows);
  const int64_t half_n = p.n / 2;  // kGeglu: I
  // The pair's expert (gathered GEMVs): its first row in the stack, and the pair's x and output rows.
  int64_t expert_row0 = 0;
  const float* x = p.x;
  float* out = p.out;
  if (pairs.ids != nullptr) {
    if (!pairs.ids_early) wait_for_prior_kernels();
    const int pair = static_cast<int>(blockIdx.z), expert = pairs.ids[pair];
    if (expert < 0 || expert >= pairs.experts) {  // block-uniform; nothing requested yet
      wait_for_prior_kernels();
      return;
    }
    expert_row0 = static_cast<int64_t>(expert) * p.n;
    x += static_cast<int64_t>(pair / pairs.x_div) * pairs.x_stride;
    if constexpr (kGelu) x_up += static_cast<int64_t>(pair / pairs.x_div) * pairs.x_stride;
    out += static_cast<int64_t>(pair) * pairs.out_stride;
  }
  // The weight row of block row rr (0 .. kRows - 1), clamped to a valid row (past the end: never stored).
  auto weight_row = [&](int rr) -> int64_t {
    if constexpr (kGeglu) return expert_row0 + min(row0 + (rr & 15), half_n - 1) + (rr >> 4) * half_n;
    return expert_row0 + min(row0 + rr, p.n - 1);
  };
  // (A warp past the last segment, when the split is uneven, has no chunks.)
  const int chunk_begin = segment < segments ? segment_begin(segment, segments, p.chunks) : p.chunks;
  const int chunk_end = segment < segments ? segment_begin(segment + 1, segments, p.chunks) : p.chunks;
  const int main_end = min(chunk_end, static_cast<int>(p.k / kChunk));  // full chunks of this segment
  const Q4GemvLayout layout = q4_gemv_layout(p, kStages, kTiles);
  const int blocks = layout.scale_blocks;
  float* partial = reinterpret_cast<float*>(smem);  // [segments][kRows]
  unsigned char* mine = smem + sizeof(float) * segments * kRows + warp * layout.warp_bytes();
  uint4* ring = reinterpret_cast<uint4*>(mine);                          // [kStages][tile][half][lane]
  uint32_t* xs = reinterpret_cast<uint32_t*>(mine + layout.ring_bytes);  // [chunk - chunk_begin][c][16 pairs]
  uint32_t* windows =
      reinterpret_cast<uint32_t*>(mine + layout.ring_bytes + layout.x_bytes);  // [2][kRows][blocks]

  // Rows (t, h): tile t, half h → block row 16 t + 8 h + g.
  const uint32_t* row_w[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) row_w[t][h] = p.weight + weight_row(16 * t + 8 * h + g) * p.row_words;

  // The scale and bias windows: row rr's groups [g0, g1) of this segment, as the aligned 16-byte blocks that
  // hold them (the plan requires 16-byte aligned arrays; bytes past an array's end zero-filled, never read).
  // 2^window_shift lanes copy each row (q4_window_shift): a lane computes a row's offsets once and copies
  // every 2^window_shift-th block of it.
  const int64_t g0 = (static_cast<int64_t>(chunk_begin) * kChunk) >> p.group_shift;
  const int64_t g1 = min((static_cast<int64_t>(chunk_end) * kChunk) >> p.group_shift, p.groups_per_row);
  const int64_t array_bytes = (expert_row0 + p.n) * p.groups_per_row * kScaleSize;  // (the expert's end)
  {
    const unsigned char* scales = static_cast<const unsigned char*>(p.scales);
    const unsigned char* biases = static_cast<const unsigned char*>(p.biases);
    const int row_lanes = 1 << window_shift, b0 = lane & (row_lanes - 1);
    const uint32_t scale_window = smem_address(windows), bias_window = scale_window + 16 * kRows * blocks;
    for (int rr = lane >> window_shift; rr < kRows; rr += 32 >> window_shift) {
      const int64_t row_groups = weight_row(rr) * p.groups_per_row;
      const int64_t first = ((row_groups + g0) * kScaleSize) & ~int64_t{15};
      const int64_t end = (row_groups + g1) * kScaleSize;
      for (int b = b0; b < blocks; b += row_lanes) {
        const int64_t byte = first + 16 * b;
        if (byte >= end) break;
        const int bytes = static_cast<int>(min(int64_t{16}, array_bytes - byte));
        const uint32_t slot = 16 * (rr * blocks + b);
        cp_async16_bytes(scale_window + slot, scales + byte, bytes);
        cp_async16_bytes(bias_window + slot, biases + byte, bytes);
      }
    }
  }
  cp_async_commit();
  // Byte offset of lane's row (t, h) window start within the scale windows (its first group's byte).
  int window[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rr = 16 * t + 8 * h + g;
      const int64_t r = weight_row(rr);
      window[t][h] = 16 * rr * blocks + static_cast<int>(((r * p.groups_per_row + g0) * kScaleSize) & 15);
    }

  // Chunk j into ring slot `slot` (nothing past the full chunks); one commit group either way.
  auto request_chunk = [&](int j, int slot) {
    if (j < main_end) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          cp_async_stream16(smem_address(ring + (slot * 2 * kTiles + 2 * t + h) * 32 + lane),
                            row_w[t][h] + 16 * static_cast<int64_t>(j) + 4 * c);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages; ++s) request_chunk(chunk_begin + s, s);

  wait_for_prior_kernels();
  allow_next_kernel();

  // Stage x: lane (half, c, i) packs columns 32 c + 8 i .. + 7 of one chunk into pairs 4 i .. 4 i + 3
  // (pair 4 i + k = bf16x2(x[32 c + 8 i + k], x[32 c + 8 i + 4 + k]), FormatQ4's pair order, as
  // load_x_pairs builds it); zeros past k. Up to kXBatch chunks per lane are loaded before any is stored,
  // so their loads are in flight together (this runs after the PDL wait, on every warp's critical path).
  {
    constexpr int kXBatch = kGelu ? 2 : 4;  // (the GeGLU input doubles the registers per chunk)
    const int ci = lane & 15, xc = ci >> 2, i = ci & 3;
    const int count = chunk_end - chunk_begin;
    for (int jj0 = lane >> 4; jj0 < count; jj0 += 2 * kXBatch) {
      float4 lo[kXBatch], hi[kXBatch], ulo[kXBatch], uhi[kXBatch];
#pragma unroll
      for (int u = 0; u < kXBatch; ++u) {
        const int jj = jj0 + 2 * u;
        const int64_t col = static_cast<int64_t>(chunk_begin + jj) * kChunk + 32 * xc + 8 * i;
        lo[u] = hi[u] = ulo[u] = uhi[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (jj < count && col < p.k) {
          lo[u] = *reinterpret_cast<const float4*>(x + col);
          hi[u] = *reinterpret_cast<const float4*>(x + col + 4);
          if constexpr (kGelu) {
            ulo[u] = *reinterpret_cast<const float4*>(x_up + col);
            uhi[u] = *reinterpret_cast<const float4*>(x_up + col + 4);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kXBatch; ++u) {
        const int jj = jj0 + 2 * u;
        if (jj >= count) break;
        float4 a = lo[u], b = hi[u];
        if constexpr (kGelu) {
          a = make_float4(detail::gelu_tanh_mul(a.x, ulo[u].x), detail::gelu_tanh_mul(a.y, ulo[u].y),
                          detail::gelu_tanh_mul(a.z, ulo[u].z), detail::gelu_tanh_mul(a.w, ulo[u].w));
          b = make_float4(detail::gelu_tanh_mul(b.x, uhi[u].x), detail::gelu_tanh_mul(b.y, uhi[u].y),
                          detail::gelu_tanh_mul(b.z, uhi[u].z), detail::gelu_tanh_mul(b.w, uhi[u].w));
        }
        *reinterpret_cast<uint4*>(xs + jj * 64 + xc * 16 + 4 * i) = make_uint4(
            pack_bf16x2(a.x, b.x), pack_bf16x2(a.y, b.y), pack_bf16x2(a.z, b.z), pack_bf16x2(a.w, b.w));
      }
    }
    __syncwarp();
  }

  // One chunk of every tile: the generic kernel's mma sequence per tile.
  auto multiply = [&](const uint32_t(&w)[kTiles][2][4], const float(&s)[kTiles][2][1],
                      const float(&b)[kTiles][2][1], const uint32_t* xj, float(&acc)[kTiles][4]) {
    uint32_t bx[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = *reinterpret_cast<const uint4*>(xj + c * 16 + 4 * q);
      bx[4 * q] = v.x, bx[4 * q + 1] = v.y, bx[4 * q + 2] = v.z, bx[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int step = 0; step < 8; ++step)
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint32_t a[4] = {F::dequant(w[t][0], 2 * step, s[t][0], b[t][0]),
                               F::dequant(w[t][1], 2 * step, s[t][1], b[t][1]),
                               F::dequant(w[t][0], 2 * step + 1, s[t][0], b[t][0]),
                               F::dequant(w[t][1], 2 * step + 1, s[t][1], b[t][1])};
        mma_bf16(acc[t], a, bx[2 * step], bx[2 * step + 1]);
      }
  };

  float acc[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
  const unsigned char* scale_bytes = reinterpret_cast<const unsigned char*>(windows);
  const unsigned char* bias_bytes = scale_bytes + 16 * kRows * blocks;
  const int g0_32 = static_cast<int>(g0);
  int slot = 0;
  for (int j = chunk_begin; j < main_end; ++j) {
    cp_async_wait<kStages - 1>();  // chunk j (and, first, the windows) arrived
    __syncwarp();                  // the windows were copied by other lanes
    uint32_t w[kTiles][2][4];
    float s[kTiles][2][1], b[kTiles][2][1];
    const int group_byte =
        (((j * kChunk + 32 * c) >> p.group_shift) - g0_32) * kScaleSize;  // (32-bit: k < 2^31)
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 v = ring[(slot * 2 * kTiles + 2 * t + h) * 32 + lane];
        w[t][h][0] = v.x, w[t][h][1] = v.y, w[t][h][2] = v.z, w[t][h][3] = v.w;
        s[t][h][0] = shared_scale<Scale>(scale_bytes + window[t][h] + group_byte);
        b[t][h][0] = shared_scale<Scale>(bias_bytes + window[t][h] + group_byte);
      }
    multiply(w, s, b, xs + (j - chunk_begin) * 64, acc);
    request_chunk(j + kStages, slot);  // the slot is free again (its words are in registers)
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }
  cp_async_wait<0>();          // nothing may land after the block exits (the windows, when no full chunk ran)
  if (main_end < chunk_end) {  // the ragged last chunk of K: the generic predicated loads (zeros past k)
    const int j = main_end;
    const int k_left = static_cast<int>(p.k - static_cast<int64_t>(j) * kChunk);
    uint32_t tail[kTiles][2][4];
    float ts[kTiles][2][1], tb[kTiles][2][1];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = weight_row(16 * t + 8 * h + g);
        load_weight_raw<F>(row_w[t][h] + static_cast<int64_t>(j) * chunk_words<F>(), c, k_left, true,
                           tail[t][h]);
        load_slot_scales<F>(p, r, true, j, c, k_left, ts[t][h], tb[t][h]);
      }
    multiply(tail, ts, tb, xs + (j - chunk_begin) * 64, acc);
  }

  // Only x row 0 is real: C column 0 lives in lanes c == 0 (rows g and g + 8 of each tile). The segment sums
  // meet in the first block of the cluster.
  const bool split = gridDim.x > 1;
  float* sums = split ? cooperative_groups::this_cluster().map_shared_rank(partial, 0) : partial;
  if (c == 0 && segment < segments) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      sums[segment * kRows + 16 * t + g] = acc[t][0];
      sums[segment * kRows + 16 * t + g + 8] = acc[t][2];
    }
  }
  if (split)
    cooperative_groups::this_cluster().sync();  // (also orders the remote stores before the reads below)
  else
    __syncthreads();
  if (rank != 0) return;
  // Block row i's output: its segments' sums added in order (the generic kernel's order).
  auto row_sum = [&](int i) {
    float v = partial[i];
    for (int s = 1; s < segments; ++s) v += partial[s * kRows + i];
    return v;
  };
  if constexpr (kGeglu) {
    const int64_t row = row0 + threadIdx.x;
    if (threadIdx.x < 16 && row < half_n)
      out[row] = detail::gelu_tanh_mul(row_sum(threadIdx.x), row_sum(16 + threadIdx.x));
  } else {
    for (int i = threadIdx.x; i < kRows; i += blockDim.x) {
      const int64_t row = row0 + i;
      if (row < p.n) out[row] = row_sum(i);
    }
  }
}

// Enqueues the gathered GEMVs of pair_count pairs (Q4Pairs; p.m == 1, p.n the rows of one expert, p's
// weight the stack) with q4_gemv_kernel, the GeGLU output when `geglu` (each expert a stacked [gate; up]
// matrix of p.n rows). False (nothing enqueued) when the batch-1 4-bit kernel does not apply (q4_gemv_plan).
bool launch_decode_pairs(const Problem& p, const Q4Pairs& pairs, int pair_count, bool geglu,
                         cudaStream_t stream);

}  // namespace lmx::cuda::linear
