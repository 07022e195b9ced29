// Tensor-core projection kernels shared by dense_linear (bf16 weights) and quantized_linear (MLX affine
// weights): the weight-fragment formats, the decode kernel (few x rows, split-K over warps) and the
// prefill kernel (128 x 128 tiles, cp.async pipeline), which compute every output bit for bit alike.
//
// Numerics. out[m, n] = Σ_k bf16(x[m, k]) · bf16(w[n, k]) with mma.sync m16n8k16 (f32 accumulate):
// x rounded to nearest bf16; a quantized weight dequantized in registers to the bf16 nearest its exact
// value (4-bit codes with bf16 scales: one rounding of s*q + b; every other case: bf16 of the f32
// fmaf(s, q, b)); bf16 weights as stored.
//
// Reduction order and batch invariance. K is cut into chunks of 128 columns; in a chunk, lane (g, c) of a
// warp (g = lane / 4, c = lane % 4) owns 32 columns of its weight rows g and g + 8, in an order fixed per
// format (Format::quad_start / pair_quad / pair_pos below: whatever keeps its loads 16 bytes wide), and
// the chunk is 8 mma steps of 16 columns. The chunks are split into `segments` contiguous ranges, a
// function of (N, K) only (linear_segments); each segment is summed by its own chain of mma (C starts
// at +0), and the output is ((seg0 + seg1) + seg2) + ... in f32. The decode kernel runs one warp per
// (16 weight rows, segment) and adds the segments through shared memory; the prefill kernel runs the
// segments in sequence in one block and adds them in registers. Both feed each mma the same operands in
// the same slots (x's columns are permuted the same way as the weight's), and an mma's output element
// depends only on its own row of A, column of B and accumulator, so out[m, :] is bit-identical whatever
// M, m or the other rows of x, and whichever kernel ran.
#pragma once

#include "lmx/core/dtype.h"
#include "lmx/ops/cuda/activation_math.cuh"
#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/quant_codes.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace lmx::cuda::linear {

constexpr int kChunk = 128;        // K columns per chunk (8 mma steps)
constexpr int kMaxSegments = 16;   // decode block = 32 * segments threads
static_assert(kMaxSegments == kTuningMaxSegments, "the tuning table checks segments against kMaxSegments");
// The most x rows the decode kernel is planned for (its launch takes any m, in x tiles of 8 or 32 rows);
// linear::run sends up to the tuning table's linear.decode_max_rows there and more to the prefill tiles (both
// kernels give the same bits).
constexpr int kDecodeMaxRows = 32;
static_assert(kDecodeMaxRows == kTuningMaxDecodeRows, "the tuning table checks decode_max_rows against it");
constexpr int kTileN = 128;        // prefill tile: weight rows
constexpr int kTileM = 128;        // prefill tile: x rows

// What a projection reads: a [n, k] weight in one of the formats, x f32 [m, k], out f32 [m, n].
enum class WeightFormat : int {
  kDenseBf16,  // bf16 rows (k % 8 == 0, 16-byte aligned)
  kQ4,         // 4-bit codes, 16-byte aligned
  kQ8,         // 8-bit codes, 16-byte aligned
  kPacked,     // any bits (2..8), 4-byte aligned words
};

struct Problem {
  WeightFormat format = WeightFormat::kDenseBf16;
  int bits = 16;                // 16 for dense bf16
  int group_shift = 6;          // log2(group_size)
  DType scale_dtype = DType::kBF16;
  const uint32_t* weight = nullptr;  // codes (quantized) or bf16 pairs (dense)
  const void* scales = nullptr;
  const void* biases = nullptr;
  int64_t n = 0, k = 0;
  int64_t row_words = 0;        // 32-bit words per weight row = k * bits / 32
  int64_t groups_per_row = 0;   // k / group_size
  int chunks = 0;               // ceil(k / 128)
  int segments = 1;             // split of the chunks (linear_segments)
  const float* x = nullptr;
  int64_t x_stride = 0, m = 0;
  bool x_vec4 = false;          // x and x_stride allow 16-byte loads
  bool small_scales = false;    // DeviceQuantized::small_scales (bf16-scaled 4-bit codes: FormatQ4<.., true>)
  bool gate_up_pair = false;    // DeviceQuantized::gate_up_pair (4-bit: segments of >= kPairMinChunks chunks)
  float* out = nullptr;
  int64_t out_stride = 0;
};

// Number of K segments for an [n, k] weight of `bits` per element: enough warps (16 rows x segment each)
// to fill an H200 in decode, at least two chunks per segment. A function of the weight only (never of m
// or the device), so results do not depend on either. Target warps measured on the H200 at batch 1:
// 4096 for 4-bit weights (the batch-1 kernel runs 32 rows per warp), 2048 for the others (more
// segments slowed 8-bit and bf16 by up to 30 %). target_warps > 0 replaces that target; with
// one_segment_tiles > 0, matrices of at least that many 16-row tiles get one segment (4-bit weights take
// both from the tuning table's linear.q4_target_warps and linear.q4_one_segment_tiles).
inline int linear_segments(int64_t n, int64_t k, int bits, int64_t target_warps = 0, int64_t one_segment_tiles = 0) {
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  const int64_t tiles = (n + 15) / 16;
  if (one_segment_tiles > 0 && tiles >= one_segment_tiles) return 1;
  const int64_t target = target_warps > 0 ? target_warps : bits == 4 ? 4096 : 2048;
  int64_t s = (target + tiles / 2) / tiles;
  s = s < chunks / 2 ? s : chunks / 2;
  s = s < kMaxSegments ? s : kMaxSegments;
  return s < 1 ? 1 : static_cast<int>(s);
}

// Chunks per segment that a 4-bit gate_up pair (DeviceQuantized::gate_up_pair) keeps at least, where
// linear_segments would cut shorter ones. Measured on the H200 at batch 1 (same-run A/Bs, 2026-11-30): a
// 24576 x 1536 pair (E2B's double-wide GeGLU) at 2 segments instead of 3, +5.8 % decode; a 4224 x 2816 pair
// (26B-A4B's) at 4 instead of 11, +1.4 %; a 20480 x 2560 pair (E4B's) best at its 3 already (2: -2.3 %).
// Plain projections of few rows want the opposite (a minimum of 4 chunks for every weight lost 2 % on E4B).
constexpr int kPairMinChunks = 5;

__host__ __device__ __forceinline__ int segment_begin(int s, int segments, int chunks) {
  return s * chunks / segments;  // (32-bit: s <= kMaxSegments and chunks < 2^24, as k < 2^31)
}

// ---- Small device helpers -----------------------------------------------------------------------------------

// bf16x2 of (lo, hi), each rounded to nearest even; lo in the low half (the lower k of an mma pair).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// d = a * b + c on bf16x2 with one rounding.
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// (a & kMask) | bits in one LOP3 (ptxas otherwise spends two: one 32-bit immediate per instruction; here
// `bits` is a register operand).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(kMask), "r"(bits));
  return d;
}

// An integer code (< 2^23) as an exact f32.
__device__ __forceinline__ float code_to_float(uint32_t code) {
  return __uint_as_float(0x4B000000u | code) - 8388608.0f;
}

