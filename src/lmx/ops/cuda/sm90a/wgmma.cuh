// Hopper warpgroup-MMA (wgmma) plumbing shared by the sm_90a kernels (prefill_wgmma.cu,
// attention_prefill_wgmma.cu): the fence / commit / wait of asynchronous wgmma groups, the shared-memory
// matrix descriptors of the 128-byte swizzled layout, the proxy fence that makes ordinary shared-memory
// writes visible to wgmma, and the host check that the device runs sm_90a code.
//
// The 128-byte swizzled layout (what TMA's CU_TENSOR_MAP_SWIZZLE_128B writes, and swizzled_offset below):
// an operand is cut into blocks of 64 bf16 columns; in a block, row r's 128 bytes start at byte 128 r and
// its 16-byte chunk j lies at chunk j ^ (r % 8). Blocks are 1024-byte aligned (the swizzle is a function of
// the address bits).
#pragma once

#include "lmx/ops/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace lmx::cuda::sm90a {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LMX_HAS_WGMMA 1

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Pins accumulator registers at this point of the instruction stream (an empty volatile asm that reads and
// writes them): placed after wgmma_wait, it keeps the compiler from moving their uses above the wait or from
// delaying them past later wgmma groups (which would keep several groups' accumulators live at once).
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// Orders this thread's earlier generic-proxy shared-memory writes (st.shared, cp.async) before later
// async-proxy reads (wgmma operands from shared memory); a barrier after it publishes them to the block.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// D[64 x 8] += A[64 x 16] · B[16 x 8] (wgmma m64n8k16, f32 accumulate): A from registers (each warp's 16 rows
// as an mma.sync m16n8k16 A fragment), B from shared memory (K-major descriptor). The prefill attention's row
// sums (B all ones); bench/cuda/wgmma_probe.cu's chains.
__device__ __forceinline__ void wgmma_rs_m64n8k16(float (&d)[4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, "
      "0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)
      : "memory");
}

// Descriptor of a K-major operand in the 128-byte swizzled layout: the k16 step's first bytes at `address`
// (a block's 1024-byte aligned start plus 32 bytes per k16 step into its rows), the next 8 rows 1024 bytes
// on (the stride byte offset; the leading one is unused by this layout), swizzle mode 1 (128 B).
__device__ __forceinline__ uint64_t kmajor_descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (uint64_t{1} << 62);
}
// Descriptor of an MN-major operand (rows = k, 64 MN-contiguous bf16 per 128-byte row) in the 128-byte
// swizzled layout, for an instruction whose N (or M) is 64 — one block wide: the k16 step's 16 rows start at
// `address` (1024-byte aligned), rows k + 8 .. k + 15 1024 bytes on. The PTX manual and CUTLASS name the two
// offset fields differently for this layout (which one strides k and which strides the next 64 MN columns);
// with one block of MN only the k stride is read, so both fields hold it.
__device__ __forceinline__ uint64_t mnmajor_descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (uint64_t{1} << 62);
}
#endif

// Byte offset of bf16 element (row, col) in an operand of `rows`-row blocks in the 128-byte swizzled layout.
__host__ __device__ constexpr uint32_t swizzled_offset(int rows, int row, int col) {
  return static_cast<uint32_t>((col >> 6) * rows * 128 + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4) +
                               (col & 7) * 2);
}

// Whether the current device runs sm_90a code (compute capability 9.0 exactly). Asked on every prefill GEMM
// and attention call, so the answer is cached per device (the first 64 ordinals; past them it is asked each
// time).
inline bool device_is_sm90() {
  static std::atomic<int8_t> known[64] = {};  // 0: not asked yet, 1: sm_90, -1: other
  int device = 0;
  LMX_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 0 && device < 64 && known[device].load(std::memory_order_relaxed) != 0)
    return known[device].load(std::memory_order_relaxed) > 0;
  int major = 0, minor = 0;
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool sm90 = major == 9 && minor == 0;
  if (device >= 0 && device < 64) known[device].store(sm90 ? 1 : -1, std::memory_order_relaxed);
  return sm90;
}

}  // namespace lmx::cuda::sm90a
