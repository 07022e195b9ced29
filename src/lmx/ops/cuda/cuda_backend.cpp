// The CUDA backend (cuda_backend.h).
#include "lmx/ops/cuda/cuda_backend.h"

#include "lmx/core/error.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/device_weights.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/exact.h"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/per_layer_input.h"
#include "lmx/ops/cuda/sampling.h"
#include "lmx/ops/cuda/tuning.h"
#include "lmx/ops/weight.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace lmx {

namespace {

struct CudaWeight final : BackendWeight {
  DeviceWeight device;
};

struct CudaExperts final : BackendExperts {
  DeviceWeight gate_up, down;  // gate_up [E, 2I, H] (quantized: gate and up joined expert by expert)
};

const DeviceWeight& device_weight(const BackendWeight& w) {
  const auto* c = dynamic_cast<const CudaWeight*>(&w);
  LMX_REQUIRE(InvalidArgument, c != nullptr && c->device.defined,
              "cuda backend: a weight prepared by another backend");
  return c->device;
}

std::shared_ptr<const BackendWeight> wrap(DeviceWeight d) {
  if (!d.defined) return nullptr;
  auto w = std::make_shared<CudaWeight>();
  w->rows = d.rows();
  w->cols = d.quantized ? d.packed.cols : d.dense.cols;
  w->quantized = d.quantized;
  w->device = std::move(d);
  return w;
}

// A 2-D f32 row view on the device: data, row stride, rows, columns.
struct Rows {
  float* data;
  int64_t stride, rows, cols;
};

// The quantized formats the CUDA kernels read and write (kv_codec.cuh): head dims up to 512 in 8-element
// chunks; the KvCodec checks the rest (groups dividing head_dim, TurboQuant's power-of-two head_dim).
void require_cuda_kv(const PagedKvLayer& kv) {
  LMX_REQUIRE(InvalidArgument, kv.quant_bits == 0 || (kv.head_dim % 8 == 0 && kv.head_dim <= 512),
              "cuda backend: quantized KV needs head_dim a multiple of 8 up to 512, got {}", kv.head_dim);
}

Rows rows_of(const Tensor& t, const char* what) {
  LMX_REQUIRE(InvalidArgument,
              !t.device().is_cpu() && t.dtype() == DType::kF32 && t.ndim() == 2 && t.strides()[1] == 1,
              "cuda backend: {} must be f32 device rows, got {} {} on {}", what, dtype_name(t.dtype()),
              shape_string(t.shape()), t.device().name());
  return {static_cast<float*>(t.raw_data()), t.strides()[0], t.dim(0), t.dim(1)};
}

// A contiguous f32 device tensor's data and element count.
float* contiguous_f32(const Tensor& t, const char* what) {
  LMX_REQUIRE(InvalidArgument, !t.device().is_cpu() && t.dtype() == DType::kF32 && t.is_contiguous(),
              "cuda backend: {} must be a contiguous f32 device tensor, got {} {}", what,
              dtype_name(t.dtype()), shape_string(t.shape()));
  return static_cast<float*>(t.raw_data());
}

const float* vector_or_null(const Tensor* t) {
  return t != nullptr && t->defined() ? contiguous_f32(*t, "vector") : nullptr;
}

const int32_t* ints(const Tensor& t, const char* what) {
  LMX_REQUIRE(InvalidArgument, !t.device().is_cpu() && t.dtype() == DType::kI32 && t.is_contiguous(),
              "cuda backend: {} must be contiguous int32 device memory", what);
  return static_cast<const int32_t*>(t.raw_data());
}

// KV blocks: stream-ordered allocations from the device's memory pool on the backend's stream (no
// device-wide synchronisation on allocation or release). Sequences may outlive the backend: once it is gone
// (detach()) blocks are released synchronously.
class CudaKvMemory final : public KvMemory {
 public:
  CudaKvMemory(int device, cudaStream_t stream) : device_(device), stream_(stream) {
    cudaMemPool_t pool = nullptr;
    LMX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;  // freed blocks stay in the pool for reuse
    LMX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  void* allocate(size_t bytes) override {
    LMX_REQUIRE(InvalidArgument, stream_ != nullptr, "KV blocks of a CUDA backend that no longer exists");
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes, stream_) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free(void* block, size_t) override {
    if (stream_ != nullptr)
      (void)cudaFreeAsync(block, stream_);
    else
      (void)cudaFree(block);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    LMX_REQUIRE(InvalidArgument, stream_ != nullptr, "KV blocks of a CUDA backend that no longer exists");
    LMX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void read(void* host, const void* src, size_t bytes) override {
    LMX_REQUIRE(InvalidArgument, stream_ != nullptr, "KV blocks of a CUDA backend that no longer exists");
    LMX_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
    LMX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void write(void* dst, const void* host, size_t bytes) override {
    LMX_REQUIRE(InvalidArgument, stream_ != nullptr, "KV blocks of a CUDA backend that no longer exists");
    LMX_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
    LMX_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may be reused on return
  }
  // The backend's stream is going away: later releases are synchronous.
  void detach() { stream_ = nullptr; }
  std::string name() const override { return fmt::format("cuda:{}", device_); }
  size_t available_bytes() const override {
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
    return free_bytes;
  }

 private:
  int device_;
  cudaStream_t stream_;
};

// A second stream whose ops overlap the main stream's between a fork and a join (one event each).
struct SideStream {
  cuda::CudaContext ctx;
  cudaEvent_t fork = nullptr, join = nullptr;

  explicit SideStream(int device) : ctx(device) {
    LMX_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    const cudaError_t created = cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    if (created != cudaSuccess) (void)cudaEventDestroy(fork);
    LMX_CUDA_CHECK(created);
  }
  ~SideStream() {
    (void)cudaEventDestroy(fork);
    (void)cudaEventDestroy(join);
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : ctx_(device) {
    side_enabled_ = cuda::tuning_for_device(device).moe.routing_stream;
    memory_ = std::make_shared<CudaKvMemory>(device, ctx_.stream());
    LMX_CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  }
  ~CudaBackend() override {
    drop_graphs();
    (void)cudaStreamSynchronize(ctx_.stream());
    memory_->detach();
    (void)cudaEventDestroy(staged_);
    if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
  }

  Device device() const override { return Device::cuda(ctx_.device()); }
  std::string description() const override {
    return fmt::format("cuda:{} ({})", ctx_.device(), cuda::device_description(ctx_.device()));
  }
  void set_exact(bool exact) override { exact_ = exact; }
  bool exact() const override { return exact_; }

  // ---- Memory ----------------------------------------------------------------------------------------

  Tensor workspace(int slot, const Shape& shape, DType dtype) override {
    LMX_REQUIRE(InvalidArgument, slot >= 0 && slot < 4096, "cuda backend: workspace slot {}", slot);
    if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
    const size_t bytes = std::max<size_t>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), 256);
    std::shared_ptr<cuda::DeviceBuffer>& buffer = slots_[static_cast<size_t>(slot)];
    if (!buffer || buffer->bytes() < bytes) {
      LMX_REQUIRE(InvalidArgument, !ctx_.capturing(),
                  "cuda backend: step buffer {} must grow to {} bytes during graph capture (warm up first)",
                  slot, bytes);
      synchronize();  // the old buffer may still be in use
      buffer =
          std::make_shared<cuda::DeviceBuffer>(std::max(bytes, buffer ? buffer->bytes() * 2 : size_t{0}));
      ++generation_;
    }
    return Tensor::from_storage(Storage::borrow(buffer, buffer->data(), buffer->bytes(), device()), shape,
                                dtype);
  }
  int memory_generation() const override {
    return generation_ + ctx_.scratch_generation() + (side_ ? side_->ctx.scratch_generation() : 0);
  }
  Tensor upload(const Tensor& host) override {
    const Tensor f = host.to(DType::kF32);
    auto buffer = std::make_shared<cuda::DeviceBuffer>(cuda::DeviceBuffer::upload(f.raw_data(), f.nbytes()));
    return Tensor::from_storage(Storage::borrow(buffer, buffer->data(), f.nbytes(), device()), f.shape(),
                                DType::kF32);
  }
  Tensor stage(int slot, std::span<const std::byte> host) override {
    on_side_ = false;  // a step starts on the main stream (even after one that failed on the side)
    Tensor t = workspace(slot, {static_cast<int64_t>(host.size())}, DType::kU8);
    if (host.empty()) return t;
    if (pinned_bytes_ < host.size()) {
      LMX_CUDA_CHECK(cudaEventSynchronize(staged_));
      if (pinned_ != nullptr) LMX_CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_ = nullptr;
      pinned_bytes_ = std::max(host.size(), pinned_bytes_ * 2);
      LMX_CUDA_CHECK(cudaMallocHost(&pinned_, pinned_bytes_));
    }
    LMX_CUDA_CHECK(cudaEventSynchronize(staged_));  // the last step's copy has read the staging area
    std::memcpy(pinned_, host.data(), host.size());
    LMX_CUDA_CHECK(
        cudaMemcpyAsync(t.raw_data(), pinned_, host.size(), cudaMemcpyHostToDevice, ctx_.stream()));
    LMX_CUDA_CHECK(cudaEventRecord(staged_, ctx_.stream()));
    return t;
  }
  void to_host(const Tensor& src, void* dst) override {
    LMX_REQUIRE(InvalidArgument, src.is_contiguous(), "to_host of a non-contiguous tensor");
    LMX_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost, ctx_.stream()));
    synchronize();
  }
  std::shared_ptr<KvMemory> kv_memory() override { return memory_; }

