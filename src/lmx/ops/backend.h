// The op set a model family's forward is written against, once, for every backend (CPU, CUDA). A backend
// owns its memory (weights, step buffers, KV blocks), implements the plain ops, and may implement fused
// ops: a fused op returns false, having done nothing, where the backend has no fused form for its
// operands, and the model then runs the plain ops its contract names. Ops are enqueued in order and may
// run asynchronously (CUDA); results reach the host through to_host().
//
// Conventions for every op:
// - Tensors live on the backend's device (device()). Activations are f32; "rows" are 2-D views
//   [rows, cols] with a contiguous last dim and a free row stride (a column window of a wider buffer
//   works), unless a comment says otherwise. Ids, positions and expert ids are int32.
// - Numerics: each op has its CPU twin's contract in ops.h / quantized.h; backends may round differently
//   (the CUDA tensor-core paths round matmul inputs to bf16) but every op keeps batch invariance: a row's
//   result does not depend on the other rows of the call.
// - Argument errors are InvalidArgument naming the op.
#pragma once

#include "lmx/core/device.h"
#include "lmx/core/tensor.h"
#include "lmx/ops/kv_memory.h"
#include "lmx/ops/paged_kv.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace lmx {

struct Weight;

// A projection [N, K] or embedding table [V, D] prepared for one backend (uploaded, possibly stacked).
class BackendWeight {
 public:
  virtual ~BackendWeight() = default;
  int64_t rows = 0, cols = 0;
  bool quantized = false;
};

// A mixture-of-experts stack prepared for one backend: gate and up [E, I, H] and down [E, H, I].
class BackendExperts {
 public:
  virtual ~BackendExperts() = default;
  int64_t experts = 0, hidden = 0, inter = 0;
};

// Norms of the MoE block that a backend may fold into its expert dispatch (moe_experts_normed):
// out = rms_norm(experts' sum) · expert_norm; dense_out = rms_norm(dense_out) · dense_norm + out.
struct MoeOutputNorms {
  Tensor* dense_out = nullptr;
  const Tensor* dense_norm = nullptr;
  const Tensor* expert_norm = nullptr;
  float eps = 1e-6f;
};

// The per-head work between the q/k/v projections and attention (attention_with_inputs): q normed per
// head (q_norm; null: no weight) and rotated in place; for a layer that owns its cache, k normed (k_norm)
// and rotated, v normed without a weight, both appended. k and v undefined: a KV-sharing layer.
struct AttentionInputs {
  Tensor q;  // [T, heads * head_dim] rows, the raw projection
  const Tensor* q_norm = nullptr;
  Tensor k, v;  // [T, kv_heads * head_dim] rows (v may view the same memory as k)
  const Tensor* k_norm = nullptr;
  const Tensor* inv_freq = nullptr;  // RoPE, [head_dim / 2]
  float eps = 0.0f;
};

// One layer's per-layer-input block of a single-token step, with the MLP residual step before it (Gemma 4):
//   x = x + rms_norm(mlp_out)·mlp_out_norm; g = gelu_tanh(x·gateᵀ) · layer_input;
//   x = (x + rms_norm(g·projectionᵀ)·projection_norm) · layer_scalar; next_normed = rms_norm(x)·next_norm.
struct PerLayerInputStep {
  Tensor* x = nullptr;
  const Tensor* mlp_out = nullptr;
  const Tensor* mlp_out_norm = nullptr;
  const BackendWeight* gate = nullptr;
  Tensor layer_input;  // [1, width]
  const BackendWeight* projection = nullptr;
  const Tensor* projection_norm = nullptr;
  float layer_scalar = 1.0f;
  Tensor* next_normed = nullptr;  // null: none
  const Tensor* next_norm = nullptr;
  float eps = 0.0f;
};

// Counters of fused ops taken (tests check that the fusions they expect ran), counted at enqueue time.
struct BackendCounters {
  int64_t fused_attention_inputs = 0;
  int64_t fused_per_layer_input_steps = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // "cpu (AVX3_SPR, 2 threads)", "cuda:0 (NVIDIA H200, ...)".
  virtual std::string description() const = 0;
  // Exactness reference: every later op computes in f32 without lower-precision shortcuts (the CUDA
  // backend's tensor-core paths round matmul inputs to bf16); fused ops that would round are not taken. The
  // CPU always computes this way. Call before preparing weights.
  virtual void set_exact(bool exact) {}
  virtual bool exact() const { return true; }

