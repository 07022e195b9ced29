// Gemma 4 text model on one CUDA device: the forward pass of Gemma4Model (same math, same op order)
// on the CUDA op set, with bf16 KV caches on the device and the single-token decode step captured
// as a CUDA graph that is replayed with new tokens, positions and lengths read from device memory.
#pragma once

#include "lmx/model/cuda/device_weights.h"
#include "lmx/model/decode_skips.h"
#include "lmx/model/gemma4/gemma4_config.h"
#include "lmx/model/language_model.h"
#include "lmx/ops/cuda/context.h"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lmx {

struct CudaModelOptions {
  int device = 0;
  // Capture single-token decode steps as CUDA graphs (one per power-of-two bucket of KV length).
  bool use_graphs = true;
  // Run each MoE layer's routing (the router's input norm, its projection and the top-k) on a second
  // stream, concurrently with the dense MLP; the experts wait for both. Same bits either way. The
  // environment variable LMX_MOE_ROUTING_STREAM=0 turns it off (A/B runs).
  bool routing_stream = true;
};

class Gemma4CudaModel final : public LanguageModel {
 public:
  // Loads config.json and the weights of a model directory and uploads them to the device.
  static std::unique_ptr<Gemma4CudaModel> load(const std::string& dir, const CudaModelOptions& options = {});
  ~Gemma4CudaModel() override;

  const Gemma4Config& config() const override { return config_; }
  std::unique_ptr<Sequence> new_sequence() override;
  Tensor forward(std::span<const StepRow> rows, bool all_positions = false) override;
  std::vector<int32_t> forward_argmax(std::span<const StepRow> rows) override;
  size_t weight_bytes_per_token() const override { return weight_bytes_per_token_; }
  std::string device_description() const override;
  // Device bytes of the uploaded weights.
  size_t device_weight_bytes() const { return weights_.bytes(); }
  // Graph replays and captures so far (tests check that decode steps replay).
  int graph_replays() const { return graph_replays_; }
  int graph_captures() const { return graph_captures_; }
  // Layers whose per-layer-input block was enqueued as the one fused kernel (enqueue_per_layer_input_step),
  // counted at enqueue time (a captured graph's replays do not count).
  int64_t fused_per_layer_input_steps() const { return fused_per_layer_input_steps_; }
  // Layers whose attention took attention_inputs' work itself (cuda::attention_with_inputs fused), counted
  // the same way.
  int64_t fused_attention_inputs() const { return fused_attention_inputs_; }

 private:
  class CudaSequence;
  struct Workspace;
  struct StepPlan;
  struct RoutingBranch;

  Gemma4CudaModel(Gemma4Config config, const Gemma4Weights& weights, const CudaModelOptions& options);
  // Validates rows, grows caches and workspace, fills the pinned staging area; returns the plan.
  StepPlan plan_step(std::span<const StepRow> rows, bool all_positions);
  // Copies the staged step inputs to the device (enqueued on the stream).
  void upload_step_inputs();
  // The parts LMX_DEBUG_SKIP leaves out of this step: skips_ for a single-token step, else none.
  DecodeSkips skips_for(const StepPlan& plan) const;
  // Enqueues the whole forward of a planned step (graph-capturable: no host syncs or allocations).
  void enqueue_forward(const StepPlan& plan);
  void enqueue_attention(int layer, const StepPlan& plan);
  void enqueue_ffn(int layer, const StepPlan& plan);
  void enqueue_per_layer_inputs(const StepPlan& plan);
  // A single-token step's MLP residual step and per-layer-input block of `layer` in one kernel
  // (cuda::per_layer_input_step, the same bits as the four kernels it replaces); false, having enqueued
  // nothing, when that kernel does not apply.
  bool enqueue_per_layer_input_step(int layer, const StepPlan& plan, float* next_normed,
                                    const float* next_norm);
  // Runs a planned step: direct launches, or a captured graph for single-token steps.
  void run_step(const StepPlan& plan);
  // The MoE routing of `layer` (moe_inputs, router projection, moe_route): on the routing stream when there
  // is one, forked after the attention block's residual step; join_routing() makes ctx_'s stream wait for it.
  void enqueue_routing(int layer, const StepPlan& plan);
  void join_routing();
  void linear(const DeviceWeight& w, const float* x, int64_t x_stride, int64_t m, float* out, int64_t out_stride);
  void linear(const DeviceWeight& w, const float* x, int64_t x_stride, int64_t m, float* out, int64_t out_stride,
              cuda::CudaContext& ctx);
  // out = (gelu_tanh(gate) * up) · Wᵀ (cuda::quantized_linear_gelu); gate is clobbered.
  void linear_gelu(const DeviceWeight& w, float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                   int64_t m, float* out, int64_t out_stride);

  Gemma4Config config_;
  CudaModelOptions options_;
  DecodeSkips skips_;  // LMX_DEBUG_SKIP (timing only; decode_skips.h); see skips_for
  cuda::CudaContext ctx_;
  DeviceWeights weights_;
  size_t weight_bytes_per_token_ = 0;
  std::vector<cuda::DeviceBuffer> inv_freq_;  // per layer, [head_dim / 2] f32
  std::unique_ptr<Workspace> ws_;
  std::unique_ptr<RoutingBranch> routing_;  // null: the routing runs on ctx_'s stream
  std::map<int64_t, cudaGraphExec_t> decode_graphs_;  // KV-length bucket → instantiated graph
  int graphs_scratch_generation_ = 0;                  // scratch_generation() the graphs saw
  // Bumped whenever a scratch buffer of ctx_ or of the routing stream's context moves.
  int scratch_generation() const;
  void drop_graphs();
  int graph_replays_ = 0, graph_captures_ = 0;
  int64_t fused_per_layer_input_steps_ = 0;
  int64_t fused_attention_inputs_ = 0;
};

}  // namespace lmx
