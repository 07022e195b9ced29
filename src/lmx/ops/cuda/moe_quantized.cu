// MoE expert projections over MLX affine-quantized stacks: the choice of linear_tiles.cuh weight format,
// as quantized_linear makes it (4-bit and 8-bit codes with 16-byte aligned rows: the vector formats; any
// other: the word-by-word packed format), for expert_mma_kernel. The 8-bit and packed instantiations are
// in moe_quantized_packed.cu (compile time).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/moe_expert_mma.cuh"

namespace lmx::cuda::moe {

void launch_quantized_projection(const ProjectionParams& p, int bits, bool aligned, bool small_scales, bool down,
                                 int grid_y, cudaStream_t stream) {
  using namespace linear;
  if (!(aligned && bits == 4)) return launch_quantized_packed_projection(p, bits, aligned, down, grid_y, stream);
  if (small_scales && p.scale_dtype == DType::kBF16)
    launch_expert_mma_format<FormatQ4<__nv_bfloat16, true>>(p, down, grid_y, stream);
  else if (p.scale_dtype == DType::kBF16)
    launch_expert_mma_format<FormatQ4<__nv_bfloat16>>(p, down, grid_y, stream);
  else if (p.scale_dtype == DType::kF16)
    launch_expert_mma_format<FormatQ4<__half>>(p, down, grid_y, stream);
  else
    launch_expert_mma_format<FormatQ4<float>>(p, down, grid_y, stream);
}

}  // namespace lmx::cuda::moe
