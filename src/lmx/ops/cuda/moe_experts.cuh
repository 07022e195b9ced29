// Internal to the CUDA MoE dispatch (moe_experts.cu, moe_quantized*.cu, moe_dense.cu): the projection
// parameters, the launch entry points, and the expert projection kernel of the dense (f32, bf16) stacks.
// Quantized stacks run on tensor cores (moe_expert_mma.cuh).
//
// Dense kernel design ("gathered GEMM on CUDA cores"): a block computes kRowsPerBlock output rows of one
// expert's projection for up to M (token, expert) pairs of that expert (a "chunk"). The block stages
// the pairs' inputs (x rows, or gelu_tanh(gate) * up for the down projection) in shared memory, slab
// by slab along K, and each output row is reduced by a group of LANES lanes of one warp. A thread
// owns R rows × M pairs of accumulators, so each weight element is read once per block and
// each staged float4 of x feeds 4·R FMAs. Decode (M = 1, R = 2) keeps two chunks per row in flight
// and issues its first weight loads before staging x; prefill (M = 4/8, R = 4) is capped at 128
// registers (two blocks per SM).
//
// Reduction order (the batch-invariance contract): K is cut into chunks of kChunk consecutive
// elements (a format property: 8 for bf16, 4 for f32).
// Lane l of a group accumulates chunks l, l + LANES, l + 2·LANES, ... in increasing order, each
// chunk's elements in increasing order, into one f32 accumulator per output (acc = fma(x, w, acc));
// the LANES partial sums are then combined by a
// fixed xor-butterfly (offsets LANES/2, ..., 1). LANES depends only on K / kChunk (lanes_for), never
// on the number of tokens, M, R, the slab size or the chunk a pair lands in, so the value of every
// (pair, output) is the same bits whatever else is in the call: the decode (M = 1, ungrouped) and
// prefill (M = 4/8, grouped) variants are instantiations of this one kernel. Every float operation on
// the numeric path is an explicit _rn intrinsic so no instantiation can contract differently.
#pragma once

#include "lmx/core/dtype.h"
#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda::linear {
struct Problem;  // linear_tiles.cuh
}

namespace lmx::cuda::moe {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Elements staged per block and slab, over all M tokens (M · slab length); 36 KiB with padding.
constexpr int kSlabElements = 8192;

// Lanes reducing one output row: a function of the chunk count only (see the order contract).
inline int lanes_for(int64_t k, int chunk) {
  return k / chunk >= 64 ? 32 : 8;
}

// One weight stack as the kernel reads it: [experts, rows, row_stride] elements of the stored type
// (uint32 code words for quantized weights), plus per-group scales and biases when quantized.
struct WeightStack {
  const void* data = nullptr;
  const void* scales = nullptr;  // quantized only: [experts, rows, groups_per_row]
  const void* biases = nullptr;
  int64_t rows = 0;        // output rows per expert
  int64_t row_stride = 0;  // stored elements (or words) per row
  int64_t groups_per_row = 0;
};

// Arguments of one projection launch (gate/up, or down).
struct ProjectionParams {
  WeightStack w;
  int64_t n_out = 0;  // output rows: w.rows
  int64_t k = 0;      // reduction length
  DType scale_dtype = DType::kBF16;
  int group_shift = 6;  // log2(group_size)
  // Input. Gate/up: x rows by token (pair / top_k), stride x_stride. Down: rows of hbuf ([rows, 2·inter]:
  // gate then up) by pair row; the staged input is gelu_tanh(gate) * up.
  const float* x = nullptr;
  int64_t x_stride = 0;
  int64_t inter = 0;
  int top_k = 1;
  // Output: out[row, n] with row the pair's row (its pair index when ungrouped).
  float* out = nullptr;
  int64_t out_stride = 0;
  // Dispatch. Ungrouped (M = 1): blockIdx.y is the pair, its expert experts[pair]. Grouped: blockIdx.y
  // indexes chunks[] ({expert, first row, rows}); rows past *chunk_count exit; sorted_pair[row] = pair.
  const int32_t* experts = nullptr;
  int num_experts = 0;
  const int4* chunks = nullptr;
  const int* chunk_count = nullptr;
  const int32_t* sorted_pair = nullptr;
  const int32_t* row_of = nullptr;  // pair → row (the inverse of sorted_pair; grouped passes)
  int m_tile = 1;  // pairs per chunk (1: ungrouped)
  int pairs = 0;   // (token, slot) pairs of the pass
  // Tensor-core kernel only (moe_expert_mma.cuh): K's 128-column chunks and their split into segments
  // (expert_segments), and whether the x rows (and, for down, their up halves) allow 16-byte loads.
  int k_chunks = 0;
  int segments = 1;
  bool x_vec4 = false;
};

// ---- Weight formats ---------------------------------------------------------------------------------

// Dense f32 or bf16 rows (16-byte aligned): a chunk is one uint4 (4 f32 or 8 bf16 elements).
template <typename T>
struct DenseFormat {
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
  static constexpr int kStep = 4;
  static constexpr int kSteps = kChunk / kStep;
  static constexpr int kStepWords = kStep * static_cast<int>(sizeof(T)) / 4;

