// Gemma 4 text model on CUDA (see gemma4_cuda_model.h). The layer math mirrors Gemma4Model::forward
// line for line; only the op set differs.
#include "lmx/model/cuda/gemma4_cuda_model.h"

#include "lmx/core/error.h"
#include "lmx/io/model_dir.h"
#include "lmx/io/safetensors.h"
#include "lmx/model/quantization_config.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/per_layer_input.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

namespace lmx {

using cuda::DeviceBuffer;

namespace {
// Smallest KV-length bucket a decode graph is captured for; buckets double from there.
constexpr int64_t kMinGraphBucket = 256;
// Caches start with room for this many tokens and double when they run out.
constexpr int64_t kInitialCacheTokens = 256;

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

struct CacheLayerShape {
  int kv_heads = 0, head_dim = 0;
  size_t token_bytes() const { return static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim) * 2; }
};
}  // namespace

// ---- Sequences: per cache layer bf16 K and V [capacity, kv_heads, head_dim], slot = position --------

class Gemma4CudaModel::CudaSequence final : public Sequence {
 public:
  CudaSequence(const Gemma4CudaModel* owner, std::vector<CacheLayerShape> shapes)
      : owner_(owner), shapes_(std::move(shapes)), k_(shapes_.size()), v_(shapes_.size()) {}

  int64_t length() const override { return length_; }
  bool can_truncate(int64_t new_length) const override { return new_length >= 0 && new_length <= length_; }
  void truncate(int64_t new_length) override {
    LMX_REQUIRE(InvalidArgument, can_truncate(new_length), "truncate to {} of a sequence of length {}", new_length,
                length_);
    length_ = new_length;
  }

  // Makes room for `tokens` positions, keeping the stored ones (copies enqueued on `stream`).
  void reserve(int64_t tokens, cudaStream_t stream) {
    if (tokens <= capacity_) return;
    const int64_t capacity = std::max(next_pow2(tokens), kInitialCacheTokens);
    for (size_t c = 0; c < shapes_.size(); ++c) {
      const size_t token_bytes = shapes_[c].token_bytes();
      for (DeviceBuffer* store : {&k_[c], &v_[c]}) {
        DeviceBuffer grown(static_cast<size_t>(capacity) * token_bytes);
        if (length_ > 0)
          LMX_CUDA_CHECK(cudaMemcpyAsync(grown.data(), store->data(), static_cast<size_t>(length_) * token_bytes,
                                         cudaMemcpyDeviceToDevice, stream));
        *store = std::move(grown);
      }
    }
    capacity_ = capacity;
  }

  const Gemma4CudaModel* owner() const { return owner_; }
  uint16_t* k(size_t layer) const { return k_[layer].as<uint16_t>(); }
  uint16_t* v(size_t layer) const { return v_[layer].as<uint16_t>(); }
  void advance(int64_t tokens) { length_ += tokens; }

 private:
  const Gemma4CudaModel* owner_;
  std::vector<CacheLayerShape> shapes_;
  std::vector<DeviceBuffer> k_, v_;
  int64_t length_ = 0, capacity_ = 0;
};

// ---- Workspace: every activation buffer of a step, sized for `tokens` tokens and `rows` rows -------

struct Gemma4CudaModel::Workspace {
  int64_t tokens = 0, rows = 0;
  DeviceBuffer x, normed, q, k, v, attn, proj, gate, up, ffn;
  DeviceBuffer routed, router_logits, expert_ids, expert_weights, expert_in, expert_out;
  DeviceBuffer ple, ple_tokens, ple_gate, last, logits, argmax;
  // Step inputs: int32 ids[T], ple_ids[T], positions[T], q_seq[T], kv_len[S], then (8-aligned)
  // pointer tables k[C][S], v[C][S]. Mirrored by a pinned host staging area of the same layout.
  DeviceBuffer inputs;
  void* staging = nullptr;
  size_t input_bytes = 0, pointer_offset = 0;

  ~Workspace() {
    if (staging != nullptr) (void)cudaFreeHost(staging);
  }
  int32_t* ids() const { return inputs.as<int32_t>(); }
  int32_t* ple_ids() const { return ids() + tokens; }
  int32_t* positions() const { return ids() + 2 * tokens; }
  int32_t* q_seq() const { return ids() + 3 * tokens; }
  int32_t* kv_len() const { return ids() + 4 * tokens; }
  uint16_t** k_table(int cache_layer) const {
    return reinterpret_cast<uint16_t**>(static_cast<char*>(inputs.data()) + pointer_offset) + cache_layer * rows;
  }
  uint16_t** v_table(int cache_layer, int cache_layers) const { return k_table(cache_layers + cache_layer); }
};

