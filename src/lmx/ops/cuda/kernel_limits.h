// Host-side launch limits of CUDA kernels on the current device, each queried (or set) once per (kernel,
// device) and cached: the dynamic shared-memory opt-in, resident blocks, and whether thread-block clusters
// of a size fit.
#pragma once

namespace lmx::cuda {

// Raises the kernel's dynamic shared-memory limit on the current device to `bytes` (once; nothing below
// 48 KiB).
void ensure_smem(const void* kernel, int bytes);
// Resident blocks per SM × SMs of the current device for a kernel shape (cached per device); CudaError when
// not even one block fits.
int resident_blocks(const void* kernel, int threads, int smem_bytes);
// Whether thread-block clusters of `blocks` blocks of the kernel can be resident on the current device
// (cudaOccupancyMaxActiveClusters ≥ 1; past 8 blocks after opting the kernel in to non-portable sizes).
// Cached per (kernel, device, blocks); the kernel's shared-memory limit must already be raised.
bool clusters_fit(const void* kernel, int threads, int smem_bytes, int blocks);

}  // namespace lmx::cuda