  // ---- Memory ----------------------------------------------------------------------------------------
  // Step buffer `slot` viewed as a contiguous `shape` of `dtype`. A slot keeps its address while requests
  // fit, else grows (bumping memory_generation()); contents are unspecified.
  virtual Tensor workspace(int slot, const Shape& shape, DType dtype) = 0;
  // Bumped whenever a workspace or internal scratch buffer moves: recorded graphs must be dropped.
  virtual int memory_generation() const = 0;
  // A host f32/bf16/f16 tensor as f32 on the backend (norm weights, RoPE frequencies, router scales).
  virtual Tensor upload(const Tensor& host) = 0;
  // Copies `bytes` of host memory into step buffer `slot` (a 1-D byte buffer of at least that size, at a
  // stable address as workspace()) and returns it, ordered before later ops; the host bytes may change
  // once this returns. Called at the start of every step with its inputs, and after the forward with
  // backend sampling's (each call into its own slot).
  virtual Tensor stage(int slot, std::span<const std::byte> host) = 0;
  // Copies src (contiguous) to host memory of src.nbytes(), waiting for every op before it.
  virtual void to_host(const Tensor& src, void* dst) = 0;
  // The memory KV cache blocks live in (shared with the KV cache, which may outlive no backend op).
  virtual std::shared_ptr<KvMemory> kv_memory() = 0;

  // ---- Weights ---------------------------------------------------------------------------------------
  virtual std::shared_ptr<const BackendWeight> prepare_weight(const Weight& w) = 0;
  // The parts (same input width) as one stacked projection whose output rows are the parts' in order,
  // where the backend gains from it and the parts are stored alike; null otherwise (the model then runs
  // the parts). geglu_pair: the two parts are a GeGLU's gate and up (linear_geglu may read them).
  virtual std::shared_ptr<const BackendWeight> prepare_stacked(std::span<const Weight* const> parts,
                                                               bool geglu_pair = false) {
    return nullptr;
  }
  // Experts: dense gate_up [E, 2I, H] (gate rows first), or quantized gate and up [E, I, H]; down [E, H, I].
  virtual std::shared_ptr<const BackendExperts> prepare_experts(const Weight& gate_up, const Weight& gate,
                                                                const Weight& up, const Weight& down) = 0;

