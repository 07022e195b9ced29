// Appending keys and values to coded KV stores (affine, TurboQuant), and TurboQuant's deferred inverse
// rotation of attention outputs (attention.h). One warp per token-head row: the row goes to the warp's
// shared memory, then each lane codes whole groups (affine) or 32-element blocks (TurboQuant) in the CPU
// codec's order of operations (kv_codec.cuh), so the bytes written are the CPU's for the same input.
#include "lmx/core/error.h"
#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/kv_codec.cuh"
#include "lmx/ops/cuda/launch.cuh"

#include <algorithm>

namespace lmx::cuda {
namespace {

using codec::kTurboBlock;

constexpr int kWarps = 4;     // rows per block
constexpr int kMaxDim = 512;  // head_dim bound (shared floats per warp)

// Every f16/bf16 parameter sits at an even offset of its half: one 16-bit store of the bits. (Written as two
// byte stores of (v & 0xff) and (v >> 8), an H100 run showed each low byte holding the parameter's float value
// converted to an integer — 0 for scales below 1, 58 for a zero of 58.0 — as if nvcc had folded the half
// conversion and the byte truncation into one float-to-int8 conversion; the high bytes were right.)
__device__ __forceinline__ void store_u16(char* p, uint16_t v) {
  *reinterpret_cast<uint16_t*>(p) = v;
}

// quantize_affine_row's group g (ops/cpu/affine_kv.cpp): MLX's GPU rounding.
__device__ void affine_group(const float* x, int g, int head_dim, int bits, int group, char* half,
                             int64_t block_rows, int64_t row) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float* v = x + g * group;
  float w_min = INFINITY, w_max = 0.0f;
  for (int j = 0; j < group; ++j) {
    w_min = fminf(w_min, v[j]);
    w_max = fmaxf(w_max, v[j]);
  }
  const bool side = fabsf(w_min) > fabsf(w_max);
  float scale = fmaxf(__fdiv_rn(__fsub_rn(w_max, w_min), n_bins), 1e-7f);
  scale = side ? scale : -scale;
  const float edge = side ? w_min : w_max;
  const float q0 = roundf(__fdiv_rn(edge, scale));
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = __fdiv_rn(edge, q0);
    bias = edge;
  }
  const int words = head_dim * bits / 32, per_word = 32 / bits, groups = head_dim / group;
  uint32_t* codes = reinterpret_cast<uint32_t*>(half) + row * words + g * group / per_word;
  for (int w = 0; w < group / per_word; ++w) {
    uint32_t word = 0;
    for (int e = 0; e < per_word; ++e) {
      const float q = roundf(__fdiv_rn(__fsub_rn(v[w * per_word + e], bias), scale));
      const uint32_t code = q > 0.0f ? static_cast<uint32_t>(fminf(q, n_bins)) : 0u;
      word |= code << (e * bits);
    }
    codes[w] = word;
  }
  char* params = half + block_rows * words * 4;
  const int64_t at = (row * groups + g) * 2;
  store_u16(params + at, __bfloat16_as_ushort(__float2bfloat16_rn(scale)));
  store_u16(params + block_rows * groups * 2 + at, __bfloat16_as_ushort(__float2bfloat16_rn(bias)));
}