// Streaming 16-byte load of weights (read once: no L1 allocation).
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t load_stream4(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// D += A · B for one m16n8k16 bf16 tile (f32 accumulate).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global → shared of src_bytes (0..16) source bytes, bypassing L1; the rest of
// the 16 bytes is zero-filled. Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16_bytes(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 16-byte (or `bytes`-byte, 4/8/16) asynchronous copy global → shared; zero-fills when !valid.
template <int kBytes>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? kBytes : 0;
  if constexpr (kBytes == 16)
    cp_async16_bytes(dst, src, src_bytes);
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(kBytes),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// Scale/bias element i as f32 (exact), dtype known at compile time (Scale = bf16, half, float) or at run
// time (Scale = void: problem's scale_dtype).
template <class Scale>
__device__ __forceinline__ float load_scale_as(const void* base, DType type, int64_t i) {
  if constexpr (std::is_same_v<Scale, __nv_bfloat16>)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  else if constexpr (std::is_same_v<Scale, __half>)
    return __half2float(static_cast<const __half*>(base)[i]);
  else if constexpr (std::is_same_v<Scale, float>)
    return static_cast<const float*>(base)[i];
  else
    return load_scale(base, type, i);
}

// ---- Weight formats --------------------------------------------------------------------------------------
//
// A format says, for lane column c (0..3) of a warp and one weight row, which 32 of a chunk's 128 columns
// the lane owns and in which order it hands them to the mma. The lane's columns come as 8 "quads" of 4
// consecutive columns (quad_start(c, q)); its 16 bf16x2 pairs P = 2 t + p (t the mma step, p the half:
// k slots 2c..2c+1 or 2c+8..2c+9) hold elements (pair_quad(P, e), pair_pos(P, e)), e = 0, 1. The lane's
// raw weight words (kWords per row per chunk) come in kLoads loads of kLoadBytes; dequant(raw, P, ...)
// turns them into pair P. Scale slots: the groups the lane's columns fall in (slot_k: first column).
//
// kBits = 16 is the dense bf16 format. Loads of 16 bytes need the rows 16-byte aligned.

// 4-bit codes, 16-byte loads: the lane's 16 bytes are columns 32c .. 32c+31; pair P takes nibbles k and
// k + 4 of word P / 4 (k = P % 4), so pairs come out of one mask: (w >> 4k) & 0x000F000F.
// kSmallScales (bf16 scales only; the weight's scales are all below kSmallScaleLimit in magnitude, or not
// finite): the same bits from fewer instructions, see dequant.
template <class Scale, bool kSmallScales = false>
struct FormatQ4 {
  static_assert(!kSmallScales || std::is_same_v<Scale, __nv_bfloat16>,
                "small-scale dequantization is for bf16 scales");
  static constexpr int kBits = 4, kWords = 4, kLoads = 1, kLoadBytes = 16, kScaleSlots = 1;
  using ScaleType = Scale;
  __host__ __device__ static constexpr int load_word(int c, int l) { return 4 * c; }
  __host__ __device__ static constexpr int load_k(int c, int l) { return 32 * c; }  // first column of load l
  __host__ __device__ static constexpr int quad_start(int c, int q) { return 32 * c + 8 * (q >> 1) + 4 * (q & 1); }
  __host__ __device__ static constexpr int pair_quad(int P, int e) { return 2 * (P >> 2) + e; }
  __host__ __device__ static constexpr int pair_pos(int P, int e) { return P & 3; }
  __host__ __device__ static constexpr int slot_k(int c, int slot) { return 32 * c; }
  __host__ __device__ static constexpr int pair_slot(int P) { return 0; }
  __host__ __device__ static constexpr int pair_load(int P) { return 0; }

  __device__ __forceinline__ static uint32_t dequant(const uint32_t (&raw)[kWords], int P, const float (&s)[1],
                                                     const float (&b)[1]) {
    const uint32_t word = raw[P >> 2];
    const int k = P & 3;
    if constexpr (kSmallScales) {
      // The codes as subnormal bf16s. The low byte of a bf16 whose high byte is 0, read as an integer i, is
      // the value i · 2^-133 (subnormals and the first normal binade share one spacing), so nibble k of
      // each half, masked in place, is q · 2^-133 (even k, bits 0-3; after the word's one shift by 8 for
      // k >= 2) or q · 2^-129 (odd k, bits 4-7). Times s · 2^133 (or s · 2^129; exact in f32 and bf16 while
      // |s| < 2^-5 = kSmallScaleLimit) that is exactly q · s, and the fma rounds q · s + b once: the bits of
      // the branch below (non-finite s too: v = 0 gives 0 · ±inf = NaN, v > 0 gives ±inf, as q does there),
      // per pair a LOP3 and one fma instead of a shift, a LOP3 and two fmas.
      const uint32_t v = (k < 2 ? word : word >> 8) & ((k & 1) != 0 ? 0x00F000F0u : 0x000F000Fu);
      const float scaled = s[0] * 0x1p66f * ((k & 1) != 0 ? 0x1p63f : 0x1p67f);  // (2^133 overflows f32)
      const uint32_t s2 = __byte_perm(__float_as_uint(scaled), 0u, 0x3232u);
      const uint32_t b2 = __byte_perm(__float_as_uint(b[0]), 0u, 0x3232u);
      return fma_bf16x2(v, s2, b2);
    } else if constexpr (std::is_same_v<Scale, __nv_bfloat16>) {
      // (128 + q) as bf16 by exponent injection, minus 128 (exact), then one fma (one rounding).
      const uint32_t v = and_or<0x000F000Fu>(word >> (4 * k), 0x43004300u);
      const uint32_t q = fma_bf16x2(v, 0x3F803F80u, 0xC300C300u);
      // s and b are bf16 values widened: their bf16 bits are the f32's high half.
      const uint32_t s2 = __byte_perm(__float_as_uint(s[0]), 0u, 0x3232u);
      const uint32_t b2 = __byte_perm(__float_as_uint(b[0]), 0u, 0x3232u);
      return fma_bf16x2(q, s2, b2);
    } else {
      const uint32_t v = (word >> (4 * k)) & 0x000F000Fu;
      return pack_bf16x2(fmaf(s[0], code_to_float(v & 0xFFFFu), b[0]), fmaf(s[0], code_to_float(v >> 16), b[0]));
    }
  }
};

// FormatQ4 without the small-scale path, as a one-parameter template (the dispatch over scale dtypes).
template <class Scale>
using FormatQ4AnyScale = FormatQ4<Scale, false>;

// Calls fn(Q<Scale>{}) for the problem's scale dtype (bf16, f16, else f32).
template <template <class> class Q, class Fn>
decltype(auto) with_scale_type(const Problem& p, Fn&& fn) {
  switch (p.scale_dtype) {
    case DType::kBF16: return fn(Q<__nv_bfloat16>{});
    case DType::kF16: return fn(Q<__half>{});
    default: return fn(Q<float>{});
  }
}

// Calls fn(F{}) with the FormatQ4 a 4-bit problem runs: the small-scale path when Problem::small_scales
// allows it (bf16 scales), else by scale dtype. The one place that choice is made, for every kernel.
template <class Fn>
decltype(auto) with_q4_format(const Problem& p, Fn&& fn) {
  if (p.small_scales && p.scale_dtype == DType::kBF16) return fn(FormatQ4<__nv_bfloat16, true>{});
  return with_scale_type<FormatQ4AnyScale>(p, fn);
}

// 8-bit codes, 16-byte loads: the lane's loads are columns 16c..16c+15 and 64+16c..64+16c+15 (so a warp's
// load instruction covers 64 contiguous bytes of each row); pairs in natural order.
template <class Scale>
struct FormatQ8 {
  static constexpr int kBits = 8, kWords = 8, kLoads = 2, kLoadBytes = 16, kScaleSlots = 2;
  using ScaleType = Scale;
  __host__ __device__ static constexpr int load_word(int c, int l) { return 16 * l + 4 * c; }
  __host__ __device__ static constexpr int load_k(int c, int l) { return 64 * l + 16 * c; }
  __host__ __device__ static constexpr int quad_start(int c, int q) { return 64 * (q >> 2) + 16 * c + 4 * (q & 3); }
  __host__ __device__ static constexpr int pair_quad(int P, int e) { return P >> 1; }
  __host__ __device__ static constexpr int pair_pos(int P, int e) { return 2 * (P & 1) + e; }
  __host__ __device__ static constexpr int slot_k(int c, int slot) { return 64 * slot + 16 * c; }
  __host__ __device__ static constexpr int pair_slot(int P) { return P >> 3; }
  __host__ __device__ static constexpr int pair_load(int P) { return P >> 3; }

  __device__ __forceinline__ static uint32_t dequant(const uint32_t (&raw)[kWords], int P, const float (&s)[2],
                                                     const float (&b)[2]) {
    const uint32_t word = raw[P >> 1];
    const int byte = 2 * (P & 1);
    const float scale = s[P >> 3], bias = b[P >> 3];
    const float q0 = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u | byte)) - 8388608.0f;
    const float q1 = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u | (byte + 1))) - 8388608.0f;
    return pack_bf16x2(fmaf(scale, q0, bias), fmaf(scale, q1, bias));
  }
};

