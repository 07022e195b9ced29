// MoE expert projections over MLX affine-quantized stacks, word by word: 2, 3, 5 and 6 bits, and 4-
// and 8-bit codes whose rows are not 16-byte aligned (same chunking, so the same bits as the fast path).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/moe_experts.cuh"

namespace lmx::cuda::moe {

void launch_quantized_generic_projection(const ProjectionParams& p, int bits, bool down, int m_tile,
                                         int grid_y, cudaStream_t stream) {
  switch (bits) {
    case 2:
      launch_format<QuantizedFormat<2, false>, false>(p, down, m_tile, grid_y, stream);
      break;
    case 3:
      launch_format<QuantizedFormat<3, false>, false>(p, down, m_tile, grid_y, stream);
      break;
    case 4:
      launch_format<QuantizedFormat<4, false>, false>(p, down, m_tile, grid_y, stream);
      break;
    case 5:
      launch_format<QuantizedFormat<5, false>, false>(p, down, m_tile, grid_y, stream);
      break;
    case 6:
      launch_format<QuantizedFormat<6, false>, false>(p, down, m_tile, grid_y, stream);
      break;
    default:
      launch_format<QuantizedFormat<8, false>, false>(p, down, m_tile, grid_y, stream);
      break;
  }
}

}  // namespace lmx::cuda::moe