  // ---- Weights ---------------------------------------------------------------------------------------

  std::shared_ptr<const BackendWeight> prepare_weight(const Weight& w) override {
    return wrap(upload_weight(w));
  }
  std::shared_ptr<const BackendWeight> prepare_stacked(std::span<const Weight* const> parts,
                                                       bool geglu_pair) override {
    DeviceWeight d = upload_stacked(parts);
    if (!d.defined) return nullptr;
    d.packed.gate_up_pair = geglu_pair && d.quantized;
    return wrap(std::move(d));
  }
  std::shared_ptr<const BackendExperts> prepare_experts(const Weight& gate_up, const Weight& gate,
                                                        const Weight& up, const Weight& down) override {
    auto e = std::make_shared<CudaExperts>();
    e->gate_up = gate.is_quantized() ? upload_expert_gate_up(gate, up) : upload_weight(gate_up);
    e->down = upload_weight(down);
    e->experts = down.is_quantized() ? down.quantized.codes.dim(0) : down.dense.dim(0);
    e->hidden = down.rows();
    e->inter = down.cols();
    return e;
  }

  // ---- Plain ops -------------------------------------------------------------------------------------

  void linear(const Tensor& x, const BackendWeight& w, Tensor& out) override {
    const Rows xr = rows_of(x, "linear x"), o = rows_of(out, "linear out");
    const DeviceWeight& d = device_weight(w);
    LMX_REQUIRE(InvalidArgument, xr.cols == w.cols && o.cols == w.rows && o.rows == xr.rows,
                "cuda linear: x {} and out {} for a [{}, {}] weight", shape_string(x.shape()),
                shape_string(out.shape()), w.rows, w.cols);
    if (exact_) {
      if (d.quantized)
        cuda::exact_linear(xr.data, xr.stride, xr.rows, d.packed, o.data, o.stride, stream());
      else
        cuda::exact_linear(xr.data, xr.stride, xr.rows, d.dense, o.data, o.stride, stream());
    } else if (d.quantized) {
      cuda::quantized_linear(xr.data, xr.stride, xr.rows, d.packed, o.data, o.stride, ctx());
    } else {
      cuda::dense_linear(xr.data, xr.stride, xr.rows, d.dense, o.data, o.stride, ctx());
    }
  }
  void embedding(const BackendWeight& table, const Tensor& ids, float scale, Tensor& out) override {
    const DeviceWeight& d = device_weight(table);
    const Rows o = rows_of(out, "embedding out");
    if (d.quantized)
      cuda::quantized_embedding(d.packed, ints(ids, "ids"), ids.numel(), scale, o.data, o.stride, stream());
    else
      cuda::embedding(d.dense.data, d.dense.dtype, d.dense.cols, ints(ids, "ids"), ids.numel(), scale, o.data,
                      o.stride, stream());
  }
  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override {
    const Rows xr = rows_of(x, "rms_norm x"), o = rows_of(out, "rms_norm out");
    cuda::rms_norm(xr.data, xr.stride, o.data, o.stride, xr.rows, static_cast<int>(xr.cols),
                   vector_or_null(weight), eps, stream());
  }
  void head_norm(Tensor& x, int heads, const Tensor* weight, float eps) override {
    const Rows xr = rows_of(x, "head_norm x");
    cuda::head_norm(xr.data, xr.stride, xr.rows, heads, static_cast<int>(xr.cols / heads),
                    vector_or_null(weight), eps, stream());
  }
  void rope(Tensor& x, int heads, const Tensor& positions, const Tensor& inv_freq) override {
    const Rows xr = rows_of(x, "rope x");
    cuda::rope(xr.data, xr.stride, xr.rows, heads, static_cast<int>(xr.cols / heads),
               ints(positions, "positions"), contiguous_f32(inv_freq, "inv_freq"), stream());
  }
  void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    const Rows g = rows_of(gate, "gate"), u = rows_of(up, "up"), o = rows_of(out, "out");
    cuda::gelu_tanh_mul(g.data, g.stride, u.data, u.stride, o.data, o.stride, g.rows, g.cols, stream());
  }
  void add(Tensor& out, const Tensor& a) override {
    LMX_REQUIRE(InvalidArgument, out.numel() == a.numel(), "cuda add: {} += {}", shape_string(out.shape()),
                shape_string(a.shape()));
    cuda::add(contiguous_f32(out, "add out"), contiguous_f32(a, "add a"), out.numel(), stream());
  }
  void scale(Tensor& x, float s) override {
    cuda::scale(contiguous_f32(x, "scale x"), x.numel(), s, stream());
  }
  void mul_rows(Tensor& x, const Tensor& row) override {
    const Rows xr = rows_of(x, "mul_rows x");
    LMX_REQUIRE(InvalidArgument, xr.stride == xr.cols && row.numel() == xr.cols, "cuda mul_rows: {} by {}",
                shape_string(x.shape()), shape_string(row.shape()));
    cuda::mul_rows(xr.data, contiguous_f32(row, "mul_rows row"), xr.rows, xr.cols, stream());
  }
  void softcap(Tensor& x, float cap) override {
    cuda::softcap(contiguous_f32(x, "softcap x"), x.numel(), cap, stream());
  }
  void copy(const Tensor& src, Tensor& dst) override {
    const Rows s = rows_of(src, "copy src"), d = rows_of(dst, "copy dst");
    LMX_REQUIRE(InvalidArgument, s.rows == d.rows && s.cols == d.cols, "cuda copy: {} to {}",
                shape_string(src.shape()), shape_string(dst.shape()));
    cuda::copy_rows(s.data, s.stride, d.data, d.stride, s.rows, s.cols, stream());
  }
  void moe_route(const Tensor& logits, int top_k, const Tensor* per_expert_scale, Tensor& experts,
                 Tensor& weights) override {
    const Rows l = rows_of(logits, "router logits");
    LMX_REQUIRE(InvalidArgument, l.stride == l.cols, "cuda moe_route: logits rows must be contiguous");
    cuda::moe_route(l.data, l.rows, static_cast<int>(l.cols), top_k, vector_or_null(per_expert_scale),
                    const_cast<int32_t*>(ints(experts, "expert ids")),
                    contiguous_f32(weights, "expert weights"), stream());
  }
  void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const BackendExperts& w,
                   Tensor& out) override {
    run_experts(x, experts, weights, w, out, nullptr, false);
  }
  void argmax_rows(const Tensor& x, Tensor& out) override {
    const Rows xr = rows_of(x, "argmax x");
    LMX_REQUIRE(InvalidArgument, xr.stride == xr.cols, "cuda argmax: rows must be contiguous");
    const size_t bytes = cuda::argmax_partials_bytes(xr.rows, xr.cols);
    void* partials = bytes > 0 ? ctx().scratch(cuda::Scratch::kArgmaxPartials, bytes) : nullptr;
    cuda::argmax_rows(xr.data, xr.rows, xr.cols, const_cast<int32_t*>(ints(out, "argmax out")), stream(),
                      partials, bytes);
  }
  bool supports_sampling() const override { return true; }
  bool sample_rows(const Tensor& logits, const Tensor& inputs, int64_t entries, Tensor& processed,
                   Tensor& out) override {
    const Rows lr = rows_of(logits, "sample_rows logits");
    LMX_REQUIRE(InvalidArgument, lr.stride == lr.cols && lr.cols <= INT32_MAX,
                "cuda sample_rows: logits must be contiguous rows of at most 2^31 - 1 columns");
    LMX_REQUIRE(InvalidArgument,
                inputs.nbytes() >= static_cast<size_t>(entries) * sizeof(SamplingRowParams) &&
                    processed.numel() >= entries * lr.cols && processed.dtype() == DType::kF32 &&
                    out.nbytes() >= static_cast<size_t>(entries) * sizeof(SampledRow),
                "cuda sample_rows: buffers too small for {} entries", entries);
    const auto* params = static_cast<const SamplingRowParams*>(inputs.raw_data());
    cuda::sample_rows(lr.data, lr.stride, static_cast<int>(lr.cols), entries, params,
                      reinterpret_cast<const LogitEdit*>(params + entries),
                      static_cast<float*>(processed.raw_data()), static_cast<SampledRow*>(out.raw_data()),
                      stream());
    return true;
  }
  bool supports_quantized_kv() const override { return true; }
  void kv_append(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& k, const Tensor& v) override {
    require_cuda_kv(kv);
    const Rows kr = rows_of(k, "kv_append k"), vr = rows_of(v, "kv_append v");
    const cuda::AttentionBatch b = batch(step, kv, nullptr, 0, nullptr, 0);
    if (kv.quant_bits > 0)
      cuda::kv_append_coded(kr.data, kr.stride, vr.data, vr.stride, step.tokens, kv.kv_heads, kv.head_dim,
                            step.q_pos, step.q_row, b.k, b.v, stream());
    else if (kv.dtype == DType::kF32)
      cuda::kv_append_f32(kr.data, kr.stride, vr.data, vr.stride, step.tokens, kv.kv_heads, kv.head_dim,
                          step.q_pos, step.q_row, b.k, b.v, stream());
    else
      cuda::kv_append(kr.data, kr.stride, vr.data, vr.stride, step.tokens, kv.kv_heads, kv.head_dim,
                      step.q_pos, step.q_row, b.k, b.v, stream());
  }
  void attention(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& q, float scale,
                 Tensor& out) override {
    require_cuda_kv(kv);
    const Rows qr = rows_of(q, "attention q");
    float* o = contiguous_f32(out, "attention out");
    cuda::AttentionBatch b = batch(step, kv, qr.data, qr.stride, o, static_cast<int>(qr.cols / kv.head_dim));
    b.scale = scale;
    if (kv.dtype == DType::kF32) {
      cuda::exact_attention(b, stream());
      return;
    }
    const size_t bytes = cuda::attention_partials_bytes(b);
    void* partials = ctx().scratch(cuda::Scratch::kAttentionPartials, std::max<size_t>(bytes, 1));
    cuda::attention(b, static_cast<float*>(partials), bytes, stream());
    // TurboQuant: attention summed the values in their rotated space; rotate each output row back once.
    if (kv.turbo) cuda::turbo_unrotate_rows(o, step.tokens * b.heads, kv.head_dim, stream());
  }

  // ---- Fused ops -------------------------------------------------------------------------------------

  bool residual_norm(Tensor& x, const Tensor& a, const Tensor* a_norm, float scale, Tensor* normed,
                     const Tensor* normed_norm, float eps) override {
    if (!x.is_contiguous() || !a.is_contiguous() || (normed != nullptr && !normed->is_contiguous()))
      return false;
    const Rows xr = rows_of(x, "residual x");
    cuda::residual_norm(xr.data, contiguous_f32(a, "residual a"), vector_or_null(a_norm), scale,
                        normed != nullptr ? contiguous_f32(*normed, "normed") : nullptr,
                        vector_or_null(normed_norm), xr.rows, static_cast<int>(xr.cols), eps, stream());
    return true;
  }
  bool linear_gelu(Tensor& gate, const Tensor& up, const BackendWeight& w, Tensor& out) override {
    const DeviceWeight& d = device_weight(w);
    if (exact_ || !d.quantized) return false;
    const Rows g = rows_of(gate, "gate"), u = rows_of(up, "up"), o = rows_of(out, "out");
    cuda::quantized_linear_gelu(g.data, g.stride, u.data, u.stride, g.rows, d.packed, o.data, o.stride,
                                ctx());
    return true;
  }
  bool linear_geglu(const Tensor& x, const BackendWeight& gate_up, Tensor& out) override {
    const DeviceWeight& d = device_weight(gate_up);
    if (exact_ || !d.quantized) return false;
    const Rows xr = rows_of(x, "geglu x"), o = rows_of(out, "geglu out");
    LMX_REQUIRE(InvalidArgument, o.stride == o.cols, "cuda geglu: out rows must be contiguous");
    return cuda::quantized_linear_geglu(xr.data, xr.stride, xr.rows, d.packed, o.data, ctx());
  }
  bool moe_inputs(const Tensor& x, const Tensor* router_scale, float router_mul, const Tensor* expert_norm,
                  float eps, Tensor& routed, Tensor& expert_in) override {
    const Rows xr = rows_of(x, "moe x");
    if (xr.stride != xr.cols || !routed.is_contiguous() || !expert_in.is_contiguous()) return false;
    cuda::moe_inputs(xr.data, xr.rows, static_cast<int>(xr.cols), vector_or_null(router_scale), router_mul,
                     vector_or_null(expert_norm), eps, contiguous_f32(routed, "routed"),
                     contiguous_f32(expert_in, "expert_in"), stream());
    return true;
  }
  bool moe_experts_normed(const Tensor& x, const Tensor& experts, const Tensor& weights,
                          const BackendExperts& w, Tensor& out, const MoeOutputNorms& norms,
                          bool ids_early) override {
    if (exact_ || norms.dense_out == nullptr || !norms.dense_out->is_contiguous()) return false;
    cuda::MoeOutputNorms n;
    n.dense_out = contiguous_f32(*norms.dense_out, "dense out");
    n.dense_norm = vector_or_null(norms.dense_norm);
    n.expert_norm = vector_or_null(norms.expert_norm);
    n.eps = norms.eps;
    run_experts(x, experts, weights, w, out, &n, ids_early);
    return true;
  }
  bool per_layer_input_step(const PerLayerInputStep& step) override {
    if (exact_ || step.x->dim(0) != 1) return false;
    const DeviceWeight& gate = device_weight(*step.gate);
    const DeviceWeight& projection = device_weight(*step.projection);
    if (!gate.quantized || !projection.quantized) return false;
    cuda::PerLayerInputStep s;
    s.x = contiguous_f32(*step.x, "x");
    s.mlp_out = contiguous_f32(*step.mlp_out, "mlp out");
    s.mlp_out_norm = vector_or_null(step.mlp_out_norm);
    s.gate = &gate.packed;
    s.layer_input = rows_of(step.layer_input, "layer input").data;
    s.projection = &projection.packed;
    s.projection_norm = vector_or_null(step.projection_norm);
    s.layer_scalar = step.layer_scalar;
    s.next_normed = step.next_normed != nullptr ? contiguous_f32(*step.next_normed, "next normed") : nullptr;
    s.next_norm = vector_or_null(step.next_norm);
    s.dim = static_cast<int>(step.x->dim(1));
    s.width = static_cast<int>(step.layer_input.dim(1));
    s.eps = step.eps;
    if (!cuda::per_layer_input_step(s, ctx())) return false;
    ++counters_.fused_per_layer_input_steps;
    return true;
  }
  bool attention_with_inputs(const PagedKvStep& step, const PagedKvLayer& kv, const AttentionInputs& in,
                             float scale, Tensor& out) override {
    if (exact_ || kv.dtype != DType::kBF16 || kv.quant_bits > 0) return false;
    const Rows q = rows_of(in.q, "q");
    cuda::AttentionBatch b = batch(step, kv, q.data, q.stride, contiguous_f32(out, "attention out"),
                                   static_cast<int>(q.cols / kv.head_dim));
    b.scale = scale;
    cuda::AttentionInputs inputs;
    inputs.q = q.data;
    inputs.q_norm = vector_or_null(in.q_norm);
    if (in.k.defined()) {
      const Rows k = rows_of(in.k, "k"), v = rows_of(in.v, "v");
      LMX_REQUIRE(InvalidArgument, k.stride == v.stride, "cuda attention inputs: k and v rows of one stride");
      inputs.k = k.data;
      inputs.v = v.data;
      inputs.kv_stride = k.stride;
      inputs.k_norm = vector_or_null(in.k_norm);
    }
    inputs.inv_freq = contiguous_f32(*in.inv_freq, "inv_freq");
    inputs.eps = in.eps;
    const size_t bytes = cuda::attention_partials_bytes(b);
    void* partials = ctx().scratch(cuda::Scratch::kAttentionPartials, std::max<size_t>(bytes, 1));
    if (cuda::attention_with_inputs(b, inputs, static_cast<float*>(partials), bytes, stream()))
      ++counters_.fused_attention_inputs;
    return true;
  }

  // ---- Concurrency -----------------------------------------------------------------------------------

  void begin_side() override {
    if (!side_enabled_) return;
    if (!side_) side_ = std::make_unique<SideStream>(ctx_.device());
    LMX_CUDA_CHECK(cudaEventRecord(side_->fork, ctx_.stream()));
    LMX_CUDA_CHECK(cudaStreamWaitEvent(side_->ctx.stream(), side_->fork, 0));
    on_side_ = true;
  }
  void end_side() override {
    if (!on_side_) return;
    LMX_CUDA_CHECK(cudaEventRecord(side_->join, side_->ctx.stream()));
    on_side_ = false;
    joined_ = false;
  }
  void join_side() override {
    if (!side_ || joined_) return;
    LMX_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), side_->join, 0));
    joined_ = true;
  }
  bool has_side() const override { return side_enabled_; }

  // ---- Graphs ----------------------------------------------------------------------------------------

  bool supports_graphs() const override { return true; }
  void begin_capture() override {
    LMX_CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream(), cudaStreamCaptureModeThreadLocal));
  }
  int end_capture() override {
    cudaGraph_t graph = nullptr;
    LMX_CUDA_CHECK(cudaStreamEndCapture(ctx_.stream(), &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    LMX_CUDA_CHECK(instantiated);
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }
  void abort_capture() override {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(ctx_.stream(), &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    on_side_ = false;
  }
  void replay(int graph) override {
    LMX_REQUIRE(InvalidArgument, graph >= 0 && static_cast<size_t>(graph) < graphs_.size() && graphs_[graph],
                "cuda backend: no graph {}", graph);
    LMX_CUDA_CHECK(cudaGraphLaunch(graphs_[static_cast<size_t>(graph)], ctx_.stream()));
  }
  void drop_graphs() override {
    for (cudaGraphExec_t g : graphs_)
      if (g != nullptr) (void)cudaGraphExecDestroy(g);
    graphs_.clear();
  }
  void synchronize() override {
    if (side_) side_->ctx.synchronize();
    ctx_.synchronize();
  }

 private:
  // The context ops are enqueued on: the side stream's between begin_side() and end_side().
  cuda::CudaContext& ctx() { return on_side_ ? side_->ctx : ctx_; }
  cudaStream_t stream() { return ctx().stream(); }

  // The kernels' view of a step's KV for one cache layer (q and out unset when null).
  cuda::AttentionBatch batch(const PagedKvStep& step, const PagedKvLayer& kv, const float* q,
                             int64_t q_stride, float* out, int heads) const {
    cuda::AttentionBatch b;
    b.q = q;
    b.q_stride = q_stride;
    b.out = out;
    b.tokens = step.tokens;
    b.heads = heads;
    b.kv_heads = kv.kv_heads;
    b.head_dim = kv.head_dim;
    b.q_pos = step.q_pos;
    b.q_seq = step.q_row;
    cuda::PagedStore store;
    store.blocks = kv.tables.blocks;
    store.stride = kv.tables.stride;
    store.first_block = kv.tables.first_block;
    store.block_tokens = step.block_tokens;
    b.k = b.v = store;
    b.k.offset = static_cast<int64_t>(kv.k_offset);
    b.v.offset = static_cast<int64_t>(kv.v_offset);
    if (kv.turbo) {
      b.k.codec = cuda::StoreCodec::kTurboKey;
      b.v.codec = cuda::StoreCodec::kTurboValue;
      b.k.bits = kv.quant_bits;
      b.v.bits = kv.value_bits;
    } else if (kv.quant_bits > 0) {
      b.k.codec = b.v.codec = cuda::StoreCodec::kAffine;
      b.k.bits = b.v.bits = kv.quant_bits;
      b.k.group = b.v.group = kv.quant_group;
    }
    b.kv_len = step.kv_len;
    b.max_kv_len = step.max_kv_len;
    b.window = kv.window;
    return b;
  }

  void run_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const BackendExperts& w,
                   Tensor& out, const cuda::MoeOutputNorms* norms, bool ids_early) {
    const auto* e = dynamic_cast<const CudaExperts*>(&w);
    LMX_REQUIRE(InvalidArgument, e != nullptr, "cuda backend: experts prepared by another backend");
    const int top_k = static_cast<int>(experts.dim(-1));
    const int64_t tokens = x.dim(0);
    const float* xd = contiguous_f32(x, "experts x");
    float* od = contiguous_f32(out, "experts out");
    const int32_t* ids = ints(experts, "expert ids");
    const float* wd = contiguous_f32(weights, "expert weights");
    if (exact_) {
      cuda::exact_moe_experts(xd, tokens, ids, wd, top_k, e->gate_up.quantized ? &e->gate_up.packed : nullptr,
                              e->gate_up.quantized ? nullptr : &e->gate_up.dense,
                              e->down.quantized ? &e->down.packed : nullptr,
                              e->down.quantized ? nullptr : &e->down.dense, od, stream());
    } else if (e->down.quantized) {
      cuda::quantized_moe_experts(xd, tokens, ids, wd, top_k, e->gate_up.packed, e->down.packed, od, ctx(),
                                  norms, ids_early);
    } else {
      cuda::dense_moe_experts(xd, tokens, ids, wd, top_k, e->gate_up.dense, e->down.dense, od, ctx(), norms);
    }
  }

  cuda::CudaContext ctx_;
  std::unique_ptr<SideStream> side_;
  bool side_enabled_ = true, on_side_ = false, joined_ = true;
  bool exact_ = false;
  std::vector<std::shared_ptr<cuda::DeviceBuffer>> slots_;
  int generation_ = 0;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  cudaEvent_t staged_ = nullptr;
  std::vector<cudaGraphExec_t> graphs_;
  std::shared_ptr<CudaKvMemory> memory_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace lmx
