// Integer kernels for 4- and 8-bit MLX affine weights on x86 CPUs with AVX-512 VNNI: x quantized to 24-bit
// fixed point (three int8 digits, a power-of-two unit per 8 columns), multiplied with the u8 codes by
// vpdpbusd into exact int32 sums, scaled to f32 once per 128 columns. Compiled per Highway target and
// dispatched at run time: only AVX3_DL (Ice Lake and later: VNNI, VBMI) and newer AVX-512 targets have
// them; on every other target, and for every other bit width, quantized_integer_kernels() is false and the
// f32 kernels (quantized_simd.cpp) run.
//
// Numerics (what quantized_linear computes for 4- and 8-bit weights on these CPUs):
// - Lanes. A chunk is 128 columns (the last one shorter when K % 128 != 0). Its codes are brought into two
//   u8 vectors of 64, one for the even columns and one for the odd ones: for 4 bits its 64 code bytes'
//   low and high nibbles, for 8 bits its 128 code bytes permuted (vpermt2b). vpdpbusd multiplies 4 u8 codes
//   by 4 s8 digits into one int32 lane, so lane l of a chunk covers its columns 8l..8l+7 (a block), which
//   lie inside one weight group (32, 64 or 128 columns).
// - x. Block j with M_j = max |x_i| gets a power-of-two unit u_j ≤ 1.008 * 2^-22 M_j, the smallest with
//   M_j / u_j ≤ 127 * 2^16, and x_i becomes x̂_i = u_j I_i with I_i = round(x_i / u_j) (an exact product
//   and one rounding to nearest even): |x_i - x̂_i| ≤ u_j / 2 ≤ 1.008 * 2^-23 M_j, close to f32's rounding
//   of the block's largest element. Units stay ≥ 2^-126 (so u_j and 1 / u_j are normal floats); an
//   all-zero block has I = 0; inf or NaN in x make the outputs non-finite (through the group sums below).
//   Why 24 bits per 8 columns: with 16 bits per 128 columns the tiny reference models' logits drift 0.03
//   from transformers (the parity tolerance is 0.001); with 24 bits they stay at 2-5e-4, the f32 kernels'
//   own level, and one large element only costs its 7 neighbours their precision.
// - I_i = 65536 a_i + 256 b_i + c_i in balanced base-256 digits (a in [-127, 127], b and c in
//   [-128, 127]). Codes are centered on z = 2^(bits - 1) (8 or 128): the weights are s (q - z) + b' with
//   b' = fma(z, s, b) in f32, so the lane sums and the bias terms are as large as the products x w
//   themselves, not as the uncentered s q x and b x that cancel (their f32 rounding would cost 2-3x the
//   f32 kernels' error).
//   4 bits: the lane's Σ (q - 8) I = Σ q I - 8 Σ I is exact in int32 (|Σ q I| ≤ 8 * 15 * 127 * 2^16 < 2^30,
//   |8 Σ I| < 2^29; the prepared row holds -8 Σ I per lane) and rounds once on conversion to f32.
//   8 bits: Σ (q - 128) I (up to 2^33) does not fit int32, so it is kept as 65536 H + L with
//   H = Σ (q - 128) a and L = Σ (q - 128)(256 b + c), each exact in int32 (|H| < 2^17, |L| < 2^25; the
//   prepared row holds -128 Σ a and -128 Σ (256 b + c) per lane); f32(L) rounds when |L| > 2^24 (by at
//   most 2 units u, 2^-8 of the quantization bound below) and fma(f32(H), 65536, f32(L)) once more.
// - out[m, n] = Σ_g s_g Σ_{i∈g} (q_i - z) x̂_i + Σ_g b'_g S_g, with S_g = Σ_{i∈g} x_i of the exact x
//   (summed in double, rounded to f32 once). So |out - exact| ≤ Σ_i |s_g (q_i - z)| u_j(i) / 2 + the f32
//   rounding of three steps (8 bits: four) per lane and chunk (and of b').
//
// Reduction order (batch invariance): out[m, n] is one vector of 16 f32 lanes; per chunk in order,
// acc = fma(f32(lane sum) * s_lane, u_lane, acc), then the b'_g S_g terms, 16 groups per fma, in order;
// finally one horizontal sum. It depends only on K, the bits and the group size: never on M, the row's
// position, the tile or the thread.
//
// Cost: per chunk, weight row and x row, 4 bits take 6 vpdpbusd and 6 other operations, 8 bits 6 vpdpbusd
// and 7 (plus two byte permutes per weight row): in decode (M = 1) both beat the f32 kernels' unpacking;
// in prefill the f32 kernels reuse a dequantized panel (one FMA per 16 weights and x row), which 8-bit
// prefill does not match (docs/benchmarks.md, "CPU kernels on the development VM").
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // Highway 1.0 compiles its AVX3_DL target only on request
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lmx/ops/cpu/quantized_vnni.cpp"
#include <hwy/aligned_allocator.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/cpu/tuning.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cassert>

