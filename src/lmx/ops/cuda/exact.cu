// The exactness-reference kernels (exact.h): f32 CUDA-core linear, MoE experts, head norms and attention
// over f32 paged KV.
#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/exact.h"
#include "lmx/ops/cuda/launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

namespace lmx::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float widen(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// Element (row, col) of matrix `batch` of a quantized stack, dequantized.
__device__ __forceinline__ float quantized_at(const DeviceQuantized& w, int64_t batch, int64_t row,
                                              int64_t col) {
  const int64_t r = batch * w.rows + row;
  const int64_t words = w.cols * w.bits / 32;
  const uint32_t* codes = w.codes + r * words;
  const int64_t bit = col * w.bits;
  const int64_t word = bit / 32;
  const int shift = static_cast<int>(bit % 32);
  uint64_t v = codes[word] >> shift;
  if (shift + w.bits > 32) v |= static_cast<uint64_t>(codes[word + 1]) << (32 - shift);
  const float code = static_cast<float>(v & ((uint64_t{1} << w.bits) - 1));
  const int64_t g = r * (w.cols / w.group_size) + col / w.group_size;
  return fmaf(widen(w.scales, w.scale_dtype, g), code, widen(w.biases, w.scale_dtype, g));
}

__device__ __forceinline__ float dense_at(const DeviceDense& w, int64_t batch, int64_t row, int64_t col) {
  return widen(w.data, w.dtype, (batch * w.rows + row) * w.cols + col);
}

template <class W>
__global__ void linear_kernel(const float* x, int64_t x_stride, int64_t m, W w, float* out,
                              int64_t out_stride) {
  wait_for_prior_kernels();
  const int64_t total = m * w.rows;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / w.rows, n = i % w.rows;
    float acc = 0.0f;
    for (int64_t k = 0; k < w.cols; ++k) {
      float wk;
      if constexpr (std::is_same_v<W, DeviceQuantized>)
        wk = quantized_at(w, 0, n, k);
      else
        wk = dense_at(w, 0, n, k);
      acc = fmaf(x[row * x_stride + k], wk, acc);
    }
    out[row * out_stride + n] = acc;
  }
}

// One block per token: for each of its experts in order, gate/up into shared memory, then the down
// projection added to the token's output.
__global__ void moe_kernel(const float* x, int64_t hidden, int64_t inter, const int32_t* experts,
                           const float* weights, int top_k, bool quantized, DeviceQuantized gq,
                           DeviceDense gd, DeviceQuantized dq, DeviceDense dd, float* out) {
  wait_for_prior_kernels();
  extern __shared__ float act[];  // [inter]
  const int64_t t = blockIdx.x;
  const float* xr = x + t * hidden;
  float* orow = out + t * hidden;
  for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) orow[h] = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    const int e = experts[t * top_k + j];
    const float weight = weights[t * top_k + j];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < inter; i += blockDim.x) {
      float gate = 0.0f, up = 0.0f;
      for (int64_t k = 0; k < hidden; ++k) {
        const float g = quantized ? quantized_at(gq, e, i, k) : dense_at(gd, e, i, k);
        const float u = quantized ? quantized_at(gq, e, inter + i, k) : dense_at(gd, e, inter + i, k);
        gate = fmaf(xr[k], g, gate);
        up = fmaf(xr[k], u, up);
      }
      act[i] = detail::gelu_tanh_mul(gate, up);
    }
    __syncthreads();
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
      float y = 0.0f;
      for (int64_t i = 0; i < inter; ++i)
        y = fmaf(act[i], quantized ? quantized_at(dq, e, h, i) : dense_at(dd, e, h, i), y);
      orow[h] = orow[h] + weight * y;
    }
  }
}

// One warp per (token, head).
__global__ void head_norm_kernel(float* x, int64_t x_stride, int64_t tokens, int heads, int head_dim,
                                 const float* weight, float eps) {
  wait_for_prior_kernels();
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= tokens * heads) return;
  float* row = x + (warp / heads) * x_stride + (warp % heads) * head_dim;
  float sum = 0.0f;
  for (int i = lane; i < head_dim; i += 32) sum = fmaf(row[i], row[i], sum);
  sum = detail::warp_sum(sum);
  const float inv = rsqrtf(sum / static_cast<float>(head_dim) + eps);
  for (int i = lane; i < head_dim; i += 32) {
    const float v = row[i] * inv;
    row[i] = weight != nullptr ? v * weight[i] : v;
  }
}

__device__ __forceinline__ float* f32_row(const PagedStore& s, int seq, int pos, int64_t row_elems) {
  const int block = pos / s.block_tokens;
  char* base = static_cast<char*>(
      const_cast<void*>(s.blocks[static_cast<int64_t>(seq) * s.stride + block - s.first_block[seq]]));
  return reinterpret_cast<float*>(base + s.offset) +
         static_cast<int64_t>(pos - block * s.block_tokens) * row_elems;
}

__global__ void append_f32_kernel(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                                  int64_t tokens, int row_elems, const int32_t* q_pos, const int32_t* q_seq,
                                  PagedStore ks, PagedStore vs) {
  wait_for_prior_kernels();
  const int64_t total = tokens * row_elems;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / row_elems;
    const int e = static_cast<int>(i % row_elems);
    f32_row(ks, q_seq[t], q_pos[t], row_elems)[e] = k[t * k_stride + e];
    f32_row(vs, q_seq[t], q_pos[t], row_elems)[e] = v[t * v_stride + e];
  }
}