// turbo_quantize_key's block b (quant/turbo.cpp).
__device__ void turbo_key_block(const float* x, int b, int head_dim, int bits, char* out) {
  const float* v = x + b * kTurboBlock;
  float lo = v[0], hi = v[0];
  for (int j = 1; j < kTurboBlock; ++j) {
    lo = fminf(lo, v[j]);
    hi = fmaxf(hi, v[j]);
  }
  float scale;
  float lowest = 0.0f, highest;
  if (bits == 8) {
    scale = fmaxf(__fdiv_rn(__fsub_rn(hi, lo), 254.0f), __fdiv_rn(fabsf(__fadd_rn(hi, lo)), 4096.0f));
    lowest = -127.0f;
    highest = 127.0f;
  } else {
    scale = fmaxf(__fdiv_rn(__fsub_rn(hi, lo), 15.0f), __fdiv_rn(fabsf(lo), 2048.0f));
    highest = 15.0f;
  }
  if (!(scale > 0.0f)) scale = 1.0f;
  scale = __half2float(__float2half_rn(scale));
  const float zero =
      bits == 8 ? roundf(__fdiv_rn(__fadd_rn(hi, lo), __fmul_rn(2.0f, scale))) : roundf(__fdiv_rn(lo, scale));
  char* codes = out + b * kTurboBlock * bits / 8;
  for (int j = 0; j < kTurboBlock; j += bits == 8 ? 1 : 2) {  // a byte: one 8-bit code or two 4-bit
    if (bits == 8) {
      const float q = fminf(fmaxf(roundf(__fsub_rn(__fdiv_rn(v[j], scale), zero)), lowest), highest);
      codes[j] = static_cast<char>(static_cast<int8_t>(q));
    } else {
      const float q0 = fminf(fmaxf(roundf(__fsub_rn(__fdiv_rn(v[j], scale), zero)), lowest), highest);
      const float q1 = fminf(fmaxf(roundf(__fsub_rn(__fdiv_rn(v[j + 1], scale), zero)), lowest), highest);
      codes[j / 2] = static_cast<char>(static_cast<uint32_t>(q0) | static_cast<uint32_t>(q1) << 4);
    }
  }
  char* params = out + head_dim * bits / 8 + b * 4;
  store_u16(params, __half_as_ushort(__float2half_rn(scale)));
  store_u16(params + 2, __half_as_ushort(__float2half_rn(zero)));
}

// turbo_quantize_value's block b of the rotated row y.
__device__ void turbo_value_block(const float* y, int b, int head_dim, int bits, char* out) {
  const float* v = y + b * kTurboBlock;
  float squares = 0.0f;
  for (int j = 0; j < kTurboBlock; ++j) squares = __fadd_rn(squares, __fmul_rn(v[j], v[j]));
  const float sigma =
      __half2float(__float2half_rn(__fsqrt_rn(__fdiv_rn(squares, static_cast<float>(kTurboBlock)))));
  const float* c = codec::centroids(bits);
  const int cells = 1 << bits;
  // The block's codes: 32 · bits bits, whole bytes.
  uint32_t words[4] = {0, 0, 0, 0};
  for (int j = 0; j < kTurboBlock; ++j) {
    const float t = sigma > 0.0f ? __fdiv_rn(v[j], sigma) : 0.0f;
    uint32_t idx = 0;
    while (static_cast<int>(idx) + 1 < cells && t > __fmul_rn(0.5f, __fadd_rn(c[idx], c[idx + 1]))) ++idx;
    const int bit = j * bits;
    words[bit / 32] |= idx << (bit % 32);
    if (bit % 32 + bits > 32) words[bit / 32 + 1] |= idx >> (32 - bit % 32);
  }
  char* codes = out + b * kTurboBlock * bits / 8;
  for (int i = 0; i < kTurboBlock * bits / 8; ++i)
    codes[i] = static_cast<char>(words[i / 4] >> (8 * (i % 4)));
  store_u16(out + head_dim * bits / 8 + b * 2, __half_as_ushort(__float2half_rn(sigma)));
}

// The orthonormal Walsh–Hadamard transform of the warp's row x[d] in shared memory (quant/turbo.cpp's
// butterflies: each output of a stage is one add or subtract of two inputs, so any lane order gives the same
// bits), then the 1/sqrt(d) scale.
__device__ void hadamard_warp(float* x, int d, int lane) {
  for (int len = 1; len < d; len <<= 1) {
    for (int i = lane; i < d / 2; i += 32) {
      const int j = i / len * 2 * len + i % len;
      const float a = x[j], b = x[j + len];
      x[j] = __fadd_rn(a, b);
      x[j + len] = __fsub_rn(a, b);
    }
    __syncwarp();
  }
  const float norm = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(d)));
  for (int i = lane; i < d; i += 32) x[i] = __fmul_rn(x[i], norm);
  __syncwarp();
}