#ifndef LMX_OPS_CPU_QUANTIZED_VNNI_LAYOUT
#define LMX_OPS_CPU_QUANTIZED_VNNI_LAYOUT
namespace lmx::ops::cpu {
namespace {

// Columns per chunk (one int32 sum per lane, converted to f32 once) and per block (one lane, one unit).
constexpr int64_t kChunkCols = 128;
constexpr int kBlockCols = 8;
constexpr int kLanes = 16;
// The largest |I| = 127 * 2^16, so that the top digit a stays in [-127, 127].
constexpr int kMaxInteger = 127 << 16;

// One prepared x row (quantized_integer_prepare_x) for `bits`-bit weights. Per chunk: the digits a, b, c as
// int8 vectors of 64 (even columns, then odd columns: the order of the 4-bit code nibbles, into which the
// 8-bit kernels permute their codes; zero past K), the lanes' units (f32 [16]), then the lanes' centering
// terms (int32 [16] each): for 4 bits -8 Σ I, for 8 bits -128 R and -128 Σ a with R = Σ (256 b + c) (so
// Σ I = 65536 Σ a + R). After the chunks: the group sums S_g (f32 [K / group], zero-padded to a multiple
// of 16).
constexpr int64_t kDigitBytes = 3 * 128;
constexpr int64_t kUnitsOffset = kDigitBytes;
constexpr int64_t kCenteringOffset = kUnitsOffset + 4 * kLanes;
constexpr int64_t kHighCenteringOffset = kCenteringOffset + 4 * kLanes;  // 8 bits only

int64_t integer_chunk_bytes(int bits) {
  return kCenteringOffset + (bits == 8 ? 2 : 1) * 4 * kLanes;
}
static_assert(kCenteringOffset % 64 == 0 && 4 * kLanes == 64);  // chunks stay 64-byte aligned

int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

struct IntegerRowLayout {
  int64_t chunk_bytes, chunks, sums_offset, bytes;
  IntegerRowLayout(int64_t k, int group_size, int bits) {
    chunk_bytes = integer_chunk_bytes(bits);
    chunks = (k + kChunkCols - 1) / kChunkCols;
    sums_offset = chunks * chunk_bytes;
    bytes = sums_offset + round_up(k / group_size, 16) * 4;
  }
};

}  // namespace
}  // namespace lmx::ops::cpu
#endif  // LMX_OPS_CPU_QUANTIZED_VNNI_LAYOUT

HWY_BEFORE_NAMESPACE();
namespace lmx::ops::cpu {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// Highway 1.0's AVX3_DL target string names avxvnni (VEX) but not avx512vnni; later versions have both.
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vbmi")
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands; GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Below this many x rows a block runs decode tiles (weights streamed once, prefetching the next tile);
// from it on, prefill tiles (x tiles reused across the block's weight rows). Values never depend on it.
constexpr int64_t kPrefillMinRows = 16;
// Register tiles: x rows × weight rows. Shapes only change speed (each output's operations are the same).
constexpr int kDecodeCols1 = 8;  // weight rows per decode tile with one x row
constexpr int kDecodeCols = 4;   // ... with 2 or 4 x rows
// Prefill tiles are 2 x rows × 4 weight rows, x-stationary: both rows' digits (12 registers) stay in
// registers while the 4 weight rows' codes pass one at a time, beside 8 accumulators. Against the 4 × 3
// weight-stationary tiles (each x row's digits loaded once per weight-row triple) 8-bit prefill ran ~18 %
// faster and 4-bit about the same; 4 × 4 spilled accumulators (bench_quant_bench's prefill table, alternating
// runs, 2026-12-05).
constexpr int kPrefillRows = 2;
constexpr int kPrefillCols = 4;
// The code values the kernels center on (half the code range).
constexpr int kCenter4 = 8;
constexpr int kCenter8 = 128;

bool integer_kernels_impl() {
  return true;
}

// ---- x rows -----------------------------------------------------------------------------------------

// Per column of v (16 columns, two blocks), the exponent e of its block's unit 2^e: the smallest with
// max / 2^e ≤ kMaxInteger, at least -126 (see the numerics above). Computed on the float bits: for
// non-negative floats the integer order is the float order, and max = 1.f * 2^E has
// max / 2^(E - 22) = 1.f * 2^22 ≤ kMaxInteger unless 1.f > 1.984375 (then E - 21). A block holding inf or
// NaN gets e = 106 or 107 (its I are garbage; its outputs are NaN through the group sums).
HWY_INLINE __m512i block_unit_exponents(__m512 v) {
  __m512i max = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
  max = _mm512_max_epu32(max, _mm512_shuffle_epi32(max, _MM_PERM_CDAB));                 // pairs
  max = _mm512_max_epu32(max, _mm512_shuffle_epi32(max, _MM_PERM_BADC));                 // 4 columns
  max = _mm512_max_epu32(max, _mm512_shuffle_i32x4(max, max, _MM_SHUFFLE(2, 3, 0, 1)));  // 8 columns
  const __mmask16 large = _mm512_cmpgt_epu32_mask(_mm512_and_si512(max, _mm512_set1_epi32(0x7FFFFF)),
                                                  _mm512_set1_epi32(0x7E0000));
  __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(max, 23), _mm512_set1_epi32(127 + 22));  // E - 22
  e = _mm512_mask_add_epi32(e, large, e, _mm512_set1_epi32(1));
  return _mm512_max_epi32(e, _mm512_set1_epi32(-126));
}

