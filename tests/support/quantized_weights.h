// Random MLX affine-quantized weights for the quantized-kernel tests (CPU and GPU), and their
// dequantization: the slow reference the kernels are compared against. Header-only, so test binaries that
// do not link the quantization library never see it.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"
#include "support/test_support.h"

#include <random>

namespace lmx::test {

// A random [.., N, K] weight: either arbitrary codes (every word is a valid bit stream) with random
// scales of both signs and random biases, or the MLX quantization of random values.
inline ops::QuantizedWeight random_quantized_weight(const Shape& shape, int bits, int group, DType scale_type,
                                                    bool arbitrary_codes) {
  ops::QuantizedWeight w;
  w.bits = bits;
  w.group_size = group;
  if (arbitrary_codes) {
    Shape codes_shape = shape, group_shape = shape;
    codes_shape.back() = shape.back() * bits / 32;
    group_shape.back() = shape.back() / group;
    w.codes = Tensor::zeros(codes_shape, DType::kU32);
    std::uniform_int_distribution<uint32_t> pick;
    for (auto& c : w.codes.span<uint32_t>()) c = pick(rng());
    w.scales = random_tensor(group_shape, scale_type, -0.1f, 0.1f);
    w.biases = random_tensor(group_shape, scale_type, -0.5f, 0.5f);
  } else {
    const auto q = quant::quantize_affine(random_tensor(shape), bits, group, scale_type);
    w.codes = q.codes;
    w.scales = q.scales;
    w.biases = q.biases;
  }
  return w;
}

// An [E, N, K] expert stack with arbitrary codes, random scales of both signs (|scale * q| < 1) and
// biases (quantizing a Gemma-sized f32 stack would need gigabytes).
inline ops::QuantizedWeight random_expert_stack(int64_t e, int64_t n, int64_t k, int bits, int group,
                                                DType scale_type) {
  ops::QuantizedWeight w;
  w.bits = bits;
  w.group_size = group;
  w.codes = Tensor::zeros({e, n, k * bits / 32}, DType::kU32);
  std::uniform_int_distribution<uint32_t> pick;
  for (auto& c : w.codes.span<uint32_t>()) c = pick(rng());
  const float step = 1.0f / static_cast<float>(1 << bits);
  w.scales = random_tensor({e, n, k / group}, scale_type, -step, step);
  w.biases = random_tensor({e, n, k / group}, scale_type, -0.3f, 0.3f);
  return w;
}

// The weight's f32 values (scale * code + bias), the slow obvious path.
inline Tensor dequantized(const ops::QuantizedWeight& w) {
  return quant::dequantize_affine({w.codes, w.scales, w.biases, w.bits, w.group_size});
}

}  // namespace lmx::test
