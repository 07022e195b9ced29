// CUDA elementwise, normalisation, position, embedding and sampling ops on f32 activations.
//
// Conventions (the CUDA op set mirrors lmx/ops/ops.h; each op's numerics are those of its CPU twin
// up to f32 rounding order, unless a comment says otherwise):
// - Pointers are device pointers; activations are f32; "stride" arguments count elements between
//   consecutive rows. Small parameter vectors (norm weights, inv_freq, router scales) are f32.
// - Every op is enqueued on `stream` and never synchronises, so a sequence of ops can be captured
//   into a CUDA graph. Launch errors are checked (CudaError); sizes of 0 rows are a no-op.
// - Index arguments (ids, positions) are validated by the caller on the host before upload.
#pragma once

#include "lmx/core/dtype.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda {

// out[r, :] = x[r, :] * (1 / sqrt(mean(x[r, :]²) + eps)) * weight (weight f32 [dim], or none when nullptr).
// Σx² accumulated in f32 (block reduction). out may alias x (same stride).
void rms_norm(const float* x, int64_t x_stride, float* out, int64_t out_stride, int64_t rows, int dim,
              const float* weight, float eps, cudaStream_t stream);

// The residual step between transformer sub-layers, fused into one kernel. For every row r of the
// contiguous [rows, dim] buffers: x[r] = (x[r] + rms_norm(a[r]) · a_weight) · scale, then, unless
// normed is nullptr, normed[r] = rms_norm(x[r]) · normed_weight. Each step rounds like rms_norm, add
// and scale run in that order (scale == 1 multiplies nothing); weights may be nullptr (none); a is
// left unchanged and must not alias x or normed.
void residual_norm(float* x, const float* a, const float* a_weight, float scale, float* normed,
                   const float* normed_weight, int64_t rows, int dim, float eps, cudaStream_t stream);
// The threads per row with which residual_norm runs a row of `dim` columns whose buffers allow 16-byte loads:
// thread i holds float4 columns i + j · threads (j < 4) and the sums of squares go through detail::block_sum.
// 0 when such rows take the wide kernel instead. Fused kernels that take a residual step reproduce its bits
// with this schedule (per_layer_input.cu).
int residual_norm_float4_threads(int dim);

// Rotate-half RoPE in place. Head h of token t starts at x + t * token_stride + h * head_dim.
// angle = float(positions[t]) * inv_freq[i] (f32), cosf/sinf; pairs (i, i + head_dim/2); pairs whose
// inv_freq is 0 are left unchanged. positions [tokens] int32, inv_freq [head_dim / 2] f32.
void rope(float* x, int64_t token_stride, int64_t tokens, int heads, int head_dim, const int32_t* positions,
          const float* inv_freq, cudaStream_t stream);

// out[r, c] = gelu_tanh(gate[r, c]) * up[r, c]; out may alias gate or up.
void gelu_tanh_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
                   int64_t out_stride, int64_t rows, int64_t cols, cudaStream_t stream);
// x = gelu_tanh(x) over n contiguous elements.
void gelu_tanh(float* x, int64_t n, cudaStream_t stream);
// x = cap * tanh(x / cap).
void softcap(float* x, int64_t n, float cap, cudaStream_t stream);
// out += a (n elements).
void add(float* out, const float* a, int64_t n, cudaStream_t stream);
// x *= s.
void scale(float* x, int64_t n, float s, cudaStream_t stream);
// x[r, c] *= y[r, c] (y with x's shape, contiguous rows of `cols`).
void mul(float* x, const float* y, int64_t n, cudaStream_t stream);
// x[r, c] *= y[c] (broadcast of one row over `rows` contiguous rows of `cols`).
void mul_rows(float* x, const float* y, int64_t rows, int64_t cols, cudaStream_t stream);

// out[t, :] = float(table[ids[t], :]) * scale for a dense table of `dtype` (kF32 or kBF16) [vocab, dim]
// with contiguous rows; out contiguous [count, dim] with row stride out_stride.
void embedding(const void* table, DType dtype, int64_t dim, const int32_t* ids, int64_t count, float scale,
               float* out, int64_t out_stride, cudaStream_t stream);

// out[r] = index of the first maximum of x[r, 0:cols] (NaN never wins unless all are NaN → 0).
// With `partials` of at least argmax_partials_bytes(rows, cols) bytes (0 for narrow rows: then none is needed),
// wide rows are split over many blocks and merged by a second kernel (same results; a 262144-column row in one
// block reads at a few tens of GB/s).
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream,
                 void* partials = nullptr, size_t partials_bytes = 0);
size_t argmax_partials_bytes(int64_t rows, int64_t cols);

// Copies `rows` rows of `cols` f32 between strided buffers (a device-side gather of row views).
void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols,
               cudaStream_t stream);

}  // namespace lmx::cuda
