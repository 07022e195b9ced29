// Rotary position embedding (rotate-half pairing) and its inverse-frequency table.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/ops.h"

#include <cmath>

namespace lmx::ops {

std::vector<float> rope_inv_freq(int head_dim, double theta, int rotated_pairs) {
  LMX_REQUIRE(InvalidArgument, head_dim > 0 && head_dim % 2 == 0,
                           "rope_inv_freq: head_dim {} must be positive and even", head_dim);
  LMX_REQUIRE(InvalidArgument, rotated_pairs >= 0 && rotated_pairs <= head_dim / 2,
                           "rope_inv_freq: rotated_pairs {} outside [0, {}]", rotated_pairs, head_dim / 2);
  LMX_REQUIRE(InvalidArgument, theta > 0.0 && std::isfinite(theta), "rope_inv_freq: theta {} must be positive",
                           theta);
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2), 0.0f);
  const float base = static_cast<float>(theta);
  for (int i = 0; i < rotated_pairs; ++i) {
    // torch: arange(0, dim, 2).float() / dim  → f32 division; base ** e → f32 pow; 1.0 / p → f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, exponent);
  }
  return inv_freq;
}

void apply_rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  constexpr const char* kOp = "apply_rope";
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  LMX_REQUIRE(InvalidArgument, x.ndim() == 3 && x.strides()[2] == 1,
                           "apply_rope: x must be [T, H, D] with a contiguous last dim, got {}",
                           shape_string(x.shape()));
  const int64_t tokens = x.dim(0), heads = x.dim(1), dim = x.dim(2);
  LMX_REQUIRE(InvalidArgument, dim % 2 == 0, "apply_rope: head dim {} must be even", dim);
  LMX_REQUIRE(InvalidArgument, static_cast<int64_t>(positions.size()) == tokens,
                           "apply_rope: {} positions for x {}", positions.size(), shape_string(x.shape()));
  LMX_REQUIRE(InvalidArgument, static_cast<int64_t>(inv_freq.size()) == dim / 2,
                           "apply_rope: {} inv_freq entries, expected D/2 = {}", inv_freq.size(), dim / 2);
  const int64_t half = dim / 2;
  float* base = x.data<float>();
  const int64_t stride_t = x.strides()[0], stride_h = x.strides()[1];
  parallel_for(tokens, std::max<int64_t>(1, 4096 / std::max<int64_t>(heads * dim, 1)),
               [&](int64_t begin, int64_t end) {
                 std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
                 for (int64_t t = begin; t < end; ++t) {
                   const float pos = static_cast<float>(positions[static_cast<size_t>(t)]);
                   for (int64_t i = 0; i < half; ++i) {
                     const float angle = pos * inv_freq[static_cast<size_t>(i)];
                     cos_v[static_cast<size_t>(i)] = std::cos(angle);
                     sin_v[static_cast<size_t>(i)] = std::sin(angle);
                   }
                   for (int64_t h = 0; h < heads; ++h) {
                     float* row = base + t * stride_t + h * stride_h;
                     for (int64_t i = 0; i < half; ++i) {
                       if (inv_freq[static_cast<size_t>(i)] == 0.0f) continue;
                       const float c = cos_v[static_cast<size_t>(i)], s = sin_v[static_cast<size_t>(i)];
                       const float a = row[i], b = row[i + half];
                       row[i] = a * c - b * s;
                       row[i + half] = b * c + a * s;
                     }
                   }
                 }
               });
}

}  // namespace lmx::ops
