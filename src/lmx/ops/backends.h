// Making a backend for a device: the CPU backend always, the CUDA backend where lmx was built with it.
// Header-only so that only programs linking every compiled backend (lmx_backends) see the CUDA one.
#pragma once

#include "lmx/core/device.h"
#include "lmx/core/error.h"
#include "lmx/ops/backend.h"
#include "lmx/ops/cpu/cpu_backend.h"
#ifdef LMX_HAS_CUDA
#include "lmx/ops/cuda/cuda_backend.h"
#endif

#include <memory>

namespace lmx {

// The backend of `device`: Unsupported for a CUDA device in a build without CUDA; the CUDA backend throws
// CudaError for a device that is not there.
inline std::unique_ptr<Backend> make_backend(const Device& device) {
  if (device.is_cpu()) return make_cpu_backend();
#ifdef LMX_HAS_CUDA
  return make_cuda_backend(device.index);
#else
  throw Unsupported(fmt::format(
      "{}: this lmx was built without the CUDA backend (configure with LMX_CUDA=ON)", device.name()));
#endif
}

}  // namespace lmx
