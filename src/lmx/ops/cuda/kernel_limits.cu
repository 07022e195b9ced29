// kernel_limits.h: one-time launch settings and occupancy queries, cached per (kernel, device).
#include "lmx/ops/cuda/kernel_limits.h"

#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/launch.cuh"

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace lmx::cuda {
namespace {

std::mutex g_cache_mutex;
std::map<std::pair<const void*, int>, int> g_smem_set;
std::map<std::pair<const void*, int>, int> g_resident;
std::map<std::tuple<const void*, int, int>, bool> g_clusters_fit;

int current_device() {
  int device = 0;
  LMX_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

void ensure_smem(const void* kernel, int bytes) {
  if (bytes <= 48 * 1024) return;
  const std::pair<const void*, int> key{kernel, current_device()};
  std::lock_guard lock(g_cache_mutex);
  auto it = g_smem_set.find(key);
  if (it != g_smem_set.end() && it->second >= bytes) return;
  LMX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  g_smem_set[key] = bytes;
}

int resident_blocks(const void* kernel, int threads, int smem_bytes) {
  const int device = current_device();
  const std::pair<const void*, int> key{kernel, device};
  std::lock_guard lock(g_cache_mutex);
  auto it = g_resident.find(key);
  if (it != g_resident.end()) return it->second;
  int per_sm = 0;
  LMX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  if (per_sm < 1) throw CudaError("cuda: a kernel of this shape cannot be resident on this device");
  const int resident = per_sm * current_multiprocessors();
  g_resident[key] = resident;
  return resident;
}

bool clusters_fit(const void* kernel, int threads, int smem_bytes, int blocks) {
  const std::tuple<const void*, int, int> key{kernel, current_device(), blocks};
  std::lock_guard lock(g_cache_mutex);
  auto it = g_clusters_fit.find(key);
  if (it != g_clusters_fit.end()) return it->second;
  if (blocks > 8)  // past the portable cluster size
    LMX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute cluster = cluster_attribute(dim3(1, static_cast<unsigned>(blocks), 1));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1, static_cast<unsigned>(blocks), 1);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // a cluster size the device refuses: not an error, the caller falls back
    clusters = 0;
  }
  g_clusters_fit[key] = clusters > 0;
  return clusters > 0;
}

}  // namespace lmx::cuda