  // ---- Plain ops -------------------------------------------------------------------------------------
  // out = x · Wᵀ.
  virtual void linear(const Tensor& x, const BackendWeight& w, Tensor& out) = 0;
  // out[t] = table[ids[t]] · scale; ids [T] validated by the caller.
  virtual void embedding(const BackendWeight& table, const Tensor& ids, float scale, Tensor& out) = 0;
  // out = rms_norm(x) · weight (weight null: none); out may be x.
  virtual void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) = 0;
  // rms_norm of every head (width head_dim) of x [T, heads · head_dim] in place.
  virtual void head_norm(Tensor& x, int heads, const Tensor* weight, float eps) = 0;
  // Rotate-half RoPE of every head of x [T, heads · head_dim] in place at positions [T].
  virtual void rope(Tensor& x, int heads, const Tensor& positions, const Tensor& inv_freq) = 0;
  // out = gelu_tanh(gate) · up (same shapes; out may be gate or up).
  virtual void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void add(Tensor& out, const Tensor& a) = 0;
  virtual void scale(Tensor& x, float s) = 0;
  // x[r, :] *= row[:] for every row r.
  virtual void mul_rows(Tensor& x, const Tensor& row) = 0;
  virtual void softcap(Tensor& x, float cap) = 0;
  // dst = src (same shapes).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // ops::moe_route: experts and weights [T, top_k].
  virtual void moe_route(const Tensor& logits, int top_k, const Tensor* per_expert_scale, Tensor& experts,
                         Tensor& weights) = 0;
  // ops::moe_experts.
  virtual void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights,
                           const BackendExperts& w, Tensor& out) = 0;
  // out[r] = index of the first maximum of row r of x [R, V].
  virtual void argmax_rows(const Tensor& x, Tensor& out) = 0;
  // Whether kv_append and attention read and write the quantized KV formats (PagedKvLayer's quant_bits > 0:
  // affine, TurboQuant); a backend without them takes only f32 and bf16.
  virtual bool supports_quantized_kv() const { return false; }
  // Appends the step's keys and values [T, kv_heads · head_dim] of one cache layer (kv.layer) at the
  // tokens' positions, in the layer's codec.
  virtual void kv_append(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& k,
                         const Tensor& v) = 0;
  // Attention of the step's queries q [T, heads · head_dim] over each row's stored keys of one cache layer
  // (this step's included), causal and windowed by position; out like q.
  virtual void attention(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& q, float scale,
                         Tensor& out) = 0;

  // ---- Sampling ------------------------------------------------------------------------------------
  // Per-request sampling on the backend (sampling_rows.h), so that only the results leave it; a backend
  // without it (the CPU, whose logits are host memory already) returns false and does nothing:
  // `entries` entries over logits [R, V] (contiguous rows); `inputs` holds the staged
  // SamplingRowParams[entries] followed by the LogitEdits they index (rows and edit ids validated by the
  // caller); processed [entries, V] f32 receives each entry's processed row; out holds at least
  // entries · sizeof(SampledRow) bytes for the results.
  virtual bool sample_rows(const Tensor& logits, const Tensor& inputs, int64_t entries, Tensor& processed,
                           Tensor& out) {
    return false;
  }
  virtual bool supports_sampling() const { return false; }

  // ---- Fused ops (false: not taken, nothing done) ----------------------------------------------------
  // x = (x + rms_norm(a)·a_norm) · scale, then normed = rms_norm(x)·normed_norm unless normed is null.
  virtual bool residual_norm(Tensor& x, const Tensor& a, const Tensor* a_norm, float scale, Tensor* normed,
                             const Tensor* normed_norm, float eps) {
    return false;
  }
  // out = (gelu_tanh(gate) · up) · Wᵀ; gate's contents afterwards are unspecified.
  virtual bool linear_gelu(Tensor& gate, const Tensor& up, const BackendWeight& w, Tensor& out) {
    return false;
  }
  // With W = [gate; up] ([2I, K]): out[:, 0:I] = gelu_tanh(x·gateᵀ) · (x·upᵀ); out[:, I:2I] unspecified.
  virtual bool linear_geglu(const Tensor& x, const BackendWeight& gate_up, Tensor& out) { return false; }
  // The MoE block's input norms: r = rms_norm(x); routed = r · router_scale · router_mul; expert_in =
  // r · expert_norm.
  virtual bool moe_inputs(const Tensor& x, const Tensor* router_scale, float router_mul,
                          const Tensor* expert_norm, float eps, Tensor& routed, Tensor& expert_in) {
    return false;
  }
  // moe_experts whose combine also applies `norms`. ids_early: the expert ids were written two or more ops
  // before this call (a backend may read them early).
  virtual bool moe_experts_normed(const Tensor& x, const Tensor& experts, const Tensor& weights,
                                  const BackendExperts& w, Tensor& out, const MoeOutputNorms& norms,
                                  bool ids_early) {
    return false;
  }
  virtual bool per_layer_input_step(const PerLayerInputStep& step) { return false; }
  // attention_inputs' work, the append and attention(step, kv, inputs.q, scale, out).
  virtual bool attention_with_inputs(const PagedKvStep& step, const PagedKvLayer& kv,
                                     const AttentionInputs& inputs, float scale, Tensor& out) {
    return false;
  }

  // ---- Concurrency -----------------------------------------------------------------------------------
  // Ops between begin_side() and end_side() may run concurrently with the ops enqueued after end_side()
  // until join_side(), which orders every later op after them. Backends without concurrency run them in
  // order (the default).
  virtual void begin_side() {}
  virtual void end_side() {}
  virtual void join_side() {}
  virtual bool has_side() const { return false; }

  // ---- Step graphs -----------------------------------------------------------------------------------
  // A backend that records a step's enqueued ops (capture) and replays them with new staged inputs.
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture() {}
  // The recorded graph's id.
  virtual int end_capture() { return -1; }
  virtual void abort_capture() {}
  virtual void replay(int graph) {}
  virtual void drop_graphs() {}
  // Waits for every enqueued op; rethrows asynchronous errors.
  virtual void synchronize() {}

  const BackendCounters& counters() const { return counters_; }

 protected:
  BackendCounters counters_;
};

}  // namespace lmx
