// Kernel launches with programmatic dependent launch (PDL, Hopper): every lmx kernel is enqueued with
// cudaLaunchAttributeProgrammaticStreamSerialization, so the GPU may start a kernel's blocks while the
// kernel before it on the stream is still finishing. That hides most of the launch gap between the
// ~1000 small kernels of a decode step (in CUDA graphs too: the edges become programmatic).
//
// Contract for every kernel launched through launch(): before it reads anything an earlier kernel
// wrote, or writes anything an earlier kernel may still read, it calls wait_for_prior_kernels(), which
// returns once the preceding kernel has completed and its writes are visible (and so, transitively,
// every earlier one). Only data no kernel writes (weights, constants, step inputs copied from the host
// before the step) may be read before that, e.g. to prefetch — and data written two or more kernels
// back: every lmx kernel calls allow_next_kernel() only after its own wait (and at least one block of
// every kernel waits before exiting), so when a kernel starts, all kernels before its predecessor have
// completed (the decode attention prefetches older KV-cache rows this way). allow_next_kernel() lets
// the next kernel's blocks be scheduled early (they then sit in their own wait); calling it is
// optional. Both are no-ops when the kernel was launched without the attribute.
//
// The tuning table's launch.pdl = false launches plainly (stream order only), for A/B measurements.
#pragma once

#include "lmx/ops/cuda/context.h"
#include "lmx/ops/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <utility>

namespace lmx::cuda {

__device__ __forceinline__ void wait_for_prior_kernels() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void allow_next_kernel() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The launch attribute that cuts a grid into thread-block clusters of `cluster` blocks (Hopper).
inline cudaLaunchAttribute cluster_attribute(dim3 cluster) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = cluster.x;
  a.val.clusterDim.y = cluster.y;
  a.val.clusterDim.z = cluster.z;
  return a;
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch (pdl_enabled(),
// context.h), the grid cut into thread-block clusters of `cluster` blocks (Hopper; 1 x 1 x 1: no clusters);
// checked.
template <class... Params, class... Args>
void launch_with_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          dim3 cluster, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (pdl_enabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) attributes[count++] = cluster_attribute(cluster);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  LMX_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// As launch_with_clusters, with clusters of `cluster_x` blocks along the grid's x dimension.
template <class... Params, class... Args>
void launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      unsigned cluster_x, Args&&... args) {
  launch_with_clusters(kernel, grid, block, smem, stream, dim3(cluster_x, 1, 1), std::forward<Args>(args)...);
}

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  launch_clustered(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace lmx::cuda