// bf16 weights, 16-byte loads: load l holds columns 32l + 8c .. 32l + 8c + 7 (a warp's load instruction
// covers 64 contiguous bytes of each row); pair P is raw word P.
struct FormatDense {
  static constexpr int kBits = 16, kWords = 16, kLoads = 4, kLoadBytes = 16, kScaleSlots = 0;
  using ScaleType = float;
  __host__ __device__ static constexpr int load_word(int c, int l) { return 16 * l + 4 * c; }
  __host__ __device__ static constexpr int load_k(int c, int l) { return 32 * l + 8 * c; }
  __host__ __device__ static constexpr int quad_start(int c, int q) { return 32 * (q >> 1) + 8 * c + 4 * (q & 1); }
  __host__ __device__ static constexpr int pair_quad(int P, int e) { return P >> 1; }
  __host__ __device__ static constexpr int pair_pos(int P, int e) { return 2 * (P & 1) + e; }
  __host__ __device__ static constexpr int slot_k(int c, int slot) { return 0; }
  __host__ __device__ static constexpr int pair_slot(int P) { return 0; }
  __host__ __device__ static constexpr int pair_load(int P) { return P >> 2; }

  template <int N>
  __device__ __forceinline__ static uint32_t dequant(const uint32_t (&raw)[kWords], int P, const float (&)[N],
                                                     const float (&)[N]) {
    return raw[P];
  }
};

// Any bits (2..8), 4-byte loads: the lane's `Bits` words hold its columns 32c .. 32c+31 (code i at bit
// i * Bits, straddling words for 3, 5, 6 bits); pairs in natural order. Scale dtype at run time.
template <int Bits>
struct FormatPacked {
  static constexpr int kBits = Bits, kWords = Bits, kLoads = Bits, kLoadBytes = 4, kScaleSlots = 1;
  using ScaleType = void;
  __host__ __device__ static constexpr int load_word(int c, int l) { return Bits * c + l; }
  __host__ __device__ static constexpr int load_k(int c, int l) { return 32 * c; }
  __host__ __device__ static constexpr int quad_start(int c, int q) { return 32 * c + 4 * q; }
  __host__ __device__ static constexpr int pair_quad(int P, int e) { return P >> 1; }
  __host__ __device__ static constexpr int pair_pos(int P, int e) { return 2 * (P & 1) + e; }
  __host__ __device__ static constexpr int slot_k(int c, int slot) { return 32 * c; }
  __host__ __device__ static constexpr int pair_slot(int P) { return 0; }
  __host__ __device__ static constexpr int pair_load(int P) { return 0; }

  __device__ __forceinline__ static uint32_t code(const uint32_t (&raw)[kWords], int i) {
    const int bit = i * Bits, word = bit >> 5, shift = bit & 31;
    uint32_t v = raw[word] >> shift;
    if (shift + Bits > 32) v |= raw[word + 1] << (32 - shift);
    return v & ((1u << Bits) - 1u);
  }
  __device__ __forceinline__ static uint32_t dequant(const uint32_t (&raw)[kWords], int P, const float (&s)[1],
                                                     const float (&b)[1]) {
    return pack_bf16x2(fmaf(s[0], code_to_float(code(raw, 2 * P)), b[0]),
                       fmaf(s[0], code_to_float(code(raw, 2 * P + 1)), b[0]));
  }
};

// Calls fn(F{}) with the format a quantized problem runs (p.format kQ4, kQ8 or kPacked; bits, scale dtype
// and small_scales as with_q4_format reads them), or a dense one too (with_format). The one place the
// format is chosen, for every kernel.
template <class Fn>
decltype(auto) with_quantized_format(const Problem& p, Fn&& fn) {
  switch (p.format) {
    case WeightFormat::kQ4: return with_q4_format(p, fn);
    case WeightFormat::kQ8: return with_scale_type<FormatQ8>(p, fn);
    default:
      switch (p.bits) {
        case 2: return fn(FormatPacked<2>{});
        case 3: return fn(FormatPacked<3>{});
        case 4: return fn(FormatPacked<4>{});
        case 5: return fn(FormatPacked<5>{});
        case 6: return fn(FormatPacked<6>{});
        default: return fn(FormatPacked<8>{});
      }
  }
}
template <class Fn>
decltype(auto) with_format(const Problem& p, Fn&& fn) {
  if (p.format == WeightFormat::kDenseBf16) return fn(FormatDense{});
  return with_quantized_format(p, fn);
}

template <class F>
__host__ __device__ constexpr int pair_k(int c, int P, int e) {
  return F::quad_start(c, F::pair_quad(P, e)) + F::pair_pos(P, e);
}

// Words per chunk of one weight row.
template <class F>
constexpr int chunk_words() {
  return 4 * F::kBits;
}

// Pair P of a row for lane c. Past the valid columns of a chunk (k_left = k - chunk * 128) both kernels
// hold zero raw words and zero scales and biases (the loads are predicated or zero-filled by the same
// rules), so the pair is +0 there without a mask (and x is 0 there too).
template <class F, int N>
__device__ __forceinline__ uint32_t weight_pair(const uint32_t (&raw)[F::kWords], int P, const float (&s)[N],
                                                const float (&b)[N], int c, int k_left) {
  return F::dequant(raw, P, s, b);
}

// Lane c's 16 x pairs of one x row for the chunk starting at xr (f32, in place): zero past k_left or for a
// row past m (valid = false). vec4: 16-byte loads allowed. kGeglu: the row's values are gelu_tanh(xr[k]) *
// xr[k + up_offset] (the GeGLU of a stacked [gate | up] row, formed in f32 as the gelu_tanh_mul op does).
template <class F, bool kGeglu = false>
__device__ __forceinline__ void load_x_pairs(const float* xr, int c, int k_left, bool valid, bool vec4,
                                             uint32_t (&b)[16], int64_t up_offset = 0) {
  auto quad = [&](const float* src, float (&f)[4]) {
    if (vec4) {
      const float4 v = *reinterpret_cast<const float4*>(src);
      f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) f[i] = src[i];
    }
  };
  float f[8][4];
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int k0 = F::quad_start(c, q);
    if (valid && k0 < k_left) {
      quad(xr + k0, f[q]);
      if constexpr (kGeglu) {
        float u[4];
        quad(xr + up_offset + k0, u);
#pragma unroll
        for (int i = 0; i < 4; ++i) f[q][i] = detail::gelu_tanh_mul(f[q][i], u[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) f[q][i] = 0.0f;
    }
  }
#pragma unroll
  for (int P = 0; P < 16; ++P)
    b[P] = pack_bf16x2(f[F::pair_quad(P, 0)][F::pair_pos(P, 0)], f[F::pair_quad(P, 1)][F::pair_pos(P, 1)]);
}

