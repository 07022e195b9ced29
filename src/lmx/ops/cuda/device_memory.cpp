// Device memory: caching allocator and DeviceBuffer (see device_memory.h).
#include "lmx/ops/cuda/device_memory.h"

#include "lmx/ops/cuda/cuda_check.h"

#include <fmt/format.h>

#include <utility>

namespace lmx::cuda {

void throw_cuda_error(cudaError_t error, const char* expr, const char* file, int line) {
  throw CudaError(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(error),
                              cudaGetErrorString(error), expr, file, line));
}

DeviceAllocator& DeviceAllocator::instance() {
  static DeviceAllocator* allocator = new DeviceAllocator();  // never destroyed: buffers may outlive statics
  return *allocator;
}

size_t DeviceAllocator::rounded_size(size_t bytes) {
  constexpr size_t kSmallStep = 256, kLarge = size_t{1} << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kLarge) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  // Above 1 MiB: steps of 1/8 of the next power of two, so reuse wastes at most 12.5 %.
  size_t power = kLarge;
  while (power < bytes) power <<= 1;
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      in_use_ += size;
      return ptr;
    }
  }
  void* ptr = nullptr;
  cudaError_t error = cudaMalloc(&ptr, size);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    trim();
    error = cudaMalloc(&ptr, size);
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    throw CudaError(fmt::format("cannot allocate {} bytes of device memory ({}; {} of {} bytes free)", size,
                                cudaGetErrorString(error), free_bytes, total_bytes));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ += size;
  return ptr;
}

void DeviceAllocator::release(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t size = rounded_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_[size].push_back(ptr);
  in_use_ -= size;
  cached_ += size;
}

void DeviceAllocator::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_)
    for (void* ptr : blocks) (void)cudaFree(ptr);
  free_.clear();
  cached_ = 0;
}

size_t DeviceAllocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t DeviceAllocator::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : ptr_(DeviceAllocator::instance().allocate(bytes)), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() { DeviceAllocator::instance().release(ptr_, bytes_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceAllocator::instance().release(ptr_, bytes_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer DeviceBuffer::upload(const void* host, size_t bytes) {
  DeviceBuffer buffer(bytes);
  if (bytes > 0) {
    LMX_CUDA_CHECK(cudaMemcpy(buffer.ptr_, host, bytes, cudaMemcpyHostToDevice));
    // A pageable copy may return before its DMA lands; work on non-blocking streams must see it.
    LMX_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return buffer;
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes == 0) return;
  LMX_CUDA_CHECK(cudaDeviceSynchronize());  // work queued on any stream (non-blocking ones too) first
  LMX_CUDA_CHECK(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::zero(cudaStream_t stream) {
  if (bytes_ > 0) LMX_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes_, stream));
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

int current_multiprocessors() {
  int device = 0, sms = 0;
  LMX_CUDA_CHECK(cudaGetDevice(&device));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

std::string device_description(int index) {
  cudaDeviceProp prop{};
  LMX_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return fmt::format("{}, {:.1f} GiB, sm_{}{}, {} SMs", prop.name,
                     static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor,
                     prop.multiProcessorCount);
}

}  // namespace lmx::cuda
