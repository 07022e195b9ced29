// The TurboQuant KV codec's rows (turbo.h).
#include "lmx/quant/turbo.h"

#include "lmx/core/half.h"
#include "lmx/quant/turbo_centroids.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace lmx::quant {
namespace {

constexpr std::array<float, 4> kCentroids2 = {LMX_TURBO_CENTROIDS_2};
constexpr std::array<float, 8> kCentroids3 = {LMX_TURBO_CENTROIDS_3};
constexpr std::array<float, 16> kCentroids4 = {LMX_TURBO_CENTROIDS_4};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Sign bits for up to 4096 elements.
const std::array<uint64_t, 64>& sign_words() {
  static const std::array<uint64_t, 64> words = [] {
    std::array<uint64_t, 64> w{};
    uint64_t state = 0x74757262'6f716e74ull;  // "turboqnt"
    for (auto& word : w) word = splitmix64(state);
    return w;
  }();
  return words;
}

// Unnormalised Walsh–Hadamard butterflies, then the 1/sqrt(d) scale.
void hadamard(float* x, int d) {
  for (int len = 1; len < d; len <<= 1)
    for (int i = 0; i < d; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(d));
  for (int i = 0; i < d; ++i) x[i] *= norm;
}

void put_bits(std::byte* stream, int index, int bits, uint32_t code) {
  for (int b = 0; b < bits; ++b)
    if (code >> b & 1u) {
      const int bit = index * bits + b;
      stream[bit / 8] |= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
    }
}

// Code `index` of a stream of `stream_bytes` bytes (bits ≤ 8, so it lies within two bytes).
uint32_t get_bits(const std::byte* stream, int index, int bits, size_t stream_bytes) {
  const int bit = index * bits;
  const auto at = static_cast<size_t>(bit / 8);
  uint32_t window = std::to_integer<uint8_t>(stream[at]);
  if (at + 1 < stream_bytes) window |= static_cast<uint32_t>(std::to_integer<uint8_t>(stream[at + 1])) << 8;
  return (window >> (bit % 8)) & ((1u << bits) - 1u);
}

uint16_t get_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void put_u16(std::byte* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
// Three bytes as a little-endian word, assembled in a register (eight 3-bit codes).
uint32_t get_u24(const std::byte* p) {
  return std::to_integer<uint32_t>(p[0]) | std::to_integer<uint32_t>(p[1]) << 8 |
         std::to_integer<uint32_t>(p[2]) << 16;
}

}  // namespace

bool turbo_head_dim_ok(int head_dim) {
  return head_dim >= kTurboBlock && head_dim <= 4096 && (head_dim & (head_dim - 1)) == 0;
}

size_t turbo_key_bytes(int head_dim, int key_bits) {
  return static_cast<size_t>(head_dim * key_bits / 8 + head_dim / kTurboBlock * 4);
}
size_t turbo_value_bytes(int head_dim, int value_bits) {
  return static_cast<size_t>(head_dim * value_bits / 8 + head_dim / kTurboBlock * 2);
}

float turbo_sign(int i) {
  return (sign_words()[static_cast<size_t>(i / 64)] >> (i % 64) & 1u) ? -1.0f : 1.0f;
}

std::span<const float> turbo_centroids(int bits) {
  if (bits == 2) return kCentroids2;
  if (bits == 3) return kCentroids3;
  return kCentroids4;
}

void turbo_rotate(float* x, int head_dim) {
  for (int i = 0; i < head_dim; ++i) x[i] *= turbo_sign(i);
  hadamard(x, head_dim);
}

void turbo_unrotate(float* x, int head_dim) {
  hadamard(x, head_dim);
  for (int i = 0; i < head_dim; ++i) x[i] *= turbo_sign(i);
}

void turbo_quantize_key(const float* x, int head_dim, int bits, std::byte* out) {
  const size_t code_bytes = static_cast<size_t>(head_dim * bits / 8);
  std::memset(out, 0, code_bytes);
  std::byte* params = out + code_bytes;
  for (int b = 0; b < head_dim / kTurboBlock; ++b) {
    const float* v = x + b * kTurboBlock;
    float lo = v[0], hi = v[0];
    for (int j = 1; j < kTurboBlock; ++j) {
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
    }
    float scale = 0.0f, zero = 0.0f;
    int lowest = 0, highest = 0;
    if (bits == 8) {
      scale = std::max((hi - lo) / 254.0f, std::fabs(hi + lo) / 4096.0f);
      lowest = -127;
      highest = 127;
    } else {
      scale = std::max((hi - lo) / 15.0f, std::fabs(lo) / 2048.0f);
      highest = 15;
    }
    if (!(scale > 0.0f)) scale = 1.0f;  // an all-zero block (or non-finite input)
    scale = f16_to_f32(f32_to_f16(scale));
    zero = bits == 8 ? std::round((hi + lo) / (2.0f * scale)) : std::round(lo / scale);
    for (int j = 0; j < kTurboBlock; ++j) {
      const float q = std::clamp(std::round(v[j] / scale - zero), static_cast<float>(lowest),
                                 static_cast<float>(highest));
      put_bits(out, b * kTurboBlock + j, bits,
               static_cast<uint32_t>(static_cast<int32_t>(q)) & ((1u << bits) - 1u));
    }
    put_u16(params + b * 4, f32_to_f16(scale));
    put_u16(params + b * 4 + 2, f32_to_f16(zero));
  }
}

namespace {

// Code `index` of a stream of kBits-bit codes: whole bytes, nibbles and pairs directly, 3 bits across bytes.
template <int kBits>
inline uint32_t code_at(const std::byte* stream, int index, size_t stream_bytes) {
  if constexpr (kBits == 8) return std::to_integer<uint8_t>(stream[index]);
  if constexpr (kBits == 4 || kBits == 2) {
    constexpr int kPerByte = 8 / kBits;
    return (std::to_integer<uint8_t>(stream[index / kPerByte]) >> (index % kPerByte * kBits)) &
           ((1u << kBits) - 1u);
  }
  return get_bits(stream, index, kBits, stream_bytes);
}

template <int kBits>
void dequantize_key(const std::byte* in, int head_dim, float* x) {
  const auto stream_bytes = static_cast<size_t>(head_dim * kBits / 8);
  const std::byte* params = in + stream_bytes;
  for (int b = 0; b < head_dim / kTurboBlock; ++b) {
    const float scale = f16_to_f32(get_u16(params + b * 4)), zero = f16_to_f32(get_u16(params + b * 4 + 2));
    for (int j = 0; j < kTurboBlock; ++j) {
      const uint32_t code = code_at<kBits>(in, b * kTurboBlock + j, stream_bytes);
      const int idx = kBits == 8 ? static_cast<int8_t>(code) : static_cast<int>(code);
      x[b * kTurboBlock + j] = (static_cast<float>(idx) + zero) * scale;
    }
  }
}

template <int kBits>
void dequantize_value(const std::byte* in, int head_dim, float* y) {
  const auto stream_bytes = static_cast<size_t>(head_dim * kBits / 8);
  const std::byte* sigmas = in + stream_bytes;
  const std::span<const float> c = turbo_centroids(kBits);
  for (int b = 0; b < head_dim / kTurboBlock; ++b) {
    const float sigma = f16_to_f32(get_u16(sigmas + b * 2));
    if constexpr (kBits == 3) {
      // Eight 3-bit codes per three bytes, read as one little-endian 24-bit word (a block starts on a byte).
      for (int k = 0; k < kTurboBlock / 8; ++k) {
        const uint32_t word = get_u24(in + (b * kTurboBlock / 8 + k) * 3);
        for (int e = 0; e < 8; ++e) y[b * kTurboBlock + k * 8 + e] = c[word >> (3 * e) & 7u] * sigma;
      }
    } else {
      for (int j = 0; j < kTurboBlock; ++j)
        y[b * kTurboBlock + j] = c[code_at<kBits>(in, b * kTurboBlock + j, stream_bytes)] * sigma;
    }
  }
}

// AVX2: eight codes per vector in element order, then the portable path's operations on each (an add and a
// multiply for keys, a table lookup and a multiply for values), so its bits. Codes 8k .. 8k + 7 of a
// kBits-bit stream are the kBits bytes from byte k · kBits, one little-endian word.
template <int kBits>
__attribute__((target("avx2"))) inline __m256i eight_codes(const std::byte* stream, int k) {
  // (Three bytes assembled in a register: copied to memory and read back as a word, the load would wait on
  // two narrower stores — a store-forwarding stall that made this slower than the scalar path.)
  const std::byte* p = stream + k * kBits;
  uint32_t word = 0;
  if constexpr (kBits == 3)
    word = get_u24(p);
  else if constexpr (kBits == 2)
    word = get_u16(p);
  else
    std::memcpy(&word, p, 4);
  const __m256i shifts =
      _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts),
                          _mm256_set1_epi32((1 << kBits) - 1));
}

