// Per-device execution context of the CUDA backend: the stream every op runs on and named scratch
// buffers that stay at fixed addresses (so CUDA graphs that captured them stay valid). Not
// thread-safe: one context per thread of work.
#pragma once

#include "lmx/ops/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace lmx::cuda {

// Scratch slots, one per purpose, so ops never hand each other's scratch around by accident.
enum class Scratch : int {
  kLinearInput = 0,  // x converted to bf16 for a tensor-core matmul
  kAttentionPartials,
  kMoeRouting,
  kMoeActivations,
  kArgmaxPartials,
  kCount
};

class CudaContext {
 public:
  // Selects `device` and creates a non-blocking stream. Throws CudaError when there is no usable
  // device.
  explicit CudaContext(int device = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  int multiprocessors() const { return multiprocessors_; }

  // A buffer of at least `bytes` for `slot`, at the same address until a larger request grows it.
  // Growing while the stream is being captured into a graph throws CudaError (warm up first).
  void* scratch(Scratch slot, size_t bytes);
  // Bumped whenever a scratch buffer moves: graphs captured before a change must be dropped.
  int scratch_generation() const { return scratch_generation_; }
  // Waits for all work queued on the stream; rethrows asynchronous kernel errors as CudaError.
  void synchronize();
  // Whether the stream is currently being captured into a CUDA graph.
  bool capturing() const;

 private:
  int device_ = 0;
  int multiprocessors_ = 0;
  cudaStream_t stream_ = nullptr;
  std::array<DeviceBuffer, static_cast<size_t>(Scratch::kCount)> scratch_;
  int scratch_generation_ = 0;
};

// Whether kernels are launched as programmatic dependent launches (launch.cuh): the current device's tuning
// table's launch.pdl (tuning.h); on by default.
bool pdl_enabled();

}  // namespace lmx::cuda
