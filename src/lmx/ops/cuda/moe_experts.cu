// CUDA MoE expert dispatch (linear.h quantized_moe_experts, dense_moe_experts): device-side grouping
// of (token, slot) pairs by expert, the gate/up and down projections (moe_experts.cuh), and the
// weighted combine in slot order. Graph-safe: expert ids are only read on the device; launch shapes
// depend on the token count, top_k and the weights' shapes only.
//
// One call = passes of at most moe_pass_tokens tokens (tokens are independent, so passes change no bits):
//   1. (M > 1 only) group_pairs_kernel: counting sort of the pass's pairs by expert into
//      ctx.scratch(kMoeRouting): row_of[pair], sorted_pair[row], and chunks of up to M rows of one expert.
//   2. gate/up projection: hbuf[row, 0:I] = gate_e · x[token], hbuf[row, I:2I] = up_e · x[token].
//   3. down projection: y[row, :] = down_e · (gelu_tanh(gate) * up), the activation made while loading.
//   Quantized stacks: on tensor cores (moe_expert_mma.cuh), dense ones on CUDA cores (moe_experts.cuh).
//   4. the combine (moe_norms.cu): out[t] = Σ_j weights[t, j] * y[row_of[t·k + j]], j = 0..k-1, one f32
//      multiply and one add per term, starting from 0 (ops::moe_experts's combine), then the MoE block's
//      output norms when the caller asks (MoeOutputNorms).
// M = 1 (few tokens: decode) skips step 1: each pair is its own block row (row = pair), reading only
// its expert's weights — a gathered GEMV. hbuf and y live in ctx.scratch(kMoeActivations).
// Pairs whose expert id lies outside [0, E) contribute nothing (the host cannot check device ids).
#include "lmx/core/error.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/moe_expert_mma.cuh"
#include "lmx/ops/cuda/moe_experts.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

