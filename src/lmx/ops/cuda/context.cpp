// CudaContext: stream and scratch buffers (see context.h).
#include "lmx/ops/cuda/context.h"

#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/tuning.h"

#include <fmt/format.h>

namespace lmx::cuda {

CudaContext::CudaContext(int device) : device_(device) {
  const int count = device_count();
  if (device < 0 || device >= count)
    throw CudaError(fmt::format("CUDA device {} is not available ({} visible device(s))", device, count));
  LMX_CUDA_CHECK(cudaSetDevice(device));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device));
  LMX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaContext::~CudaContext() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void* CudaContext::scratch(Scratch slot, size_t bytes) {
  DeviceBuffer& buffer = scratch_[static_cast<size_t>(slot)];
  if (buffer.bytes() < bytes) {
    if (capturing())
      throw CudaError(fmt::format("scratch slot {} must grow to {} bytes during graph capture (warm up first)",
                                  static_cast<int>(slot), bytes));
    LMX_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer may still be in use
    buffer = DeviceBuffer(bytes);
    ++scratch_generation_;
  }
  return buffer.data();
}

void CudaContext::synchronize() { LMX_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool CudaContext::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LMX_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

bool pdl_enabled() {
  return tuning().launch.pdl;
}

}  // namespace lmx::cuda