// Scale and bias of the lane's slots for one row and chunk (zeros for a row past n): the row's groups start
// at index first_group of the scale and bias arrays.
template <class F>
__device__ __forceinline__ void load_row_scales(const void* scales, const void* biases, DType dtype,
                                                int64_t first_group, int group_shift, bool valid, int chunk, int c,
                                                int k_left, float (&s)[F::kScaleSlots > 0 ? F::kScaleSlots : 1],
                                                float (&b)[F::kScaleSlots > 0 ? F::kScaleSlots : 1]) {
  constexpr int kSlots = F::kScaleSlots > 0 ? F::kScaleSlots : 1;
#pragma unroll
  for (int slot = 0; slot < kSlots; ++slot) {
    s[slot] = 0.0f, b[slot] = 0.0f;
    if constexpr (F::kScaleSlots > 0) {
      const int k0 = F::slot_k(c, slot);
      if (valid && k0 < k_left) {
        const int64_t i = first_group + ((static_cast<int64_t>(chunk) * kChunk + k0) >> group_shift);
        s[slot] = load_scale_as<typename F::ScaleType>(scales, dtype, i);
        b[slot] = load_scale_as<typename F::ScaleType>(biases, dtype, i);
      }
    }
  }
}

template <class F>
__device__ __forceinline__ void load_slot_scales(const Problem& p, int64_t row, bool valid, int chunk, int c,
                                                 int k_left, float (&s)[F::kScaleSlots > 0 ? F::kScaleSlots : 1],
                                                 float (&b)[F::kScaleSlots > 0 ? F::kScaleSlots : 1]) {
  load_row_scales<F>(p.scales, p.biases, p.scale_dtype, row * p.groups_per_row, p.group_shift, valid, chunk, c,
                     k_left, s, b);
}

// ---- Decode kernel ------------------------------------------------------------------------------------------
//
// Block = `segments` warps over 16 weight rows (blockIdx.y) and 8 * NT x rows (blockIdx.x, so that the
// blocks sharing weight rows run together and the second reads them from L2); warp s sums segment s of K
// for its 16 rows x 8 NT x rows (decode_segment). The segments' partial sums meet in shared memory and are
// added in order. The MoE expert kernel (moe_expert_mma.cuh) runs the same warp code on gathered rows.

template <class F, int NT>
struct DecodeConfig {
  static constexpr int kBaseUnroll = F::kBits >= 16 ? 1 : (16 / F::kBits < 4 ? 16 / F::kBits : 4);
  static constexpr int kUnroll = NT >= 4 ? 1 : (NT == 2 && kBaseUnroll > 2 ? 2 : kBaseUnroll);
  // Q4 / Q8 (16-byte loads, heavy dequantization): the loads run a ring ahead of the compute (below).
  static constexpr bool kRing = F::kBits < 16 && F::kLoadBytes == 16;
};

template <class F>
__device__ __forceinline__ void load_weight_raw(const uint32_t* row_chunk, int c, int k_left, bool valid,
                                                uint32_t (&raw)[F::kWords]) {
#pragma unroll
  for (int l = 0; l < F::kLoads; ++l) {
    constexpr int kPer = F::kLoadBytes / 4;
    const bool ok = valid && F::load_k(c, l) < k_left;
    if constexpr (F::kLoadBytes == 16) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (ok) v = load_stream16(row_chunk + F::load_word(c, l));
      raw[l * kPer + 0] = v.x, raw[l * kPer + 1] = v.y, raw[l * kPer + 2] = v.z, raw[l * kPer + 3] = v.w;
    } else {
      raw[l] = ok ? load_stream4(row_chunk + F::load_word(c, l)) : 0u;
    }
  }
}

// What one decode warp multiplies: weight rows g and g + 8 of a 16-row tile and x rows 8 nt + g (nt < NT),
// over the chunks [chunk_begin, chunk_end) of K. The kernels fill it (linear_decode_kernel from a Problem,
// the MoE expert kernel from gathered rows of expert stacks) and run decode_segment.
template <int NT>
struct SegmentOperands {
  const uint32_t* w[2];  // weight row starts; a row past the matrix points at any valid row, w_valid false
  bool w_valid[2];
  const void* scales;  // scales and biases of both rows
  const void* biases;
  int64_t first_group[2];  // index of the row's first group in scales and biases
  const float* x[NT];      // x row starts; an invalid row points at any valid row, x_valid false
  bool x_valid[NT];
  int64_t up_offset;  // kGeglu: x values are gelu_tanh(x[k]) * x[k + up_offset]
  int64_t k;
  int group_shift;
  DType scale_dtype;
  bool x_vec4;  // the x rows (and up halves) allow 16-byte loads
  int chunk_begin, chunk_end;

  // The problem's K shape and x format, and segment `segment` of `segments` over its `chunks` chunks.
  __device__ __forceinline__ void set_segment(int64_t k_, int group_shift_, DType scale_dtype_, bool x_vec4_,
                                              int chunks, int segment, int segments) {
    k = k_;
    group_shift = group_shift_;
    scale_dtype = scale_dtype_;
    x_vec4 = x_vec4_;
    chunk_begin = segment_begin(segment, segments, chunks);
    chunk_end = segment_begin(segment + 1, segments, chunks);
  }
};

// acc[nt] += the warp's segment product (C fragment: rows g / g + 8, x rows 8 nt + 2c, + 1), from +0: each
// chunk's 8 mma steps in chunk order, with kUnroll chunks of weights loaded before use (Q4: 4 chunks = 8
// 16-byte loads per lane, 4 KiB per warp, in flight). x is read as f32 (L1-resident) and rounded in
// registers.
template <class F, int NT, bool kGeglu = false>
__device__ __forceinline__ void decode_segment(const SegmentOperands<NT>& op, int c, float (&acc)[NT][4]) {
  constexpr int kSlots = F::kScaleSlots > 0 ? F::kScaleSlots : 1;
  constexpr int kUnroll = DecodeConfig<F, NT>::kUnroll;
  const int chunk_begin = op.chunk_begin, chunk_end = op.chunk_end;
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  // Chunk j's raw words and scales into slot u, and chunk j's product from slot u into acc (the same
  // operands in the same order whichever loop below drives them).
  uint32_t raw[kUnroll][2][F::kWords];
  float sc[kUnroll][2][kSlots], bi[kUnroll][2][kSlots];
  auto load_chunk = [&](int u, int j) {
    const bool in = j < chunk_end;
    const int k_left = static_cast<int>(op.k - static_cast<int64_t>(j) * kChunk);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      load_weight_raw<F>(op.w[h] + static_cast<int64_t>(j) * chunk_words<F>(), c, k_left, in && op.w_valid[h],
                         raw[u][h]);
      load_row_scales<F>(op.scales, op.biases, op.scale_dtype, op.first_group[h], op.group_shift,
                         in && op.w_valid[h], j, c, k_left, sc[u][h], bi[u][h]);
    }
  };
  auto x_pairs = [&](int nt, int j, int k_left, uint32_t (&b)[16]) {
    load_x_pairs<F, kGeglu>(op.x[nt] + static_cast<int64_t>(j) * kChunk, c, k_left, op.x_valid[nt], op.x_vec4, b,
                            op.up_offset);
  };
  auto dequant_chunk = [&](int u, int k_left, uint32_t (&a)[8][4]) {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      a[t][0] = weight_pair<F>(raw[u][0], 2 * t, sc[u][0], bi[u][0], c, k_left);
      a[t][1] = weight_pair<F>(raw[u][1], 2 * t, sc[u][1], bi[u][1], c, k_left);
      a[t][2] = weight_pair<F>(raw[u][0], 2 * t + 1, sc[u][0], bi[u][0], c, k_left);
      a[t][3] = weight_pair<F>(raw[u][1], 2 * t + 1, sc[u][1], bi[u][1], c, k_left);
    }
  };
  auto multiply_chunk = [&](int j, int k_left, const uint32_t (&a)[8][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t b[16];
      x_pairs(nt, j, k_left, b);
#pragma unroll
      for (int t = 0; t < 8; ++t) mma_bf16(acc[nt], a[t], b[2 * t], b[2 * t + 1]);
    }
  };

  if constexpr (DecodeConfig<F, NT>::kRing) {
    // Ring of kUnroll slots, slot u holding chunk j0 + u: a slot is refilled with the chunk kUnroll ahead
    // as soon as it is used, so every warp keeps ~kUnroll chunks of loads in flight while it
    // computes, instead of alternating a burst of loads with a phase of pure compute (the 4/8-bit
    // formats spend 4-8x more issue slots per byte than bf16 on dequantization, so that compute phase
    // is long and left the memory system idle). Slots are indexed statically (fully unrolled u), so the
    // ring costs no register moves. Loads past chunk_end are predicated off (zeros, no memory access).
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_chunk(u, chunk_begin + u);
    for (int j0 = chunk_begin; j0 < chunk_end; j0 += kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u;
        if (j < chunk_end) {
          const int k_left = static_cast<int>(op.k - static_cast<int64_t>(j) * kChunk);
          if constexpr (NT == 1 && F::kBits == 4) {
            // x first, then each step's A fragment right before its mma: 4 live A registers instead of
            // 32 (the same operands in the same order), which keeps Q4's 4-slot ring free of spills.
            // (Q8's 2-slot ring fits the other way and spills this way, per ptxas -v.)
            uint32_t b[16];
            x_pairs(0, j, k_left, b);
#pragma unroll
            for (int t = 0; t < 8; ++t) {
              const uint32_t a[4] = {weight_pair<F>(raw[u][0], 2 * t, sc[u][0], bi[u][0], c, k_left),
                                     weight_pair<F>(raw[u][1], 2 * t, sc[u][1], bi[u][1], c, k_left),
                                     weight_pair<F>(raw[u][0], 2 * t + 1, sc[u][0], bi[u][0], c, k_left),
                                     weight_pair<F>(raw[u][1], 2 * t + 1, sc[u][1], bi[u][1], c, k_left)};
              mma_bf16(acc[0], a, b[2 * t], b[2 * t + 1]);
            }
          } else {
            uint32_t a[8][4];
            dequant_chunk(u, k_left, a);
            multiply_chunk(j, k_left, a);
          }
          load_chunk(u, j + kUnroll);  // after the mma: the A registers are dead, so the ring fits
        }
      }
    }
  } else {
    // kUnroll chunks loaded, then used (bf16: one chunk is 8 loads per lane already; packed: unchanged).
    for (int j0 = chunk_begin; j0 < chunk_end; j0 += kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_chunk(u, j0 + u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u;
        if (j < chunk_end) {
          const int k_left = static_cast<int>(op.k - static_cast<int64_t>(j) * kChunk);
          uint32_t a[8][4];
          dequant_chunk(u, k_left, a);
          multiply_chunk(j, k_left, a);
        }
      }
    }
  }
}

