// Uploads Gemma 4 weights to the GPU (see device_weights.h).
#include "lmx/model/cuda/device_weights.h"

#include "lmx/core/error.h"
#include "lmx/quant/affine.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
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

// 2-D projections with the same input width and storage (same dtype, or same bits, group size and
// scale dtype) as one [Σ rows, cols] weight, in the given order; undefined when any is absent or they
// differ. Each output row is computed from its own weight row, so the stacked projection gives the same
// values as the separate ones (up to the reduction split, which is chosen per shape).
DeviceWeight upload_stacked(std::initializer_list<const Weight*> parts) {
  DeviceWeight d;
  const Weight& first = **parts.begin();
  for (const Weight* w : parts) {
    if (!w->defined() || w->is_quantized() != first.is_quantized()) return d;
    if (w->is_quantized()) {
      const ops::QuantizedWeight &q = w->quantized, &q0 = first.quantized;
      if (q.codes.ndim() != 2 || q.bits != q0.bits || q.group_size != q0.group_size || q.cols() != q0.cols() ||
          q.scales.dtype() != q0.scales.dtype())
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

// Quantized expert gate and up stacks [E, I, H] as one [E, 2I, H] stack, expert by expert (the layout
// cuda::quantized_moe_experts reads). Unsupported when the two are not quantized alike.
DeviceWeight upload_expert_gate_up(const Weight& gate, const Weight& up) {
  const ops::QuantizedWeight &g = gate.quantized, &u = up.quantized;
  if (g.bits != u.bits || g.group_size != u.group_size || g.scales.dtype() != u.scales.dtype())
    throw Unsupported(fmt::format("the CUDA backend needs a layer's expert gate and up projections quantized alike; "
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

DeviceVector upload_vector(const Tensor& t) {
  DeviceVector v;
  if (!t.defined()) return v;
  const Tensor f = t.to(DType::kF32).contiguous();
  v.buffer = cuda::DeviceBuffer::upload(f.raw_data(), f.nbytes());
  return v;
}

size_t weight_bytes(const DeviceWeight& w) { return w.data.bytes() + w.scales.bytes() + w.biases.bytes(); }

}  // namespace

DeviceWeights DeviceWeights::upload(const Gemma4Weights& w) {
  DeviceWeights d;
  d.embed_tokens = upload_weight(w.embed_tokens);
  d.lm_head = upload_weight(w.lm_head);
  d.embed_tokens_per_layer = upload_weight(w.embed_tokens_per_layer);
  d.per_layer_model_projection = upload_weight(w.per_layer_model_projection);
  d.per_layer_projection_norm = upload_vector(w.per_layer_projection_norm);
  d.norm = upload_vector(w.norm);
  for (const Gemma4LayerWeights& l : w.layers) {
    DeviceLayerWeights& o = d.layers.emplace_back();
    o.input_layernorm = upload_vector(l.input_layernorm);
    o.post_attention_layernorm = upload_vector(l.post_attention_layernorm);
    o.pre_feedforward_layernorm = upload_vector(l.pre_feedforward_layernorm);
    o.post_feedforward_layernorm = upload_vector(l.post_feedforward_layernorm);
    if (l.k_proj.defined())
      o.qkv_proj = l.v_proj.defined() ? upload_stacked({&l.q_proj, &l.k_proj, &l.v_proj})
                                      : upload_stacked({&l.q_proj, &l.k_proj});
    if (!o.qkv_proj.defined) {
      o.q_proj = upload_weight(l.q_proj);
      o.k_proj = upload_weight(l.k_proj);
      o.v_proj = upload_weight(l.v_proj);
    }
    o.o_proj = upload_weight(l.o_proj);
    o.q_norm = upload_vector(l.q_norm);
    o.k_norm = upload_vector(l.k_norm);
    o.gate_up_proj = upload_stacked({&l.gate_proj, &l.up_proj});
    o.gate_up_proj.packed.gate_up_pair = o.gate_up_proj.quantized;
    if (!o.gate_up_proj.defined) {
      o.gate_proj = upload_weight(l.gate_proj);
      o.up_proj = upload_weight(l.up_proj);
    }
    o.down_proj = upload_weight(l.down_proj);
    o.router_proj = upload_weight(l.router_proj);
    o.router_scale = upload_vector(l.router_scale);
    o.router_per_expert_scale = upload_vector(l.router_per_expert_scale);
    o.experts_gate_up = l.experts_gate.is_quantized() ? upload_expert_gate_up(l.experts_gate, l.experts_up)
                                                      : upload_weight(l.experts_gate_up);
    o.experts_down = upload_weight(l.experts_down);
    o.pre_feedforward_layernorm_2 = upload_vector(l.pre_feedforward_layernorm_2);
    o.post_feedforward_layernorm_1 = upload_vector(l.post_feedforward_layernorm_1);
    o.post_feedforward_layernorm_2 = upload_vector(l.post_feedforward_layernorm_2);
    o.per_layer_input_gate = upload_weight(l.per_layer_input_gate);
    o.per_layer_projection = upload_weight(l.per_layer_projection);
    o.post_per_layer_input_norm = upload_vector(l.post_per_layer_input_norm);
    o.layer_scalar = l.layer_scalar;
  }
  return d;
}

size_t DeviceWeights::bytes() const {
  size_t total = weight_bytes(embed_tokens) + weight_bytes(lm_head) + weight_bytes(embed_tokens_per_layer) +
                 weight_bytes(per_layer_model_projection) + per_layer_projection_norm.buffer.bytes() +
                 norm.buffer.bytes();
  for (const auto& l : layers) {
    for (const DeviceWeight* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.qkv_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.gate_up_proj, &l.down_proj,
                                  &l.router_proj, &l.experts_gate_up, &l.experts_down,
                                  &l.per_layer_input_gate, &l.per_layer_projection})
      total += weight_bytes(*w);
    for (const DeviceVector* v : {&l.input_layernorm, &l.post_attention_layernorm, &l.pre_feedforward_layernorm,
                                  &l.post_feedforward_layernorm, &l.q_norm, &l.k_norm, &l.router_scale,
                                  &l.router_per_expert_scale, &l.pre_feedforward_layernorm_2,
                                  &l.post_feedforward_layernorm_1, &l.post_feedforward_layernorm_2,
                                  &l.post_per_layer_input_norm})
      total += v->buffer.bytes();
  }
  return total;
}

}  // namespace lmx
