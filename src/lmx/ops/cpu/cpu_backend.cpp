// The CPU backend (cpu_backend.h).
#include "lmx/ops/cpu/cpu_backend.h"

#include "lmx/core/error.h"
#include "lmx/core/thread_pool.h"
#include "lmx/ops/ops.h"
#include "lmx/ops/quantized.h"
#include "lmx/ops/weight.h"

#include <cstring>
#include <vector>

namespace lmx {

namespace {

struct CpuWeight final : BackendWeight {
  Weight weight;
};

struct CpuExperts final : BackendExperts {
  Weight gate_up, gate, up, down;
};

const CpuWeight& cpu_weight(const BackendWeight& w) {
  const auto* c = dynamic_cast<const CpuWeight*>(&w);
  LMX_REQUIRE(InvalidArgument, c != nullptr, "cpu backend: a weight prepared by another backend");
  return *c;
}

// A [rows, cols] view of x as `shape` when x's rows are contiguous (else x itself).
Tensor host_span_i32(const Tensor& t, const char* what) {
  LMX_REQUIRE(InvalidArgument, t.device().is_cpu() && t.dtype() == DType::kI32 && t.is_contiguous(),
              "cpu backend: {} must be contiguous int32 host memory", what);
  return t;
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  bool supports_quantized_kv() const override { return true; }
  std::string description() const override {
    return fmt::format("cpu ({}, {} threads)", ops::simd_target_name(), default_pool().threads());
  }

  Tensor workspace(int slot, const Shape& shape, DType dtype) override {
    LMX_REQUIRE(InvalidArgument, slot >= 0 && slot < 4096, "cpu backend: workspace slot {}", slot);
    if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    std::shared_ptr<Storage>& storage = slots_[static_cast<size_t>(slot)];
    if (!storage || storage->bytes() < bytes) {
      storage = Storage::allocate(std::max(bytes, storage ? storage->bytes() * 2 : size_t{0}));
      ++generation_;
    }
    return Tensor::from_storage(storage, shape, dtype);
  }
  int memory_generation() const override { return generation_; }
  Tensor upload(const Tensor& host) override { return host.to(DType::kF32); }
  Tensor stage(int slot, std::span<const std::byte> host) override {
    Tensor t = workspace(slot, {static_cast<int64_t>(host.size())}, DType::kU8);
    if (!host.empty()) std::memcpy(t.raw_data(), host.data(), host.size());
    return t;
  }
  void to_host(const Tensor& src, void* dst) override {
    LMX_REQUIRE(InvalidArgument, src.is_contiguous(), "to_host of a non-contiguous tensor");
    std::memcpy(dst, src.raw_data(), src.nbytes());
  }
  std::shared_ptr<KvMemory> kv_memory() override { return memory_; }

  std::shared_ptr<const BackendWeight> prepare_weight(const Weight& w) override {
    auto c = std::make_shared<CpuWeight>();
    c->weight = w;
    c->rows = w.rows();
    c->cols = w.cols();
    c->quantized = w.is_quantized();
    return c;
  }
  std::shared_ptr<const BackendExperts> prepare_experts(const Weight& gate_up, const Weight& gate,
                                                        const Weight& up, const Weight& down) override {
    auto e = std::make_shared<CpuExperts>();
    e->gate_up = gate_up;
    e->gate = gate;
    e->up = up;
    e->down = down;
    e->experts = down.is_quantized() ? down.quantized.codes.dim(0) : down.dense.dim(0);
    e->hidden = down.rows();
    e->inter = down.cols();
    return e;
  }

  void linear(const Tensor& x, const BackendWeight& w, Tensor& out) override {
    const Weight& weight = cpu_weight(w).weight;
    if (out.is_contiguous()) {
      if (weight.is_quantized())
        ops::quantized_linear(x, weight.quantized, out);
      else
        ops::linear(x, weight.dense, out);
      return;
    }
    Tensor full;
    if (weight.is_quantized())
      ops::quantized_linear(x, weight.quantized, full);
    else
      ops::linear(x, weight.dense, full);
    copy(full, out);
  }
  void embedding(const BackendWeight& table, const Tensor& ids, float scale, Tensor& out) override {
    const Tensor i = host_span_i32(ids, "embedding ids");
    lookup_rows(cpu_weight(table).weight, i.span<int32_t>(), scale, out);
  }
  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override {
    ops::rms_norm(x, weight, eps, out);
  }
  void head_norm(Tensor& x, int heads, const Tensor* weight, float eps) override {
    const int64_t tokens = x.dim(0), dim = x.dim(1) / heads;
    Tensor view = x.as_strided({tokens, heads, dim}, {x.strides()[0], dim, 1});
    for (int64_t t = 0; t < tokens; ++t) {
      Tensor rows = view.select(t);  // [heads, dim], contiguous
      ops::rms_norm(rows, weight, eps, rows);
    }
  }
  void rope(Tensor& x, int heads, const Tensor& positions, const Tensor& inv_freq) override {
    const int64_t tokens = x.dim(0), dim = x.dim(1) / heads;
    Tensor view = x.as_strided({tokens, heads, dim}, {x.strides()[0], dim, 1});
    ops::apply_rope(view, host_span_i32(positions, "rope positions").span<int32_t>(), inv_freq.span<float>());
  }
  void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    ops::gelu_tanh_mul(gate, up, out);
  }
  void add(Tensor& out, const Tensor& a) override { ops::add_inplace(out, a); }
  void scale(Tensor& x, float s) override { ops::scale_inplace(x, s); }
  void mul_rows(Tensor& x, const Tensor& row) override { ops::mul_inplace(x, row); }
  void softcap(Tensor& x, float cap) override { ops::softcap(x, cap); }
  void copy(const Tensor& src, Tensor& dst) override {
    LMX_REQUIRE(InvalidArgument,
                src.ndim() == 2 && src.shape() == dst.shape() && src.strides()[1] == 1 &&
                    dst.strides()[1] == 1 && src.dtype() == dst.dtype(),
                "cpu backend copy: {} to {}", shape_string(src.shape()), shape_string(dst.shape()));
    const size_t row_bytes = static_cast<size_t>(src.dim(1)) * dtype_size(src.dtype());
    for (int64_t r = 0; r < src.dim(0); ++r)
      std::memcpy(
          static_cast<std::byte*>(dst.raw_data()) + r * dst.strides()[0] * dtype_size(dst.dtype()),
          static_cast<const std::byte*>(src.raw_data()) + r * src.strides()[0] * dtype_size(src.dtype()),
          row_bytes);
  }
  void moe_route(const Tensor& logits, int top_k, const Tensor* per_expert_scale, Tensor& experts,
                 Tensor& weights) override {
    ops::moe_route(logits, top_k, per_expert_scale, experts, weights);
  }
  void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const BackendExperts& w,
                   Tensor& out) override {
    const auto* e = dynamic_cast<const CpuExperts*>(&w);
    LMX_REQUIRE(InvalidArgument, e != nullptr, "cpu backend: experts prepared by another backend");
    if (e->down.is_quantized())
      ops::quantized_moe_experts(x, experts, weights, e->gate.quantized, e->up.quantized, e->down.quantized,
                                 out);
    else
      ops::moe_experts(x, experts, weights, e->gate_up.dense, e->down.dense, out);
  }
  void argmax_rows(const Tensor& x, Tensor& out) override {
    const int64_t vocab = x.dim(1);
    for (int64_t r = 0; r < x.dim(0); ++r)
      out.data<int32_t>()[r] =
          ops::argmax({x.data<float>() + r * x.strides()[0], static_cast<size_t>(vocab)});
  }
  void kv_append(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& k, const Tensor& v) override {
    ops::paged_kv_append(step, kv, k, v);
  }
  void attention(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& q, float scale,
                 Tensor& out) override {
    ops::paged_attention(step, kv, q, scale, out);
  }

 private:
  std::vector<std::shared_ptr<Storage>> slots_;
  int generation_ = 0;
  std::shared_ptr<KvMemory> memory_ = host_kv_memory();
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace lmx
