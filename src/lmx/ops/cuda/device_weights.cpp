// Uploads weights to the GPU (see device_weights.h).
#include "lmx/ops/cuda/device_weights.h"

#include "lmx/core/error.h"
#include "lmx/quant/affine.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace lmx {

namespace {

// Points d's packed view at its own buffers (data, scales, biases), laid out like `like` (bits, group
// size, scale dtype, columns) with `batch` x `rows` rows.
void view_quantized(DeviceWeight& d, const ops::QuantizedWeight& like, int64_t batch, int64_t rows) {
  d.defined = d.quantized = true;
  d.packed.codes = d.data.as<const uint32_t>();
  d.packed.scales = d.scales.data();
  d.packed.biases = d.biases.data();
  d.packed.scale_dtype = like.scales.dtype();
  d.packed.bits = like.bits;
  d.packed.group_size = like.group_size;
  d.packed.batch = batch;
  d.packed.rows = rows;
  d.packed.cols = like.cols();
}

// Points d's dense view at its data buffer: [batch, rows, cols] of `dtype`.
void view_dense(DeviceWeight& d, DType dtype, int64_t batch, int64_t rows, int64_t cols) {
  d.defined = true;
  d.dense.data = d.data.data();
  d.dense.dtype = dtype;
  d.dense.batch = batch;
  d.dense.rows = rows;
  d.dense.cols = cols;
}

// DeviceQuantized::small_scales for a weight: decided only where a kernel uses it (4-bit codes, bf16
// scales), since it reads every scale.
bool small_scales(const ops::QuantizedWeight& q) {
  return q.bits == 4 && q.scales.dtype() == DType::kBF16 &&
         quant::finite_magnitudes_below(q.scales, cuda::kSmallScaleLimit);
}

cuda::DeviceBuffer upload_tensor(const Tensor& t) {
  const Tensor c = t.contiguous();
  return cuda::DeviceBuffer::upload(c.raw_data(), c.nbytes());
}

}  // namespace

DeviceWeight upload_weight(const Weight& w) {
  DeviceWeight d;
  if (!w.defined()) return d;
  if (w.is_quantized()) {
    const ops::QuantizedWeight& q = w.quantized;
    d.data = upload_tensor(q.codes);
    d.scales = upload_tensor(q.scales);
    d.biases = upload_tensor(q.biases);
    view_quantized(d, q, q.codes.ndim() == 3 ? q.codes.dim(0) : 1, q.rows());
    d.packed.small_scales = small_scales(q);
    return d;
  }
  Tensor t = w.dense;
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16) t = t.to(DType::kF32);
  d.data = upload_tensor(t);
  view_dense(d, t.dtype(), t.ndim() == 3 ? t.dim(0) : 1, t.dim(t.ndim() - 2), t.dim(t.ndim() - 1));
  return d;
}

DeviceWeight upload_stacked(std::span<const Weight* const> parts) {
  DeviceWeight d;
  if (parts.empty()) return d;
  const Weight& first = *parts.front();
  for (const Weight* w : parts) {
    if (!w->defined() || w->is_quantized() != first.is_quantized()) return d;
    if (w->is_quantized()) {
      const ops::QuantizedWeight &q = w->quantized, &q0 = first.quantized;
      if (q.codes.ndim() != 2 || q.bits != q0.bits || q.group_size != q0.group_size ||
          q.cols() != q0.cols() || q.scales.dtype() != q0.scales.dtype())
        return d;
    } else if (w->dense.ndim() != 2 || w->dense.dtype() != first.dense.dtype() ||
               w->dense.dim(1) != first.dense.dim(1) ||
               (first.dense.dtype() != DType::kF32 && first.dense.dtype() != DType::kBF16)) {
      return d;
    }
  }
  auto upload_concatenated = [&](auto tensor_of) {
    size_t bytes = 0;
    for (const Weight* w : parts) bytes += tensor_of(*w).nbytes();
    std::vector<unsigned char> host(bytes);
    size_t at = 0;
    for (const Weight* w : parts) {
      const Tensor t = tensor_of(*w).contiguous();
      std::memcpy(host.data() + at, t.raw_data(), t.nbytes());
      at += t.nbytes();
    }
    return cuda::DeviceBuffer::upload(host.data(), host.size());
  };
  int64_t rows = 0;
  for (const Weight* w : parts) rows += w->is_quantized() ? w->quantized.rows() : w->dense.dim(0);
  if (first.is_quantized()) {
    d.data = upload_concatenated([](const Weight& w) -> const Tensor& { return w.quantized.codes; });
    d.scales = upload_concatenated([](const Weight& w) -> const Tensor& { return w.quantized.scales; });
    d.biases = upload_concatenated([](const Weight& w) -> const Tensor& { return w.quantized.biases; });
    view_quantized(d, first.quantized, 1, rows);
    d.packed.small_scales =
        std::all_of(parts.begin(), parts.end(), [](const Weight* w) { return small_scales(w->quantized); });
  } else {
    d.data = upload_concatenated([](const Weight& w) -> const Tensor& { return w.dense; });
    view_dense(d, first.dense.dtype(), 1, rows, first.dense.dim(1));
  }
  return d;
}

DeviceWeight upload_expert_gate_up(const Weight& gate, const Weight& up) {
  const ops::QuantizedWeight &g = gate.quantized, &u = up.quantized;
  if (g.bits != u.bits || g.group_size != u.group_size || g.scales.dtype() != u.scales.dtype())
    throw Unsupported(
        fmt::format("the CUDA backend needs a layer's expert gate and up projections quantized alike; "
                    "got {}-bit group {} {} and {}-bit group {} {}",
                    g.bits, g.group_size, dtype_name(g.scales.dtype()), u.bits, u.group_size,
                    dtype_name(u.scales.dtype())));
  Weight joined;
  joined.quantized.codes = join_expert_rows(g.codes, u.codes, "expert gate/up codes");
  joined.quantized.scales = join_expert_rows(g.scales, u.scales, "expert gate/up scales");
  joined.quantized.biases = join_expert_rows(g.biases, u.biases, "expert gate/up biases");
  joined.quantized.bits = g.bits;
  joined.quantized.group_size = g.group_size;
  return upload_weight(joined);
}

size_t device_bytes(const DeviceWeight& w) {
  return w.data.bytes() + w.scales.bytes() + w.biases.bytes();
}

}  // namespace lmx
