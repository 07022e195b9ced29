// per_layer_input_step (per_layer_input.h): the MLP's residual step, the per-layer-input gate and projection
// and their residual step, in one thread-block cluster instead of four kernels (E2B and E4B decode: 35 and 42
// layers, each of which otherwise waits for four kernels that read 0.7 MB between them).
//
// Bits. Each part repeats the arithmetic of the kernel it replaces:
// - the residual steps are residual_norm_kernel<float4>'s, on the schedule residual_norm_float4_threads gives
//   (the block's further warps add +0 to the block sum, which leaves it unchanged);
// - each projection row is the sum, in segment order, of the weight's K segments (Problem::segments), each an
//   mma chain from zero over its chunks with FormatQ4's dequantization and x staged as q4_gemv_kernel stages
//   it (bf16 pairs; the projection's input is gelu_tanh_mul(gate, layer_input), as with its GeGLU input).
// Work. Block `rank` of the cluster owns gate tiles [rank tg, rank tg + tg) and projection tiles [rank tp,
// rank tp + tp) (16 rows each). Before waiting for the previous kernel it requests those rows' codes, scales
// and biases, the norm weights and the layer input into shared memory (none of them written by a kernel of
// the step since the per-layer inputs were formed at its start: launch.cuh's contract). After the wait: the
// first residual step (every block, on its own copy), the gate tiles (one warp per (tile, segment)), the gate
// values to every block's shared memory (distributed shared memory), the projection tiles, their rows to
// block 0, which takes the second residual step and writes x and the next layer's normed input.
#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/kernel_limits.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/norm_rope_math.cuh"
#include "lmx/ops/cuda/per_layer_input.h"
#include "lmx/ops/cuda/tuning.h"

#include <cooperative_groups.h>

#include <algorithm>