// kDigitIndex.bytes[2 d + parity]: byte 16 p + j of digit d's vector of even (parity 0) or odd columns
// is column 32 p + 2 j + parity, i.e. byte 4 (2 j + parity) + (2 - d) of the 128 bytes of int32 values
// of the 32-column pair p.
struct DigitIndex {
  alignas(64) uint8_t bytes[6][64];
  constexpr DigitIndex() : bytes{} {
    for (int d = 0; d < 3; ++d)
      for (int parity = 0; parity < 2; ++parity)
        for (int byte = 0; byte < 64; ++byte)
          bytes[2 * d + parity][byte] = static_cast<uint8_t>(4 * (2 * (byte % 16) + parity) + (2 - d));
  }
};
constexpr DigitIndex kDigitIndex;

// Writes a chunk's centering terms (see IntegerRowLayout) from its lanes' digit sums Σ a, Σ b, Σ c (each
// at most 8 * 128 in magnitude): for 4 bits -8 Σ I (|Σ I| ≤ 8 * 127 * 2^16), for 8 bits -128 R
// (|R| ≤ 8 * 32896) and -128 Σ a.
HWY_INLINE void store_centering(const __m512i (&digit_sums)[3], int bits, uint8_t* chunk) {
  const __m512i zero = _mm512_setzero_si512();
  // R = 256 Σ b + Σ c, Σ I = 65536 Σ a + R.
  const __m512i r = _mm512_add_epi32(_mm512_slli_epi32(digit_sums[1], 8), digit_sums[2]);
  if (bits == 4) {
    static_assert(kCenter4 == 1 << 3);
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(digit_sums[0], 16), r);
    _mm512_store_si512(chunk + kCenteringOffset, _mm512_sub_epi32(zero, _mm512_slli_epi32(sum, 3)));
  } else {
    static_assert(kCenter8 == 1 << 7);
    _mm512_store_si512(chunk + kCenteringOffset, _mm512_sub_epi32(zero, _mm512_slli_epi32(r, 7)));
    _mm512_store_si512(chunk + kHighCenteringOffset,
                       _mm512_sub_epi32(zero, _mm512_slli_epi32(digit_sums[0], 7)));
  }
}

