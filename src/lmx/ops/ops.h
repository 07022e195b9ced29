// The CPU op set the model code calls: linear, norms, RoPE, activations, attention, MoE, sampling helpers.
//
// Conventions for every op here:
// - Activations are float32 tensors; weights are f32 or bf16 (row-major [N, K], like torch
//   nn.Linear.weight). All arithmetic is f32 unless a comment says otherwise.
// - "Rows" inputs (x of linear, rms_norm, softmax, gelu_tanh_mul, moe ops) are contiguous, or 2-D
//   views whose last dim is contiguous (free row stride, e.g. a column window of a fused buffer).
// - Output tensors passed by reference are either undefined (the op allocates them with the
//   documented shape) or already f32 (int32 where stated) contiguous tensors with that element count
//   and last dimension (rms_norm and gelu_tanh_mul also take row views, so they may work in place);
//   anything else is an InvalidArgument naming the op and the shapes.
// - Ops split large work over lmx::default_pool(); no result depends on the thread count.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/ops/paged_kv.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lmx::ops {

// ---- Dense projections -------------------------------------------------------------------------------

// out[M, N] = x[M, K] · w[N, K]ᵀ; x f32 rows [.., K] (leading dims flatten into M); w f32 or bf16
// [N, K] with contiguous rows; accumulation in f32. out gets x's leading shape with last dim N.
// Contract (batch invariance): out[m, n] is bit-identical whatever M, m, the other rows of x and the
// thread count — its reduction order depends only on K (and on the SIMD target chosen at start-up).
void linear(const Tensor& x, const Tensor& w, Tensor& out);
Tensor linear(const Tensor& x, const Tensor& w);

// ---- Normalisation and position ----------------------------------------------------------------------

// Row-wise RMSNorm over the last dim D of x [.., D]: y = x * (mean(x²) + eps)^-0.5 * w, with w f32/bf16
// [D] or no weight when `weight` is nullptr. Σx² is accumulated in double, then mean, rsqrt and the
// products are f32 (x * inv first, then * w, as transformers does). In place allowed (out may alias x).
void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out);

// Rotary embedding in place on x [T, H, D] f32 (last dim contiguous; other strides free). Rotate-half
// pairing: element i pairs with i + D/2 for i < D/2; angle = float(positions[t]) * inv_freq[i] in f32,
// then cosf/sinf of that f32 angle:
//   x'[i] = x[i]*cos - x[i+D/2]*sin ; x'[i+D/2] = x[i+D/2]*cos + x[i]*sin.
// inv_freq has D/2 entries; pairs whose inv_freq is 0 are left bit-unchanged.
void apply_rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq);

// inv_freq for head dim D, base theta and rotated pair count P (0 ≤ P ≤ D/2): inv_freq[i] =
// 1 / theta^(2i/D) for i < P, 0 beyond. Default RoPE: P = D/2; Gemma 4 "proportional":
// P = int(partial_rotary_factor * D / 2) (the exponent still divides by the full D).
// Replicates transformers' f32 arithmetic: e = float(2i) / float(D) (f32 division),
// inv = 1.0f / powf(float(theta), e). (torch's vectorised pow may differ from glibc powf by an ulp.)
// Any rope `factor` division is the caller's.
std::vector<float> rope_inv_freq(int head_dim, double theta, int rotated_pairs);

// ---- Elementwise -------------------------------------------------------------------------------------

// GELU with tanh approximation, in place: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715x³))), f32.
void gelu_tanh(Tensor& x);
// out[M, I] = gelu_tanh(gate[M, I]) * up[M, I] (same shapes; out may alias gate or up).
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out);
// In-place softmax over the last dim, f32, max-subtracted: exp(x - max) * (1 / Σ).
void softmax(Tensor& x);
// In place x = cap * tanh(x / cap).
void softcap(Tensor& x, float cap);
// out += a. `a` has out's element count, or is a vector of out's last dim (broadcast over rows).
void add_inplace(Tensor& out, const Tensor& a);
// x *= s.
void scale_inplace(Tensor& x, float s);
// x *= y. `y` has x's element count, or is a vector of x's last dim (broadcast over rows).
void mul_inplace(Tensor& x, const Tensor& y);