struct Gemma4CudaModel::StepPlan {
  int64_t tokens = 0, rows = 0, out_rows = 0;
  bool all_positions = false;
  std::vector<int64_t> last_index;  // per row: index of its last token in the step
  int64_t max_kv_len = 0;           // bound on every kv_len (the decode graph's bucket when graphed)
  bool graphed = false;
  std::vector<CudaSequence*> sequences;
  std::vector<int64_t> new_tokens;
};

// The MoE routing's stream: its own context (stream and scratch, so that its ops never share scratch with
// the dense MLP's) and the two events that fork it from ctx_'s stream and join it back, once per MoE layer.
struct Gemma4CudaModel::RoutingBranch {
  cuda::CudaContext ctx;
  cudaEvent_t fork = nullptr, join = nullptr;

  explicit RoutingBranch(int device) : ctx(device) {
    LMX_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    const cudaError_t created = cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    if (created != cudaSuccess) (void)cudaEventDestroy(fork);
    LMX_CUDA_CHECK(created);
  }
  ~RoutingBranch() {
    (void)cudaEventDestroy(fork);
    (void)cudaEventDestroy(join);
  }
  RoutingBranch(const RoutingBranch&) = delete;
  RoutingBranch& operator=(const RoutingBranch&) = delete;
};

namespace {
bool routing_stream_enabled(const CudaModelOptions& options, const Gemma4Config& config) {
  static const bool env_allows = cuda::env_integer("LMX_MOE_ROUTING_STREAM", 1, 0, 1) != 0;
  if (!options.routing_stream || !env_allows) return false;
  return std::any_of(config.layers.begin(), config.layers.end(), [](const Gemma4LayerSpec& l) { return l.moe; });
}
}  // namespace

// ---- Loading -----------------------------------------------------------------------------------------

std::unique_ptr<Gemma4CudaModel> Gemma4CudaModel::load(const std::string& dir, const CudaModelOptions& options) {
  ModelConfigFiles files = load_model_config(dir);
  Gemma4Config config = Gemma4Config::from_json(files.text, files.root, files.path);
  QuantizationConfig quantization = QuantizationConfig::from_json(files.root, files.path);
  Checkpoint checkpoint = Checkpoint::open_dir(dir);
  Gemma4Weights weights = Gemma4Weights::bind(checkpoint, config, quantization);
  // The mapped checkpoint is released when this returns: the model keeps only device copies.
  return std::unique_ptr<Gemma4CudaModel>(new Gemma4CudaModel(std::move(config), weights, options));
}

Gemma4CudaModel::Gemma4CudaModel(Gemma4Config config, const Gemma4Weights& weights, const CudaModelOptions& options)
    : config_(std::move(config)), options_(options), ctx_(options.device), ws_(std::make_unique<Workspace>()) {
  weights_ = DeviceWeights::upload(weights);
  skips_ = DecodeSkips::from_env();
  if (skips_.any())
    std::fprintf(stderr,
                 "lmx: LMX_DEBUG_SKIP=%s leaves parts out of every single-token step; its outputs are "
                 "meaningless\n",
                 skips_.describe().c_str());
  if (routing_stream_enabled(options_, config_)) routing_ = std::make_unique<RoutingBranch>(options.device);
  weight_bytes_per_token_ = decode_weight_bytes(config_, weights);
  for (const auto& l : config_.layers) {
    std::vector<float> inv = ops::rope_inv_freq(l.head_dim, l.rope_theta, l.rope_rotated_pairs);
    if (l.rope_factor != 1.0)
      for (float& f : inv) f = static_cast<float>(f / l.rope_factor);
    inv_freq_.push_back(cuda::upload_vector(inv));
  }
}

Gemma4CudaModel::~Gemma4CudaModel() { drop_graphs(); }

int Gemma4CudaModel::scratch_generation() const {
  return ctx_.scratch_generation() + (routing_ ? routing_->ctx.scratch_generation() : 0);
}

void Gemma4CudaModel::drop_graphs() {
  for (auto& [bucket, exec] : decode_graphs_) (void)cudaGraphExecDestroy(exec);
  decode_graphs_.clear();
}

std::string Gemma4CudaModel::device_description() const {
  return fmt::format("cuda:{} ({})", ctx_.device(), cuda::device_description(ctx_.device()));
}

std::unique_ptr<Sequence> Gemma4CudaModel::new_sequence() {
  std::vector<CacheLayerShape> shapes(static_cast<size_t>(config_.num_cache_layers));
  for (const auto& l : config_.layers)
    if (l.kv_donor < 0) shapes[static_cast<size_t>(l.cache_index)] = {l.num_kv_heads, l.head_dim};
  return std::make_unique<CudaSequence>(this, std::move(shapes));
}

// ---- Step planning ------------------------------------------------------------------------------------