// Writes one x row (k columns, a multiple of 32) in the IntegerRowLayout for `group_size` and `bits`.
void prepare_row(const float* x, int64_t k, int group_size, int bits, uint8_t* row) {
  const IntegerRowLayout layout(k, group_size, bits);
  auto* sums = reinterpret_cast<float*>(row + layout.sums_offset);
  __m512i digit_index[6];
  for (int j = 0; j < 6; ++j) digit_index[j] = _mm512_load_si512(kDigitIndex.bytes[j]);
  const __m512i limit = _mm512_set1_epi32(kMaxInteger);
  const __m512i ones = _mm512_set1_epi8(1);
  // Index vectors gathering lane units: [a0 a8 b0 b8 ..] from two vectors, then quarters, then halves.
  const __m512i pick_pairs = _mm512_setr_epi32(0, 8, 16, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i join_quarters = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i join_halves = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  for (int64_t c = 0; c < layout.chunks; ++c) {
    const int64_t col0 = c * kChunkCols;
    const int vectors = static_cast<int>(std::min<int64_t>(kChunkCols, k - col0) / 16);
    uint8_t* chunk = row + c * layout.chunk_bytes;
    // In balanced base 256 the digits of I are bytes: c is byte 0 of I (as a signed byte), b byte 1 of
    // I + 128, a byte 2 of I + 32896. Each pair of 16-column vectors (32 columns) fills 16 bytes of every
    // digit vector by a masked byte permutation (zero past K).
    __m512i digits[6] = {};  // a even, a odd, b even, b odd, c even, c odd
    __m512 units[kChunkCols / 16];
    for (int pair = 0; pair < kChunkCols / 32; ++pair) {
      __m512i shifted[2][3];  // per vector of the pair: I + 32896 (a), I + 128 (b), I (c)
      for (int h = 0; h < 2; ++h) {
        const int v = 2 * pair + h;
        const __m512 xv = v < vectors ? _mm512_loadu_ps(x + col0 + 16 * v) : _mm512_setzero_ps();
        const __m512i exponent = block_unit_exponents(xv);
        // 2^e and 2^-e built from their bits (both normal: -126 ≤ e ≤ 107); x * 2^-e is exact.
        units[v] =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(exponent, _mm512_set1_epi32(127)), 23));
        const __m512 inverse =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127), exponent), 23));
        __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(xv, inverse));
        i = _mm512_min_epi32(_mm512_max_epi32(i, _mm512_sub_epi32(_mm512_setzero_si512(), limit)), limit);
        shifted[h][0] = _mm512_add_epi32(i, _mm512_set1_epi32(32896));
        shifted[h][1] = _mm512_add_epi32(i, _mm512_set1_epi32(128));
        shifted[h][2] = i;
      }
      const auto segment = static_cast<__mmask64>(0xFFFFull << (16 * pair));
      for (int d = 0; d < 3; ++d)
        for (int parity = 0; parity < 2; ++parity)
          digits[2 * d + parity] = _mm512_mask_mov_epi8(
              digits[2 * d + parity], segment,
              _mm512_permutex2var_epi8(shifted[0][d], digit_index[2 * d + parity], shifted[1][d]));
    }
    auto* out = reinterpret_cast<int8_t*>(chunk);
    __m512i digit_sums[3];  // Σ a, Σ b, Σ c over each lane's 8 columns
    for (int d = 0; d < 3; ++d) {
      _mm512_store_si512(out + 128 * d, digits[2 * d]);
      _mm512_store_si512(out + 128 * d + 64, digits[2 * d + 1]);
      digit_sums[d] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, digits[2 * d]),
                                          ones, digits[2 * d + 1]);
    }
    // The lanes' units: columns 0 and 8 of each 16-column vector (every column of a block has its unit).
    __m512 pairs[4];
    for (int j = 0; j < 4; ++j) pairs[j] = _mm512_permutex2var_ps(units[2 * j], pick_pairs, units[2 * j + 1]);
    const __m512 low_lanes = _mm512_permutex2var_ps(pairs[0], join_quarters, pairs[1]);
    const __m512 high_lanes = _mm512_permutex2var_ps(pairs[2], join_quarters, pairs[3]);
    _mm512_store_ps(reinterpret_cast<float*>(chunk + kUnitsOffset),
                    _mm512_permutex2var_ps(low_lanes, join_halves, high_lanes));
    store_centering(digit_sums, bits, chunk);
  }
  // S_g summed in double (in a fixed order) and rounded once: the bias term b'_g S_g must not carry the
  // error of an f32 sum, which is relative to Σ|x|.
  const int64_t groups = k / group_size;
  std::memset(sums, 0, static_cast<size_t>(layout.bytes - layout.sums_offset));
  for (int64_t g = 0; g < groups; ++g) {
    const float* p = x + g * group_size;
    __m512d s = _mm512_setzero_pd();
    for (int v = 0; v < group_size / 8; ++v)
      s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm256_loadu_ps(p + 8 * v)));
    sums[g] = static_cast<float>(_mm512_reduce_add_pd(s));
  }
}

void integer_prepare_x_impl(const float* x, int64_t x_stride, int64_t rows, int64_t k, int group_size,
                            int bits, uint8_t* out) {
  const int64_t row_bytes = IntegerRowLayout(k, group_size, bits).bytes;
  for (int64_t r = 0; r < rows; ++r) prepare_row(x + r * x_stride, k, group_size, bits, out + r * row_bytes);
}

// ---- Tiles --------------------------------------------------------------------------------------------