template <int kBits>
__attribute__((target("avx2"))) void dequantize_key_avx2(const std::byte* in, int head_dim, float* x) {
  const std::byte* params = in + head_dim * kBits / 8;
  for (int b = 0; b < head_dim / kTurboBlock; ++b) {
    const __m256 scale = _mm256_set1_ps(f16_to_f32(get_u16(params + b * 4)));
    const __m256 zero = _mm256_set1_ps(f16_to_f32(get_u16(params + b * 4 + 2)));
    for (int k = b * kTurboBlock / 8; k < (b + 1) * kTurboBlock / 8; ++k) {
      __m256i idx;
      if constexpr (kBits == 8)  // signed bytes
        idx = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + k * 8)));
      else
        idx = eight_codes<kBits>(in, k);
      _mm256_storeu_ps(x + k * 8, _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(idx), zero), scale));
    }
  }
}

template <int kBits>
__attribute__((target("avx2"))) void dequantize_value_avx2(const std::byte* in, int head_dim, float* y) {
  const std::byte* sigmas = in + head_dim * kBits / 8;
  // The codebook padded to 16 entries, built once.
  static const std::array<float, 16> table = [] {
    std::array<float, 16> t{};
    const std::span<const float> c = turbo_centroids(kBits);
    std::copy(c.begin(), c.end(), t.begin());
    return t;
  }();
  const __m256 low = _mm256_loadu_ps(table.data()), high = _mm256_loadu_ps(table.data() + 8);
  for (int b = 0; b < head_dim / kTurboBlock; ++b) {
    const __m256 sigma = _mm256_set1_ps(f16_to_f32(get_u16(sigmas + b * 2)));
    for (int k = b * kTurboBlock / 8; k < (b + 1) * kTurboBlock / 8; ++k) {
      const __m256i idx = eight_codes<kBits>(in, k);
      __m256 centroid = _mm256_permutevar8x32_ps(low, idx);  // (the low three bits of idx)
      if constexpr (kBits == 4)
        centroid = _mm256_blendv_ps(centroid, _mm256_permutevar8x32_ps(high, idx),
                                    _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7))));
      _mm256_storeu_ps(y + k * 8, _mm256_mul_ps(centroid, sigma));
    }
  }
}

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

}  // namespace

