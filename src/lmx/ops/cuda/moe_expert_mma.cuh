// The MoE expert projections of quantized stacks on tensor cores, for the dispatches moe_experts.cu does
// not send to the batch-1 4-bit GEMV or the prefill GEMM: decode of stacks in other formats (each (token,
// slot) pair its own block row, reading only its expert's weights) and chunks of up to 8 pairs of one
// expert (grouped by moe_experts.cu's counting sort).
//
// A block computes 16 output rows of one expert's projection for the chunk's pairs with the decode warps
// of the dense projections (linear_tiles.cuh decode_segment): warp s sums segment s of K for the 16 rows
// and x rows g (a pair per x row, one mma column tile), the segments meet in shared memory and are added
// in order. So a pair's outputs are Σ_k bf16(x_k) · bf16(w_k) in f32 with linear_tiles.cuh's numerics and
// chunk order, the mma output of one x row depends on that row alone, and the segments are a function of
// the weight shape (expert_segments): the bits of every pair are the same whatever else is in the call,
// and the same as the batch-1 GEMV's and the prefill GEMM's (the batch-invariance contract).
//
// Gate/up: the stack's expert matrices are [gate; up] (2I rows), x the pair's token row. Down: x the
// pair's row of the gate/up output, whose GeGLU gelu_tanh(gate) · up (f32, the gelu_tanh_mul op's values)
// is formed while loading (linear_tiles.cuh load_x_pairs<F, true>).
#pragma once

#include "lmx/ops/cuda/linear_tiles.cuh"
#include "lmx/ops/cuda/moe_experts.cuh"

namespace lmx::cuda::moe {

// Segments per block at most: 8 warps (expert_segments), so that the kernel may use more than 128
// registers (the 8-bit and packed formats spill at 128).
constexpr int kMaxExpertSegments = 8;

// Segments of K for a projection of n_out rows over k columns (moe_experts.cu): ~512 warps per (pair,
// projection) — 8 pairs of a decode step then run ~4096 warps, as the dense 4-bit decode does — at least
// kExpertSegmentMinChunks chunks each, at most kExpertSegmentsMost. A function of the weights only (never of
// the tokens). Fewer, longer segments cost the decode GEMVs parallelism and save the prefill GEMM a drain of
// its wgmma pipeline per segment; the two limits are measured on 26B-A4B (H200 A/Bs, 2026-12-01, seventeenth
// pass: down 704 → 2816 in 2 segments instead of 3, gate/up 2816 → 1408 in 3 instead of 6: decode +2 %,
// prefill +2 %). LMX_MOE_TARGET_WARPS in the environment replaces the 512, and LMX_MOE_SEGMENTS="NxK=S,…"
// sets the segments of [N, K] expert matrices (A/B runs; other segments, other bits, the same in every
// kernel).
constexpr int kExpertSegmentMinChunks = 3;
constexpr int kExpertSegmentsMost = 3;
int expert_segments(int64_t n_out, int64_t k);

// Pairs per chunk of expert_mma_kernel (one mma column tile).
constexpr int kExpertMmaPairs = 8;

template <class F, bool kDown>
__global__ void __launch_bounds__(kMaxExpertSegments * 32) expert_mma_kernel(const ProjectionParams p) {
  using namespace linear;
  wait_for_prior_kernels();
  allow_next_kernel();
  extern __shared__ float partial[];  // [segments][8 pairs][16 rows]
  int expert, row0, count;
  if (!block_pairs(p, p.m_tile == 1, expert, row0, count)) return;
  if (expert < 0 || expert >= p.num_experts) return;  // block-uniform; the combine skips such pairs

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int segments = static_cast<int>(blockDim.x) >> 5;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const WeightStack& w = p.w;
  const int64_t stack_row0 = static_cast<int64_t>(expert) * w.rows;
  SegmentOperands<1> op;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t n = n0 + g + 8 * h;
    op.w_valid[h] = n < p.n_out;
    const int64_t row = stack_row0 + (op.w_valid[h] ? n : n0);
    op.w[h] = static_cast<const uint32_t*>(w.data) + row * w.row_stride;
    op.first_group[h] = row * w.groups_per_row;
  }
  op.scales = w.scales;
  op.biases = w.biases;
  op.x_valid[0] = g < count;
  const int row = row0 + (op.x_valid[0] ? g : 0);
  int64_t source = row;  // down: the pair's row of the gate/up output
  if constexpr (!kDown) source = (p.m_tile == 1 ? row : p.sorted_pair[row]) / p.top_k;  // the pair's token
  op.x[0] = p.x + source * p.x_stride;
  op.up_offset = kDown ? p.inter : 0;
  op.set_segment(p.k, p.group_shift, p.scale_dtype, p.x_vec4, p.k_chunks, warp, segments);
  float acc[1][4];
  decode_segment<F, 1, kDown>(op, c, acc);

  store_segment_sums<1>(partial, warp, g, c, acc);
  for (int i = static_cast<int>(threadIdx.x); i < 8 * 16; i += static_cast<int>(blockDim.x)) {
    const int m = i >> 4;
    const int64_t n = n0 + (i & 15);
    if (m < count && n < p.n_out)
      p.out[static_cast<int64_t>(row0 + m) * p.out_stride + n] = segment_total<1>(partial, segments, i);
  }
}

// Enqueues expert_mma_kernel<F, down> for p (p.segments and p.k_chunks set, grid_y block rows).
template <class F>
void launch_expert_mma_format(const ProjectionParams& p, bool down, int grid_y, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n_out + 15) / 16), static_cast<unsigned>(grid_y));
  const size_t smem = sizeof(float) * static_cast<size_t>(p.segments) * 8 * 16;
  const unsigned threads = 32 * static_cast<unsigned>(p.segments);
  if (down)
    launch(expert_mma_kernel<F, true>, grid, threads, smem, stream, p);
  else
    launch(expert_mma_kernel<F, false>, grid, threads, smem, stream, p);
}

}  // namespace lmx::cuda::moe