  struct Chunk {
    uint32_t words[4];
  };

  __device__ __forceinline__ static Chunk load(const WeightStack& w, int64_t r, int64_t c,
                                               const ProjectionParams&) {
    const uint4 v =
        __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(w.data) + r * w.row_stride + c * kChunk));
    return {{v.x, v.y, v.z, v.w}};
  }

  __device__ __forceinline__ static void advance(Chunk& ch) {
#pragma unroll
    for (int i = 0; i + kStepWords < 4; ++i) ch.words[i] = ch.words[i + kStepWords];
  }

  __device__ __forceinline__ static float element(const Chunk& ch, int i) {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(ch.words[i]);
    } else {
      const uint32_t word = ch.words[i >> 1];
      return __uint_as_float((i & 1) ? (word & 0xFFFF0000u) : (word << 16));
    }
  }
};

// ---- The projection kernel --------------------------------------------------------------------------

// Shared-memory index of slab element e: 4 floats of padding after every 32, so the lanes of a group
// (each reading 16 bytes of its own chunk) hit distinct banks.
__device__ __forceinline__ int padded(int e) {
  return e + ((e >> 5) << 2);
}

// Slab length (elements per token) for M tokens: a multiple of 32 chunks of every format.
template <int M>
constexpr int slab_length() {
  return kSlabElements / M;
}
inline int padded_host(int e) {
  return e + ((e >> 5) << 2);
}

// Blocks per SM the register budget is sized for: the multi-token variants are capped at 128 registers.
template <int M>
constexpr int min_blocks() {
  return M == 1 ? 1 : 2;
}

// The pairs of block row blockIdx.y: rows [row0, row0 + count) of the pair-row space, all of expert `expert`:
// one pair (ungrouped: the block row is the pair) or a chunk of the grouping. False for a block past the
// chunk count.
__device__ __forceinline__ bool block_pairs(const ProjectionParams& p, bool ungrouped, int& expert, int& row0,
                                            int& count) {
  if (ungrouped) {
    row0 = static_cast<int>(blockIdx.y);
    expert = p.experts[row0];
    count = 1;
    return true;
  }
  if (static_cast<int>(blockIdx.y) >= *p.chunk_count) return false;
  const int4 chunk = p.chunks[blockIdx.y];
  expert = chunk.x;
  row0 = chunk.y;
  count = chunk.z;
  return true;
}

