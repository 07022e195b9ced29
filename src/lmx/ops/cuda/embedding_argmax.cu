// CUDA embedding lookup (f32/bf16 tables) and row-wise argmax (elementwise.h); both bit-exact with
// the CPU ops::embedding and ops::argmax.
#include "lmx/core/error.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/elementwise_util.cuh"

#include <climits>

namespace lmx::cuda {
namespace {

using detail::aligned16;
using detail::grid_blocks;
using detail::kMaxRowBlocks;
using detail::kThreads;

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// Loads element group c of a table row and widens it to f32: Src = float, float4 (4 f32), uint16_t
// (1 bf16) or uint2 (4 bf16, little-endian: element 0 in the low half of .x).
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float4 widen(float4 v) { return v; }
__device__ __forceinline__ float widen(uint16_t v) { return bf16_bits_to_f32(v); }
__device__ __forceinline__ float4 widen(uint2 v) {
  return make_float4(bf16_bits_to_f32(v.x & 0xffffu), __uint_as_float(v.x & 0xffff0000u),
                     bf16_bits_to_f32(v.y & 0xffffu), __uint_as_float(v.y & 0xffff0000u));
}
__device__ __forceinline__ float scaled(float v, float s) { return __fmul_rn(v, s); }
__device__ __forceinline__ float4 scaled(float4 v, float s) {
  return make_float4(__fmul_rn(v.x, s), __fmul_rn(v.y, s), __fmul_rn(v.z, s), __fmul_rn(v.w, s));
}

// One block per token (grid-stride over tokens). n and out_stride are in units of Dst (float or float4).
template <typename Src, typename Dst>
__global__ void embedding_kernel(const Src* table, int64_t n, const int32_t* ids, int64_t count, float scale,
                                 Dst* out, int64_t out_stride) {
  wait_for_prior_kernels();
  allow_next_kernel();
  for (int64_t t = blockIdx.x; t < count; t += gridDim.x) {
    const Src* row = table + static_cast<int64_t>(ids[t]) * n;
    Dst* orow = out + t * out_stride;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) orow[c] = scaled(widen(row[c]), scale);
  }
}

template <typename Src, typename Dst>
void launch_embedding(const void* table, int64_t n, const int32_t* ids, int64_t count, float scale, float* out,
                      int64_t out_stride, cudaStream_t stream) {
  const int threads = n >= kThreads ? kThreads : static_cast<int>((n + 31) / 32 * 32);
  launch(embedding_kernel<Src, Dst>, grid_blocks(count, 1, kMaxRowBlocks), threads, 0, stream,
      static_cast<const Src*>(table), n, ids, count, scale, reinterpret_cast<Dst*>(out), out_stride);
}

// Whether candidate (v, i) beats (best_v, best_i): a non-NaN beats a NaN, then the larger value, then
// the lower index. A total order, so the winner of any reduction tree is the row's first maximum
// (or index 0 when every element is NaN), as ops::argmax.
__device__ __forceinline__ bool beats(float v, int i, float best_v, int best_i) {
  const bool nan = isnan(v), best_nan = isnan(best_v);
  if (nan != best_nan) return best_nan;
  if (!nan && v != best_v) return v > best_v;
  return i < best_i;
}

__device__ __forceinline__ void consider(float v, int i, float& best_v, int& best_i) {
  if (beats(v, i, best_v, best_i)) {
    best_v = v;
    best_i = i;
  }
}

// The best (value, index) of this thread's elements of row[begin, end), strided by the block: float4
// loads when kVec4 (row 16-byte aligned, begin and end multiples of 4).
template <bool kVec4>
__device__ __forceinline__ void slice_best(const float* row, int begin, int end, float& best_v, int& best_i) {
  if constexpr (kVec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int c = begin / 4 + static_cast<int>(threadIdx.x); c < end / 4; c += blockDim.x) {
      const float4 v = row4[c];
      consider(v.x, 4 * c, best_v, best_i);
      consider(v.y, 4 * c + 1, best_v, best_i);
      consider(v.z, 4 * c + 2, best_v, best_i);
      consider(v.w, 4 * c + 3, best_v, best_i);
    }
  } else {
    for (int c = begin + static_cast<int>(threadIdx.x); c < end; c += blockDim.x) consider(row[c], c, best_v, best_i);
  }
}

__device__ __forceinline__ void warp_best(float& best_v, int& best_i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
    consider(v, i, best_v, best_i);
  }
}

