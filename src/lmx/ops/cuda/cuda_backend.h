// The CUDA backend: the Backend op set over lmx's CUDA kernels on one device — weights uploaded once (q | k
// | v and gate | up stacked where stored alike), step buffers at stable addresses, the decode fusions as
// fused ops, a side stream for work that can overlap (the MoE routing), CUDA graphs of whole steps, KV
// blocks in device memory (stream-ordered allocations). With set_exact(true) (the f32 KV cache) every op
// computes in f32 on CUDA cores: the exactness reference.
#pragma once

#include "lmx/ops/backend.h"

#include <memory>

namespace lmx {

// The backend of CUDA device `device`; CudaError when it is not there.
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace lmx