void turbo_dequantize_key_portable(const std::byte* in, int head_dim, int bits, float* x) {
  if (bits == 8)
    dequantize_key<8>(in, head_dim, x);
  else
    dequantize_key<4>(in, head_dim, x);
}

void turbo_dequantize_key(const std::byte* in, int head_dim, int bits, float* x) {
  if (!cpu_has_avx2())
    turbo_dequantize_key_portable(in, head_dim, bits, x);
  else if (bits == 8)
    dequantize_key_avx2<8>(in, head_dim, x);
  else
    dequantize_key_avx2<4>(in, head_dim, x);
}

void turbo_quantize_value(const float* x, int head_dim, int bits, std::byte* out) {
  float y[4096];
  std::copy(x, x + head_dim, y);
  turbo_rotate(y, head_dim);
  const size_t code_bytes = static_cast<size_t>(head_dim * bits / 8);
  std::memset(out, 0, code_bytes);
  const std::span<const float> c = turbo_centroids(bits);
  for (int b = 0; b < head_dim / kTurboBlock; ++b) {
    const float* v = y + b * kTurboBlock;
    float squares = 0.0f;
    for (int j = 0; j < kTurboBlock; ++j) squares += v[j] * v[j];
    const float sigma = f16_to_f32(f32_to_f16(std::sqrt(squares / kTurboBlock)));
    for (int j = 0; j < kTurboBlock; ++j) {
      const float t = sigma > 0.0f ? v[j] / sigma : 0.0f;
      // The cell: the number of boundaries (centroid midpoints) below t.
      uint32_t idx = 0;
      while (idx + 1 < c.size() && t > 0.5f * (c[idx] + c[idx + 1])) ++idx;
      put_bits(out, b * kTurboBlock + j, bits, idx);
    }
    put_u16(out + code_bytes + b * 2, f32_to_f16(sigma));
  }
}

void turbo_dequantize_value_rotated_portable(const std::byte* in, int head_dim, int bits, float* y) {
  if (bits == 2)
    dequantize_value<2>(in, head_dim, y);
  else if (bits == 3)
    dequantize_value<3>(in, head_dim, y);
  else
    dequantize_value<4>(in, head_dim, y);
}

void turbo_dequantize_value_rotated(const std::byte* in, int head_dim, int bits, float* y) {
  if (!cpu_has_avx2())
    turbo_dequantize_value_rotated_portable(in, head_dim, bits, y);
  else if (bits == 2)
    dequantize_value_avx2<2>(in, head_dim, y);
  else if (bits == 3)
    dequantize_value_avx2<3>(in, head_dim, y);
  else
    dequantize_value_avx2<4>(in, head_dim, y);
}

}  // namespace lmx::quant
