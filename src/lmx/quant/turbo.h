// The TurboQuant KV codec (mlx-bun's variant, arXiv 2504.19874 without the QJL residual): keys quantized
// affinely per block of 32 along head_dim, values rotated by a fixed random-sign Walsh–Hadamard transform
// and quantized per block with a Lloyd–Max codebook for a unit Gaussian scaled by the block's RMS.
// Attention reads values in the rotated space and rotates each output row back once (deferred inverse
// rotation: attention is linear in V).
//
// Row layout of one token-head (head_dim d, a power of two ≥ 32; blocks of kTurboBlock elements):
// - keys, b_k bits: codes as a little-endian bit stream of d·b_k bits (element i at bits [i·b_k, i·b_k+b_k);
//   8-bit codes are two's-complement bytes), then per block an f16 scale and an f16 zero;
//   x̂ = (idx + zero) · scale.
//   8-bit: idx ∈ [−127, 127], scale = (max − min)/254, zero = round((max + min)/(2·scale));
//   4-bit: idx ∈ [0, 15], scale = (max − min)/15, zero = round(min/scale).
//   Two guards the original lacks: scale is at least |max + min|/4096 (8-bit) or |min|/2048 (4-bit), so the
//   zero is an integer of at most 2048 in magnitude, exact in f16 (a constant block then decodes exactly);
//   scale is rounded to f16 before the codes are computed, so they are the nearest for the stored scale.
// - values, b_v bits (2, 3 or 4): y = H(s ⊙ x) with H the orthonormal Walsh–Hadamard transform and s the
//   fixed signs turbo_sign(i); per block σ = sqrt(mean(y²)) stored f16; idx = the Lloyd–Max cell of y/σ
//   (boundaries the centroids' midpoints); codes a bit stream of d·b_v bits; ŷ = centroid[idx] · σ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace lmx::quant {

constexpr int kTurboBlock = 32;

// Whether head_dim suits the codec (a power of two, at least one block).
bool turbo_head_dim_ok(int head_dim);
// Bytes of one token-head's keys (key_bits 4 or 8) or values (value_bits 2, 3 or 4).
size_t turbo_key_bytes(int head_dim, int key_bits);
size_t turbo_value_bytes(int head_dim, int value_bits);

// The fixed sign of element i of the value rotation: +1 or −1 (bits of a splitmix64 stream seeded with
// "turboqnt").
float turbo_sign(int i);
// The Lloyd–Max centroids for a unit Gaussian at `bits` (2, 3 or 4), ascending: 2^bits of them.
std::span<const float> turbo_centroids(int bits);

// In place, x[d]: y = H(s ⊙ x) (turbo_rotate) and its inverse x = s ⊙ H(y) (turbo_unrotate), H normalised
// by 1/sqrt(d), butterflies in f32 in a fixed order.
void turbo_rotate(float* x, int head_dim);
void turbo_unrotate(float* x, int head_dim);

// One token-head row: out[turbo_key_bytes] from x[d]; x̂[d] from it, x̂ = (code + zero) · scale.
void turbo_quantize_key(const float* x, int head_dim, int bits, std::byte* out);
void turbo_dequantize_key(const std::byte* in, int head_dim, int bits, float* x);
// Values: out[turbo_value_bytes] from x[d] (rotated inside); ŷ[d] = the rotated-space values, centroid · σ.
void turbo_quantize_value(const float* x, int head_dim, int bits, std::byte* out);
void turbo_dequantize_value_rotated(const std::byte* in, int head_dim, int bits, float* y);
// The decoders take AVX2 vectors where the CPU has them; these are the portable paths they equal bit for bit
// (callable on their own so that tests compare both).
void turbo_dequantize_key_portable(const std::byte* in, int head_dim, int bits, float* x);
void turbo_dequantize_value_rotated_portable(const std::byte* in, int head_dim, int bits, float* y);

}  // namespace lmx::quant