namespace lmx::cuda {
namespace {

using moe::ProjectionParams;
using moe::WeightStack;

constexpr int kMaxExperts = 4096;  // group_pairs_kernel keeps 4 ints per expert in shared memory (64 KiB)
constexpr int kGroupThreads = 1024;

// Counting sort of pairs by expert, by one thread-block cluster (the whole grid: gridDim.x blocks, at most
// kGroupBlocks). Block b takes the pairs i ≡ b·kGroupThreads + tid (mod gridDim.x·kGroupThreads) and counts
// them per expert in its shared memory; after a cluster barrier every block reads all blocks' counts
// (distributed shared memory), so expert e's rows start at Σ_{e' < e} total(e') and block b's pairs of e
// follow those of blocks 0..b-1. Row order within a block's pairs of an expert is arbitrary (atomics): no
// value depends on it, since a pair's outputs are the same bits in any row of any chunk. (One block of 1024
// threads took ~22 µs per layer at 26B-A4B's 2048 tokens, latency-bound on its shared atomics: ncu, 0.64
// instructions per cycle.)
constexpr int kGroupBlocks = 8;  // the portable cluster size
__global__ void __launch_bounds__(kGroupThreads)
    group_pairs_kernel(const int32_t* __restrict__ experts, int pairs, int num_experts, int m_tile,
                       int4* __restrict__ chunks, int* __restrict__ chunk_count,
                       int32_t* __restrict__ sorted_pair, int32_t* __restrict__ row_of) {
  namespace cg = cooperative_groups;
  wait_for_prior_kernels();
  allow_next_kernel();
  extern __shared__ int group_smem[];
  int* count = group_smem;                    // this block's pairs per expert
  int* fill = group_smem + num_experts;       // the next row for this block's pairs of each expert
  int* total = group_smem + 2 * num_experts;  // all blocks' pairs per expert
  int* chunk_first = group_smem + 3 * num_experts;
  __shared__ int rows_used;
  const int tid = static_cast<int>(threadIdx.x), block = static_cast<int>(blockIdx.x);
  const int blocks = static_cast<int>(gridDim.x), stride = blocks * kGroupThreads;
  const int first = block * kGroupThreads + tid;
  for (int e = tid; e < num_experts; e += kGroupThreads) count[e] = 0;
  __syncthreads();
  for (int i = first; i < pairs; i += stride) {
    const int e = experts[i];
    if (e >= 0 && e < num_experts)
      atomicAdd(&count[e], 1);
    else
      row_of[i] = -1;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's counts are final
  for (int e = tid; e < num_experts; e += kGroupThreads) {
    int all = 0, before = 0;
    for (int r = 0; r < blocks; ++r) {
      const int c = *cluster.map_shared_rank(count + e, r);
      all += c;
      if (r < block) before += c;
    }
    total[e] = all;
    fill[e] = before;
  }
  __syncthreads();
  if (tid < 32) {  // exclusive scans of rows and chunks per expert
    int rows_carry = 0, chunks_carry = 0;
    for (int base = 0; base < num_experts; base += 32) {
      const int e = base + tid;
      const int c = e < num_experts ? total[e] : 0;
      const int n = (c + m_tile - 1) / m_tile;
      int rows_incl = c, chunks_incl = n;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int r = __shfl_up_sync(0xFFFFFFFFu, rows_incl, offset);
        const int h = __shfl_up_sync(0xFFFFFFFFu, chunks_incl, offset);
        if (tid >= offset) {
          rows_incl += r;
          chunks_incl += h;
        }
      }
      if (e < num_experts) {
        fill[e] += rows_carry + rows_incl - c;
        chunk_first[e] = chunks_carry + chunks_incl - n;
      }
      rows_carry += __shfl_sync(0xFFFFFFFFu, rows_incl, 31);
      chunks_carry += __shfl_sync(0xFFFFFFFFu, chunks_incl, 31);
    }
    if (tid == 0) rows_used = rows_carry;
    if (tid == 0 && block == 0) *chunk_count = chunks_carry;
  }
  __syncthreads();
  if (block == 0) {  // (block 0's pairs come first: its fill[e] is expert e's first row)
    // Rows past those in use belong to no chunk (the grouped prefill's x preparation may read every row).
    for (int i = rows_used + tid; i < pairs; i += kGroupThreads) sorted_pair[i] = -1;
    for (int e = tid; e < num_experts; e += kGroupThreads) {
      const int c = total[e], first_row = fill[e], first_chunk = chunk_first[e];
      for (int j = 0; j * m_tile < c; ++j)
        chunks[first_chunk + j] = make_int4(e, first_row + j * m_tile, min(m_tile, c - j * m_tile), 0);
    }
    __syncthreads();
  }
  for (int i = first; i < pairs; i += stride) {
    const int e = experts[i];
    if (e >= 0 && e < num_experts) {
      const int row = atomicAdd(&fill[e], 1);
      sorted_pair[row] = i;
      row_of[i] = row;
    }
  }
  cluster.sync();  // no block leaves while another may still read its counts
}

// group_pairs_kernel on a cluster of one block per 2048 pairs, at most kGroupBlocks; the tuning table's
// moe.group_blocks sets the blocks (any count gives the same chunks and, per expert, the same set of rows).
void launch_group_pairs(const int32_t* experts, int pairs, int num_experts, int m_tile, int4* chunks,
                        int* chunk_count, int32_t* sorted_pair, int32_t* row_of, cudaStream_t stream) {
  const int forced = std::min(tuning().moe.group_blocks, kGroupBlocks);
  const int blocks = forced > 0 ? forced : std::clamp((pairs + 2047) / 2048, 1, kGroupBlocks);
  const size_t smem = sizeof(int) * 4 * static_cast<size_t>(num_experts);
  // Per call (cheap, host-side), as launch_prefill_tiles does, so that every device the process uses gets it.
  LMX_CUDA_CHECK(cudaFuncSetAttribute(group_pairs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  launch_clustered(group_pairs_kernel, blocks, kGroupThreads, smem, stream, static_cast<unsigned>(blocks),
                   experts, pairs, num_experts, m_tile, chunks, chunk_count, sorted_pair, row_of);
}

// Rows per chunk for a pass of `tokens` tokens: 1 (ungrouped) while few pairs share an expert; then, for
// the tensor-core kernels, 8 (one mma column tile of expert_mma_kernel) or, from 4 pairs per expert on
// average, grouped_rows (the prefill GEMM's chunk: kTileM or linear::kWideChunkRows); for the dense kernel 4
// or 8.
int choose_m_tile(int64_t tokens, int64_t pairs, int num_experts, bool tensor_cores, int grouped_rows) {
  if (tokens <= 4 || 2 * pairs <= num_experts) return 1;
  const bool few = pairs <= 4 * static_cast<int64_t>(num_experts);
  if (tensor_cores) return few ? moe::kExpertMmaPairs : grouped_rows;
  return few ? 4 : 8;
}

// Bound on the chunk count of a pass (host-known, for the grid): Σ_e ceil(c_e / M) ≤ pairs / M + #experts
// used.
int64_t chunk_bound(int64_t pairs, int m_tile, int num_experts) {
  return std::min(pairs, pairs / m_tile + std::min<int64_t>(num_experts, pairs));
}

size_t align256(size_t bytes) {
  return (bytes + 255) & ~size_t{255};
}

// Runs the passes; project(p, down, m_tile, grid_y) enqueues one projection with the weight fields of
// p filled in by the caller. grouped_rows: the tensor-core kernels' chunk rows when many pairs share an
// expert.
template <class Launch>
void run_expert_passes(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                       int top_k, int num_experts, int64_t hidden, int64_t inter, float* out,
                       const MoeOutputNorms* norms, bool tensor_cores, int grouped_rows, CudaContext& ctx,
                       const Launch& project) {
  const int64_t pass_tokens = moe_pass_tokens(tokens, top_k, hidden, inter);
  const int64_t max_pairs = pass_tokens * top_k;
  // Scratch: hbuf [pairs, 2I] then y [pairs, H]; routing tables.
  const size_t hbuf_bytes = align256(sizeof(float) * static_cast<size_t>(max_pairs * 2 * inter));
  const size_t y_bytes = align256(sizeof(float) * static_cast<size_t>(max_pairs * hidden));
  auto* activations = static_cast<char*>(ctx.scratch(Scratch::kMoeActivations, hbuf_bytes + y_bytes));
  float* hbuf = reinterpret_cast<float*>(activations);
  float* ybuf = reinterpret_cast<float*>(activations + hbuf_bytes);
  const size_t chunks_bytes = align256(sizeof(int4) * static_cast<size_t>(max_pairs));
  const size_t index_bytes = align256(sizeof(int32_t) * static_cast<size_t>(max_pairs));
  auto* routing = static_cast<char*>(ctx.scratch(Scratch::kMoeRouting, chunks_bytes + 2 * index_bytes + 256));
  auto* chunks = reinterpret_cast<int4*>(routing);
  auto* sorted_pair = reinterpret_cast<int32_t*>(routing + chunks_bytes);
  auto* row_of = reinterpret_cast<int32_t*>(routing + chunks_bytes + index_bytes);
  auto* chunk_count = reinterpret_cast<int*>(routing + chunks_bytes + 2 * index_bytes);
  const cudaStream_t stream = ctx.stream();

  for (int64_t t0 = 0; t0 < tokens; t0 += pass_tokens) {
    const int64_t count = std::min(pass_tokens, tokens - t0);
    const int64_t pairs = count * top_k;
    const int32_t* pass_experts = experts + t0 * top_k;
    const int m_tile = choose_m_tile(count, pairs, num_experts, tensor_cores, grouped_rows);
    int64_t grid_y = pairs;
    if (m_tile > 1) {
      grid_y = chunk_bound(pairs, m_tile, num_experts);
      launch_group_pairs(pass_experts, static_cast<int>(pairs), num_experts, m_tile, chunks, chunk_count,
                         sorted_pair, row_of, stream);
    }
    ProjectionParams p;
    p.top_k = top_k;
    p.experts = pass_experts;
    p.num_experts = num_experts;
    p.chunks = chunks;
    p.chunk_count = chunk_count;
    p.sorted_pair = sorted_pair;
    p.row_of = row_of;
    p.m_tile = m_tile;
    p.pairs = static_cast<int>(pairs);

    ProjectionParams gate_up = p;
    gate_up.k = hidden;
    gate_up.x = x + t0 * hidden;
    gate_up.x_stride = hidden;
    gate_up.out = hbuf;
    gate_up.out_stride = 2 * inter;
    project(gate_up, false, m_tile, static_cast<int>(grid_y));

    ProjectionParams down = p;
    down.k = inter;
    down.n_out = hidden;
    down.x = hbuf;
    down.x_stride = 2 * inter;
    down.inter = inter;
    down.out = ybuf;
    down.out_stride = hidden;
    project(down, true, m_tile, static_cast<int>(grid_y));

    moe::CombineParams combine;
    combine.y = ybuf;
    combine.hidden = hidden;
    combine.row_of = m_tile > 1 ? row_of : nullptr;
    combine.experts = pass_experts;
    combine.num_experts = num_experts;
    combine.weights = weights + t0 * top_k;
    combine.top_k = top_k;
    combine.out = out + t0 * hidden;
    combine.tokens = count;
    MoeOutputNorms pass_norms;
    if (norms != nullptr) {
      pass_norms = *norms;
      pass_norms.dense_out += t0 * hidden;
    }
    moe::launch_combine(combine, norms != nullptr ? &pass_norms : nullptr, stream);
  }
}

void check_quantized(const DeviceQuantized& w, const char* name) {
  LMX_REQUIRE(InvalidArgument,
              w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8,
              "cuda::quantized_moe_experts: {} has unsupported bits {}", name, w.bits);
  LMX_REQUIRE(InvalidArgument, w.group_size == 32 || w.group_size == 64 || w.group_size == 128,
              "cuda::quantized_moe_experts: {} has unsupported group size {}", name, w.group_size);
  LMX_REQUIRE(InvalidArgument,
              w.scale_dtype == DType::kBF16 || w.scale_dtype == DType::kF16 || w.scale_dtype == DType::kF32,
              "cuda::quantized_moe_experts: {} scales must be bf16, f16 or f32", name);
  LMX_REQUIRE(InvalidArgument, w.rows > 0 && w.cols > 0 && w.cols % w.group_size == 0,
              "cuda::quantized_moe_experts: {} [{}, {}, {}] has columns that are not a multiple of group {}",
              name, w.batch, w.rows, w.cols, w.group_size);
  LMX_REQUIRE(InvalidArgument, w.codes != nullptr && w.scales != nullptr && w.biases != nullptr,
              "cuda::quantized_moe_experts: {} has a null pointer", name);
}

WeightStack quantized_stack(const DeviceQuantized& w) {
  WeightStack s;
  s.data = w.codes;
  s.scales = w.scales;
  s.biases = w.biases;
  s.rows = w.rows;
  s.row_stride = w.cols * w.bits / 32;
  s.groups_per_row = w.cols / w.group_size;
  return s;
}

void check_shared_args(int64_t tokens, int top_k, int64_t num_experts, const char* op) {
  LMX_REQUIRE(InvalidArgument, tokens >= 0, "{}: negative token count {}", op, tokens);
  LMX_REQUIRE(InvalidArgument, top_k >= 1, "{}: top_k {} must be at least 1", op, top_k);
  LMX_REQUIRE(InvalidArgument, num_experts >= 1 && num_experts <= kMaxExperts,
              "{}: {} experts outside [1, {}]", op, num_experts, kMaxExperts);
}

}  // namespace

namespace moe {

int expert_segments(int64_t n_out, int64_t k, const CudaTuning::Moe& rules) {
  const int64_t chunks = (k + linear::kChunk - 1) / linear::kChunk;
  const int set = shape_segments(rules.segments, "cuda.moe.segments", n_out, k,
                                 std::min<int64_t>(chunks, kMaxExpertSegments));
  if (set > 0) return set;
  const int64_t tiles = (n_out + 15) / 16;
  int64_t s = (rules.target_warps + tiles / 2) / tiles;
  s = std::min(s, chunks / kExpertSegmentMinChunks);
  s = std::min<int64_t>(s, kExpertSegmentsMost);
  return static_cast<int>(std::max<int64_t>(s, 1));
}

}  // namespace moe

int64_t moe_pass_tokens(int64_t tokens, int top_k, int64_t hidden, int64_t inter) {
  return moe_pass_tokens(tokens, top_k, hidden, inter, tuning().moe.pass_pairs);
}

int64_t moe_pass_tokens(int64_t tokens, int top_k, int64_t hidden, int64_t inter, int64_t pass_pairs) {
  if (tokens <= 1) return std::max<int64_t>(tokens, 1);
  const int64_t pair_bytes = static_cast<int64_t>(sizeof(float)) * (2 * inter + hidden);
  const int64_t pairs = pass_pairs > 0
                            ? pass_pairs
                            : std::clamp(kMoePassBytes / pair_bytes, kMoeMinPassPairs, kMoeMaxPassPairs);
  const int64_t most = std::max<int64_t>(1, pairs / top_k);
  const int64_t passes = (tokens + most - 1) / most;
  return (tokens + passes - 1) / passes;  // equal passes (the last one at most passes - 1 tokens shorter)
}

void quantized_moe_experts(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                           int top_k, const DeviceQuantized& gate_up, const DeviceQuantized& down, float* out,
                           CudaContext& ctx, const MoeOutputNorms* norms, bool ids_early) {
  constexpr const char* kOp = "cuda::quantized_moe_experts";
  check_quantized(gate_up, "gate_up");
  check_quantized(down, "down");
  const int64_t num_experts = gate_up.batch, hidden = gate_up.cols, inter = gate_up.rows / 2;
  LMX_REQUIRE(InvalidArgument,
              gate_up.rows % 2 == 0 && down.batch == num_experts && down.rows == hidden && down.cols == inter,
              "{}: gate_up [{}, {}, {}] and down [{}, {}, {}] must be [E, 2I, H] and [E, H, I]", kOp, gate_up.batch,
              gate_up.rows, gate_up.cols, down.batch, down.rows, down.cols);
  check_shared_args(tokens, top_k, num_experts, kOp);
  if (tokens == 0) return;

  const WeightStack gate_up_s = quantized_stack(gate_up), down_s = quantized_stack(down);
  // A projection as a linear_tiles.cuh problem over one expert's matrix (the stack's first), segments as
  // expert_mma_kernel's: for the batch-1 4-bit kernel's gathered GEMVs and the grouped prefill GEMM.
  auto pair_problem = [&](const DeviceQuantized& w, const float* in, int64_t in_stride, int64_t m, float* result,
                          int64_t result_stride) {
    linear::Problem q = linear::quantized_problem(in, in_stride, m, w, result, result_stride);
    q.chunks = static_cast<int>((q.k + linear::kChunk - 1) / linear::kChunk);
    q.segments = moe::expert_segments(q.n, q.k);
    q.x_vec4 = detail::aligned16(in) && in_stride % 4 == 0;
    return q;
  };
  const bool q4 = gate_up.bits == 4 && down.bits == 4 && detail::aligned16(gate_up.codes) &&
                  detail::aligned16(down.codes);
  auto project = [&](ProjectionParams p, bool is_down, int m_tile, int grid_y) {
    const DeviceQuantized& w = is_down ? down : gate_up;
    // Decode (one pair per block row) with 4-bit stacks: the batch-1 4-bit kernel, gate/up writing the GeGLU
    // h = gelu_tanh(gate) * up into hbuf's first half (the bits the other paths' down projection forms from
    // gate and up), the down projection reading h. Both or neither (hbuf's layout).
    if (m_tile == 1 && q4) {
      linear::Q4Pairs pairs;
      pairs.ids = p.experts;
      pairs.experts = p.num_experts;
      pairs.x_div = is_down ? 1 : p.top_k;
      pairs.x_stride = p.x_stride;
      pairs.out_stride = p.out_stride;
      pairs.ids_early = is_down || ids_early;
      const bool gate_up_ok =
          linear::q4_gemv_plan(pair_problem(gate_up, x, hidden, 1, p.out, 2 * inter), true, grid_y).stages > 0;
      const bool down_ok =
          linear::q4_gemv_plan(pair_problem(down, p.out, 2 * inter, 1, p.out, hidden), false, grid_y).stages > 0;
      if (gate_up_ok && down_ok) {
        const bool launched = linear::launch_decode_pairs(pair_problem(w, p.x, p.x_stride, 1, p.out, p.out_stride),
                                                          pairs, grid_y, !is_down, ctx.stream());
        LMX_REQUIRE(Error, launched, "{}: the batch-1 4-bit kernel refused a planned projection", kOp);
        return;
      }
    }
    const linear::Problem q = pair_problem(w, p.x, p.x_stride, p.pairs, p.out, p.out_stride);
    if (m_tile >= static_cast<int>(linear::kTileM)) {
      // Many pairs per expert: the prefill GEMM over chunks of up to m_tile pairs of one expert, x gathered
      // (gate/up: the pairs' token rows, each token's row prepared once and stored to its top_k pair rows;
      // down: the GeGLU of each pair's gate/up row) into bf16 tiles.
      linear::XRows rows;
      // The grouped gate/up projection's x preparation per token row, storing each prepared row to its top_k
      // pair rows (XRows::scatter; the tuning table's moe.prefill_scatter), else per pair row, reading its
      // token's row (XRows::map; top_k reads of every token row). Same xp rows either way.
      if (!is_down && tuning().moe.prefill_scatter)
        rows.scatter = p.row_of;
      else if (!is_down)
        rows.map = p.sorted_pair;
      rows.div = p.top_k;
      if (is_down) {
        rows.up = p.x + inter;
        rows.up_stride = p.x_stride;
      }
      linear::PrefillChunks grouped{p.chunks, p.chunk_count, p.num_experts};
      grouped.chunk_rows = m_tile;
      auto* xp = static_cast<uint32_t*>(ctx.scratch(Scratch::kLinearInput, linear::prefill_scratch_bytes(q)));
      linear::launch_prefill_grouped(q, rows, grouped, grid_y, xp, ctx.stream());
      return;
    }
    p.w = is_down ? down_s : gate_up_s;
    p.n_out = w.rows;
    p.scale_dtype = w.scale_dtype;
    p.group_shift = q.group_shift;
    p.k_chunks = q.chunks;
    p.segments = q.segments;
    p.x_vec4 = q.x_vec4 && (!is_down || p.inter % 4 == 0);
    moe::launch_quantized_projection(p, q, is_down, grid_y, ctx.stream());
  };
  // Chunks as wide as the grouped GEMM of both projections takes (one sort serves both).
  const int grouped_rows =
      std::min(linear::prefill_chunk_rows(pair_problem(gate_up, x, hidden, 2, nullptr, 2 * inter)),
               linear::prefill_chunk_rows(pair_problem(down, nullptr, 2 * inter, 2, nullptr, hidden)));
  run_expert_passes(x, tokens, experts, weights, top_k, static_cast<int>(num_experts), hidden, inter, out,
                    norms, /*tensor_cores=*/true, grouped_rows, ctx, project);
}

void dense_moe_experts(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                       int top_k, const DeviceDense& gate_up, const DeviceDense& down, float* out,
                       CudaContext& ctx, const MoeOutputNorms* norms) {
  constexpr const char* kOp = "cuda::dense_moe_experts";
  for (const DeviceDense* w : {&gate_up, &down}) {
    LMX_REQUIRE(InvalidArgument, w->dtype == DType::kF32 || w->dtype == DType::kBF16,
                "{}: expert weights must be f32 or bf16", kOp);
    LMX_REQUIRE(InvalidArgument, w->data != nullptr && detail::aligned16(w->data),
                "{}: expert weights must be non-null and 16-byte aligned", kOp);
    const int64_t chunk = w->dtype == DType::kF32 ? 4 : 8;
    LMX_REQUIRE(InvalidArgument, w->rows > 0 && w->cols > 0 && w->cols % chunk == 0,
                "{}: expert weight [{}, {}, {}] must have a positive multiple of {} columns", kOp, w->batch,
                w->rows, w->cols, chunk);
  }
  const int64_t num_experts = gate_up.batch, hidden = gate_up.cols, inter = gate_up.rows / 2;
  LMX_REQUIRE(InvalidArgument,
              gate_up.rows % 2 == 0 && down.batch == num_experts && down.rows == hidden && down.cols == inter,
              "{}: gate_up [{}, {}, {}] and down [{}, {}, {}] must be [E, 2I, H] and [E, H, I]", kOp,
              gate_up.batch, gate_up.rows, gate_up.cols, down.batch, down.rows, down.cols);
  check_shared_args(tokens, top_k, num_experts, kOp);
  if (tokens == 0) return;

  auto stack = [](const DeviceDense& w) {
    WeightStack s;
    s.data = w.data;
    s.rows = w.rows;
    s.row_stride = w.cols;
    return s;
  };
  const WeightStack gate_up_s = stack(gate_up), down_s = stack(down);
  auto project = [&](ProjectionParams p, bool is_down, int m_tile, int grid_y) {
    const DeviceDense& w = is_down ? down : gate_up;
    p.w = is_down ? down_s : gate_up_s;
    p.n_out = w.rows;
    moe::launch_dense_projection(p, w.dtype, is_down, m_tile, grid_y, ctx.stream());
  };
  run_expert_passes(x, tokens, experts, weights, top_k, static_cast<int>(num_experts), hidden, inter, out,
                    norms, /*tensor_cores=*/false, static_cast<int>(linear::kTileM), ctx, project);
}

}  // namespace lmx::cuda
