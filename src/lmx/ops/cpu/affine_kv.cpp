// The affine KV codec's host rows: quantize_affine's per-group arithmetic (lmx/quant/affine.h) in the
// same f32 operations, and its dequantization.
#include "lmx/ops/cpu/affine_kv.h"

#include "lmx/core/half.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace lmx::ops::cpu {

void quantize_affine_row(const float* x, int head_dim, int bits, int group, uint32_t* codes, uint16_t* scales,
                         uint16_t* biases) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  const int per_word = 32 / bits;
  std::fill(codes, codes + head_dim / per_word, 0u);
  for (int g = 0; g < head_dim / group; ++g) {
    const float* v = x + g * group;
    // MLX's GPU kernels start the max at 0 and the min above every finite value.
    float w_min = std::numeric_limits<float>::infinity(), w_max = 0.0f;
    for (int j = 0; j < group; ++j) {
      w_min = std::min(w_min, v[j]);
      w_max = std::max(w_max, v[j]);
    }
    const bool side = std::fabs(w_min) > std::fabs(w_max);
    float scale = std::max((w_max - w_min) / n_bins, eps);
    scale = side ? scale : -scale;
    const float edge = side ? w_min : w_max;
    const float q0 = std::round(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
    for (int j = 0; j < group; ++j) {
      const float q = std::round((v[j] - bias) / scale);
      const uint32_t code = q > 0.0f ? static_cast<uint32_t>(std::min(q, n_bins)) : 0u;
      const int e = g * group + j;
      codes[e / per_word] |= code << (e % per_word * bits);
    }
    scales[g] = f32_to_bf16(scale);
    biases[g] = f32_to_bf16(bias);
  }
}

namespace {

// kBits fixed at compile time, so the code extraction is shifts and masks.
template <int kBits>
void dequantize_body(const uint32_t* codes, const uint16_t* scales, const uint16_t* biases, int head_dim,
                     int group, float* out) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  for (int g = 0; g < head_dim / group; ++g) {
    const float scale = bf16_to_f32(scales[g]), bias = bf16_to_f32(biases[g]);
    const uint32_t* words = codes + g * group / kPerWord;
    float* o = out + g * group;
    for (int w = 0; w < group / kPerWord; ++w)
      for (int e = 0; e < kPerWord; ++e)
        o[w * kPerWord + e] = std::fma(scale, static_cast<float>((words[w] >> (e * kBits)) & kMask), bias);
  }
}

// AVX2 with FMA: eight codes per vector in element order — a 4-bit word broadcast and shifted by 0, 4, …, 28
// per lane, or eight 8-bit codes (bytes, little-endian words) widened — then one fused multiply-add each: the
// portable path's operations, so its bits.
__attribute__((target("avx2,fma"))) void dequantize_row_avx2(const uint32_t* codes, const uint16_t* scales,
                                                             const uint16_t* biases, int head_dim, int bits,
                                                             int group, float* out) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i nibble = _mm256_set1_epi32(15);
  const auto* bytes = reinterpret_cast<const uint8_t*>(codes);
  for (int g = 0; g < head_dim / group; ++g) {
    const __m256 scale = _mm256_set1_ps(bf16_to_f32(scales[g])),
                 bias = _mm256_set1_ps(bf16_to_f32(biases[g]));
    for (int e = g * group; e < (g + 1) * group; e += 8) {
      __m256i c;
      if (bits == 4) {
        c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(codes[e / 8])), shifts),
                             nibble);
      } else {
        c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + e)));
      }
      _mm256_storeu_ps(out + e, _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(c), bias));
    }
  }
}

}  // namespace

void dequantize_affine_row_portable(const uint32_t* codes, const uint16_t* scales, const uint16_t* biases,
                                    int head_dim, int bits, int group, float* out) {
  if (bits == 4)
    dequantize_body<4>(codes, scales, biases, head_dim, group, out);
  else
    dequantize_body<8>(codes, scales, biases, head_dim, group, out);
}

void dequantize_affine_row(const uint32_t* codes, const uint16_t* scales, const uint16_t* biases,
                           int head_dim, int bits, int group, float* out) {
  static const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2_fma)
    dequantize_row_avx2(codes, scales, biases, head_dim, bits, group, out);
  else
    dequantize_affine_row_portable(codes, scales, biases, head_dim, bits, group, out);
}

}  // namespace lmx::ops::cpu