template <class W, int M, int R, int LANES, bool kDown, bool kPrefetch>
__global__ void __launch_bounds__(kThreads, min_blocks<M>())
    expert_projection_kernel(const ProjectionParams p) {
  // The ungrouped down projection reads its expert ids and requests its first weight chunks before waiting
  // for the gate/up projection: the ids are an input of the dispatch, written before its first kernel, so
  // at least two launches back (launch.cuh). Everything else waits first.
  constexpr bool kEarly = kDown && M == 1 && kPrefetch;
  if constexpr (!kEarly) {
    wait_for_prior_kernels();
    allow_next_kernel();
  }
  constexpr int kGroups = 32 / LANES;
  constexpr int kRowsPerBlock = kWarps * kGroups * R;
  constexpr int kChunk = W::kChunk;
  constexpr int kSlab = slab_length<M>();
  static_assert(kSlab % (32 * kChunk) == 0);
  // Dynamic shared memory: the M staged rows' source offsets, then the staged slab (see smem_bytes).
  extern __shared__ float4 smem_raw[];
  int64_t* src_offset = reinterpret_cast<int64_t*>(smem_raw);
  float* xs = reinterpret_cast<float*>(smem_raw + (M + 1) / 2);

  int expert, row0, count;
  if (!block_pairs(p, M == 1, expert, row0, count)) return;
  if (expert < 0 || expert >= p.num_experts) {  // block-uniform; the combine skips such pairs
    if constexpr (kEarly) wait_for_prior_kernels();  // (a kernel never completes before the previous one)
    return;
  }

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int sub = lane % LANES;
  const int64_t n_first =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (warp * kGroups + lane / LANES) * R;
  // Chunk c of the thread's row r (rows past n_out are clamped to the last one and never stored).
  auto load_chunk = [&](int r, int64_t c) {
    const int64_t n = n_first + r < p.n_out ? n_first + r : p.n_out - 1;
    return W::load(p.w, static_cast<int64_t>(expert) * p.w.rows + n, c, p);
  };

  typename W::Chunk cur[R];
  if constexpr (kEarly) {
    if (sub < (p.k < kSlab ? p.k : kSlab) / kChunk) {  // the first slab's first chunk of each row
#pragma unroll
      for (int r = 0; r < R; ++r) cur[r] = load_chunk(r, sub);
    }
    wait_for_prior_kernels();
    allow_next_kernel();
  }

  // The staged rows' sources (row offsets into p.x; -1 = a padding row of zeros).
  if (threadIdx.x < M) {
    const int m = static_cast<int>(threadIdx.x);
    int64_t offset = -1;
    if (m < count) {
      const int row = row0 + m;
      if constexpr (kDown) {
        offset = static_cast<int64_t>(row) * p.x_stride;
      } else {
        const int pair = M == 1 ? row : p.sorted_pair[row];
        offset = static_cast<int64_t>(pair / p.top_k) * p.x_stride;
      }
    }
    src_offset[m] = offset;
  }
  __syncthreads();

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;

  const int64_t slab_len = p.k < kSlab ? p.k : kSlab;
  const int token_stride = padded(static_cast<int>(slab_len));
  for (int64_t s0 = 0; s0 < p.k; s0 += kSlab) {
    const int len = static_cast<int>(p.k - s0 < kSlab ? p.k - s0 : kSlab);
    const int64_t c_begin = s0 / kChunk, c_end = (s0 + len) / kChunk;
    int64_t c = c_begin + sub;
    // The prefetching variants issue their first weight loads before staging, to overlap the two (kEarly:
    // the first slab's were issued before the wait).
    if constexpr (kPrefetch) {
      if (c < c_end && !(kEarly && s0 == 0)) {
#pragma unroll
        for (int r = 0; r < R; ++r) cur[r] = load_chunk(r, c);
      }
    }
    if (s0 > 0) __syncthreads();  // the previous slab has been consumed
    for (int m = 0; m < M; ++m) {
      float* dst = xs + m * token_stride;
      const int64_t offset = src_offset[m];
      for (int e = static_cast<int>(threadIdx.x); e < len; e += kThreads) {
        float v = 0.0f;
        if (offset >= 0) {
          const float* g = p.x + offset + s0 + e;
          if constexpr (kDown)
            v = detail::gelu_tanh_mul(g[0], g[p.inter]);
          else
            v = g[0];
        }
        dst[padded(e)] = v;
      }
    }
    __syncthreads();

    // Accumulates chunk c (its R rows' data in ch, consumed) into acc, elements in increasing order.
    // Steps are not unrolled so that the dequantisation of one step is not hoisted above the FMAs of
    // the previous one (register pressure).
    auto compute = [&](typename W::Chunk(&ch)[R], int64_t chunk) {
      const int base = static_cast<int>((chunk - c_begin) * kChunk);
#pragma unroll 1
      for (int step = 0; step < W::kSteps; ++step) {
#pragma unroll
        for (int q = 0; q < W::kStep / 4; ++q) {
          float w[R][4];
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < 4; ++i) w[r][i] = W::element(ch[r], 4 * q + i);
          const int e = padded(base + step * W::kStep + 4 * q);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const float4 xv = *reinterpret_cast<const float4*>(xs + m * token_stride + e);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              acc[r][m] = __fmaf_rn(xv.x, w[r][0], acc[r][m]);
              acc[r][m] = __fmaf_rn(xv.y, w[r][1], acc[r][m]);
              acc[r][m] = __fmaf_rn(xv.z, w[r][2], acc[r][m]);
              acc[r][m] = __fmaf_rn(xv.w, w[r][3], acc[r][m]);
            }
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) W::advance(ch[r]);
      }
    };

    if constexpr (kPrefetch) {
#pragma unroll 1
      while (c < c_end) {
        const int64_t next = c + LANES;
        typename W::Chunk nxt[R];
        if (next < c_end) {
#pragma unroll
          for (int r = 0; r < R; ++r) nxt[r] = load_chunk(r, next);
        }
        compute(cur, c);
#pragma unroll
        for (int r = 0; r < R; ++r) cur[r] = nxt[r];
        c = next;
      }
    } else {
#pragma unroll 1
      for (; c < c_end; c += LANES) {
#pragma unroll
        for (int r = 0; r < R; ++r) cur[r] = load_chunk(r, c);
        compute(cur, c);
      }
    }
  }

  // Fixed butterfly over the group's lanes; every lane ends with the same sum.
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int offset = LANES / 2; offset > 0; offset >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
      const int64_t n = n_first + r;
      if (sub == (r * M + m) % LANES && m < count && n < p.n_out)
        p.out[static_cast<int64_t>(row0 + m) * p.out_stride + n] = v;
    }
  }
}

