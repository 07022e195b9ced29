// The CUDA backend's exactness reference (f32 KV cache): ops that compute in f32 throughout — no bf16
// rounding of matmul inputs, keys, values or probabilities — so that the GPU matches transformers' f32
// logits as closely as the CPU does. Simple CUDA-core kernels: correctness, not speed.
#pragma once

#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/linear.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda {

// out[m, n] = Σ_k x[m, k] · w[n, k] as one f32 fmaf chain per output in k order, w dequantized as
// fma(scale, code, bias) (quantized, any bits and group) or widened (dense f32 / bf16 / f16-free).
void exact_linear(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                  int64_t out_stride, cudaStream_t stream);
void exact_linear(const float* x, int64_t x_stride, int64_t m, const DeviceDense& w, float* out,
                  int64_t out_stride, cudaStream_t stream);

// ops::moe_experts' contract in f32: out[t] = Σ_j weights[t, j] · down_e(gelu_tanh(gate_e x[t]) · up_e x[t]),
// j in the row's order from 0. gate_up [E, 2I, H] (expert e's gate rows then its up rows), down [E, H, I],
// both quantized or both dense. x, out [T, H] contiguous.
void exact_moe_experts(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                       int top_k, const DeviceQuantized* gate_up_q, const DeviceDense* gate_up_d,
                       const DeviceQuantized* down_q, const DeviceDense* down_d, float* out,
                       cudaStream_t stream);

// rms_norm of every head (head_dim wide) of x [T, heads · head_dim] (row stride x_stride) in place; weight
// f32 [head_dim] or null.
void head_norm(float* x, int64_t x_stride, int64_t tokens, int heads, int head_dim, const float* weight,
               float eps, cudaStream_t stream);

// One cache layer's keys or values in f32 paged storage (PagedStore's layout with f32 rows).
// Appends token t's k and v rows ([T, kv_heads · head_dim], strides) at position q_pos[t] of row q_seq[t].
void kv_append_f32(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                   int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
                   const PagedStore& k_store, const PagedStore& v_store, cudaStream_t stream);
// Attention over f32 paged keys and values (AttentionBatch's contract; batch.k / batch.v address f32 rows):
// scores, softmax and P·V in f32 (online softmax per query head, keys in position order).
void exact_attention(const AttentionBatch& batch, cudaStream_t stream);

}  // namespace lmx::cuda