namespace lmx::cuda {
namespace {

using linear::cp_async16_bytes;
using linear::kChunk;
using linear::Problem;
using linear::smem_address;

constexpr int kMaxWarps = 16;

struct Params {
  PerLayerInputStep step;      // (its weight pointers are host views: the kernel reads gate and proj)
  Problem gate, proj;          // the weights (x and out unused)
  int norm_threads;            // residual_norm_float4_threads(step.dim)
  int gate_tiles, proj_tiles;  // per block
};

// Shared-memory layout (byte offsets, each 16-byte aligned), a function of the parameters.
struct Layout {
  int gate_w, gate_s, gate_b, proj_w, proj_s, proj_b;  // codes (lane-ordered) and scale / bias rows
  int mlp_norm, proj_norm, next_norm, layer_input;     // f32 vectors
  int x, proj_out, gate_out, xs, partial, reduce;
  int bytes;
};

__host__ __device__ inline int align16(int n) {
  return (n + 15) / 16 * 16;
}

__host__ __device__ inline Layout layout(const Params& p) {
  Layout l{};
  const int scale_size = p.gate.scale_dtype == DType::kF32 ? 4 : 2;
  int at = 0;
  auto take = [&](int bytes) {
    const int offset = at;
    at += align16(bytes);
    return offset;
  };
  // A 16-row tile's chunk is 1 KB of codes; its rows' scales are 16 * groups_per_row values.
  l.gate_w = take(p.gate_tiles * p.gate.chunks * 1024);
  l.gate_s = take(p.gate_tiles * 16 * static_cast<int>(p.gate.groups_per_row) * scale_size);
  l.gate_b = take(p.gate_tiles * 16 * static_cast<int>(p.gate.groups_per_row) * scale_size);
  l.proj_w = take(p.proj_tiles * p.proj.chunks * 1024);
  l.proj_s = take(p.proj_tiles * 16 * static_cast<int>(p.proj.groups_per_row) * scale_size);
  l.proj_b = take(p.proj_tiles * 16 * static_cast<int>(p.proj.groups_per_row) * scale_size);
  l.mlp_norm = take(4 * p.step.dim);
  l.proj_norm = take(4 * p.step.dim);
  l.next_norm = take(4 * p.step.dim);
  l.layer_input = take(4 * p.step.width);
  l.x = take(4 * p.step.dim);
  l.proj_out = take(4 * p.step.dim);
  l.gate_out = take(4 * p.step.width);
  l.xs = take(256 * (p.gate.chunks > p.proj.chunks ? p.gate.chunks : p.proj.chunks));
  const int gate_tasks = p.gate_tiles * p.gate.segments, proj_tasks = p.proj_tiles * p.proj.segments;
  l.partial = take(64 * (gate_tasks > proj_tasks ? gate_tasks : proj_tasks));
  l.reduce = take(4 * 32);
  l.bytes = at;
  return l;
}

// Requests `bytes` (a multiple of 16) from src into shared memory at dst, 16 bytes per copy, spread over the
// block's threads (nothing when src is null).
__device__ __forceinline__ void request_bytes(unsigned char* dst, const void* src, int bytes) {
  if (src == nullptr) return;
  for (int b = 16 * static_cast<int>(threadIdx.x); b < bytes; b += 16 * static_cast<int>(blockDim.x))
    cp_async16_bytes(smem_address(dst + b), static_cast<const unsigned char*>(src) + b, 16);
}

// Requests the codes, scales and biases of tiles [first, first + count) of weight w: codes as
// [tile][chunk][half][lane] 16-byte words (lane (g, c) of half h holds words 4c .. 4c + 3 of the chunk in row
// 16 tile + 8 h + g, the words q4_gemv_kernel's lane takes), scales and biases as the rows' contiguous range.
template <int kScaleSize>
__device__ __forceinline__ void request_tiles(const Problem& w, int first, int count, unsigned char* codes,
                                              unsigned char* scales, unsigned char* biases) {
  const int chunks = w.chunks, words = count * chunks * 64;
  uint4* dst = reinterpret_cast<uint4*>(codes);
  for (int i = threadIdx.x; i < words; i += blockDim.x) {
    const int lane = i & 31, h = (i >> 5) & 1, tile_chunk = i >> 6;
    const int tile = tile_chunk / chunks, j = tile_chunk - tile * chunks;
    const int64_t row = 16 * static_cast<int64_t>(first + tile) + 8 * h + (lane >> 2);
    linear::cp_async_stream16(smem_address(dst + i), w.weight + row * w.row_words + 16 * j + 4 * (lane & 3));
  }
  const int64_t row_bytes = w.groups_per_row * kScaleSize,
                first_byte = 16 * static_cast<int64_t>(first) * row_bytes;
  const int bytes = static_cast<int>(16 * count * row_bytes);
  request_bytes(scales, static_cast<const unsigned char*>(w.scales) + first_byte, bytes);
  request_bytes(biases, static_cast<const unsigned char*>(w.biases) + first_byte, bytes);
}

// xs = the bf16 pairs of v[0, k) in q4_gemv_kernel's staging order: chunk j's 64 words, pair 4 i + e of lane
// group (c = xc) from columns 32 c + 8 i + e and + 4.
__device__ __forceinline__ void stage_pairs(const float* v, int k, uint32_t* xs) {
  for (int i = threadIdx.x; i < k / 8; i += blockDim.x) {
    const int chunk = i >> 4, xc = (i >> 2) & 3, q = i & 3;
    const float* col = v + chunk * kChunk + 32 * xc + 8 * q;
    *reinterpret_cast<uint4*>(xs + chunk * 64 + xc * 16 + 4 * q) =
        make_uint4(linear::pack_bf16x2(col[0], col[4]), linear::pack_bf16x2(col[1], col[5]),
                   linear::pack_bf16x2(col[2], col[6]), linear::pack_bf16x2(col[3], col[7]));
  }
}

// Segment sums of `count` tiles of w from shared memory: warp task (tile, segment) runs the segment's mma
// chain from zero (q4_gemv_kernel's per-chunk sequence) and leaves rows g and g + 8 in partial[(tile *
// segments + segment) * 16 + row].
template <class F>
__device__ __forceinline__ void project_tiles(const Problem& w, int count, const unsigned char* codes,
                                              const unsigned char* scales, const unsigned char* biases,
                                              const uint32_t* xs, float* partial) {
  using Scale = typename F::ScaleType;
  constexpr int kScaleSize = sizeof(Scale);
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int segments = w.segments, chunks = w.chunks, groups = static_cast<int>(w.groups_per_row);
  const uint4* words = reinterpret_cast<const uint4*>(codes);
  for (int task = threadIdx.x >> 5; task < count * segments; task += blockDim.x >> 5) {
    const int tile = task / segments, segment = task - tile * segments;
    const int rows[2] = {16 * tile + g, 16 * tile + 8 + g};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int end = linear::segment_begin(segment + 1, segments, chunks);
    for (int j = linear::segment_begin(segment, segments, chunks); j < end; ++j) {
      const int group = (j * kChunk + 32 * c) >> w.group_shift;
      uint32_t wr[2][4];
      float s[2][1], b[2][1];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 v = words[((tile * chunks + j) * 2 + h) * 32 + lane];
        wr[h][0] = v.x, wr[h][1] = v.y, wr[h][2] = v.z, wr[h][3] = v.w;
        s[h][0] = linear::shared_scale<Scale>(scales + (rows[h] * groups + group) * kScaleSize);
        b[h][0] = linear::shared_scale<Scale>(biases + (rows[h] * groups + group) * kScaleSize);
      }
      uint32_t bx[16];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = *reinterpret_cast<const uint4*>(xs + j * 64 + c * 16 + 4 * q);
        bx[4 * q] = v.x, bx[4 * q + 1] = v.y, bx[4 * q + 2] = v.z, bx[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int step = 0; step < 8; ++step) {
        const uint32_t a[4] = {
            F::dequant(wr[0], 2 * step, s[0], b[0]), F::dequant(wr[1], 2 * step, s[1], b[1]),
            F::dequant(wr[0], 2 * step + 1, s[0], b[0]), F::dequant(wr[1], 2 * step + 1, s[1], b[1])};
        linear::mma_bf16(acc, a, bx[2 * step], bx[2 * step + 1]);
      }
    }
    if (c == 0) {  // (x column 0 is the real one)
      partial[task * 16 + g] = acc[0];
      partial[task * 16 + 8 + g] = acc[2];
    }
  }
}

// Row i (of the 16 count rows) of the projected tiles: its segments' sums added in order.
__device__ __forceinline__ float row_total(const float* partial, int segments, int i) {
  const int tile = i >> 4, row = i & 15;
  float v = partial[tile * segments * 16 + row];
  for (int s = 1; s < segments; ++s) v += partial[(tile * segments + s) * 16 + row];
  return v;
}

// residual_norm_kernel<float4>'s step for one row on the first `threads` threads (every thread of the block
// calls it): x_out = (x_in + rms_norm(a) · a_weight) · scale, and normed = rms_norm(x_out) · normed_weight
// when normed is not null. Weights may be null.
__device__ __forceinline__ void residual_step(float4* x_out, const float4* x_in, const float4* a,
                                              const float4* a_weight, float scale, float4* normed,
                                              const float4* normed_weight, int n, int threads, float dim,
                                              float eps, float* reduce) {
  constexpr int kPer = 4;
  const int t = threadIdx.x;
  const bool mine = t < threads;
  float4 av[kPer], xv[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = t + i * threads;
    if (mine && c < n) {
      av[i] = a[c], xv[i] = x_in[c];
      ss = detail::sum_sq(av[i], ss);
    }
  }
  const float inv_a = detail::inv_rms(detail::block_sum(ss, reduce), dim, eps);
  const float4 none{};
  float ss_x = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = t + i * threads;
    if (mine && c < n) {
      float4 v = detail::added(xv[i], detail::weighted(detail::scaled(av[i], inv_a),
                                                       a_weight ? a_weight[c] : none, a_weight != nullptr));
      if (scale != 1.0f) v = detail::scaled(v, scale);
      x_out[c] = xv[i] = v;
      ss_x = detail::sum_sq(v, ss_x);
    }
  }
  if (normed == nullptr) return;
  const float inv_x = detail::inv_rms(detail::block_sum(ss_x, reduce), dim, eps);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = t + i * threads;
    if (mine && c < n)
      normed[c] = detail::weighted(detail::scaled(xv[i], inv_x), normed_weight ? normed_weight[c] : none,
                                   normed_weight != nullptr);
  }
}

