// Device memory: a caching allocator (blocks are kept per rounded size and reused, so steady-state
// steps and CUDA-graph replays never call cudaMalloc) and DeviceBuffer, an owning move-only handle.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lmx::cuda {

class DeviceAllocator {
 public:
  // The process-wide allocator of the current device.
  static DeviceAllocator& instance();

  // At least `bytes` (rounded up to a 256-byte multiple, or to a power-of-two step above 1 MiB),
  // 256-byte aligned. Reuses a cached block of that rounded size when one is free. Throws CudaError
  // naming the size and the free device memory when the device is out of memory (after trimming).
  void* allocate(size_t bytes);
  // Returns a block obtained from allocate(bytes) to the cache (not to the driver).
  void release(void* ptr, size_t bytes);
  // Frees every cached (unused) block.
  void trim();

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  static size_t rounded_size(size_t bytes);

 private:
  DeviceAllocator() = default;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // rounded size → free blocks
  size_t in_use_ = 0;
  size_t cached_ = 0;
};

// Owns one allocation from DeviceAllocator::instance(). Empty when default-constructed or moved from.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // A new buffer holding a copy of `bytes` host bytes (synchronous: the data is on the device when
  // it returns, visible to every stream).
  static DeviceBuffer upload(const void* host, size_t bytes);
  // Copies the first `bytes` bytes to host memory after all queued device work (on every stream).
  void download(void* host, size_t bytes) const;
  // Sets every byte to zero (asynchronous on `stream`).
  void zero(cudaStream_t stream = nullptr);

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Upload/download helpers for typed vectors.
template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& host) {
  return DeviceBuffer::upload(host.data(), host.size() * sizeof(T));
}
template <typename T>
std::vector<T> download_vector(const DeviceBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  buffer.download(host.data(), count * sizeof(T));
  return host;
}

// Number of visible CUDA devices (0 when there is no driver or no GPU; never throws).
int device_count();
// Streaming multiprocessors of the current device.
int current_multiprocessors();
// "NVIDIA H200, 139.8 GiB, sm_90" for device `index`.
std::string device_description(int index);

}  // namespace lmx::cuda
