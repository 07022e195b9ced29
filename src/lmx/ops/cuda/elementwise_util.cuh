// Launch-shape, alignment and reduction helpers shared by the CUDA ops.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace lmx::cuda::detail {

// Threads per block of the 1-D grid-stride kernels.
constexpr int kThreads = 256;
// Cap on grid-stride grids: enough blocks to fill every SM of an H200 many times over.
constexpr int64_t kMaxGridBlocks = 8192;
// Cap on grids of one block (or a few) per row: the grid's y limit, used for x too.
constexpr int64_t kMaxRowBlocks = 65535;

// Blocks for `work` items at `per_block` items per block, at least 1 and at most `cap`.
inline unsigned grid_blocks(int64_t work, int64_t per_block, int64_t cap = kMaxGridBlocks) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + per_block - 1) / per_block, 1, cap));
}

// Whether a device pointer is 16-byte aligned (float4 / uint4 loads are legal).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// Whether every pointer is null (an absent optional operand) or 16-byte aligned.
inline bool aligned16_or_null(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

// 2-D launch over a [rows, cols] grid of strided rows: blockDim.x threads along columns (a warp
// multiple, at most 256), blockDim.y rows per block; kernels loop over both with grid strides.
struct RowLaunch {
  dim3 grid;
  dim3 block;
};
inline RowLaunch row_launch(int64_t rows, int64_t cols) {
  const int bx = cols >= kThreads ? kThreads : static_cast<int>(std::max<int64_t>(32, (cols + 31) / 32 * 32));
  const int by = kThreads / bx;
  const unsigned gx = grid_blocks(cols, bx, 1024);
  const unsigned gy = grid_blocks(rows, by, 65535);
  return {dim3(gx, gy, 1), dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by), 1)};
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of `v` over a 1-D block whose size is a multiple of 32 (≤ 1024); every thread gets the total.
// `shared` holds at least 32 floats; the function may be called again after it returns.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = lane < warps ? shared[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();  // `shared` may be reused by the caller
  return total;
}

}  // namespace lmx::cuda::detail