// Writes the warp's segment sums (decode_segment's C fragments) to partial[warp][x row][weight row]
// ([segments][NT * 8][16] floats) and waits for the block: then partial holds every segment's sums.
template <int NT>
__device__ __forceinline__ void store_segment_sums(float* partial, int warp, int g, int c, const float (&acc)[NT][4]) {
  float* mine = partial + warp * (NT * 8 * 16);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    mine[(nt * 8 + 2 * c) * 16 + g] = acc[nt][0];
    mine[(nt * 8 + 2 * c + 1) * 16 + g] = acc[nt][1];
    mine[(nt * 8 + 2 * c) * 16 + g + 8] = acc[nt][2];
    mine[(nt * 8 + 2 * c + 1) * 16 + g + 8] = acc[nt][3];
  }
  __syncthreads();
}

// Entry i of the segments' sums (x row i / 16, weight row i % 16), added in segment order.
template <int NT>
__device__ __forceinline__ float segment_total(const float* partial, int segments, int i) {
  float v = partial[i];
  for (int s = 1; s < segments; ++s) v += partial[s * (NT * 8 * 16) + i];
  return v;
}

template <class F, int NT>
__global__ void __launch_bounds__(kMaxSegments * 32) linear_decode_kernel(const Problem p) {
  wait_for_prior_kernels();
  allow_next_kernel();
  extern __shared__ float partial[];  // [segments][NT * 8 x rows][16 weight rows]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int segments = blockDim.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * (8 * NT);
  SegmentOperands<NT> op;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = row0 + g + 8 * h;
    op.w_valid[h] = r < p.n;
    op.w[h] = p.weight + (op.w_valid[h] ? r : 0) * p.row_words;
    op.first_group[h] = r * p.groups_per_row;
  }
  op.scales = p.scales;
  op.biases = p.biases;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t token = m0 + nt * 8 + g;
    op.x_valid[nt] = token < p.m;
    op.x[nt] = p.x + (op.x_valid[nt] ? token : 0) * p.x_stride;
  }
  op.up_offset = 0;
  op.set_segment(p.k, p.group_shift, p.scale_dtype, p.x_vec4, p.chunks, warp, segments);
  float acc[NT][4];
  decode_segment<F, NT>(op, c, acc);

  store_segment_sums<NT>(partial, warp, g, c, acc);
  for (int i = threadIdx.x; i < NT * 8 * 16; i += blockDim.x) {
    const int64_t token = m0 + (i >> 4), row = row0 + (i & 15);
    if (token < p.m && row < p.n) p.out[token * p.out_stride + row] = segment_total<NT>(partial, segments, i);
  }
}

// ---- x preparation for the prefill kernel ----------------------------------------------------------------
//
// xp [m][chunks][128] bf16: chunk j of row r holds, at 16 t + 8 p + 2 c + e, bf16(x[r, 128 j + pair_k(c,
// 2t + p, e)]) (0 past k) — each mma step's B fragment as two 16-byte rows for ldmatrix.
//
// Gathered rows (the MoE's grouped prefill): row r of xp is x's row map[r] / div (a negative map entry: a
// row of zeros). With `up` set, the values of source row s are gelu_tanh(x[s, k]) * up[s, k] (the GeGLU
// before a down projection, in f32 as the gelu_tanh_mul op computes it, so the same bits as that op followed
// by the projection; for a stacked [gate | up] row, up = x + the gate width).
struct XRows {
  const int32_t* map = nullptr;  // null: row r is x's row r
  int div = 1;
  const float* up = nullptr;  // null: no GeGLU
  int64_t up_stride = 0;
  // Non-null (instead of map): the preparation covers x's m / div rows, and x's row r is stored to xp's rows
  // scatter[r · div + s], s < div (a negative entry: none). xp rows that no entry names are left as they were
  // (the grouped prefill computes such rows of a tile, never stores them, and an output column reads only its
  // own x row).
  const int32_t* scatter = nullptr;
};

// One thread per 16 bytes of xp (4 consecutive words of a chunk, unit u of the [m][chunks * 16] units):
// eight f32 loads (sixteen with rows.up) in flight per thread and one 16-byte store (rows.scatter: units of
// x's rows, one store per named xp row). (One word per thread with two loads in flight read x at about half
// the bandwidth: ncu, E4B prefill, ~10 % of the step.)
template <class F>
__global__ void prepare_x_kernel(const float* x, int64_t x_stride, int64_t k, int chunks, uint32_t* xp,
                                 const XRows rows, int64_t units) {
  wait_for_prior_kernels();
  allow_next_kernel();
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= units) return;
  const int64_t row_units = static_cast<int64_t>(chunks) * 16;
  const int64_t row = u / row_units, j = (u % row_units) >> 4;
  const int q0 = static_cast<int>(u & 15) * 4;  // the unit's first word in its chunk
  int64_t source = row;
  if (rows.map != nullptr) source = rows.map[row] < 0 ? -1 : rows.map[row] / rows.div;
  const float* xr = x + source * x_stride + j * kChunk;
  const float* ur = rows.up != nullptr ? rows.up + source * rows.up_stride + j * kChunk : nullptr;
  const int64_t k_left = source < 0 ? 0 : k - j * kChunk;
  auto value = [&](int kk) {
    if (kk >= k_left) return 0.0f;
    return rows.up != nullptr ? detail::gelu_tanh_mul(xr[kk], ur[kk]) : xr[kk];
  };
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = q0 + i, t = q >> 3, half = (q >> 2) & 1, c = q & 3, P = 2 * t + half;
    w[i] = pack_bf16x2(value(pair_k<F>(c, P, 0)), value(pair_k<F>(c, P, 1)));
  }
  const uint4 unit = make_uint4(w[0], w[1], w[2], w[3]);
  if (rows.scatter == nullptr) {
    *reinterpret_cast<uint4*>(xp + (row * chunks + j) * 64 + q0) = unit;
    return;
  }
  for (int s = 0; s < rows.div; ++s) {
    const int64_t to = rows.scatter[row * rows.div + s];
    if (to >= 0) *reinterpret_cast<uint4*>(xp + (to * chunks + j) * 64 + q0) = unit;
  }
}