Gemma4CudaModel::StepPlan Gemma4CudaModel::plan_step(std::span<const StepRow> rows, bool all_positions) {
  LMX_REQUIRE(InvalidArgument, !rows.empty(), "forward: empty batch");
  StepPlan plan;
  plan.rows = static_cast<int64_t>(rows.size());
  plan.all_positions = all_positions;
  std::unordered_set<const Sequence*> seen;
  for (size_t r = 0; r < rows.size(); ++r) {
    LMX_REQUIRE(InvalidArgument, rows[r].sequence != nullptr && !rows[r].tokens.empty(), "forward: row {} has no tokens",
                r);
    auto* seq = dynamic_cast<CudaSequence*>(rows[r].sequence);
    LMX_REQUIRE(InvalidArgument, seq != nullptr && seq->owner() == this,
                "forward: row {}'s sequence belongs to another model or backend", r);
    LMX_REQUIRE(InvalidArgument, seen.insert(seq).second, "forward: row {} repeats a sequence of the step", r);
    for (int32_t id : rows[r].tokens)
      LMX_REQUIRE(InvalidArgument, id >= 0 && id < config_.vocab_size, "token id {} out of range [0, {}) in row {}", id,
                  config_.vocab_size, r);
    plan.sequences.push_back(seq);
    plan.new_tokens.push_back(static_cast<int64_t>(rows[r].tokens.size()));
    plan.tokens += plan.new_tokens.back();
    plan.last_index.push_back(plan.tokens - 1);
  }
  plan.out_rows = all_positions ? plan.tokens : plan.rows;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t kv_len = plan.sequences[r]->length() + plan.new_tokens[r];
    LMX_REQUIRE(InvalidArgument, kv_len <= (int64_t{1} << 30), "forward: row {} would hold {} tokens", r, kv_len);
    plan.sequences[r]->reserve(kv_len, ctx_.stream());
    plan.max_kv_len = std::max(plan.max_kv_len, kv_len);
  }
  plan.graphed = options_.use_graphs && plan.tokens == 1 && !all_positions;
  if (plan.graphed) plan.max_kv_len = std::max(kMinGraphBucket, next_pow2(plan.max_kv_len));

  // Grow the workspace when this step is larger than any before.
  Workspace& ws = *ws_;
  if (plan.tokens > ws.tokens || plan.rows > ws.rows) {
    ctx_.synchronize();
    // (The routing stream too: a step that failed between a fork and its join left work there unjoined.)
    if (routing_) routing_->ctx.synchronize();
    const int64_t t = std::max(ws.tokens, next_pow2(plan.tokens)), s = std::max(ws.rows, next_pow2(plan.rows));
    ws_ = std::make_unique<Workspace>();
    Workspace& w = *ws_;
    w.tokens = t;
    w.rows = s;
    drop_graphs();
    const int64_t hidden = config_.hidden_size;
    int64_t q_width = 0, kv_width = 0, inter = 0;
    for (const auto& l : config_.layers) {
      q_width = std::max<int64_t>(q_width, static_cast<int64_t>(config_.num_attention_heads) * l.head_dim);
      kv_width = std::max<int64_t>(kv_width, static_cast<int64_t>(l.num_kv_heads) * l.head_dim);
      inter = std::max<int64_t>(inter, l.intermediate_size);
    }
    auto f32 = [](int64_t n) { return DeviceBuffer(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4); };
    w.x = f32(t * hidden);
    w.normed = f32(t * hidden);
    w.q = f32(t * (q_width + 2 * kv_width));  // q, or the stacked q | k | v projection
    w.k = f32(t * kv_width);
    w.v = f32(t * kv_width);
    w.attn = f32(t * q_width);
    w.proj = f32(t * hidden);
    w.gate = f32(t * inter * 2);  // stacked gate | up output (gate_up_proj)
    w.up = f32(t * inter);
    w.ffn = f32(t * hidden);
    if (config_.num_experts > 0) {
      w.routed = f32(t * hidden);
      w.router_logits = f32(t * config_.num_experts);
      w.expert_ids = f32(t * config_.top_k_experts);
      w.expert_weights = f32(t * config_.top_k_experts);
      w.expert_in = f32(t * hidden);
      w.expert_out = f32(t * hidden);
    }
    const int64_t ple_width = static_cast<int64_t>(config_.num_hidden_layers) * config_.hidden_size_per_layer_input;
    if (ple_width > 0) {
      w.ple = f32(t * ple_width);
      w.ple_tokens = f32(t * ple_width);
      w.ple_gate = f32(t * config_.hidden_size_per_layer_input);
    }
    w.last = f32(t * hidden);
    w.logits = f32(t * config_.vocab_size);
    w.argmax = f32(t);
    const size_t ints = static_cast<size_t>(4 * t + s) * 4;
    w.pointer_offset = (ints + 7) / 8 * 8;
    w.input_bytes = w.pointer_offset + static_cast<size_t>(2 * config_.num_cache_layers * s) * sizeof(void*);
    w.inputs = DeviceBuffer(w.input_bytes);
    LMX_CUDA_CHECK(cudaMallocHost(&w.staging, w.input_bytes));
  }

  // Stage the inputs (same layout as Workspace::inputs).
  Workspace& w = *ws_;
  auto* ints = static_cast<int32_t*>(w.staging);
  int32_t* ids = ints;
  int32_t* ple_ids = ints + w.tokens;
  int32_t* positions = ints + 2 * w.tokens;
  int32_t* q_seq = ints + 3 * w.tokens;
  int32_t* kv_len = ints + 4 * w.tokens;
  int64_t t = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t start = plan.sequences[r]->length();
    for (size_t i = 0; i < rows[r].tokens.size(); ++i, ++t) {
      const int32_t id = rows[r].tokens[i];
      ids[t] = id;
      ple_ids[t] = id < config_.vocab_size_per_layer_input ? id : 0;  // as the CPU model (see notes)
      positions[t] = static_cast<int32_t>(start + static_cast<int64_t>(i));
      q_seq[t] = static_cast<int32_t>(r);
    }
    kv_len[r] = static_cast<int32_t>(start + plan.new_tokens[r]);
  }
  auto** pointers = reinterpret_cast<uint16_t**>(static_cast<char*>(w.staging) + w.pointer_offset);
  for (int c = 0; c < config_.num_cache_layers; ++c)
    for (size_t r = 0; r < rows.size(); ++r) {
      pointers[c * w.rows + static_cast<int64_t>(r)] = plan.sequences[r]->k(static_cast<size_t>(c));
      pointers[(config_.num_cache_layers + c) * w.rows + static_cast<int64_t>(r)] =
          plan.sequences[r]->v(static_cast<size_t>(c));
    }
  return plan;
}

