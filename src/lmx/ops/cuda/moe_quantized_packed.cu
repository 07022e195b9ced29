// MoE expert projections over MLX affine-quantized stacks that are not 16-byte aligned 4-bit codes:
// 8-bit codes with aligned rows (FormatQ8), and every other case word by word (FormatPacked).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/moe_expert_mma.cuh"

namespace lmx::cuda::moe {

void launch_quantized_packed_projection(const ProjectionParams& p, int bits, bool aligned, bool down, int grid_y,
                                        cudaStream_t stream) {
  using namespace linear;
  if (aligned && bits == 8) {
    if (p.scale_dtype == DType::kBF16)
      launch_expert_mma_format<FormatQ8<__nv_bfloat16>>(p, down, grid_y, stream);
    else if (p.scale_dtype == DType::kF16)
      launch_expert_mma_format<FormatQ8<__half>>(p, down, grid_y, stream);
    else
      launch_expert_mma_format<FormatQ8<float>>(p, down, grid_y, stream);
    return;
  }
  switch (bits) {
    case 2: return launch_expert_mma_format<FormatPacked<2>>(p, down, grid_y, stream);
    case 3: return launch_expert_mma_format<FormatPacked<3>>(p, down, grid_y, stream);
    case 4: return launch_expert_mma_format<FormatPacked<4>>(p, down, grid_y, stream);
    case 5: return launch_expert_mma_format<FormatPacked<5>>(p, down, grid_y, stream);
    case 6: return launch_expert_mma_format<FormatPacked<6>>(p, down, grid_y, stream);
    default: return launch_expert_mma_format<FormatPacked<8>>(p, down, grid_y, stream);
  }
}

}  // namespace lmx::cuda::moe