// Output rows per thread (R); a block covers kWarps · (32 / LANES) · R rows. Not part of the order.
template <int M>
constexpr int rows_per_thread() {
  return M == 1 ? 2 : 4;
}

template <class W, int M, int LANES, bool kDown>
void launch_projection_kernel(const ProjectionParams& p, int grid_y, cudaStream_t stream) {
  constexpr int R = rows_per_thread<M>();
  constexpr int kRowsPerBlock = kWarps * (32 / LANES) * R;
  const int64_t slab_len = p.k < slab_length<M>() ? p.k : slab_length<M>();
  const size_t smem =
      sizeof(float4) * static_cast<size_t>((M + 1) / 2) +
      sizeof(float) * static_cast<size_t>(M) * static_cast<size_t>(padded_host(static_cast<int>(slab_len)));
  const dim3 grid(static_cast<unsigned>((p.n_out + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(grid_y));
  launch(expert_projection_kernel<W, M, R, LANES, kDown, (M <= 4)>, grid, kThreads, smem, stream, p);
}

template <class W, int M, bool kDown>
void launch_for_lanes(const ProjectionParams& p, int grid_y, cudaStream_t stream) {
  if (lanes_for(p.k, W::kChunk) == 32)
    launch_projection_kernel<W, M, 32, kDown>(p, grid_y, stream);
  else
    launch_projection_kernel<W, M, 8, kDown>(p, grid_y, stream);
}

// Dispatches on M (1, 4 or 8) and LANES.
template <class W, bool kDown>
void launch_for_format(const ProjectionParams& p, int m_tile, int grid_y, cudaStream_t stream) {
  if (m_tile == 1)
    launch_for_lanes<W, 1, kDown>(p, grid_y, stream);
  else if (m_tile == 4)
    launch_for_lanes<W, 4, kDown>(p, grid_y, stream);
  else
    launch_for_lanes<W, 8, kDown>(p, grid_y, stream);
}

// launch_for_format with kDown chosen at run time.
template <class W>
void launch_format(const ProjectionParams& p, bool down, int m_tile, int grid_y, cudaStream_t stream) {
  if (down)
    launch_for_format<W, true>(p, m_tile, grid_y, stream);
  else
    launch_for_format<W, false>(p, m_tile, grid_y, stream);
}

// ---- Entry points (moe_quantized.cu, moe_dense.cu) -----------------------------------------------------

// Enqueues one quantized projection (gate/up when !down, else down) on expert_mma_kernel: p complete (its
// m_tile 1 or 8 — 1 = ungrouped, grid_y pairs; otherwise grid_y bounds the chunk count — and its segments);
// `weight`, the stack's linear problem (linear::quantized_problem), names the weight format.
void launch_quantized_projection(const ProjectionParams& p, const linear::Problem& weight, bool down, int grid_y,
                                 cudaStream_t stream);
// Dense stacks on CUDA cores, chunks of up to m_tile pairs (1, 4 or 8).
void launch_dense_projection(const ProjectionParams& p, DType dtype, bool down, int m_tile, int grid_y,
                             cudaStream_t stream);

// The combine of one pass (moe_norms.cu): out[t] = Σ_j weights[t, j] · y[row(t, j)] for its tokens, then,
// when norms is given, the MoE block's output norms (linear.h MoeOutputNorms; norms->dense_out points at
// the pass's first token).
struct CombineParams {
  const float* y = nullptr;  // [rows, hidden]: the down projections' outputs
  int64_t hidden = 0;
  const int32_t* row_of = nullptr;  // pair → row of y (grouped passes), or null: row = pair
  const int32_t* experts = nullptr;  // [tokens, top_k]
  int num_experts = 0;
  const float* weights = nullptr;  // [tokens, top_k]
  int top_k = 1;
  float* out = nullptr;  // [tokens, hidden]
  int64_t tokens = 0;
};
void launch_combine(const CombineParams& p, const MoeOutputNorms* norms, cudaStream_t stream);

}  // namespace lmx::cuda::moe