// Warp w of block b codes row unit = b · kWarps + w: token unit / (2 kv_heads), head (unit / 2) % kv_heads,
// keys (even) or values (odd).
__global__ void __launch_bounds__(32 * kWarps)
    kv_append_coded_kernel(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                           int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
                           PagedStore k_store, PagedStore v_store) {
  __shared__ float rows[kWarps][kMaxDim];
  wait_for_prior_kernels();
  allow_next_kernel();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (unit >= tokens * kv_heads * 2) return;
  const int64_t t = unit / (2 * kv_heads);
  const int h = static_cast<int>(unit / 2 % kv_heads);
  const bool values = unit % 2 == 1;
  const PagedStore& s = values ? v_store : k_store;
  const float* src = (values ? v + t * v_stride : k + t * k_stride) + static_cast<int64_t>(h) * head_dim;
  float* x = rows[warp];
  for (int i = lane; i < head_dim; i += 32) x[i] = src[i];
  __syncwarp();
  const int pos = q_pos[t];
  char* half = codec::coded_half(s, q_seq[t], pos);
  const int64_t block_rows = static_cast<int64_t>(s.block_tokens) * kv_heads;
  const int64_t row = static_cast<int64_t>(pos % s.block_tokens) * kv_heads + h;
  if (s.codec == StoreCodec::kAffine) {
    for (int g = lane; g < head_dim / s.group; g += 32)
      affine_group(x, g, head_dim, s.bits, s.group, half, block_rows, row);
    return;
  }
  char* out = half + row * codec::turbo_row_bytes(s, head_dim);
  if (s.codec == StoreCodec::kTurboKey) {
    for (int b = lane; b < head_dim / kTurboBlock; b += 32) turbo_key_block(x, b, head_dim, s.bits, out);
    return;
  }
  for (int i = lane; i < head_dim; i += 32) x[i] = __fmul_rn(x[i], codec::turbo_sign(i));
  __syncwarp();
  hadamard_warp(x, head_dim, lane);
  for (int b = lane; b < head_dim / kTurboBlock; b += 32) turbo_value_block(x, b, head_dim, s.bits, out);
}

// One warp per row: x ← s ⊙ H(x) (quant::turbo_unrotate).
__global__ void __launch_bounds__(32 * kWarps) turbo_unrotate_kernel(float* x, int64_t rows, int head_dim) {
  __shared__ float buf[kWarps][kMaxDim];
  wait_for_prior_kernels();
  allow_next_kernel();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (r >= rows) return;
  float* row = x + r * head_dim;
  float* y = buf[warp];
  for (int i = lane; i < head_dim; i += 32) y[i] = row[i];
  __syncwarp();
  hadamard_warp(y, head_dim, lane);
  for (int i = lane; i < head_dim; i += 32) row[i] = __fmul_rn(y[i], codec::turbo_sign(i));
}

unsigned blocks_for(int64_t units) {
  return static_cast<unsigned>((units + kWarps - 1) / kWarps);
}

}  // namespace

void kv_append_coded(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                     int kv_heads, int head_dim, const int32_t* q_pos, const int32_t* q_seq,
                     const PagedStore& k_store, const PagedStore& v_store, cudaStream_t stream) {
  if (tokens <= 0) return;
  LMX_REQUIRE(InvalidArgument, kv_heads > 0 && head_dim > 0 && head_dim <= kMaxDim && head_dim % 8 == 0,
              "kv_append_coded: kv_heads {} head_dim {} (at most {}, a multiple of 8)", kv_heads, head_dim,
              kMaxDim);
  LMX_REQUIRE(InvalidArgument,
              k_store.codec != StoreCodec::kBf16 && v_store.codec != StoreCodec::kBf16 && k_store.blocks &&
                  v_store.blocks && k_store.block_tokens > 0 && v_store.block_tokens == k_store.block_tokens,
              "kv_append_coded: coded key and value stores with block tables needed");
  launch(kv_append_coded_kernel, blocks_for(tokens * kv_heads * 2), 32 * kWarps, 0, stream, k, k_stride, v,
         v_stride, tokens, kv_heads, head_dim, q_pos, q_seq, k_store, v_store);
}

void turbo_unrotate_rows(float* x, int64_t rows, int head_dim, cudaStream_t stream) {
  if (rows <= 0) return;
  LMX_REQUIRE(InvalidArgument,
              head_dim >= kTurboBlock && head_dim <= kMaxDim && (head_dim & (head_dim - 1)) == 0,
              "turbo_unrotate_rows: head_dim {} must be a power of two in [32, {}]", head_dim, kMaxDim);
  launch(turbo_unrotate_kernel, blocks_for(rows), 32 * kWarps, 0, stream, x, rows, head_dim);
}

}  // namespace lmx::cuda