DecodeSkips Gemma4CudaModel::skips_for(const StepPlan& plan) const {
  return plan.tokens == 1 ? skips_ : DecodeSkips{};
}

void Gemma4CudaModel::upload_step_inputs() {
  LMX_CUDA_CHECK(cudaMemcpyAsync(ws_->inputs.data(), ws_->staging, ws_->input_bytes, cudaMemcpyHostToDevice,
                                 ctx_.stream()));
}

// ---- The forward pass (enqueue only) ------------------------------------------------------------------

void Gemma4CudaModel::linear(const DeviceWeight& w, const float* x, int64_t x_stride, int64_t m, float* out,
                             int64_t out_stride) {
  linear(w, x, x_stride, m, out, out_stride, ctx_);
}

void Gemma4CudaModel::linear(const DeviceWeight& w, const float* x, int64_t x_stride, int64_t m, float* out,
                             int64_t out_stride, cuda::CudaContext& ctx) {
  if (w.quantized)
    cuda::quantized_linear(x, x_stride, m, w.packed, out, out_stride, ctx);
  else
    cuda::dense_linear(x, x_stride, m, w.dense, out, out_stride, ctx);
}

void Gemma4CudaModel::linear_gelu(const DeviceWeight& w, float* gate, int64_t gate_stride, const float* up,
                                  int64_t up_stride, int64_t m, float* out, int64_t out_stride) {
  if (w.quantized) {
    cuda::quantized_linear_gelu(gate, gate_stride, up, up_stride, m, w.packed, out, out_stride, ctx_);
    return;
  }
  cuda::gelu_tanh_mul(gate, gate_stride, up, up_stride, gate, gate_stride, m, w.dense.cols, ctx_.stream());
  cuda::dense_linear(gate, gate_stride, m, w.dense, out, out_stride, ctx_);
}

namespace {
void lookup(const DeviceWeight& table, const int32_t* ids, int64_t count, float scale, float* out, int64_t out_stride,
            cudaStream_t stream) {
  if (table.quantized)
    cuda::quantized_embedding(table.packed, ids, count, scale, out, out_stride, stream);
  else
    cuda::embedding(table.dense.data, table.dense.dtype, table.dense.cols, ids, count, scale, out, out_stride, stream);
}
}  // namespace

// PLE inputs [T, L, P]: (rms_norm(per_layer_model_projection(h) · H^-0.5) + embed_per_layer(ids) · √P) · 2^-0.5.
void Gemma4CudaModel::enqueue_per_layer_inputs(const StepPlan& plan) {
  Workspace& w = *ws_;
  const cudaStream_t s = ctx_.stream();
  const int64_t t = plan.tokens, layers = config_.num_hidden_layers, width = config_.hidden_size_per_layer_input;
  const int64_t total = layers * width;
  lookup(weights_.embed_tokens_per_layer, w.ple_ids(), t, std::sqrt(static_cast<float>(width)), w.ple_tokens.as<float>(),
         total, s);
  float* context = w.ple.as<float>();
  linear(weights_.per_layer_model_projection, w.x.as<float>(), config_.hidden_size, t, context, total);
  cuda::scale(context, t * total, 1.0f / std::sqrt(static_cast<float>(config_.hidden_size)), s);
  cuda::rms_norm(context, width, context, width, t * layers, static_cast<int>(width),
                 weights_.per_layer_projection_norm.get(), config_.rms_norm_eps, s);
  cuda::add(context, w.ple_tokens.as<float>(), t * total, s);
  cuda::scale(context, t * total, 1.0f / std::sqrt(2.0f), s);
}