template <class F>
__global__ void __launch_bounds__(kMaxWarps * 32) per_layer_input_kernel(const Params p) {
  constexpr int kScaleSize = sizeof(typename F::ScaleType);
  extern __shared__ __align__(128) unsigned char smem[];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), blocks = static_cast<int>(cluster.num_blocks());
  const Layout l = layout(p);
  const int gate_first = rank * p.gate_tiles, proj_first = rank * p.proj_tiles;
  const int gate_count = max(0, min(p.gate_tiles, p.step.width / 16 - gate_first));
  const int proj_count = max(0, min(p.proj_tiles, p.step.dim / 16 - proj_first));
  auto at = [&](int offset) { return smem + offset; };
  auto vec = [&](int offset) { return reinterpret_cast<float*>(smem + offset); };
  auto vec4 = [&](int offset) { return reinterpret_cast<float4*>(smem + offset); };

  // Constant data (and the per-layer input, written at the step's start) before the wait.
  request_tiles<kScaleSize>(p.gate, gate_first, gate_count, at(l.gate_w), at(l.gate_s), at(l.gate_b));
  request_tiles<kScaleSize>(p.proj, proj_first, proj_count, at(l.proj_w), at(l.proj_s), at(l.proj_b));
  request_bytes(at(l.mlp_norm), p.step.mlp_out_norm, 4 * p.step.dim);
  if (rank == 0) {  // (the second residual step's weights: block 0 takes it)
    request_bytes(at(l.proj_norm), p.step.projection_norm, 4 * p.step.dim);
    request_bytes(at(l.next_norm), p.step.next_norm, 4 * p.step.dim);
  }
  request_bytes(at(l.layer_input), p.step.layer_input, 4 * p.step.width);
  linear::cp_async_commit();
  wait_for_prior_kernels();
  allow_next_kernel();
  linear::cp_async_wait<0>();
  __syncthreads();  // (the norm weights are read by other threads than those that copied them)

  // The MLP's residual step, on this block's copy of x.
  const int n = p.step.dim / 4;
  const float dim = static_cast<float>(p.step.dim);
  float* reduce = vec(l.reduce);
  residual_step(vec4(l.x), reinterpret_cast<const float4*>(p.step.x),
                reinterpret_cast<const float4*>(p.step.mlp_out),
                p.step.mlp_out_norm ? vec4(l.mlp_norm) : nullptr, 1.0f, nullptr, nullptr, n, p.norm_threads,
                dim, p.step.eps, reduce);
  __syncthreads();

  // The gate rows, to every block of the cluster.
  uint32_t* xs = reinterpret_cast<uint32_t*>(at(l.xs));
  float* partial = vec(l.partial);
  stage_pairs(vec(l.x), p.step.dim, xs);
  __syncthreads();
  project_tiles<F>(p.gate, gate_count, at(l.gate_w), at(l.gate_s), at(l.gate_b), xs, partial);
  __syncthreads();
  // (One thread per (row, block): the row's total and its GeGLU product with the layer input, formed once
  // per thread rather than in sequence by the few threads that stage the projection's input.)
  for (int i = threadIdx.x; i < 16 * gate_count * blocks; i += blockDim.x) {
    const int row = i % (16 * gate_count), b = i / (16 * gate_count);
    const int r = 16 * gate_first + row;
    const float v = detail::gelu_tanh_mul(row_total(partial, p.gate.segments, row), vec(l.layer_input)[r]);
    cluster.map_shared_rank(vec(l.gate_out), b)[r] = v;
  }
  cluster.sync();

  // The projection's rows, to block 0.
  stage_pairs(vec(l.gate_out), p.step.width, xs);
  __syncthreads();
  project_tiles<F>(p.proj, proj_count, at(l.proj_w), at(l.proj_s), at(l.proj_b), xs, partial);
  __syncthreads();
  float* proj_out = cluster.map_shared_rank(vec(l.proj_out), 0);
  for (int i = threadIdx.x; i < 16 * proj_count; i += blockDim.x)
    proj_out[16 * proj_first + i] = row_total(partial, p.proj.segments, i);
  cluster.sync();
  if (rank != 0) return;

  // The block's residual step, into x and the next layer's normed input.
  residual_step(reinterpret_cast<float4*>(p.step.x), vec4(l.x), vec4(l.proj_out),
                p.step.projection_norm ? vec4(l.proj_norm) : nullptr, p.step.layer_scalar,
                reinterpret_cast<float4*>(p.step.next_normed), p.step.next_norm ? vec4(l.next_norm) : nullptr,
                n, p.norm_threads, dim, p.step.eps, reduce);
}

