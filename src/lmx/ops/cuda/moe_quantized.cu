// MoE expert projections over MLX affine-quantized stacks on expert_mma_kernel, in the weight format the
// stack's linear problem names (linear_tiles.cuh with_quantized_format, as every projection chooses it).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/moe_expert_mma.cuh"

namespace lmx::cuda::moe {

void launch_quantized_projection(const ProjectionParams& p, const linear::Problem& weight, bool down, int grid_y,
                                 cudaStream_t stream) {
  linear::with_quantized_format(weight, [&](auto f) { launch_expert_mma_format<decltype(f)>(p, down, grid_y, stream); });
}

}  // namespace lmx::cuda::moe