// Widens `count` scales or biases of dtype `type` from element `offset` of src into dst, followed by
// zeros up to dst[round_up(count, 16) + 16).
void widen(const void* src, DType type, int64_t offset, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; i += 16) {
    const auto mask = static_cast<__mmask16>(count - i >= 16 ? 0xFFFF : (1u << (count - i)) - 1);
    __m512 v;
    if (type == DType::kF32) {
      v = _mm512_maskz_loadu_ps(mask, static_cast<const float*>(src) + offset + i);
    } else {
      const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(src) + offset + i);
      v = type == DType::kBF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                               : _mm512_cvtph_ps(h);
    }
    _mm512_store_ps(dst + i, v);
  }
  _mm512_store_ps(dst + round_up(count, 16), _mm512_setzero_ps());
}

// The f32 scales s and centered biases b' = fma(center, s, b) of a block's weight rows, widened once for all
// its tiles: row j's groups at scales + j * stride and biases + j * stride, zero past K / group (the
// chunk loads read up to 16 floats from a chunk's first group).
struct WidenedRows {
  const float* scales;
  const float* biases;
  int64_t stride;
  __m512i lane_group;  // lane l's group among its chunk's groups: 8 l / group
};

WidenedRows widen_rows(const QuantizedMatrix& w, int64_t n0, int64_t n1) {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffer;
  thread_local size_t capacity = 0;
  const int64_t groups = w.groups_per_row(), stride = round_up(groups, 16) + 16, rows = n1 - n0;
  const auto size = static_cast<size_t>(2 * rows * stride);
  if (size > capacity) {
    buffer = hwy::AllocateAligned<float>(size);
    capacity = size;
  }
  float* scales = buffer.get();
  float* biases = scales + rows * stride;
  const __m512 center = _mm512_set1_ps(w.bits == 8 ? kCenter8 : kCenter4);
  for (int64_t j = 0; j < rows; ++j) {
    float* s = scales + j * stride;
    float* b = biases + j * stride;
    widen(w.scales, w.scale_dtype, (n0 + j) * groups, groups, s);
    widen(w.biases, w.scale_dtype, (n0 + j) * groups, groups, b);
    for (int64_t g = 0; g < groups; g += 16)
      _mm512_store_ps(b + g, _mm512_fmadd_ps(center, _mm512_load_ps(s + g), _mm512_load_ps(b + g)));
  }
  // 8 l / group = l >> log2(group / 8), group in {32, 64, 128}.
  const int shift = w.group_size == 32 ? 2 : w.group_size == 64 ? 3 : 4;
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return {scales, biases, stride, _mm512_srl_epi32(lanes, _mm_cvtsi32_si128(shift))};
}

// The sum of v's 16 lanes in a fixed tree: a_i = v_i + v_(i+8), b_i = a_i + a_(i+4), c_i = b_i + b_(i+2),
// then c_0 + c_1.
HWY_INLINE float horizontal_sum(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// horizontal_sum of the 16 vectors acc[r][c] at once (the same additions, bit for bit), as lane 4 r + c.
HWY_INLINE __m512 horizontal_sums_4x4(const __m512 (&acc)[4][4]) {
  const __m512* v = &acc[0][0];  // v[4 r + c]
  __m512 w[8], x[4], y[2];
  for (int k = 0; k < 8; ++k)  // a: lanes 0-7 of v[2k], 8-15 of v[2k+1]
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int k = 0; k < 4; ++k)  // b: 128-bit block j of x[k] from v[4k + j]
    x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int k = 0; k < 2; ++k)  // c: block j of y[k] = c_0, c_1 of v[8k + j], then of v[8k + 4 + j]
    y[k] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Block j, lane t of z: the sum of v[4t + j], i.e. lane 4 c + r holds (r, c); transposed on return.
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

// One weight row's codes for one chunk in the digits' column order: even and odd the codes of the even and
// odd columns (byte 16 p + j of `even`: column 32 p + 2 j; zero past K), scale the lanes' scales.
struct ChunkCodes {
  __m512i even, odd;
  __m512 scale;
};

// The 6 digit vectors of one x row's chunk (a, b, c; even then odd columns).
struct ChunkDigits {
  __m512i d[6];
};

HWY_INLINE ChunkDigits load_digits(const uint8_t* chunk) {
  ChunkDigits x;
  for (int j = 0; j < 6; ++j) x.d[j] = _mm512_load_si512(chunk + 64 * j);
  return x;
}