void Gemma4CudaModel::enqueue_attention(int layer, const StepPlan& plan) {
  const Gemma4LayerSpec& spec = config_.layers[static_cast<size_t>(layer)];
  const DeviceLayerWeights& lw = weights_.layers[static_cast<size_t>(layer)];
  Workspace& w = *ws_;
  const cudaStream_t s = ctx_.stream();
  const int64_t t = plan.tokens;
  const int heads = config_.num_attention_heads, dim = spec.head_dim, kv_heads = spec.num_kv_heads;
  const int64_t q_width = static_cast<int64_t>(heads) * dim, kv_width = static_cast<int64_t>(kv_heads) * dim;
  const float eps = config_.rms_norm_eps;
  const float* inv_freq = inv_freq_[static_cast<size_t>(layer)].as<const float>();
  const DecodeSkips skip = skips_for(plan);

  // Projections: one stacked q | k (| v) matrix when the weights allowed it (w.q then holds rows of
  // qkv_proj.rows() floats), else one per output.
  const bool own_kv = spec.kv_donor < 0;
  float* q = w.q.as<float>();
  float *k = nullptr, *v = nullptr;
  int64_t q_stride = q_width, kv_stride = kv_width;
  if (lw.qkv_proj.defined) {
    const int64_t width = lw.qkv_proj.rows();
    if (!skip.qkv) linear(lw.qkv_proj, w.normed.as<float>(), config_.hidden_size, t, q, width);
    q_stride = kv_stride = width;
    k = q + q_width;
    v = spec.k_eq_v ? k : k + kv_width;
  } else {
    linear(lw.q_proj, w.normed.as<float>(), config_.hidden_size, t, q, q_width);
    if (own_kv) {
      k = w.k.as<float>();
      linear(lw.k_proj, w.normed.as<float>(), config_.hidden_size, t, k, kv_width);
      v = k;  // k_eq_v: values are the keys before their norm
      if (!spec.k_eq_v) {
        v = w.v.as<float>();
        linear(lw.v_proj, w.normed.as<float>(), config_.hidden_size, t, v, kv_width);
      }
    }
  }
  // Per-head norms, RoPE and the cache append (q in place, k and v into the caches), then attention: one
  // kernel in a single-token step, else attention_inputs and attention.
  cuda::AttentionInputs inputs;
  inputs.q = q;
  inputs.q_norm = lw.q_norm.get();
  if (own_kv) {
    inputs.k = k;
    inputs.v = v;
    inputs.kv_stride = kv_stride;
    inputs.k_norm = lw.k_norm.get();
    inputs.k_store = w.k_table(spec.cache_index);
    inputs.v_store = w.v_table(spec.cache_index, config_.num_cache_layers);
  }
  inputs.inv_freq = inv_freq;
  inputs.eps = eps;
  cuda::AttentionBatch batch;
  batch.q = q;
  batch.q_stride = q_stride;
  batch.out = w.attn.as<float>();
  batch.tokens = t;
  batch.heads = heads;
  batch.kv_heads = kv_heads;
  batch.head_dim = dim;
  batch.q_pos = w.positions();
  batch.q_seq = w.q_seq();
  batch.k = w.k_table(spec.cache_index);
  batch.v = w.v_table(spec.cache_index, config_.num_cache_layers);
  batch.kv_len = w.kv_len();
  batch.max_kv_len = plan.max_kv_len;
  batch.window = spec.sliding_window;
  batch.scale = 1.0f;
  const size_t partial_bytes = cuda::attention_partials_bytes(batch);
  void* partials = ctx_.scratch(cuda::Scratch::kAttentionPartials, std::max<size_t>(partial_bytes, 1));
  if (skip.inputs || skip.attention) {
    if (!skip.inputs) cuda::attention_inputs(batch, inputs, s);
    if (!skip.attention) cuda::attention(batch, static_cast<float*>(partials), partial_bytes, s);
  } else if (cuda::attention_with_inputs(batch, inputs, static_cast<float*>(partials), partial_bytes, s)) {
    ++fused_attention_inputs_;
  }
  if (!skip.o_proj)
    linear(lw.o_proj, w.attn.as<float>(), q_width, t, w.proj.as<float>(), config_.hidden_size);
}

