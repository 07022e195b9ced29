// MoE expert projections over dense f32 and bf16 expert stacks (16-byte aligned rows).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/moe_experts.cuh"

#include <cuda_bf16.h>

namespace lmx::cuda::moe {

void launch_dense_projection(const ProjectionParams& p, DType dtype, bool down, int m_tile, int grid_y,
                             cudaStream_t stream) {
  if (dtype == DType::kF32)
    launch_format<DenseFormat<float>>(p, down, m_tile, grid_y, stream);
  else
    launch_format<DenseFormat<__nv_bfloat16>>(p, down, m_tile, grid_y, stream);
}

}  // namespace lmx::cuda::moe