// kEvenOddIndex.bytes[parity]: the permutation of 128 code bytes (two vectors) into the digits' order:
// byte 16 p + j of the result is code 32 p + 2 j + parity.
struct EvenOddIndex {
  alignas(64) uint8_t bytes[2][64];
  constexpr EvenOddIndex() : bytes{} {
    for (int parity = 0; parity < 2; ++parity)
      for (int byte = 0; byte < 64; ++byte)
        bytes[parity][byte] = static_cast<uint8_t>(32 * (byte / 16) + 2 * (byte % 16) + parity);
  }
};
constexpr EvenOddIndex kEvenOddIndex;

// Loads one weight row's codes for the chunk of `cols` columns (32, 64, 96 or 128) at `codes` (the chunk's
// first code byte) in the digits' column order, prefetching `ahead` bytes further on (into L2) when asked.
// 4 bits: one 64-byte load; low nibbles are the even columns, high nibbles the odd ones. 8 bits: two
// 64-byte loads, permuted into even and odd columns.
template <int Bits>
HWY_INLINE ChunkCodes load_codes(const uint8_t* codes, int64_t cols, bool prefetch, uintptr_t ahead) {
  ChunkCodes w;
  if constexpr (Bits == 4) {
    const __mmask64 mask = cols == kChunkCols ? ~__mmask64{0} : (__mmask64{1} << (cols / 2)) - 1;
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(codes + ahead), _MM_HINT_T1);
    const __m512i v = _mm512_maskz_loadu_epi8(mask, codes);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    w.even = _mm512_and_si512(v, nibble);
    w.odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
  } else {
    static_assert(Bits == 8);
    auto mask = [](int64_t bytes) {
      return bytes >= 64 ? ~__mmask64{0} : bytes <= 0 ? __mmask64{0} : (__mmask64{1} << bytes) - 1;
    };
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(codes + ahead), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(codes + ahead + 64), _MM_HINT_T1);
    }
    const __m512i low = _mm512_maskz_loadu_epi8(mask(cols), codes);
    const __m512i high = _mm512_maskz_loadu_epi8(mask(cols - 64), codes + 64);
    w.even = _mm512_permutex2var_epi8(low, _mm512_load_si512(kEvenOddIndex.bytes[0]), high);
    w.odd = _mm512_permutex2var_epi8(low, _mm512_load_si512(kEvenOddIndex.bytes[1]), high);
  }
  return w;
}

// acc + f32(Σ (q - center) I) * s_lane * u_lane for one (x row, weight row, chunk).
// 4 bits: Σ (q - 8) I = ((Σ q a) * 256 + Σ q b) * 256 + (-8 Σ I + Σ q c) per lane, exact in int32 (two
// independent dot-product chains, so the tile's latency hides), rounded once to f32.
// 8 bits: Σ (q - 128) I = 65536 H + L overflows int32, so its parts stay apart: H = -128 Σ a + Σ q a
// (|H| ≤ 8 * 128 * 127) and L = (Σ q b) * 256 + (-128 R + Σ q c) = Σ (q - 128)(256 b + c) (|L| ≤
// 8 * 128 * 32896 < 2^25), both exact in int32; f32(H) * 65536 is exact, f32(L) rounds when |L| > 2^24,
// and their sum rounds once (one fma).
// Then acc = fma(f32(that) * s_lane, u_lane, acc).
template <int Bits>
HWY_INLINE __m512 accumulate(const ChunkCodes& w, const ChunkDigits& x, const uint8_t* chunk, __m512 acc) {
  __m512 sum;
  if constexpr (Bits == 4) {
    __m512i ia = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.even, x.d[0]);
    __m512i ic = _mm512_dpbusd_epi32(_mm512_load_si512(chunk + kCenteringOffset), w.even, x.d[4]);
    ia = _mm512_dpbusd_epi32(ia, w.odd, x.d[1]);
    ic = _mm512_dpbusd_epi32(ic, w.odd, x.d[5]);
    __m512i i = _mm512_dpbusd_epi32(_mm512_slli_epi32(ia, 8), w.even, x.d[2]);
    i = _mm512_dpbusd_epi32(i, w.odd, x.d[3]);
    i = _mm512_add_epi32(_mm512_slli_epi32(i, 8), ic);
    sum = _mm512_cvtepi32_ps(i);
  } else {
    __m512i high = _mm512_dpbusd_epi32(_mm512_load_si512(chunk + kHighCenteringOffset), w.even, x.d[0]);
    __m512i ib = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.even, x.d[2]);
    __m512i ic = _mm512_dpbusd_epi32(_mm512_load_si512(chunk + kCenteringOffset), w.even, x.d[4]);
    high = _mm512_dpbusd_epi32(high, w.odd, x.d[1]);
    ib = _mm512_dpbusd_epi32(ib, w.odd, x.d[3]);
    ic = _mm512_dpbusd_epi32(ic, w.odd, x.d[5]);
    const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(ib, 8), ic);
    sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(low));
  }
  const __m512 t = _mm512_mul_ps(sum, w.scale);
  return _mm512_fmadd_ps(t, _mm512_load_ps(reinterpret_cast<const float*>(chunk + kUnitsOffset)), acc);
}

