// Device helpers shared by the CUDA kernels that read MLX affine-quantized weights: code extraction
// for every bits value and scale/bias loading for each scale dtype. Bit-exact with quant/affine.h.
#pragma once

#include "lmx/core/dtype.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace lmx::cuda {

// log2 of an MLX group size (32, 64 or 128): the shift from a column index to its group.
__host__ __device__ constexpr int log2_group_size(int group_size) {
  return group_size == 32 ? 5 : group_size == 64 ? 6 : 7;
}

// Code j of a packed row (bits 2..8): bits [j*bits, j*bits + bits) of the row's little-endian uint32
// words, straddling into the next word when needed (3, 5, 6 bits).
__device__ __forceinline__ uint32_t unpack_code(const uint32_t* row_words, int64_t j, int bits) {
  const int64_t bit = j * bits;
  const int64_t word = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  uint32_t v = row_words[word] >> shift;
  if (shift + bits > 32) v |= row_words[word + 1] << (32 - shift);
  return v & ((1u << bits) - 1u);
}

// Element i of a scale or bias array of dtype `type` (kBF16, kF16 or kF32), widened to f32 exactly.
__device__ __forceinline__ float load_scale(const void* base, DType type, int64_t i) {
  if (type == DType::kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  if (type == DType::kF16) return __half2float(static_cast<const __half*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

// Dequantized weight (row n, column j) of a [rows, cols] quantized matrix — the slow obvious path the
// fast kernels are tested against: scale * code + bias in f32 (fmaf).
__device__ __forceinline__ float dequantize_element(const uint32_t* codes, const void* scales, const void* biases,
                                                   DType scale_dtype, int bits, int group_size, int64_t cols,
                                                   int64_t n, int64_t j) {
  const uint32_t* row = codes + n * (cols * bits / 32);
  const int64_t g = n * (cols / group_size) + j / group_size;
  return fmaf(load_scale(scales, scale_dtype, g), static_cast<float>(unpack_code(row, j, bits)),
              load_scale(biases, scale_dtype, g));
}

}  // namespace lmx::cuda
