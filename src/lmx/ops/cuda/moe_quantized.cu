// MoE expert projections over MLX affine-quantized stacks: the 16-byte-vector 4- and 8-bit paths
// (the word-by-word path for other bits and unaligned codes is in moe_quantized_generic.cu).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/moe_experts.cuh"

namespace lmx::cuda::moe {

void launch_quantized_projection(const ProjectionParams& p, int bits, bool aligned, bool down, int m_tile,
                                 int grid_y, cudaStream_t stream) {
  if (aligned && bits == 4)
    launch_format<QuantizedFormat<4, true>, true>(p, down, m_tile, grid_y, stream);
  else if (aligned && bits == 8)
    launch_format<QuantizedFormat<8, true>, true>(p, down, m_tile, grid_y, stream);
  else
    return launch_quantized_generic_projection(p, bits, down, m_tile, grid_y, stream);
}

}  // namespace lmx::cuda::moe