// out[m + r, n + c] for r < R, c < C over the whole K; wr holds the widened scales and biases of rows n..
// prefetch: fetch the next tile's codes (rows n + C, ...) into L2 as the tile goes (decode streams each
// weight once).
template <int Bits, int R, int C>
HWY_NOINLINE void integer_tile(const QuantizedLinearArgs& a, int64_t m, int64_t n, const WidenedRows& wr,
                               bool prefetch) {
  const QuantizedMatrix& w = a.w;
  const int64_t k = w.k, groups = w.groups_per_row();
  const IntegerRowLayout layout(k, w.group_size, Bits);
  const int64_t row_bytes = w.words_per_row() * 4;
  const uint8_t* x_row[R];
  for (int r = 0; r < R; ++r) x_row[r] = a.xq + (m + r) * a.xq_stride;
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(w.codes) + n * row_bytes;
  const auto ahead = static_cast<uintptr_t>(C * row_bytes);    // from a row to the next tile's
  const int64_t groups_per_chunk = kChunkCols / w.group_size;  // the last chunk may hold fewer
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();

  auto weight_chunk = [&](int c, int64_t chunk, int64_t col, int64_t cols) {
    ChunkCodes wc = load_codes<Bits>(codes + c * row_bytes + col * Bits / 8, cols, prefetch, ahead);
    wc.scale = _mm512_permutexvar_ps(wr.lane_group,
                                     _mm512_loadu_ps(wr.scales + c * wr.stride + chunk * groups_per_chunk));
    return wc;
  };
  for (int64_t chunk = 0; chunk < layout.chunks; ++chunk) {
    const int64_t col = chunk * kChunkCols, cols = std::min(kChunkCols, k - col);
    if constexpr (R <= 2) {
      // One or two x rows: their digits stay in registers while the C weight rows' codes pass one at a time,
      // each used right after its load (keeping C rows' codes live at once spilled them to the stack).
      const uint8_t* x_chunk[R];
      ChunkDigits xd[R];
      for (int r = 0; r < R; ++r) {
        x_chunk[r] = x_row[r] + chunk * layout.chunk_bytes;
        xd[r] = load_digits(x_chunk[r]);
      }
      for (int c = 0; c < C; ++c) {
        const ChunkCodes wc = weight_chunk(c, chunk, col, cols);
        for (int r = 0; r < R; ++r) acc[r][c] = accumulate<Bits>(wc, xd[r], x_chunk[r], acc[r][c]);
      }
    } else {
      ChunkCodes wc[C];
      for (int c = 0; c < C; ++c) wc[c] = weight_chunk(c, chunk, col, cols);
      // x row by x row: its digits are loaded once for the C weight rows.
      for (int r = 0; r < R; ++r) {
        const uint8_t* x_chunk = x_row[r] + chunk * layout.chunk_bytes;
        const ChunkDigits xd = load_digits(x_chunk);
        for (int c = 0; c < C; ++c) acc[r][c] = accumulate<Bits>(wc[c], xd, x_chunk, acc[r][c]);
      }
    }
  }
  // Σ_g b'_g S_g (the widened b' and the sums are zero past the groups).
  for (int64_t g = 0; g < groups; g += 16)
    for (int c = 0; c < C; ++c) {
      const __m512 bias = _mm512_load_ps(wr.biases + c * wr.stride + g);
      for (int r = 0; r < R; ++r) {
        const auto* sums = reinterpret_cast<const float*>(x_row[r] + layout.sums_offset);
        acc[r][c] = _mm512_fmadd_ps(bias, _mm512_load_ps(sums + g), acc[r][c]);
      }
    }
  if constexpr (R == 4 && C == 4) {
    alignas(64) float sums_rc[16];
    _mm512_store_ps(sums_rc, horizontal_sums_4x4(acc));
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a.out[(m + r) * a.out_stride + n + c] = sums_rc[4 * r + c];
  } else {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a.out[(m + r) * a.out_stride + n + c] = horizontal_sum(acc[r][c]);
  }
}