// The router and the experts read the residual stream itself, normed (one kernel, moe_inputs, for both
// inputs); the routing writes the expert ids and weights. It depends only on the attention block's residual
// step, so with a routing stream it runs there, concurrently with the dense MLP on ctx_'s stream. Without
// one it runs first on ctx_'s stream, so that the expert ids are written two or more launches before the
// experts' first kernel, which then fetches their weights while the dense MLP finishes (ids_early).
void Gemma4CudaModel::enqueue_routing(int layer, const StepPlan& plan) {
  const DeviceLayerWeights& lw = weights_.layers[static_cast<size_t>(layer)];
  Workspace& w = *ws_;
  const int64_t t = plan.tokens, hidden = config_.hidden_size;
  cuda::CudaContext& ctx = routing_ ? routing_->ctx : ctx_;
  const cudaStream_t s = ctx.stream();
  if (routing_) {
    LMX_CUDA_CHECK(cudaEventRecord(routing_->fork, ctx_.stream()));
    LMX_CUDA_CHECK(cudaStreamWaitEvent(s, routing_->fork, 0));
  }
  cuda::moe_inputs(w.x.as<float>(), t, static_cast<int>(hidden), lw.router_scale.get(),
                   1.0f / std::sqrt(static_cast<float>(hidden)), lw.pre_feedforward_layernorm_2.get(),
                   config_.rms_norm_eps, w.routed.as<float>(), w.expert_in.as<float>(), s);
  linear(lw.router_proj, w.routed.as<float>(), hidden, t, w.router_logits.as<float>(), config_.num_experts, ctx);
  cuda::moe_route(w.router_logits.as<float>(), t, config_.num_experts, config_.top_k_experts,
                  lw.router_per_expert_scale.get(), w.expert_ids.as<int32_t>(), w.expert_weights.as<float>(), s);
  if (routing_) LMX_CUDA_CHECK(cudaEventRecord(routing_->join, s));
}

void Gemma4CudaModel::join_routing() {
  if (routing_) LMX_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), routing_->join, 0));
}

void Gemma4CudaModel::enqueue_ffn(int layer, const StepPlan& plan) {
  const Gemma4LayerSpec& spec = config_.layers[static_cast<size_t>(layer)];
  const DeviceLayerWeights& lw = weights_.layers[static_cast<size_t>(layer)];
  Workspace& w = *ws_;
  const int64_t t = plan.tokens, hidden = config_.hidden_size, inter = spec.intermediate_size;
  const float eps = config_.rms_norm_eps;
  float* ffn = w.ffn.as<float>();

  const DecodeSkips skip = skips_for(plan);
  const bool experts = spec.moe && !skip.experts;
  if (experts) enqueue_routing(layer, plan);
  float* gate = w.gate.as<float>();
  if (skip.mlp) {
    // (timing only: the dense MLP left out)
  } else if (lw.gate_up_proj.defined) {
    // One stacked projection: row r of `gate` holds gate(x) then up(x) — or, where the projection forms the
    // GeGLU itself (batch 1, 4-bit, wide MLPs), gelu_tanh(gate) * up.
    if (lw.gate_up_proj.quantized &&
        cuda::quantized_linear_geglu(w.normed.as<float>(), hidden, t, lw.gate_up_proj.packed, gate, ctx_)) {
      linear(lw.down_proj, gate, 2 * inter, t, ffn, hidden);
    } else {
      linear(lw.gate_up_proj, w.normed.as<float>(), hidden, t, gate, 2 * inter);
      linear_gelu(lw.down_proj, gate, 2 * inter, gate + inter, 2 * inter, t, ffn, hidden);
    }
  } else {
    linear(lw.gate_proj, w.normed.as<float>(), hidden, t, gate, inter);
    linear(lw.up_proj, w.normed.as<float>(), hidden, t, w.up.as<float>(), inter);
    linear_gelu(lw.down_proj, gate, inter, w.up.as<float>(), inter, t, ffn, hidden);
  }
  if (experts) {
    // The experts' combine norms their sum and the dense MLP's output and adds them into ffn.
    cuda::MoeOutputNorms norms;
    norms.dense_out = ffn;
    norms.dense_norm = lw.post_feedforward_layernorm_1.get();
    norms.expert_norm = lw.post_feedforward_layernorm_2.get();
    norms.eps = eps;
    float* expert_in = w.expert_in.as<float>();
    float* expert_out = w.expert_out.as<float>();
    join_routing();
    // ids_early: the experts' first kernel reads its expert ids before its PDL wait, which is safe when they
    // were written two or more launches back on this stream. After a join the routing's last kernel may be
    // a direct (programmatic) predecessor in a captured graph, so the ids are then read after the wait.
    if (lw.experts_down.quantized)
      cuda::quantized_moe_experts(expert_in, t, w.expert_ids.as<int32_t>(), w.expert_weights.as<float>(),
                                  config_.top_k_experts, lw.experts_gate_up.packed, lw.experts_down.packed,
                                  expert_out, ctx_, &norms, /*ids_early=*/routing_ == nullptr);
    else
      cuda::dense_moe_experts(expert_in, t, w.expert_ids.as<int32_t>(), w.expert_weights.as<float>(),
                              config_.top_k_experts, lw.experts_gate_up.dense, lw.experts_down.dense, expert_out, ctx_,
                              &norms);
  }
}

