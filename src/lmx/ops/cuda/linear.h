// CUDA projections: dense (f32/bf16 weights) and MLX affine-quantized, plus the mixture-of-experts
// routing and expert dispatch. All are lmx's own kernels (linear_tiles.cuh): cuBLAS(Lt) picks its
// kernel and split-K by M, which would break the batch-invariance contract below.
//
// Conventions: see elementwise.h. x is f32 [M, K] with row stride x_stride; out is f32 [M, N] with
// row stride out_stride; accumulation is f32. Tensor-core paths round x to bf16 on the way in.
// Batch invariance: out[m, :] does not depend on M or on the other rows of x (the reduction order of
// an output depends only on the weight's shape); tests check this bit for bit.
#pragma once

#include "lmx/core/dtype.h"
#include "lmx/ops/cuda/context.h"

#include <cstdint>

namespace lmx::cuda {

// A dense weight resident on the device: [batch, rows, cols] (batch = experts, 1 for a plain matrix),
// row-major with contiguous rows (torch nn.Linear layout: rows = output features N, cols = K).
struct DeviceDense {
  const void* data = nullptr;
  DType dtype = DType::kBF16;  // kF32 or kBF16
  int64_t batch = 1, rows = 0, cols = 0;
};

// An MLX affine-quantized weight resident on the device, exactly the checkpoint's layout:
// codes uint32 [batch, rows, cols * bits / 32] (code j of a row at bit j*bits of the row's words,
// little-endian, straddling words for 3/5/6 bits); scales and biases [batch, rows, cols / group_size]
// of scale_dtype (kBF16, kF16 or kF32); w = scale * code + bias.
struct DeviceQuantized {
  const uint32_t* codes = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  DType scale_dtype = DType::kBF16;
  int bits = 4, group_size = 64;
  int64_t batch = 1, rows = 0, cols = 0;
  // Every finite scale is below kSmallScaleLimit in magnitude (the uploader decides it from the host copy:
  // quant::finite_magnitudes_below). 4-bit codes with bf16 scales then dequantize in fewer instructions to
  // the same bits; false is always safe.
  bool small_scales = false;
  // The rows are a GeGLU's gate half then its up half (a stacked gate_up projection, which batch-1 decode
  // reads through the fused GeGLU kernel: a gate and an up tile per warp). Such weights keep longer K
  // segments (linear::kPairMinChunks); a property of the weight, so every path of it sums in the same order.
  bool gate_up_pair = false;
};

// The bound on |scale| for DeviceQuantized::small_scales (s · 2^133 must stay finite in bf16).
constexpr float kSmallScaleLimit = 0x1p-5f;

// What the batch-1 4-bit GEMV chose for one launch (q4_gemv_plan), for tools that list the shapes a model
// runs and their plans (bench/cuda/q4_plans.cpp; the shapes to sweep with the tuning table's
// q4_gemv.shapes). stages 0: the plan does not apply (the generic decode kernel runs).
struct Q4PlanEvent {
  int64_t n = 0, k = 0;
  bool geglu_output = false, gelu_input = false;  // Q4Io::kGegluOutput / kGeluInput
  int pairs = 1;                                  // gathered GEMVs (the MoE decode) in one grid
  int stages = 0, tiles = 0, split = 0;
  int segments = 0, max_segment_chunks = 0;
  int64_t blocks = 0;  // of the grid
};
using Q4PlanObserver = void (*)(const Q4PlanEvent&);
// Installs `observer` (nullptr: none), called on the host for every batch-1 4-bit GEMV launch (during graph
// capture too) from the thread that launches it. Not thread-safe against running ops.
void set_q4_plan_observer(Q4PlanObserver observer);

// out = x · Wᵀ for a dense weight (batch must be 1).
void dense_linear(const float* x, int64_t x_stride, int64_t m, const DeviceDense& w, float* out,
                  int64_t out_stride, CudaContext& ctx);

// out = x · Wᵀ for a quantized weight (batch must be 1); every bits value 2, 3, 4, 5, 6, 8 and group
// 32/64/128; fast paths for 4 and 8 bits (decode: near HBM bandwidth; prefill: tensor cores).
void quantized_linear(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                      int64_t out_stride, CudaContext& ctx);

// out = (gelu_tanh(gate) * up) · Wᵀ, the GeGLU before a down projection: one kernel at batch 1 with
// 4-bit weights (the product is formed while the GEMV stages its input); on the prefill path (M above
// linear::decode_max_rows()) the product is formed while x is converted to the GEMM's bf16 tiles; else
// gelu_tanh_mul into gate and quantized_linear. Bit-identical to those two ops every way; gate's contents
// afterwards are unspecified.
void quantized_linear_gelu(float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t m,
                           const DeviceQuantized& w, float* out, int64_t out_stride, CudaContext& ctx);

// The MLP's stacked gate/up projection and its GeGLU in one kernel, where that is faster than the GeGLU
// formed by the down projection (quantized_linear_gelu). With W = [gate; up] ([2I, K], I = W.rows / 2):
// out[0, i] = gelu_tanh(gate_i(x)) * up_i(x) for i < I — the bits of quantized_linear into out followed by
// gelu_tanh_mul into its first I columns; out[0, I, 2I) is left unwritten. The kernel pairs gate rows with
// the matching up rows in each block, so it applies at batch 1 with 4-bit codes, an even row count and
// I >= the tuning table's q4_gemv.geglu_min_rows (below that its I / 16 blocks leave the GPU short of work).
// Returns false, having enqueued nothing, when it does not apply.
bool quantized_linear_geglu(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                            CudaContext& ctx);

// out[t, :] = dequantized row ids[t] of a quantized [vocab, dim] table, times scale.
void quantized_embedding(const DeviceQuantized& table, const int32_t* ids, int64_t count, float scale,
                         float* out, int64_t out_stride, cudaStream_t stream);

// MoE routing (ops::moe_route's contract): p = softmax(logits[t, :E]); top-k (ties → lower index);
// renormalise to sum 1; multiply by per_expert_scale[e] (f32 [E] or nullptr). experts [T, k] int32
// and weights [T, k] f32, each row by descending probability.
void moe_route(const float* logits, int64_t tokens, int num_experts, int top_k, const float* per_expert_scale,
               int32_t* experts, float* weights, cudaStream_t stream);

// The MoE block's input norms in one kernel. With r = rms_norm(x[t]) (no weight): routed[t] = (r ·
// router_scale) · router_mul (the router's input) and expert_in[t] = r · expert_norm. The bits of rms_norm,
// mul_rows, scale and rms_norm run in that order (for 16-byte aligned buffers; otherwise up to the order of
// the f32 sum of squares). Weights may be nullptr (none); x, routed and expert_in are contiguous [tokens,
// hidden] and must not alias.
void moe_inputs(const float* x, int64_t tokens, int hidden, const float* router_scale, float router_mul,
                const float* expert_norm, float eps, float* routed, float* expert_in, cudaStream_t stream);

// The MoE block's output norms, run by the expert dispatch in place of its plain combine. With e[t] the
// experts' sum (the contract below) and d[t] = dense_out[t] (the dense MLP's output, contiguous [T, H]):
//   out[t] = rms_norm(e[t]) · expert_norm,   dense_out[t] = rms_norm(d[t]) · dense_norm + out[t]
// — the bits of the plain dispatch followed by rms_norm, rms_norm and add (for 16-byte aligned buffers;
// otherwise up to the order of the f32 sums of squares). Weights may be nullptr (none).
struct MoeOutputNorms {
  float* dense_out = nullptr;
  const float* dense_norm = nullptr;   // f32 [H]
  const float* expert_norm = nullptr;  // f32 [H]
  float eps = 1e-6f;
};

// Expert dispatch (ops::moe_experts's contract): out[t] = Σ_j weights[t,j] * down_e(gelu_tanh(gate_e(x[t])) *
// up_e(x[t])), e = experts[t, j], the sum over j in the row's order. Quantized experts: gate_up [E, 2I, H]
// (expert e's I gate rows, then its I up rows: MLX switch_glu's gate and up stacks joined per expert at
// upload, join_expert_rows), down [E, H, I]; the projections on tensor cores with linear_tiles.cuh's
// numerics (bf16 operands, f32 sums). x [T, H] f32 contiguous, out [T, H].
// Expert ids are read from device memory (graph-safe); tokens are grouped by expert on the device.
// ids_early: the caller wrote `experts` at least two kernel launches before this call, so the decode kernel
// may read them (and start fetching the experts' weights) before waiting for the previous kernel
// (launch.cuh).
void quantized_moe_experts(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                           int top_k, const DeviceQuantized& gate_up, const DeviceQuantized& down, float* out,
                           CudaContext& ctx, const MoeOutputNorms* norms = nullptr, bool ids_early = false);
// Tokens per pass of the expert dispatch for a call of `tokens` tokens: a call runs in passes (grouping,
// gate/up, down, combine each), as many tokens each as keep a pass's activations (the gate/up output
// [pairs, 2I] and the down output [pairs, H], f32) within kMoePassBytes, but at least kMoeMinPassPairs /
// top_k and at most kMoeMaxPassPairs / top_k, split evenly over the passes that takes. Large passes fill the
// prefill GEMM's 128-pair tiles: 128 experts at top 8 have 128 pairs per expert at 2048 tokens in one pass,
// where passes of 4096 pairs left 32 (26B-A4B prefill +58 % on the H200). Tokens are independent, so passes
// change no bits. The tuning table's moe.pass_pairs = N makes passes of at most N pairs instead (4096 was the
// fixed size before).
constexpr int64_t kMoePassBytes = int64_t{512} << 20;
constexpr int64_t kMoeMinPassPairs = 4096, kMoeMaxPassPairs = 32768;
int64_t moe_pass_tokens(int64_t tokens, int top_k, int64_t hidden, int64_t inter);
// The same rule with `pass_pairs` in place of the table's (0: by activation bytes).
int64_t moe_pass_tokens(int64_t tokens, int top_k, int64_t hidden, int64_t inter, int64_t pass_pairs);
// Same for dense experts: gate_up [E, 2I, H] (first I rows gate, next I rows up), down [E, H, I].
void dense_moe_experts(const float* x, int64_t tokens, const int32_t* experts, const float* weights,
                       int top_k, const DeviceDense& gate_up, const DeviceDense& down, float* out,
                       CudaContext& ctx, const MoeOutputNorms* norms = nullptr);

}  // namespace lmx::cuda