// Whether w can be read by the kernel as format F's codes: 4-bit, whole chunks, 16-byte aligned arrays.
bool tiles_apply(const Problem& w) {
  return w.format == linear::WeightFormat::kQ4 && w.k % kChunk == 0 && w.n % 16 == 0 &&
         detail::aligned16(w.scales) && detail::aligned16(w.biases);
}

}  // namespace

bool per_layer_input_step(const PerLayerInputStep& s, CudaContext& ctx) {
  // The tuning table: the fused kernel on or off, its cluster size (8 or 16: only that one is tried; 0: the
  // largest that fits) and the most warps per block.
  const CudaTuning& table = tuning();
  const CudaTuning::PerLayerInput& rules = table.per_layer_input;
  const int forced_blocks = rules.cluster_blocks;
  const int most_warps = std::min(rules.max_warps, kMaxWarps);
  LMX_REQUIRE(InvalidArgument,
              s.gate != nullptr && s.projection != nullptr && s.x != nullptr && s.mlp_out != nullptr &&
                  s.layer_input != nullptr,
              "per_layer_input_step: missing operand");
  LMX_REQUIRE(InvalidArgument,
              s.gate->rows == s.width && s.gate->cols == s.dim && s.projection->rows == s.dim &&
                  s.projection->cols == s.width,
              "per_layer_input_step: gate [{}, {}] and projection [{}, {}] do not match dim {} and width {}",
              s.gate->rows, s.gate->cols, s.projection->rows, s.projection->cols, s.dim, s.width);
  if (!rules.fused || s.dim % kChunk != 0 || s.width % kChunk != 0) return false;
  const int norm_threads = residual_norm_float4_threads(s.dim);
  if (norm_threads == 0 || norm_threads > 32 * kMaxWarps) return false;
  if (!detail::aligned16_or_null(
          {s.x, s.mlp_out, s.mlp_out_norm, s.layer_input, s.projection_norm, s.next_normed, s.next_norm}))
    return false;
  Params p{};
  p.gate = linear::quantized_problem(s.x, s.dim, 1, *s.gate, nullptr, s.width, table);
  p.proj = linear::quantized_problem(s.x, s.width, 1, *s.projection, nullptr, s.dim, table);
  linear::complete(p.gate, table);
  linear::complete(p.proj, table);
  if (!tiles_apply(p.gate) || !tiles_apply(p.proj) || p.gate.scale_dtype != p.proj.scale_dtype ||
      p.gate.small_scales != p.proj.small_scales)
    return false;
  p.step = s;
  if (s.next_normed == nullptr) p.step.next_norm = nullptr;
  p.norm_threads = norm_threads;
  return linear::with_q4_format(p.gate, [&](auto f) {
    auto* kernel = per_layer_input_kernel<decltype(f)>;
    for (const int blocks : {16, 8}) {  // (the largest cluster the device holds)
      if (forced_blocks != 0 && blocks != forced_blocks) continue;
      p.gate_tiles = (s.width / 16 + blocks - 1) / blocks;
      p.proj_tiles = (s.dim / 16 + blocks - 1) / blocks;
      const Layout l = layout(p);
      const int tasks = std::max(p.gate_tiles * p.gate.segments, p.proj_tiles * p.proj.segments);
      const int threads = 32 * std::max(std::min(tasks, most_warps), norm_threads / 32);
      if (l.bytes > linear::kGemvMaxSmem) continue;
      ensure_smem(reinterpret_cast<const void*>(kernel), l.bytes);
      if (!clusters_fit(reinterpret_cast<const void*>(kernel), threads, l.bytes, blocks)) continue;
      launch_clustered(kernel, dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(threads)),
                       static_cast<size_t>(l.bytes), ctx.stream(), static_cast<unsigned>(blocks), p);
      return true;
    }
    return false;
  });
}

}  // namespace lmx::cuda