bool Gemma4CudaModel::enqueue_per_layer_input_step(int layer, const StepPlan& plan, float* next_normed,
                                                   const float* next_norm) {
  const DeviceLayerWeights& lw = weights_.layers[static_cast<size_t>(layer)];
  if (plan.tokens != 1 || !lw.per_layer_input_gate.quantized || !lw.per_layer_projection.quantized)
    return false;
  Workspace& w = *ws_;
  const int64_t width = config_.hidden_size_per_layer_input;
  cuda::PerLayerInputStep step;
  step.x = w.x.as<float>();
  step.mlp_out = w.ffn.as<float>();
  step.mlp_out_norm = lw.post_feedforward_layernorm.get();
  step.gate = &lw.per_layer_input_gate.packed;
  step.layer_input = w.ple.as<float>() + layer * width;
  step.projection = &lw.per_layer_projection.packed;
  step.projection_norm = lw.post_per_layer_input_norm.get();
  step.layer_scalar = lw.layer_scalar;
  step.next_normed = next_normed;
  step.next_norm = next_norm;
  step.dim = static_cast<int>(config_.hidden_size);
  step.width = static_cast<int>(width);
  step.eps = config_.rms_norm_eps;
  if (!cuda::per_layer_input_step(step, ctx_)) return false;
  ++fused_per_layer_input_steps_;
  return true;
}

void Gemma4CudaModel::enqueue_forward(const StepPlan& plan) {
  Workspace& w = *ws_;
  const cudaStream_t s = ctx_.stream();
  const int64_t t = plan.tokens, hidden = config_.hidden_size;
  const float eps = config_.rms_norm_eps;
  float* x = w.x.as<float>();
  float* normed = w.normed.as<float>();
  lookup(weights_.embed_tokens, w.ids(), t, std::sqrt(static_cast<float>(hidden)), x, hidden, s);
  const int64_t ple_width = config_.hidden_size_per_layer_input;
  if (ple_width > 0) enqueue_per_layer_inputs(plan);

  // Residual steps are fused (cuda::residual_norm): x += norm(sub-layer output) · w, times the layer
  // scalar at the layer's end, and the norm of x that the next sub-layer reads, in one kernel.
  const int layers = config_.num_hidden_layers;
  if (layers > 0)
    cuda::rms_norm(x, hidden, normed, hidden, t, static_cast<int>(hidden), weights_.layers[0].input_layernorm.get(),
                   eps, s);
  const DecodeSkips skip = skips_for(plan);
  const bool residual = !skip.residual;
  for (int i = 0; i < layers && !skip.layers; ++i) {
    const DeviceLayerWeights& lw = weights_.layers[static_cast<size_t>(i)];
    // The next layer's input norm, fused into this layer's last residual step (none after the last).
    const float* next_norm = i + 1 < layers ? weights_.layers[static_cast<size_t>(i) + 1].input_layernorm.get() : nullptr;
    float* next_normed = i + 1 < layers ? normed : nullptr;
    enqueue_attention(i, plan);
    if (residual)
      cuda::residual_norm(x, w.proj.as<float>(), lw.post_attention_layernorm.get(), 1.0f, normed,
                          lw.pre_feedforward_layernorm.get(), t, static_cast<int>(hidden), eps, s);
    enqueue_ffn(i, plan);
    if (ple_width == 0) {
      if (residual)
        cuda::residual_norm(x, w.ffn.as<float>(), lw.post_feedforward_layernorm.get(), lw.layer_scalar,
                            next_normed, next_norm, t, static_cast<int>(hidden), eps, s);
    } else {
      // A single-token step takes the MLP's residual step and the per-layer-input block in one kernel where
      // that kernel applies; else the four kernels below.
      if (residual && !skip.ple && enqueue_per_layer_input_step(i, plan, next_normed, next_norm)) continue;
      if (residual)
        cuda::residual_norm(x, w.ffn.as<float>(), lw.post_feedforward_layernorm.get(), 1.0f, nullptr, nullptr,
                            t, static_cast<int>(hidden), eps, s);
      if (skip.ple) continue;
      float* gate = w.ple_gate.as<float>();
      linear(lw.per_layer_input_gate, x, hidden, t, gate, ple_width);
      const int64_t ple_stride = static_cast<int64_t>(config_.num_hidden_layers) * ple_width;
      float* projected = w.proj.as<float>();
      linear_gelu(lw.per_layer_projection, gate, ple_width, w.ple.as<float>() + i * ple_width, ple_stride, t,
                  projected, hidden);
      if (residual)
        cuda::residual_norm(x, projected, lw.post_per_layer_input_norm.get(), lw.layer_scalar, next_normed,
                            next_norm, t, static_cast<int>(hidden), eps, s);
    }
  }

  // Output head over the requested positions.
  float* last = w.last.as<float>();
  if (plan.all_positions) {
    cuda::copy_rows(x, hidden, last, hidden, t, hidden, s);
  } else {
    for (int64_t r = 0; r < plan.rows; ++r)
      cuda::copy_rows(x + plan.last_index[static_cast<size_t>(r)] * hidden, hidden, last + r * hidden, hidden, 1, hidden,
                      s);
  }
  cuda::rms_norm(last, hidden, last, hidden, plan.out_rows, static_cast<int>(hidden), weights_.norm.get(), eps, s);
  const DeviceWeight& head = weights_.lm_head.defined ? weights_.lm_head : weights_.embed_tokens;
  float* logits = w.logits.as<float>();
  linear(head, last, hidden, plan.out_rows, logits, config_.vocab_size);
  if (config_.final_logit_softcapping)
    cuda::softcap(logits, plan.out_rows * config_.vocab_size, *config_.final_logit_softcapping, s);
  const size_t argmax_bytes = cuda::argmax_partials_bytes(plan.out_rows, config_.vocab_size);
  void* argmax_partials = argmax_bytes > 0 ? ctx_.scratch(cuda::Scratch::kArgmaxPartials, argmax_bytes) : nullptr;
  cuda::argmax_rows(logits, plan.out_rows, config_.vocab_size, w.argmax.as<int32_t>(), s, argmax_partials,
                    argmax_bytes);
}