// ---- Prefill kernel --------------------------------------------------------------------------------------
//
// Block tile 128 weight rows x 128 x rows, 8 warps as 4 (rows, 32 each) x 2 (x rows, 64 each); a warp tile
// is 2 x 8 mma tiles. Per chunk a kStages-deep cp.async pipeline brings the block's raw weight words
// (128 rows x 16*bits bytes) and prepared x (128 rows x 256 bytes, 16-byte units XOR-swizzled by row) to
// shared memory; each warp dequantizes its A fragments in registers from the raw words (the same code as
// the decode kernel) and reads B with ldmatrix. Segments are summed in `acc` and added at their ends, in
// order, to per-thread totals in shared memory (kSplit; without it there is one segment).

template <class F, bool kSplit = true>
struct PrefillConfig {
  static constexpr int kARowBytes = 16 * F::kBits;  // one chunk of one weight row
  static constexpr int kABytes = kTileN * kARowBytes;
  static constexpr int kBBytes = kTileM * 256;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Segment totals of a split: 64 floats per thread, element i of thread t at i * 256 + t.
  static constexpr int kTotalBytes = kSplit ? 64 * 256 * 4 : 0;
  static constexpr int kMaxSmem = 227 * 1024;
  static constexpr int kStages = 3 * kStageBytes + kTotalBytes <= kMaxSmem ? 3 : 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + kTotalBytes;
  // 16-byte unit swizzle of A rows (rows of >= 128 bytes: odd rows XOR 4, so that lanes reading rows
  // 2i and 2i+1 hit different banks).
  static constexpr bool kSwizzleA = F::kLoadBytes == 16 && kARowBytes >= 128;
};

template <class F>
__device__ __forceinline__ uint32_t a_smem_offset(int row, int unit_or_word) {
  static_assert(PrefillConfig<F, true>::kARowBytes == PrefillConfig<F, false>::kARowBytes);
  constexpr int kRowBytes = PrefillConfig<F>::kARowBytes;
  if constexpr (F::kLoadBytes == 16) {
    const int unit = PrefillConfig<F>::kSwizzleA ? unit_or_word ^ ((row & 1) << 2) : unit_or_word;
    return row * kRowBytes + unit * 16;
  } else {
    return row * kRowBytes + unit_or_word * 4;
  }
}

// The copies of one stage of the mma.sync prefill kernel: the block's raw weight words (weight rows
// expert_row0 + row_tile .., where expert_row0 is the expert's first row in a stack, 0 for a plain weight)
// and prepared x (x rows [tok_tile, m_end) of the tile's 128, as 256-byte rows with XOR-swizzled 16-byte
// units for ldmatrix) for one chunk. Each thread's sources and destinations are planned once per tile, so
// that a chunk costs an add per copy: planned per chunk, the 64-bit index arithmetic was over half of the
// instructions of the wgmma kernel that shared this code before it moved to TMA. A copy past the weight's
// rows, past k or past m_end zero-fills, from an address inside the arrays (its tile's first row).
template <class F>
struct PrefillStageCopies {
  using C = PrefillConfig<F>;
  static constexpr bool kWide = F::kLoadBytes == 16;  // 16-byte copies (else 4-byte words)
  static constexpr int kAPerRow = kWide ? C::kARowBytes / 16 : chunk_words<F>();
  static constexpr int kACopies = kTileN * kAPerRow / 256;
  static constexpr int kBCopies = kTileM * 16 / 256;
  static_assert(kTileN * kAPerRow % 256 == 0 && 256 % 16 == 0);

  const uint32_t* a_src[kACopies];  // chunk 0's words of copy i
  uint32_t a_dst[kACopies];         // its offset in a stage
  int a_first[kACopies];            // its first column (wide) or word (4-byte) within a chunk
  uint32_t a_rows_ok = 0;           // bit i: copy i's row is a weight row
  int a_limit = 0;                  // columns (wide) or words per row (4-byte)
  const uint32_t* b_src = nullptr;  // chunk 0 of x row tok_tile + tid / 16 (clamped), unit tid % 16
  int64_t b_step = 0;               // words between the rows of copies i and i + 1 (16 x rows)
  uint32_t b_dst = 0, b_dst_step = 0;
  uint32_t b_rows_ok = 0;  // bit i: copy i's x row is below m_end

  __device__ __forceinline__ PrefillStageCopies(const Problem& p, const uint32_t* xp, int64_t expert_row0,
                                                int64_t row_tile, int64_t tok_tile, int64_t m_end) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int it = 0; it < kACopies; ++it) {
      const int i = tid + it * 256;
      const int r = i / kAPerRow, q = i % kAPerRow;
      const int64_t row = row_tile + r;
      if (row < p.n) a_rows_ok |= 1u << it;
      const int64_t safe_row = row < p.n ? row : row_tile;
      a_src[it] = p.weight + (expert_row0 + safe_row) * p.row_words + (kWide ? 4 * q : q);
      a_dst[it] = a_smem_offset<F>(r, q);
      a_first[it] = kWide ? q * (128 / F::kBits) : q;
    }
    a_limit = kWide ? static_cast<int>(p.k) : static_cast<int>(p.row_words);
    const int r = tid >> 4, q = tid & 15;
    b_step = static_cast<int64_t>(256 / 16) * p.chunks * 64;
#pragma unroll
    for (int it = 0; it < kBCopies; ++it)
      if (tok_tile + r + it * (256 / 16) < m_end) b_rows_ok |= 1u << it;
    b_src = xp + ((tok_tile + r) * p.chunks) * 64 + q * 4;  // row tok_tile + r: the tile's first row is valid
    if ((b_rows_ok & 1u) == 0) b_src = xp + (tok_tile * p.chunks) * 64 + q * 4;
    b_dst = C::kABytes + r * 256 + ((q ^ (r & 7)) << 4);
    b_dst_step = (256 / 16) * 256;  // (r + 16 keeps r % 8)
  }

  // Enqueues the copies of chunk `chunk` into the stage at shared address `stage` (cp.async, not committed).
  __device__ __forceinline__ void load(int chunk, uint32_t stage) const {
    const int a_chunk = chunk * (kWide ? kChunk : chunk_words<F>());
#pragma unroll
    for (int it = 0; it < kACopies; ++it) {
      const bool ok = ((a_rows_ok >> it) & 1u) != 0 && a_chunk + a_first[it] < a_limit;
      const uint32_t* src = a_src[it] + (ok ? chunk * chunk_words<F>() : 0);
      cp_async<kWide ? 16 : 4>(stage + a_dst[it], src, ok);
    }
    const uint32_t* first = b_src + chunk * 64;
    const uint32_t* row = first;
#pragma unroll
    for (int it = 0; it < kBCopies; ++it, row += b_step) {
      const bool ok = ((b_rows_ok >> it) & 1u) != 0;
      cp_async<16>(stage + b_dst + it * b_dst_step, ok ? row : first, ok);
    }
  }
};

