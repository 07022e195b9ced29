// Batch-1 decode kernel for 4-bit weights (WeightFormat::kQ4, M == 1): the hot path of single-sequence
// decode. It computes exactly what linear_decode_kernel<FormatQ4<Scale>, 1> computes — the same operands
// into the same mma steps in the same order, the same segment sums added in the same order — so every
// output is bit-identical to that kernel and to the prefill kernel (linear_tiles.cuh), and the
// batch-invariance contract holds across all three. What differs is where the time went in the generic
// kernel (ncu on the H200: 30 % of HBM bandwidth, warps stalled on L1 loads of x):
// - x is converted once per warp into shared memory as the lane-ordered bf16 pairs of its mma B fragments
//   (256 bytes per 128-column chunk; lanes of equal c read the same 64 bytes, a broadcast), so the main
//   loop reads 4 LDS.128 per chunk instead of 8 LDG.128 of f32 and 16 conversions;
// - each warp runs two independent mma chains (two 16-row tiles, 32 weight rows) that share the x
//   fragment and overlap each other's latency;
// - full 128-column chunks run without per-load predicates (the ragged last chunk of K, if any, uses the
//   generic predicated loads); weight rows past n read row n - 1 (valid addresses; an mma output element
//   depends only on its own row, and those rows are never stored);
// - the first chunks of weights, scales and biases (constant data) are requested before waiting for the
//   previous kernel (programmatic dependent launch, launch.cuh), so they stream in while it finishes.
// - with kGelu the input is gelu_tanh(x) * x_up, formed while staging (the GeGLU before a down projection:
//   one kernel instead of two, and the same f32 values the gelu_tanh_mul op writes).
// Shared memory: the segment partials ([segments][32] f32), then per warp x_chunks_per_warp(...) chunks of
// staged x; q4_gemv_smem_bytes says how much (q4_gemv_applies: at most 48 KiB).
#pragma once

#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"

namespace lmx::cuda::linear {

constexpr int kGemvTiles = 2;                // 16-row mma tiles per warp
constexpr int kGemvRows = 16 * kGemvTiles;   // weight rows per block

__host__ __device__ constexpr int x_chunks_per_warp(int chunks, int segments) {
  return (chunks + segments - 1) / segments + 1;
}

inline size_t q4_gemv_smem_bytes(const Problem& p) {
  return sizeof(float) * static_cast<size_t>(p.segments) * kGemvRows +
         sizeof(uint32_t) * 64 * static_cast<size_t>(p.segments) * x_chunks_per_warp(p.chunks, p.segments);
}

// Whether q4_gemv_kernel runs this problem (else the generic decode kernel does, without x_up).
inline bool q4_gemv_applies(const Problem& p) {
  return p.format == WeightFormat::kQ4 && p.m == 1 && p.x_vec4 && q4_gemv_smem_bytes(p) <= 48 * 1024;
}

// x_up is a parameter of its own, not a Problem field: with a larger Problem, ptxas gave this kernel 96
// registers instead of 115 and it ran 13 % slower on the H200 (same code otherwise).
template <class Scale, bool kGelu>
__global__ void __launch_bounds__(kMaxSegments * 32) q4_gemv_kernel(const Problem p, const float* x_up) {
  using F = FormatQ4<Scale>;
  constexpr int kTiles = kGemvTiles, kRows = kGemvRows;
  constexpr int kUnroll = 2;  // chunks in flight per warp (8 16-byte loads per lane)
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int segments = blockDim.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int chunk_begin = segment_begin(warp, segments, p.chunks);
  const int chunk_end = segment_begin(warp + 1, segments, p.chunks);
  const int main_end = min(chunk_end, static_cast<int>(p.k / kChunk));  // full chunks of this segment
  float* partial = reinterpret_cast<float*>(smem);                       // [segments][kRows]
  uint32_t* xs = reinterpret_cast<uint32_t*>(partial + segments * kRows) +
                 warp * x_chunks_per_warp(p.chunks, segments) * 64;  // [chunk - chunk_begin][c][16 pairs]

  // Rows (t, h): tile t, half h → weight row row0 + 16 t + 8 h + g (clamped to n - 1).
  const uint32_t* row_w[kTiles][2];
  int64_t row_g[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = min(row0 + 16 * t + 8 * h + g, p.n - 1);
      row_w[t][h] = p.weight + r * p.row_words;
      row_g[t][h] = r * p.groups_per_row;
    }

  uint32_t raw[kUnroll][kTiles][2][4];
  float sc[kUnroll][kTiles][2][1], bi[kUnroll][kTiles][2][1];
  auto load_chunk = [&](int u, int j) {  // this lane's 16 bytes of chunk j of each of its rows
    const int group = (j * kChunk + 32 * c) >> p.group_shift;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 v = load_stream16(reinterpret_cast<const uint4*>(row_w[t][h]) + 4 * j + c);
        raw[u][t][h][0] = v.x, raw[u][t][h][1] = v.y, raw[u][t][h][2] = v.z, raw[u][t][h][3] = v.w;
        sc[u][t][h][0] = load_scale_as<Scale>(p.scales, p.scale_dtype, row_g[t][h] + group);
        bi[u][t][h][0] = load_scale_as<Scale>(p.biases, p.scale_dtype, row_g[t][h] + group);
      }
  };
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (chunk_begin + u < main_end) load_chunk(u, chunk_begin + u);