void Gemma4CudaModel::run_step(const StepPlan& plan) {
  upload_step_inputs();
  // A scratch buffer that moved since the graphs were captured invalidates them.
  if (scratch_generation() != graphs_scratch_generation_) {
    drop_graphs();
    graphs_scratch_generation_ = scratch_generation();
  }
  const auto found = plan.graphed ? decode_graphs_.find(plan.max_kv_len) : decode_graphs_.end();
  if (found != decode_graphs_.end()) {
    LMX_CUDA_CHECK(cudaGraphLaunch(found->second, ctx_.stream()));
    ++graph_replays_;
  } else {
    // Direct launches; a single-token step of a new bucket is then captured for later replays (the
    // direct run first sizes every scratch buffer, so the capture allocates nothing).
    enqueue_forward(plan);
    if (plan.graphed && scratch_generation() != graphs_scratch_generation_) {
      drop_graphs();
      graphs_scratch_generation_ = scratch_generation();
    }
    if (plan.graphed) {
      cudaGraph_t graph = nullptr;
      LMX_CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream(), cudaStreamCaptureModeThreadLocal));
      try {
        enqueue_forward(plan);
      } catch (...) {
        (void)cudaStreamEndCapture(ctx_.stream(), &graph);
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        throw;
      }
      LMX_CUDA_CHECK(cudaStreamEndCapture(ctx_.stream(), &graph));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
      (void)cudaGraphDestroy(graph);
      LMX_CUDA_CHECK(instantiated);
      decode_graphs_[plan.max_kv_len] = exec;
      ++graph_captures_;
    }
  }
  for (size_t r = 0; r < plan.sequences.size(); ++r) plan.sequences[r]->advance(plan.new_tokens[r]);
}

Tensor Gemma4CudaModel::forward(std::span<const StepRow> rows, bool all_positions) {
  StepPlan plan = plan_step(rows, all_positions);
  run_step(plan);
  Tensor logits = Tensor::zeros({plan.out_rows, config_.vocab_size}, DType::kF32);
  LMX_CUDA_CHECK(cudaMemcpyAsync(logits.raw_data(), ws_->logits.data(), logits.nbytes(), cudaMemcpyDeviceToHost,
                                 ctx_.stream()));
  ctx_.synchronize();
  return logits;
}

std::vector<int32_t> Gemma4CudaModel::forward_argmax(std::span<const StepRow> rows) {
  StepPlan plan = plan_step(rows, false);
  run_step(plan);
  std::vector<int32_t> tokens(static_cast<size_t>(plan.out_rows));
  LMX_CUDA_CHECK(cudaMemcpyAsync(tokens.data(), ws_->argmax.data(), tokens.size() * 4, cudaMemcpyDeviceToHost,
                                 ctx_.stream()));
  ctx_.synchronize();
  return tokens;
}

}  // namespace lmx