// Raw words of load l of one weight row (local row `row`) from a stage in shared memory.
template <class F>
__device__ __forceinline__ void load_raw_smem(const unsigned char* stage_ptr, int row, int c, int l,
                                              uint32_t (&raw)[F::kWords]) {
  if constexpr (F::kLoadBytes == 16) {
    const uint4 v =
        *reinterpret_cast<const uint4*>(stage_ptr + a_smem_offset<F>(row, F::load_word(c, l) / 4));
    raw[4 * l + 0] = v.x, raw[4 * l + 1] = v.y, raw[4 * l + 2] = v.z, raw[4 * l + 3] = v.w;
  } else {
    raw[l] = *reinterpret_cast<const uint32_t*>(stage_ptr + a_smem_offset<F>(row, F::load_word(c, l)));
  }
}

// How a prefill launch's blocks map to tiles. The block's x tile is its grid x index (x rows 128 i ..) and
// its weight row tile its grid y index — or, with rows_first, the other way round, so that the blocks
// resident together share an x tile and read each other's weight tiles instead: one read of each x tile from
// DRAM, where x-first sweeps re-read every x tile per weight row tile once x outgrows L2
// (prefill_rows_first). The MoE's grouped prefill: the x index picks chunks[i] ({expert, first row, rows}: up
// to 128 x rows of one expert, x rows and output rows indexed by those rows); blocks past *chunk_count exit.
// The weight is a stack of p.n-row experts. The order changes which block computes a tile, never how: the
// same bits.
struct PrefillChunks {
  const int4* chunks = nullptr;  // null: a plain projection
  const int* chunk_count = nullptr;
  int experts = 0;
  bool rows_first = false;  // weight row tiles along grid x, x tiles (chunks) along y
  int chunk_rows = kTileM;  // the most rows of a chunk: kTileM, or kWideChunkRows (prefill_chunk_rows)
};
// Chunks of up to 160 rows: the wgmma kernel's wide instance (m64n160k16) takes them whole.
constexpr int kWideChunkRows = 160;

// A prefill block's x rows [tok_tile, m_end), its weight row tile's first row (row_tile) and the weight's
// first row in a stack (expert_row0): from its grid indices, and its chunk of `grouped` (a plain launch: x
// tiles of x_rows rows). False when the block has no work (a grouped block past the chunk count, or whose
// expert id is out of range); block-uniform.
struct PrefillTile {
  int64_t tok_tile = 0, m_end = 0, expert_row0 = 0, row_tile = 0;
};
__device__ __forceinline__ bool prefill_tile(const Problem& p, const PrefillChunks& grouped,
                                             PrefillTile& tile, int x_rows = kTileM) {
  const unsigned x_index = grouped.rows_first ? blockIdx.y : blockIdx.x;
  tile.row_tile = static_cast<int64_t>(grouped.rows_first ? blockIdx.x : blockIdx.y) * kTileN;
  tile.tok_tile = static_cast<int64_t>(x_index) * x_rows;
  tile.m_end = p.m;
  tile.expert_row0 = 0;
  if (grouped.chunks == nullptr) return true;
  if (static_cast<int>(x_index) >= *grouped.chunk_count) return false;
  const int4 chunk = grouped.chunks[x_index];
  if (chunk.x < 0 || chunk.x >= grouped.experts) return false;
  tile.expert_row0 = static_cast<int64_t>(chunk.x) * p.n;
  tile.tok_tile = chunk.y;
  tile.m_end = static_cast<int64_t>(chunk.y) + chunk.z;
  return true;
}

template <class F, bool kSplit>
__global__ void __launch_bounds__(256, 1)
    linear_prefill_kernel(const Problem p, const uint32_t* xp, const PrefillChunks grouped) {
  wait_for_prior_kernels();
  allow_next_kernel();
  PrefillTile tile;
  if (!prefill_tile(p, grouped, tile)) return;
  const int64_t tok_tile = tile.tok_tile, m_end = tile.m_end, expert_row0 = tile.expert_row0;
  using C = PrefillConfig<F, kSplit>;
  constexpr int kStages = C::kStages;
  constexpr int kSlots = F::kScaleSlots > 0 ? F::kScaleSlots : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int warp_n = warp & 3, warp_m = warp >> 2;
  const int64_t row_tile = tile.row_tile;
  const uint32_t smem_base = smem_address(smem);

  // This lane's weight rows: m-tile mt, half h → local row warp_n*32 + mt*16 + h*8 + g.
  int64_t rows[2][2];
  bool row_ok[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows[mt][h] = row_tile + warp_n * 32 + mt * 16 + h * 8 + g;
      row_ok[mt][h] = rows[mt][h] < p.n;
    }

  const PrefillStageCopies<F> copies(p, xp, expert_row0, row_tile, tok_tile, m_end);
  float acc[2][8][4];
  float* total = reinterpret_cast<float*>(smem + kStages * C::kStageBytes) + tid;  // [64][256]
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;

  const int chunks = p.chunks;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) copies.load(s, smem_base + s * C::kStageBytes);
    cp_async_commit();
  }

  float sc[2][2][kSlots], bi[2][2][kSlots];
  {
    const int k_left = static_cast<int>(p.k);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        load_slot_scales<F>(p, expert_row0 + rows[mt][h], row_ok[mt][h], 0, c, k_left, sc[mt][h], bi[mt][h]);
  }

  int segment = 0;
  int segment_end = segment_begin(1, p.segments, chunks);
  // ldmatrix row of this lane: matrix lane/8 (x-row half (lane/16), k half (lane/8)&1), row lane%8.
  const int ld_row = warp_m * 64 + (lane >> 4) * 8 + (lane & 7);
  const int ld_khalf = (lane >> 3) & 1;

  for (int j = 0; j < chunks; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int next = j + kStages - 1;
      if (next < chunks) copies.load(next, smem_base + (next % kStages) * C::kStageBytes);
      cp_async_commit();
    }
    // Scales of the next chunk, loaded while this one computes.
    float sc_next[2][2][kSlots], bi_next[2][2][kSlots];
    if (j + 1 < chunks) {
      const int k_left = static_cast<int>(p.k - static_cast<int64_t>(j + 1) * kChunk);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          load_slot_scales<F>(p, expert_row0 + rows[mt][h], row_ok[mt][h], j + 1, c, k_left, sc_next[mt][h],
                              bi_next[mt][h]);
    }

    const int stage = j % kStages;
    const unsigned char* a_ptr = smem + stage * C::kStageBytes;
    const uint32_t b_addr = smem_base + stage * C::kStageBytes + C::kABytes + ld_row * 256;
    const int k_left = static_cast<int>(p.k - static_cast<int64_t>(j) * kChunk);

    uint32_t raw[2][2][F::kWords];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      // Raw words of the load that pairs 2t, 2t+1 come from (all formats: pairs of one step share a load).
      constexpr int kStepsPerLoad = F::kLoadBytes == 16 ? 8 / F::kLoads : 8;
      if (t % kStepsPerLoad == 0) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int local_row = warp_n * 32 + mt * 16 + h * 8 + g;
            if constexpr (F::kLoadBytes == 16) {
              load_raw_smem<F>(a_ptr, local_row, c, F::pair_load(2 * t), raw[mt][h]);
            } else {
#pragma unroll
              for (int l = 0; l < F::kLoads; ++l) load_raw_smem<F>(a_ptr, local_row, c, l, raw[mt][h]);
            }
          }
      }
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        a[mt][0] = weight_pair<F>(raw[mt][0], 2 * t, sc[mt][0], bi[mt][0], c, k_left);
        a[mt][1] = weight_pair<F>(raw[mt][1], 2 * t, sc[mt][1], bi[mt][1], c, k_left);
        a[mt][2] = weight_pair<F>(raw[mt][0], 2 * t + 1, sc[mt][0], bi[mt][0], c, k_left);
        a[mt][3] = weight_pair<F>(raw[mt][1], 2 * t + 1, sc[mt][1], bi[mt][1], c, k_left);
      }
      const int unit = (2 * t + ld_khalf) ^ (lane & 7);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bq[4];
        ldmatrix_x4(bq, b_addr + np * 16 * 256 + (unit << 4));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(acc[mt][2 * np], a[mt], bq[0], bq[1]);
          mma_bf16(acc[mt][2 * np + 1], a[mt], bq[2], bq[3]);
        }
      }
    }

    if constexpr (kSplit) {
      if (j + 1 == segment_end) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              float* slot = total + ((mt * 8 + nt) * 4 + i) * 256;
              *slot = segment == 0 ? acc[mt][nt][i] : *slot + acc[mt][nt][i];
              acc[mt][nt][i] = 0.0f;
            }
        ++segment;
        segment_end = segment_begin(segment + 1, p.segments, chunks);
      }
    }
    if (j + 1 < chunks) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s = 0; s < kSlots; ++s) sc[mt][h][s] = sc_next[mt][h][s], bi[mt][h][s] = bi_next[mt][h][s];
    }
  }
  cp_async_wait<0>();

  // Store: C fragment rows g / g+8 (weight rows), columns 2c, 2c+1 (x rows).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int64_t token = tok_tile + warp_m * 64 + nt * 8 + 2 * c;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v;
        if constexpr (kSplit)
          v = total[((mt * 8 + nt) * 4 + i) * 256];
        else
          v = acc[mt][nt][i];
        const int64_t tk = token + (i & 1);
        const int h = i >> 1;
        if (tk < m_end && row_ok[mt][h]) p.out[tk * p.out_stride + rows[mt][h]] = v;
      }
    }
}