// The best of the block's (best_v, best_i), valid in warp 0. shared_v / shared_i hold 32 entries each and
// may be reused once it returns.
__device__ __forceinline__ void block_best(float& best_v, int& best_i, float* shared_v, int* shared_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_best(best_v, best_i);
  if (lane == 0) {
    shared_v[warp] = best_v;
    shared_i[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    best_v = lane < warps ? shared_v[lane] : __int_as_float(0x7fc00000);
    best_i = lane < warps ? shared_i[lane] : INT_MAX;
    warp_best(best_v, best_i);
  }
  __syncthreads();
}

// NaN at INT_MAX: loses to every element.
constexpr int kNoIndex = INT_MAX;
__device__ __forceinline__ float no_value() { return __int_as_float(0x7fc00000); }

// One block per row (grid-stride over rows). kVec4: x 16-byte aligned and cols % 4 == 0.
template <bool kVec4>
__global__ void argmax_rows_kernel(const float* x, int64_t rows, int cols, int32_t* out) {
  wait_for_prior_kernels();
  allow_next_kernel();
  __shared__ float shared_v[32];
  __shared__ int shared_i[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float best_v = no_value();
    int best_i = kNoIndex;
    slice_best<kVec4>(x + r * cols, 0, cols, best_v, best_i);
    block_best(best_v, best_i, shared_v, shared_i);
    if (threadIdx.x == 0) out[r] = best_i == kNoIndex ? 0 : best_i;
  }
}

// Wide rows in two kernels: block (part, r) finds the best of columns [part · kPartCols, + kPartCols) of
// row r; then one warp per row picks the best of its parts. `consider` is a total order, so the split
// changes no result.
constexpr int kPartCols = 4096;
constexpr int64_t kSplitMinCols = 4 * kPartCols;

int argmax_parts(int64_t cols) { return static_cast<int>((cols + kPartCols - 1) / kPartCols); }

struct Best {
  float v;
  int i;
};

template <bool kVec4>
__global__ void argmax_parts_kernel(const float* x, int64_t rows, int cols, Best* parts) {
  wait_for_prior_kernels();
  allow_next_kernel();
  __shared__ float shared_v[32];
  __shared__ int shared_i[32];
  const int begin = static_cast<int>(blockIdx.x) * kPartCols, end = min(cols, begin + kPartCols);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float best_v = no_value();
    int best_i = kNoIndex;
    slice_best<kVec4>(x + r * cols, begin, end, best_v, best_i);
    block_best(best_v, best_i, shared_v, shared_i);
    if (threadIdx.x == 0) parts[r * gridDim.x + blockIdx.x] = {best_v, best_i};
  }
}

__global__ void argmax_merge_kernel(const Best* parts, int64_t rows, int count, int32_t* out) {
  wait_for_prior_kernels();
  allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int64_t warps = blockDim.x >> 5;
  for (int64_t r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
    float best_v = no_value();
    int best_i = kNoIndex;
    for (int q = lane; q < count; q += 32) consider(parts[r * count + q].v, parts[r * count + q].i, best_v, best_i);
    warp_best(best_v, best_i);
    if (lane == 0) out[r] = best_i == kNoIndex ? 0 : best_i;
  }
}

template <bool kVec4>
void launch_argmax(const float* x, int64_t rows, int cols, int32_t* out, Best* parts, cudaStream_t stream) {
  if (parts == nullptr) {
    const int threads = cols >= 32768 ? 1024 : kThreads;
    launch(argmax_rows_kernel<kVec4>, grid_blocks(rows, 1, kMaxRowBlocks), threads, 0, stream, x, rows, cols, out);
    return;
  }
  const int count = argmax_parts(cols);
  launch(argmax_parts_kernel<kVec4>, dim3(static_cast<unsigned>(count), grid_blocks(rows, 1, kMaxRowBlocks)),
         kThreads, 0, stream, x, rows, cols, parts);
  launch(argmax_merge_kernel, grid_blocks(rows, kThreads / 32, kMaxRowBlocks), kThreads, 0, stream, parts, rows,
         count, out);
}

}  // namespace

void embedding(const void* table, DType dtype, int64_t dim, const int32_t* ids, int64_t count, float scale,
               float* out, int64_t out_stride, cudaStream_t stream) {
  LMX_REQUIRE(InvalidArgument, dtype == DType::kF32 || dtype == DType::kBF16,
              "cuda::embedding: table dtype {} is not F32 or BF16", dtype_name(dtype));
  if (count <= 0 || dim <= 0) return;
  const bool out_vec4 = dim % 4 == 0 && out_stride % 4 == 0 && aligned16(out);
  if (dtype == DType::kBF16) {
    if (out_vec4 && (reinterpret_cast<uintptr_t>(table) & 7u) == 0)
      launch_embedding<uint2, float4>(table, dim / 4, ids, count, scale, out, out_stride / 4, stream);
    else
      launch_embedding<uint16_t, float>(table, dim, ids, count, scale, out, out_stride, stream);
  } else {
    if (out_vec4 && aligned16(table))
      launch_embedding<float4, float4>(table, dim / 4, ids, count, scale, out, out_stride / 4, stream);
    else
      launch_embedding<float, float>(table, dim, ids, count, scale, out, out_stride, stream);
  }
}

size_t argmax_partials_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols < kSplitMinCols) return 0;
  return sizeof(Best) * static_cast<size_t>(rows) * static_cast<size_t>(argmax_parts(cols));
}

void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream, void* partials,
                 size_t partials_bytes) {
  if (rows <= 0) return;
  LMX_REQUIRE(InvalidArgument, cols >= 1 && cols <= INT_MAX, "cuda::argmax_rows: {} columns outside [1, {}]", cols,
              INT_MAX);
  const size_t needed = argmax_partials_bytes(rows, cols);
  Best* parts = needed > 0 && partials != nullptr && partials_bytes >= needed ? static_cast<Best*>(partials) : nullptr;
  if (cols % 4 == 0 && aligned16(x))
    launch_argmax<true>(x, rows, static_cast<int>(cols), out, parts, stream);
  else
    launch_argmax<false>(x, rows, static_cast<int>(cols), out, parts, stream);
}

}  // namespace lmx::cuda
