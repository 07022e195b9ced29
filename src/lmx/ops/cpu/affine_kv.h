// One token-head row of the affine KV codec on the host (kv/kv_codec.h, ops/paged_kv.h's AffineKvHalf):
// quantize on append, dequantize inside attention. Bit for bit what lmx::quant's reference codec gives
// (quantize_affine with MLX's GPU rounding and bf16 scales, then dequantize_affine), without allocating.
#pragma once

#include <cstdint>

namespace lmx::ops::cpu {

// codes[head_dim · bits / 32], scales and biases[head_dim / group] (bf16 bits) from x[head_dim].
// bits 4 or 8, group 32, 64 or 128 dividing head_dim (checked by the caller); non-finite elements give
// unspecified codes.
void quantize_affine_row(const float* x, int head_dim, int bits, int group, uint32_t* codes, uint16_t* scales,
                         uint16_t* biases);
// out[j] = fma(scale, code, bias) with the bf16 scale and bias widened exactly: AVX2 vectors where the CPU
// has them, else dequantize_affine_row_portable (the same bits; callable on its own so that tests compare
// both).
void dequantize_affine_row(const uint32_t* codes, const uint16_t* scales, const uint16_t* biases,
                           int head_dim, int bits, int group, float* out);
void dequantize_affine_row_portable(const uint32_t* codes, const uint16_t* scales, const uint16_t* biases,
                                    int head_dim, int bits, int group, float* out);

}  // namespace lmx::ops::cpu