// ---- Host entry points (quantized_gemv.cu, quantized_gemm.cu) ---------------------------------------------

// Enqueues a prefill kernel (linear_prefill_kernel or prefill_wgmma_kernel) over grid_x x-row tiles (or
// chunks of `grouped`) and the weight's row tiles, with `threads` per block, `smem` bytes of dynamic shared
// memory and the kernel's parameters after (p, xp, grouped): `extra` (the wgmma kernel's tensor maps).
template <class Kernel, class... Extra>
void launch_prefill_tiles(Kernel kernel, int smem, int threads, const Problem& p, const uint32_t* xp,
                          const PrefillChunks& grouped, int64_t grid_x, cudaStream_t stream,
                          const Extra&... extra) {
  // Per call (cheap, host-side) so that every device the process uses gets the attribute.
  LMX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const auto x_tiles = static_cast<unsigned>(grid_x),
             row_tiles = static_cast<unsigned>((p.n + kTileN - 1) / kTileN);
  const dim3 grid = grouped.rows_first ? dim3(row_tiles, x_tiles) : dim3(x_tiles, row_tiles);
  launch(kernel, grid, threads, static_cast<size_t>(smem), stream, p, xp, grouped, extra...);
}

// Enqueues the decode kernel (m <= kDecodeMaxRows; any m works). x_up (the batch-1 4-bit kernel only, where
// q4_gemv_applies): the input is gelu_tanh(x) * x_up instead of x.
void launch_decode(const Problem& p, cudaStream_t stream, const float* x_up = nullptr);
// The stacked [gate; up] projection followed by the GeGLU in one kernel (q4_gemv_kernel, Q4Io::kGegluOutput)
// when the batch-1 4-bit kernel applies with an even row count: out[0, I) = gelu_tanh(gate) * up, out[I, 2I)
// unwritten. False (nothing enqueued) otherwise. (quantized_linear_geglu adds the size rule.)
bool launch_decode_geglu(const Problem& p, cudaStream_t stream);
// Bytes of scratch the prefill path needs for prepared x.
size_t prefill_scratch_bytes(const Problem& p);
// Enqueues x preparation into `xp` (prefill_scratch_bytes) and the prefill kernel; `rows` may ask for the
// GeGLU of x and rows.up (no gathering: rows.map must be null).
void launch_prefill(const Problem& p, uint32_t* xp, cudaStream_t stream, const XRows& rows = XRows{});
// The prefill kernel on Hopper's warpgroup MMA (sm90a/prefill_wgmma.cu): the same tiles, operands, k steps
// and segment sums as linear_prefill_kernel, so the same bits (wgmma chains give mma.sync's bits:
// bench/cuda/wgmma_probe.cu); xp already prepared. False (nothing enqueued) when it does not apply: a weight
// format other than kQ4, a device other than sm_90 (the kernel is sm_90a code), or the tuning table's
// prefill.wgmma off.
bool launch_prefill_wgmma(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t grid_x,
                          cudaStream_t stream);
// The most rows a grouped prefill chunk may hold for the stack of p (sm90a/prefill_wgmma.cu): kWideChunkRows
// where the wgmma kernel runs p (4-bit codes with bf16 scales on sm_90) and the tuning table's
// prefill.wide_chunks is on, else kTileM.
int prefill_chunk_rows(const Problem& p);
// The grid order of a prefill launch over grid_x x tiles (quantized_gemm.cu; PrefillChunks::rows_first) by
// the tuning table's prefill.rows_first (kAuto: the rule there).
bool prefill_rows_first(const Problem& p, bool grouped, int64_t grid_x, Choice rule);
// The wgmma kernel's x tile height for a plain launch over grid_x 128-row tiles on a device of `sms` SMs
// (sm90a/prefill_wgmma.cu): the 32-row tiles it takes (prefill.short_tiles), else the 96-row tiles
// (prefill.narrow_tiles, narrow_tile_cost), each 0 where the rule keeps 128-row tiles.
int64_t prefill_short_tiles(const Problem& p, int64_t grid_x, int64_t sms, const CudaTuning::Prefill& rules);
int64_t prefill_narrow_tiles(const Problem& p, int64_t grid_x, int64_t sms, const CudaTuning::Prefill& rules);
// The MoE's grouped prefill (quantized_gemm.cu): p.weight a stack of p.n-row experts, p.m the pair rows,
// x rows gathered by `rows` into xp, then the prefill kernel over up to max_chunks chunks of `grouped`
// (each up to grouped.chunk_rows rows of one expert); out rows are pair rows.
void launch_prefill_grouped(const Problem& p, const XRows& rows, const PrefillChunks& grouped, int max_chunks,
                            uint32_t* xp, cudaStream_t stream);
// A quantized weight's problem (quantized_linear.cu): the weight format from its bits and the alignment of
// its codes (FormatQ4 / FormatQ8 for 16-byte aligned 4- and 8-bit codes, else FormatPacked), its fields,
// x [m, k] with row stride x_stride and out with out_stride; the derived fields are left to complete().
// For a stack (w.batch > 1), n is the rows of one matrix. `table`: the tuning table (linear.small_scales).
Problem quantized_problem(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                          int64_t out_stride, const CudaTuning& table = tuning());
// Fills in the derived fields (chunks, segments, x_vec4; quantized_linear.cu) by the tuning table's
// segment rules. Needs p.n, p.k, p.m > 0.
void complete(Problem& p, const CudaTuning& table = tuning());
// The most x rows run() sends to the decode kernel: the tuning table's linear.decode_max_rows.
int64_t decode_max_rows();
// complete(), then the decode path (up to decode_max_rows() rows) or the prefill path.
void run(Problem p, CudaContext& ctx);
// The prefill path of a completed problem: x prepared into the context's scratch (`rows`: launch_prefill's),
// then the prefill kernel.
void run_prefill(const Problem& p, CudaContext& ctx, const XRows& rows = XRows{});

}  // namespace lmx::cuda::linear
