// Checked CUDA runtime calls: every failure becomes an lmx::CudaError naming the call,
// the error and the source line. lmx kernels are launched (and checked) through launch() in launch.cuh;
// a raw <<<...>>> launch (benches, tests) is checked with LMX_CUDA_CHECK_LAUNCH().
#pragma once

#include "lmx/core/error.h"

#include <cuda_runtime.h>

namespace lmx {

// A CUDA runtime, driver or library call failed (out of memory, bad launch, no device, ...).
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace cuda {
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* expr, const char* file, int line);
}  // namespace cuda

}  // namespace lmx

#define LMX_CUDA_CHECK(expr)                                                              \
  do {                                                                                    \
    const cudaError_t lmx_cuda_error_ = (expr);                                           \
    if (lmx_cuda_error_ != cudaSuccess) [[unlikely]]                                      \
      ::lmx::cuda::throw_cuda_error(lmx_cuda_error_, #expr, __FILE__, __LINE__);          \
  } while (0)

#define LMX_CUDA_CHECK_LAUNCH() LMX_CUDA_CHECK(cudaGetLastError())