// ---- Embedding ---------------------------------------------------------------------------------------

// out[T, D] = table[ids[t], :] * scale (f32 multiply of the widened value); table f32 or bf16 [V, D].
// An id outside [0, V) is an InvalidArgument naming the id and its index. (transformers rounds the
// Gemma embedding scale to the weight dtype first: pass the rounded value to match it.)
void embedding(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out);

// ---- Attention ---------------------------------------------------------------------------------------

// Attention for one sequence: q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv], f32, each with a
// contiguous last dim (other strides free, so views into larger buffers work). Query head h uses kv
// head h / (Hq / Hkv). Key j is visible to query i iff k_pos[j] <= q_pos[i] and
// (window <= 0 || q_pos[i] - k_pos[j] < window). Scores are scale * (q·k); softmax in f32,
// max-subtracted; out[i, h] = Σ_j p_j v_j / Σ_j p_j over visible j in storage order.
// A query with no visible key gets zeros. Tokens may come in any order (positions decide visibility).
// A query's output does not depend on the other queries in the call. out [Tq, Hq, Dv].
void attention(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const int32_t> q_pos,
               std::span<const int32_t> k_pos, int window, float scale, Tensor& out);

// Attention of one sequence's queries q [Tq, Hq, D] (last dim contiguous) over its paged KV (paged_kv.h):
// the keys are the stored positions, in order. Same contract as attention() — and the same bits, for
// f32 storage, as attention() over those keys gathered contiguously with their positions; bf16 keys and
// values are widened exactly. out [Tq, Hq, D].
void paged_attention(const Tensor& q, const PagedKvRow& kv, std::span<const int32_t> q_pos, int window,
                     float scale, Tensor& out);

// A step's paged KV on the host (PagedKvStep / PagedKvLayer with host pointers). k and v [T, kv_heads ·
// head_dim] rows: token t's key and value are stored at position q_pos[t] of row q_row[t], in the layer's
// element type (bf16: round to nearest even).
void paged_kv_append(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& k, const Tensor& v);
// Attention of the step's queries q [T, heads · head_dim] rows over each row's stored keys (paged_attention
// per row); out [T, heads · head_dim], contiguous.
void paged_attention(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& q, float scale,
                     Tensor& out);

// ---- Mixture of experts ------------------------------------------------------------------------------

// MoE routing from router logits [T, E] (f32): p = softmax(logits) in f32; top-k (ties → lower index);
// renormalise the k probabilities to sum 1 (sequential f32 sum, divide); multiply by
// per_expert_scale[e] (f32/bf16 [E], or nullptr). Writes experts [T, k] (int32) and weights [T, k]
// (f32), each row sorted by descending probability (ties: lower expert first).
void moe_route(const Tensor& router_logits, int top_k, const Tensor* per_expert_scale, Tensor& experts,
               Tensor& weights);

// Expert dispatch: out[t] = Σ_j weights[t,j] * down_e(gelu_tanh(gate_e(x[t])) * up_e(x[t])) with
// e = experts[t,j]; x [T, H] f32; gate_up [E, 2I, H] (first I rows = gate, next I rows = up);
// down [E, H, I]; f32/bf16 weights; experts [T, k] int32 (each in [0, E)), weights [T, k] f32.
// Tokens are grouped by expert so each expert's weights are read once per call. Contract: a token's
// output is bit-identical whatever the other tokens in the call (the sum over j runs in the order of
// the row's experts, starting from 0, one multiply and one add per term). out [T, H].
void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const Tensor& gate_up,
                 const Tensor& down, Tensor& out);

// ---- Introspection -----------------------------------------------------------------------------------

// The SIMD target the kernels dispatch to on this CPU (e.g. "AVX3_SPR"), and every target that is
// both compiled in and supported here, best first.
std::string simd_target_name();
std::vector<std::string> simd_target_names();

// ---- Sampling helpers --------------------------------------------------------------------------------

// Index of the first maximum of a non-empty row (NaNs are never the maximum unless all are NaN → 0).
int argmax(std::span<const float> row);

}  // namespace lmx::ops
