// A step's paged KV on the host: appending rows into blocks and attention per row (ops.h).
#include "lmx/core/half.h"
#include "lmx/ops/cpu/affine_kv.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/ops.h"
#include "lmx/quant/turbo.h"

#include <cstring>
#include <vector>

namespace lmx::ops {

namespace {
void require_rows(const Tensor& t, int64_t tokens, int64_t width, const char* what) {
  LMX_REQUIRE(InvalidArgument,
              t.dtype() == DType::kF32 && t.device().is_cpu() && t.ndim() == 2 && t.dim(0) == tokens &&
                  t.dim(1) == width && t.strides()[1] == 1,
              "paged KV: {} {} must be f32 host rows [{}, {}]", what, shape_string(t.shape()), tokens, width);
}

// Row r's blocks as a PagedKvRow (addresses in the step's host tables).
PagedKvRow row_view(const PagedKvStep& step, const PagedKvLayer& kv, int64_t r) {
  PagedKvRow row;
  row.first_block = kv.tables.first_block[r];
  row.kv_len = step.kv_len[r];
  row.block_tokens = step.block_tokens;
  const int64_t held = (row.kv_len + step.block_tokens - 1) / step.block_tokens - row.first_block;
  LMX_REQUIRE(InvalidArgument, held >= 0 && held <= kv.tables.stride,
              "paged KV: row {} needs {} blocks, {} staged", r, held, kv.tables.stride);
  row.blocks = {kv.tables.blocks + r * kv.tables.stride, static_cast<size_t>(held)};
  row.k_offset = kv.k_offset;
  row.v_offset = kv.v_offset;
  row.kv_heads = kv.kv_heads;
  row.head_dim = kv.head_dim;
  row.dtype = kv.dtype;
  row.quant_bits = kv.quant_bits;
  row.quant_group = kv.quant_group;
  row.value_bits = kv.value_bits;
  row.turbo = kv.turbo;
  return row;
}
}  // namespace

void paged_kv_append(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& k, const Tensor& v) {
  const int64_t width = static_cast<int64_t>(kv.kv_heads) * kv.head_dim;
  require_rows(k, step.tokens, width, "k");
  require_rows(v, step.tokens, width, "v");
  const bool turbo = kv.turbo;
  const bool affine = kv.quant_bits > 0 && !turbo;
  const bool bf16 = kv.dtype == DType::kBF16;
  LMX_REQUIRE(
      InvalidArgument,
      cpu::paged_kv_format_ok(kv.dtype, kv.quant_bits, kv.quant_group, kv.value_bits, turbo, kv.head_dim),
      "paged KV: {} storage with {}-bit codes (groups of {}, {}-bit values{}) over head_dim {}",
      dtype_name(kv.dtype), kv.quant_bits, kv.quant_group, kv.value_bits, turbo ? ", TurboQuant" : "",
      kv.head_dim);
  const AffineKvHalf half{step.block_tokens, kv.kv_heads, kv.head_dim, kv.quant_bits, kv.quant_group};
  const size_t elem = bf16 ? 2 : 4;
  for (int64_t t = 0; t < step.tokens; ++t) {
    const int64_t r = step.q_row[t], p = step.q_pos[t];
    const int64_t b = p / step.block_tokens - kv.tables.first_block[r];
    LMX_REQUIRE(InvalidArgument, b >= 0 && b < kv.tables.stride && p < step.kv_len[r],
                "paged KV: position {} of row {} has no block", p, r);
    auto* block = static_cast<std::byte*>(const_cast<void*>(kv.tables.blocks[r * kv.tables.stride + b]));
    const int64_t slot_index = p % step.block_tokens;
    const float* src[2] = {k.data<float>() + t * k.strides()[0], v.data<float>() + t * v.strides()[0]};
    std::byte* halves[2] = {block + kv.k_offset, block + kv.v_offset};
    for (int i = 0; i < 2; ++i) {
      if (turbo) {
        const size_t row_bytes = i == 0 ? quant::turbo_key_bytes(kv.head_dim, kv.quant_bits)
                                        : quant::turbo_value_bytes(kv.head_dim, kv.value_bits);
        for (int h = 0; h < kv.kv_heads; ++h) {
          std::byte* dst = halves[i] + static_cast<size_t>(slot_index * kv.kv_heads + h) * row_bytes;
          if (i == 0)
            quant::turbo_quantize_key(src[i] + h * kv.head_dim, kv.head_dim, kv.quant_bits, dst);
          else
            quant::turbo_quantize_value(src[i] + h * kv.head_dim, kv.head_dim, kv.value_bits, dst);
        }
        continue;
      }
      if (affine) {
        for (int h = 0; h < kv.kv_heads; ++h) {
          const int64_t at = slot_index * kv.kv_heads + h;
          cpu::quantize_affine_row(src[i] + h * kv.head_dim, kv.head_dim, kv.quant_bits, kv.quant_group,
                                   reinterpret_cast<uint32_t*>(halves[i] + half.codes_at(at)),
                                   reinterpret_cast<uint16_t*>(halves[i] + half.scales_at(at)),
                                   reinterpret_cast<uint16_t*>(halves[i] + half.biases_at(at)));
        }
        continue;
      }
      std::byte* dst = halves[i] + static_cast<size_t>(slot_index * width) * elem;
      if (!bf16) {
        std::memcpy(dst, src[i], static_cast<size_t>(width) * 4);
        continue;
      }
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t e = 0; e < width; ++e) out[e] = f32_to_bf16(src[i][e]);
    }
  }
}

void paged_attention(const PagedKvStep& step, const PagedKvLayer& kv, const Tensor& q, float scale,
                     Tensor& out) {
  LMX_REQUIRE(InvalidArgument,
              q.ndim() == 2 && q.dim(0) == step.tokens && q.strides()[1] == 1 && kv.head_dim > 0 &&
                  q.dim(1) % kv.head_dim == 0 && out.is_contiguous() &&
                  out.shape() == Shape({q.dim(0), q.dim(1)}),
              "paged attention: q {} / out {} for {} tokens of head_dim {}", shape_string(q.shape()),
              shape_string(out.shape()), step.tokens, kv.head_dim);
  const int64_t heads = q.dim(1) / kv.head_dim;
  std::vector<int32_t> q_pos;
  for (int64_t t0 = 0; t0 < step.tokens;) {
    // The row's tokens are consecutive in the step.
    const int64_t r = step.q_row[t0];
    int64_t t1 = t0;
    while (t1 < step.tokens && step.q_row[t1] == r) ++t1;
    q_pos.assign(step.q_pos + t0, step.q_pos + t1);
    const Tensor row_q = q.slice(0, t0, t1), row_out = out.slice(0, t0, t1);
    // [n, heads · head_dim] rows as [n, heads, head_dim].
    const Tensor q3 = row_q.as_strided({t1 - t0, heads, kv.head_dim}, {row_q.strides()[0], kv.head_dim, 1});
    Tensor out3 = row_out.reshape({t1 - t0, heads, kv.head_dim});
    ops::paged_attention(q3, row_view(step, kv, r), q_pos, kv.window, scale, out3);
    t0 = t1;
  }
}

}  // namespace lmx::ops