  wait_for_prior_kernels();
  allow_next_kernel();

  // Stage x: lane (half, c, i) packs columns 32 c + 8 i .. + 7 of one chunk into pairs 4 i .. 4 i + 3
  // (pair 4 i + k = bf16x2(x[32 c + 8 i + k], x[32 c + 8 i + 4 + k]), FormatQ4's pair order, as
  // load_x_pairs builds it); zeros past k.
  {
    const int ci = lane & 15, xc = ci >> 2, i = ci & 3;
    for (int jj = lane >> 4; jj < chunk_end - chunk_begin; jj += 2) {
      const int64_t col = static_cast<int64_t>(chunk_begin + jj) * kChunk + 32 * xc + 8 * i;
      float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
      if (col < p.k) {
        lo = *reinterpret_cast<const float4*>(p.x + col);
        hi = *reinterpret_cast<const float4*>(p.x + col + 4);
        if constexpr (kGelu) {
          const float4 ulo = *reinterpret_cast<const float4*>(x_up + col);
          const float4 uhi = *reinterpret_cast<const float4*>(x_up + col + 4);
          lo = make_float4(detail::gelu_tanh_mul(lo.x, ulo.x), detail::gelu_tanh_mul(lo.y, ulo.y),
                           detail::gelu_tanh_mul(lo.z, ulo.z), detail::gelu_tanh_mul(lo.w, ulo.w));
          hi = make_float4(detail::gelu_tanh_mul(hi.x, uhi.x), detail::gelu_tanh_mul(hi.y, uhi.y),
                           detail::gelu_tanh_mul(hi.z, uhi.z), detail::gelu_tanh_mul(hi.w, uhi.w));
        }
      }
      *reinterpret_cast<uint4*>(xs + jj * 64 + xc * 16 + 4 * i) = make_uint4(
          pack_bf16x2(lo.x, hi.x), pack_bf16x2(lo.y, hi.y), pack_bf16x2(lo.z, hi.z), pack_bf16x2(lo.w, hi.w));
    }
    __syncwarp();
  }

  // One chunk of every tile: the generic kernel's mma sequence per tile.
  auto multiply = [&](const uint32_t (&w)[kTiles][2][4], const float (&s)[kTiles][2][1],
                      const float (&b)[kTiles][2][1], const uint32_t* xj, float (&acc)[kTiles][4]) {
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
  for (int j0 = chunk_begin; j0 < main_end; j0 += kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u;
      if (j < main_end) {
        multiply(raw[u], sc[u], bi[u], xs + (j - chunk_begin) * 64, acc);
        if (j + kUnroll < main_end) load_chunk(u, j + kUnroll);  // the slot is free again
      }
    }
  }
  if (main_end < chunk_end) {  // the ragged last chunk of K: the generic predicated loads (zeros past k)
    const int j = main_end;
    const int k_left = static_cast<int>(p.k - static_cast<int64_t>(j) * kChunk);
    uint32_t tail[kTiles][2][4];
    float ts[kTiles][2][1], tb[kTiles][2][1];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = min(row0 + 16 * t + 8 * h + g, p.n - 1);
        load_weight_raw<F>(row_w[t][h] + static_cast<int64_t>(j) * chunk_words<F>(), c, k_left, true, tail[t][h]);
        load_slot_scales<F>(p, r, true, j, c, k_left, ts[t][h], tb[t][h]);
      }
    multiply(tail, ts, tb, xs + (j - chunk_begin) * 64, acc);
  }

  // Only x row 0 is real: C column 0 lives in lanes c == 0 (rows g and g + 8 of each tile).
  if (c == 0) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      partial[warp * kRows + 16 * t + g] = acc[t][0];
      partial[warp * kRows + 16 * t + g + 8] = acc[t][2];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows; i += blockDim.x) {
    const int64_t row = row0 + i;
    if (row < p.n) {
      float v = partial[i];
      for (int s = 1; s < segments; ++s) v += partial[s * kRows + i];
      p.out[row] = v;
    }
  }
}

}  // namespace lmx::cuda::linear
