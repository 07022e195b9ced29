// Quantized test weights on the CUDA device (GPU tests only): a host weight's upload with the view the
// kernels take, and 4-bit weights whose bf16 scales take the small-scale dequantization.
#pragma once

#include "lmx/core/half.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"
#include "support/quantized_weights.h"
#include "support/test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace lmx::test {

// A quantized weight on the device. code_offset shifts the codes inside their buffer (4-byte steps) to
// exercise the unaligned path.
struct DeviceQuantizedWeight {
  cuda::DeviceBuffer codes, scales, biases;
  cuda::DeviceQuantized view;
};

inline DeviceQuantizedWeight upload(const ops::QuantizedWeight& w, size_t code_offset = 0) {
  DeviceQuantizedWeight d;
  std::vector<unsigned char> code_bytes(code_offset + w.codes.nbytes());
  std::memcpy(code_bytes.data() + code_offset, w.codes.raw_data(), w.codes.nbytes());
  d.codes = cuda::upload_vector(code_bytes);
  d.scales = cuda::DeviceBuffer::upload(w.scales.raw_data(), w.scales.nbytes());
  d.biases = cuda::DeviceBuffer::upload(w.biases.raw_data(), w.biases.nbytes());
  d.view.codes =
      reinterpret_cast<const uint32_t*>(static_cast<const unsigned char*>(d.codes.data()) + code_offset);
  d.view.scales = d.scales.data();
  d.view.biases = d.biases.data();
  d.view.scale_dtype = w.scales.dtype();
  d.view.bits = w.bits;
  d.view.group_size = w.group_size;
  d.view.rows = w.rows();
  d.view.cols = w.cols();
  d.view.small_scales = quant::finite_magnitudes_below(w.scales, cuda::kSmallScaleLimit);  // as the uploader
  return d;
}

// A 4-bit weight with bf16 scales below cuda::kSmallScaleLimit (DeviceQuantized::small_scales): arbitrary
// codes; scales of both signs from 2^-9 up to the largest bf16 below 2^-5, plus zeros, subnormals and (when
// non_finite) ±inf and NaN in a few groups; biases of both signs, some -0.
inline ops::QuantizedWeight small_scale_weight(int64_t n, int64_t k, int group, bool non_finite) {
  ops::QuantizedWeight w = random_quantized_weight({n, k}, 4, group, DType::kBF16, true);
  auto* scales = static_cast<uint16_t*>(w.scales.raw_data());
  auto* biases = static_cast<uint16_t*>(w.biases.raw_data());
  const std::vector<float> pick = random_floats(static_cast<size_t>(w.scales.numel()), 0.0f, 1.0f);
  for (int64_t i = 0; i < w.scales.numel(); ++i) {
    const float u = pick[static_cast<size_t>(i)];
    const uint16_t sign = (i & 1) != 0 ? 0x8000u : 0u;
    uint16_t magnitude =
        std::min<uint16_t>(f32_to_bf16(std::ldexp(1.0f + u, -9 + static_cast<int>(u * 4.0f))),
                           0x3CFFu);       // 2^-9 .. < 2^-5 (rounding may reach 2^-5: clamped)
    if (i % 97 == 5) magnitude = 0x3CFFu;  // the largest bf16 below 2^-5
    if (i % 89 == 7) magnitude = 0x0000u;
    if (i % 83 == 11) magnitude = 0x0003u;                                        // subnormal
    if (non_finite && i % 101 == 13) magnitude = i % 2 == 0 ? 0x7F80u : 0x7FC0u;  // inf or NaN
    scales[i] = static_cast<uint16_t>(sign | magnitude);
    if (i % 79 == 3) biases[i] = 0x8000u;  // -0
  }
  return w;
}

}  // namespace lmx::test