// One warp per (token, query head): online softmax over the visible keys in position order; each lane keeps
// head_dim / 32 output columns (head_dim ≤ 512).
__global__ void attention_f32_kernel(AttentionBatch b) {
  wait_for_prior_kernels();
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= b.tokens * b.heads) return;
  const int64_t t = warp / b.heads;
  const int h = static_cast<int>(warp % b.heads), kvh = h / (b.heads / b.kv_heads);
  const int seq = b.q_seq[t], pos = b.q_pos[t];
  const int64_t row_elems = static_cast<int64_t>(b.kv_heads) * b.head_dim;
  const float* q = b.q + t * b.q_stride + static_cast<int64_t>(h) * b.head_dim;
  constexpr int kMaxPerLane = 16;
  float acc[kMaxPerLane] = {};
  float m = -INFINITY, l = 0.0f;
  const int kv_len = b.kv_len[seq];
  const int last = min(pos, kv_len - 1);
  const int first = b.window > 0 ? max(0, pos - b.window + 1) : 0;
  for (int j = first; j <= last; ++j) {
    const float* kr = f32_row(b.k, seq, j, row_elems) + static_cast<int64_t>(kvh) * b.head_dim;
    float s = 0.0f;
    for (int i = lane; i < b.head_dim; i += 32) s = fmaf(q[i], kr[i], s);
    s = detail::warp_sum(s) * b.scale;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new), p = expf(s - m_new);
    const float* vr = f32_row(b.v, seq, j, row_elems) + static_cast<int64_t>(kvh) * b.head_dim;
    for (int c = 0; c < kMaxPerLane; ++c) {
      const int i = lane + 32 * c;
      if (i < b.head_dim) acc[c] = fmaf(p, vr[i], acc[c] * alpha);
    }
    l = l * alpha + p;
    m = m_new;
  }
  float* o = b.out + (t * b.heads + h) * static_cast<int64_t>(b.head_dim);
  for (int c = 0; c < kMaxPerLane; ++c) {
    const int i = lane + 32 * c;
    if (i < b.head_dim) o[i] = l > 0.0f ? acc[c] / l : 0.0f;
  }
}

unsigned warps_grid(int64_t warps) {
  return detail::grid_blocks(warps * 32, kThreads, int64_t{1} << 30);
}

}  // namespace

void exact_linear(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                  int64_t out_stride, cudaStream_t stream) {
  if (m <= 0 || w.rows <= 0) return;
  launch(linear_kernel<DeviceQuantized>, detail::grid_blocks(m * w.rows, kThreads), kThreads, 0, stream, x,
         x_stride, m, w, out, out_stride);
}

void exact_linear(const float* x, int64_t x_stride, int64_t m, const DeviceDense& w, float* out,
                  int64_t out_stride, cudaStream_t stream) {
  if (m <= 0 || w.rows <= 0) return;
  LMX_REQUIRE(InvalidArgument, w.dtype == DType::kF32 || w.dtype == DType::kBF16,
              "exact_linear: weight dtype");
  launch(linear_kernel<DeviceDense>, detail::grid_blocks(m * w.rows, kThreads), kThreads, 0, stream, x,
         x_stride, m, w, out, out_stride);
}

void exact_moe_experts(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                       int top_k, const DeviceQuantized* gate_up_q, const DeviceDense* gate_up_d,
                       const DeviceQuantized* down_q, const DeviceDense* down_d, float* out,
                       cudaStream_t stream) {
  if (tokens <= 0) return;
  const int64_t hidden = down_q ? down_q->rows : down_d->rows, inter = down_q ? down_q->cols : down_d->cols;
  const size_t smem = static_cast<size_t>(inter) * sizeof(float);
  LMX_REQUIRE(InvalidArgument, smem <= 48 * 1024, "exact_moe_experts: {} expert columns exceed shared memory",
              inter);
  const bool quantized = gate_up_q != nullptr && down_q != nullptr;
  LMX_REQUIRE(InvalidArgument, quantized || (gate_up_d != nullptr && down_d != nullptr),
              "exact_moe_experts: gate_up and down must both be quantized or both dense");
  launch(moe_kernel, static_cast<unsigned>(tokens), kThreads, smem, stream, x, hidden, inter, experts,
         weights, top_k, quantized, quantized ? *gate_up_q : DeviceQuantized{},
         quantized ? DeviceDense{} : *gate_up_d, quantized ? *down_q : DeviceQuantized{},
         quantized ? DeviceDense{} : *down_d, out);
}

void head_norm(float* x, int64_t x_stride, int64_t tokens, int heads, int head_dim, const float* weight,
               float eps, cudaStream_t stream) {
  if (tokens <= 0) return;
  launch(head_norm_kernel, warps_grid(tokens * heads), kThreads, 0, stream, x, x_stride, tokens, heads,
         head_dim, weight, eps);
}

void kv_append_f32(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                   int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
                   const PagedStore& k_store, const PagedStore& v_store, cudaStream_t stream) {
  if (tokens <= 0) return;
  const int row_elems = kv_heads * head_dim;
  launch(append_f32_kernel, detail::grid_blocks(tokens * row_elems, kThreads), kThreads, 0, stream, k,
         k_stride, v, v_stride, tokens, row_elems, q_pos, q_seq, k_store, v_store);
}

void exact_attention(const AttentionBatch& batch, cudaStream_t stream) {
  if (batch.tokens <= 0) return;
  LMX_REQUIRE(InvalidArgument, batch.head_dim <= 512 && batch.heads % batch.kv_heads == 0,
              "exact_attention: head_dim {} (at most 512), heads {} / kv heads {}", batch.head_dim,
              batch.heads, batch.kv_heads);
  launch(attention_f32_kernel, warps_grid(batch.tokens * batch.heads), kThreads, 0, stream, batch);
}

}  // namespace lmx::cuda