// Rows [n0, n1) for x rows m..m+R-1: tiles of C weight rows, then single rows. wr: rows n0...
template <int Bits, int R, int C>
void tile_row(const QuantizedLinearArgs& a, int64_t m, int64_t n0, int64_t n1, const WidenedRows& wr,
              bool prefetch) {
  int64_t n = n0;
  auto at = [&](int64_t row) {
    return WidenedRows{wr.scales + (row - n0) * wr.stride, wr.biases + (row - n0) * wr.stride, wr.stride,
                       wr.lane_group};
  };
  for (; n + C <= n1; n += C) integer_tile<Bits, R, C>(a, m, n, at(n), prefetch);
  for (; n < n1; ++n) integer_tile<Bits, R, 1>(a, m, n, at(n), prefetch);
}

template <int Bits>
void integer_block(const QuantizedLinearArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const WidenedRows wr = widen_rows(a.w, n0, n1);
  int64_t m = m0;
  if (m1 - m0 < kPrefillMinRows) {
    // Decode: each x-row tile streams the block's weight rows (from DRAM for the first, L2 after).
    for (; m + 4 <= m1; m += 4) tile_row<Bits, 4, kDecodeCols>(a, m, n0, n1, wr, true);
    for (; m + 2 <= m1; m += 2) tile_row<Bits, 2, kDecodeCols>(a, m, n0, n1, wr, true);
    for (; m < m1; ++m) tile_row<Bits, 1, kDecodeCols1>(a, m, n0, n1, wr, true);
    return;
  }
  // Prefill: x-row pairs, each pair's chunk held in registers while the block's weight rows pass (from L2).
  static_assert(kPrefillRows == 2);
  for (; m + kPrefillRows <= m1; m += kPrefillRows)
    tile_row<Bits, kPrefillRows, kPrefillCols>(a, m, n0, n1, wr, false);
  if (m < m1) tile_row<Bits, 1, kPrefillCols>(a, m, n0, n1, wr, false);
}

void integer_block_impl(const QuantizedLinearArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 <= m0 || n1 <= n0) return;
  assert(a.w.bits == 4 || a.w.bits == 8);
  if (a.w.bits == 4) {
    integer_block<4>(a, m0, m1, n0, n1);
  } else {
    integer_block<8>(a, m0, m1, n0, n1);
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options
#else  // no AVX-512 VNNI on this target: never called (quantized_integer_kernels() is false)

bool integer_kernels_impl() {
  return false;
}
void integer_prepare_x_impl(const float*, int64_t, int64_t, int64_t, int, int, uint8_t*) {
  assert(false && "integer kernels unavailable on this target");
}
void integer_block_impl(const QuantizedLinearArgs&, int64_t, int64_t, int64_t, int64_t) {
  assert(false && "integer kernels unavailable on this target");
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lmx::ops::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmx::ops::cpu {

HWY_EXPORT(integer_kernels_impl);
HWY_EXPORT(integer_prepare_x_impl);
HWY_EXPORT(integer_block_impl);

namespace {
// Whether the integer kernels may run: the tuning table's quantized.integer_kernels at first use, then
// whatever set_quantized_integer_kernels said.
std::atomic<bool>& integer_kernels_enabled() {
  static std::atomic<bool> enabled{tuning().quantized.integer_kernels};
  return enabled;
}
}  // namespace

void set_quantized_integer_kernels(bool enabled) {
  integer_kernels_enabled().store(enabled);
}

bool quantized_integer_kernels(int bits) {
  // The CPU check backs up Highway's: its AVX3_DL detection requires VNNI, but its target string does not.
  static const bool cpu_has_vnni = __builtin_cpu_supports("avx512vnni");
  return (bits == 4 || bits == 8) && cpu_has_vnni &&
         integer_kernels_enabled().load(std::memory_order_relaxed) &&
         HWY_DYNAMIC_DISPATCH(integer_kernels_impl)();
}

int64_t quantized_integer_row_bytes(int64_t k, int group_size, int bits) {
  return IntegerRowLayout(k, group_size, bits).bytes;
}

void quantized_integer_prepare_x(const float* x, int64_t x_stride, int64_t rows, int64_t k, int group_size,
                                 int bits, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(integer_prepare_x_impl)(x, x_stride, rows, k, group_size, bits, out);
}

void quantized_integer_block(const QuantizedLinearArgs& args, int64_t m0, int64_t m1, int64_t n0,
                             int64_t n1) {
  HWY_DYNAMIC_DISPATCH(integer_block_impl)(args, m0, m1, n0, n1);
}

}  // namespace lmx::ops::cpu
#endif  // HWY_ONCE
