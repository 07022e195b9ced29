// Device-side reading and writing of the quantized KV layouts (ops/paged_kv.h, kv/kv_codec.h) for the
// CUDA attention: decoding 8 consecutive elements of a coded row (the attention kernels' tile loads
// dequantize through it), and the per-row quantizers of kv_append_coded (kv_quantize.cu).
//
// Numerics: the quantizers are the CPU's (ops/cpu/affine_kv.cpp, quant/turbo.cpp) operation for operation,
// each rounding an explicit intrinsic, so a row's bytes are the CPU's bytes for the same f32 input (tests
// compare them). Decoding gives the CPU's f32 values (fma(scale, code, bias); (idx + zero) · scale;
// centroid · σ), which the tile then holds in bf16 like the bf16 codec's rows.
#pragma once

#include "lmx/ops/cuda/attention.h"
#include "lmx/quant/turbo_centroids.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda::codec {

constexpr int kTurboBlock = 32;

// TurboQuant's Lloyd–Max centroids: 2-bit at [0, 4), 3-bit at [4, 12), 4-bit at [12, 28).
__device__ const float kCentroids[28] = {LMX_TURBO_CENTROIDS_2, LMX_TURBO_CENTROIDS_3, LMX_TURBO_CENTROIDS_4};
__device__ __forceinline__ const float* centroids(int bits) {
  return kCentroids + (bits == 2 ? 0 : bits == 3 ? 4 : 12);
}

// The sign of element i of TurboQuant's value rotation (quant::turbo_sign): bit i % 64 of splitmix64's
// word i / 64 from the seed "turboqnt" (word w = mix(seed + (w + 1) · golden)).
__device__ __forceinline__ float turbo_sign(int i) {
  uint64_t z = 0x747572626f716e74ull + static_cast<uint64_t>(i / 64 + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (z >> (i % 64) & 1u) ? -1.0f : 1.0f;
}

// Bytes of one token-head row of a TurboQuant half (quant::turbo_key_bytes / turbo_value_bytes).
__host__ __device__ __forceinline__ int64_t turbo_row_bytes(const PagedStore& s, int head_dim) {
  const int params = s.codec == StoreCodec::kTurboKey ? 4 : 2;
  return static_cast<int64_t>(head_dim) * s.bits / 8 + head_dim / kTurboBlock * params;
}

// The start of the coded half (keys or values of the store's layer) of the block holding position pos.
__device__ __forceinline__ char* coded_half(const PagedStore& s, int seq, int pos) {
  const int block = pos / s.block_tokens;
  char* base = static_cast<char*>(
      const_cast<void*>(s.blocks[static_cast<int64_t>(seq) * s.stride + block - s.first_block[seq]]));
  return base + s.offset;
}

__device__ __forceinline__ uint16_t load_u16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8);
}
// n ≤ 4 little-endian bytes as one word.
__device__ __forceinline__ uint32_t load_bytes(const char* p, int n) {
  uint32_t w = 0;
  for (int i = 0; i < n; ++i) w |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return w;
}

// Elements [c, c + 8) of row `row` (slot · kv_heads + head) of a coded half (`block_rows` rows per block),
// c a multiple of 8, decoded to f32.
__device__ __forceinline__ void decode8(const PagedStore& s, const char* half, int64_t block_rows,
                                        int head_dim, int64_t row, int c, float (&x)[8]) {
  if (s.codec == StoreCodec::kAffine) {
    const int words = head_dim * s.bits / 32, groups = head_dim / s.group;
    const uint32_t* codes = reinterpret_cast<const uint32_t*>(half) + row * words + c * s.bits / 32;
    const char* params = half + block_rows * words * 4;
    const int64_t at = (row * groups + c / s.group) * 2;
    const float scale = __bfloat162float(__ushort_as_bfloat16(load_u16(params + at)));
    const float bias =
        __bfloat162float(__ushort_as_bfloat16(load_u16(params + block_rows * groups * 2 + at)));
    if (s.bits == 4) {
      const uint32_t w = codes[0];
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = __fmaf_rn(scale, static_cast<float>(w >> (4 * e) & 15u), bias);
    } else {
      const uint32_t w[2] = {codes[0], codes[1]};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = __fmaf_rn(scale, static_cast<float>(w[e / 4] >> (8 * (e % 4)) & 255u), bias);
    }
    return;
  }
  const char* base = half + row * turbo_row_bytes(s, head_dim);
  const char* codes = base + c * s.bits / 8;
  const char* params = base + head_dim * s.bits / 8;
  if (s.codec == StoreCodec::kTurboKey) {
    const float scale = __half2float(__ushort_as_half(load_u16(params + c / kTurboBlock * 4)));
    const float zero = __half2float(__ushort_as_half(load_u16(params + c / kTurboBlock * 4 + 2)));
    if (s.bits == 8) {
      const uint32_t w[2] = {load_bytes(codes, 4), load_bytes(codes + 4, 4)};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int idx = static_cast<int8_t>(w[e / 4] >> (8 * (e % 4)) & 255u);
        x[e] = __fmul_rn(__fadd_rn(static_cast<float>(idx), zero), scale);
      }
    } else {
      const uint32_t w = load_bytes(codes, 4);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = __fmul_rn(__fadd_rn(static_cast<float>(w >> (4 * e) & 15u), zero), scale);
    }
    return;
  }
  // TurboQuant values (rotated): 8 codes of `bits` bits fill `bits` whole bytes.
  const float sigma = __half2float(__ushort_as_half(load_u16(params + c / kTurboBlock * 2)));
  const float* table = centroids(s.bits);
  const uint32_t w = load_bytes(codes, s.bits), mask = (1u << s.bits) - 1u;
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = __fmul_rn(table[w >> (s.bits * e) & mask], sigma);
}

// One 64-key tile of a coded store into shared memory as bf16 rows of DT + 8 (load_tile's layout and
// thread mapping): keys outside [lo, hi) and columns past head_dim are zeros. Plain stores, so the caller's
// barrier makes them visible (no cp.async group to wait for).
template <int DT, int THREADS>
__device__ __forceinline__ void load_coded_tile(__nv_bfloat16* dst, const PagedStore& s, int seq,
                                                int kv_heads, int kvh, int head_dim, int key0, int lo,
                                                int hi) {
  constexpr int kStride = DT + 8;
  constexpr int kChunks = DT / 8;
  constexpr int kTileKeys = 64;
  constexpr int kStep = THREADS / kChunks;
  static_assert(THREADS % kChunks == 0 && kTileKeys % kStep == 0,
                "load_coded_tile: the block's threads must cover whole key rows of the tile");
  const int c = static_cast<int>(threadIdx.x % kChunks) * 8;
  const int key = static_cast<int>(threadIdx.x / kChunks);
  const char* half = coded_half(s, seq, key0);
  const int64_t block_rows = static_cast<int64_t>(s.block_tokens) * kv_heads;
  const int slot0 = key0 % s.block_tokens;
#pragma unroll 2
  for (int k = key; k < kTileKeys; k += kStep) {
    const int j = key0 + k;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if (c < head_dim && j >= lo && j < hi) {
      float x[8];
      decode8(s, half, block_rows, head_dim, static_cast<int64_t>(slot0 + k) * kv_heads + kvh, c, x);
      __nv_bfloat162 b[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) b[e] = __floats2bfloat162_rn(x[2 * e], x[2 * e + 1]);
      packed = *reinterpret_cast<const uint4*>(b);
    }
    *reinterpret_cast<uint4*>(dst + k * kStride + c) = packed;
  }
}

}  // namespace lmx::cuda::codec
