// dense_linear (linear.h). bf16 weights (k % 8 == 0, 16-byte aligned) run the tensor-core projections of
// linear_tiles.cuh — the same kernels as the quantized weights, so the same batch invariance by
// construction (cuBLASLt is not used: its heuristics pick kernels and split-K by M, and a pinned
// large-tile algorithm would leave decode far from bandwidth). f32 weights, and bf16 weights that do not
// fit the 16-byte layout, use an exact f32 CUDA-core kernel: one fmaf chain per output, k ascending.
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/linear_tiles.cuh"

#include <cuda_bf16.h>

namespace lmx::cuda {
namespace {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

// out[m, n] = fmaf chain over k = 0, 1, .. of x[m, k] * w[n, k]; 64 weight rows x 32 x rows per block,
// k in tiles of 32 through shared memory; each thread 4 rows x 2 x rows.
template <class W>
__global__ void __launch_bounds__(256) dense_f32_kernel(const float* x, int64_t x_stride, int64_t m, const W* w,
                                                        int64_t n, int64_t k, float* out, int64_t out_stride) {
  wait_for_prior_kernels();
  allow_next_kernel();
  constexpr int kRows = 64, kTokens = 32, kDepth = 32;
  __shared__ float ws[kDepth][kRows + 1];
  __shared__ float xs[kDepth][kTokens + 1];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows, tok0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  float acc[4][2] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
#pragma unroll
    for (int it = 0; it < kRows * kDepth / 256; ++it) {
      const int i = tid + it * 256, r = i / kDepth, kk = i % kDepth;
      const int64_t row = row0 + r, col = k0 + kk;
      ws[kk][r] = row < n && col < k ? widen(w[row * k + col]) : 0.0f;
    }
#pragma unroll
    for (int it = 0; it < kTokens * kDepth / 256; ++it) {
      const int i = tid + it * 256, r = i / kDepth, kk = i % kDepth;
      const int64_t token = tok0 + r, col = k0 + kk;
      xs[kk][r] = token < m && col < k ? x[token * x_stride + col] : 0.0f;
    }
    __syncthreads();
    const int depth = k - k0 < kDepth ? static_cast<int>(k - k0) : kDepth;
    for (int kk = 0; kk < depth; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) acc[i][j] = fmaf(xs[kk][ty + 16 * j], ws[kk][tx + 16 * i], acc[i][j]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t row = row0 + tx + 16 * i, token = tok0 + ty + 16 * j;
      if (row < n && token < m) out[token * out_stride + row] = acc[i][j];
    }
}

}  // namespace

void dense_linear(const float* x, int64_t x_stride, int64_t m, const DeviceDense& w, float* out, int64_t out_stride,
                  CudaContext& ctx) {
  LMX_REQUIRE(InvalidArgument, w.dtype == DType::kF32 || w.dtype == DType::kBF16,
              "dense_linear: weight dtype must be f32 or bf16");
  LMX_REQUIRE(InvalidArgument, w.batch == 1, "dense_linear: weight batch must be 1, got {}", w.batch);
  LMX_REQUIRE(InvalidArgument, m >= 0 && w.rows >= 0 && w.cols >= 0 && x_stride >= w.cols && out_stride >= w.rows,
              "dense_linear: M {} with x stride {} (K {}) and out stride {} (N {})", m, x_stride, w.cols, out_stride,
              w.rows);
  if (m == 0 || w.rows == 0) return;
  cudaStream_t stream = ctx.stream();
  if (w.cols == 0) {
    LMX_CUDA_CHECK(cudaMemset2DAsync(out, static_cast<size_t>(out_stride) * sizeof(float), 0,
                                     static_cast<size_t>(w.rows) * sizeof(float), static_cast<size_t>(m), stream));
    return;
  }
  if (w.dtype == DType::kBF16 && w.cols % 8 == 0 && detail::aligned16(w.data)) {
    linear::Problem p;
    p.format = linear::WeightFormat::kDenseBf16;
    p.bits = 16;
    p.weight = static_cast<const uint32_t*>(w.data);
    p.n = w.rows;
    p.k = w.cols;
    p.row_words = w.cols / 2;
    p.x = x;
    p.x_stride = x_stride;
    p.m = m;
    p.out = out;
    p.out_stride = out_stride;
    linear::run(p, ctx);
    return;
  }
  const dim3 grid(static_cast<unsigned>((m + 31) / 32), static_cast<unsigned>((w.rows + 63) / 64));
  if (w.dtype == DType::kF32)
    launch(dense_f32_kernel<float>, grid, 256, 0, stream, x, x_stride, m, static_cast<const float*>(w.data), w.rows,
        w.cols, out, out_stride);
  else
    launch(dense_f32_kernel<__nv_bfloat16>, grid, 256, 0, stream, x, x_stride, m,
        static_cast<const __nv_bfloat16*>(w.data), w.rows, w.cols, out, out_stride);
}

}  // namespace lmx::cuda
