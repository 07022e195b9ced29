// Decode path of the tensor-core projections (dense bf16 and quantized): linear_decode_kernel for every
// weight format, 8, 16 or 32 x rows per block (linear_tiles.cuh).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/linear_tiles.cuh"

namespace lmx::cuda::linear {
namespace {

template <class F, int NT>
void decode_rows(const Problem& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.m + 8 * NT - 1) / (8 * NT)), static_cast<unsigned>((p.n + 15) / 16));
  const size_t smem = static_cast<size_t>(p.segments) * NT * 8 * 16 * sizeof(float);
  linear_decode_kernel<F, NT><<<grid, 32 * p.segments, smem, stream>>>(p);
  LMX_CUDA_CHECK_LAUNCH();
}

template <class F>
void decode(const Problem& p, cudaStream_t stream) {
  if (p.m <= 8)
    decode_rows<F, 1>(p, stream);
  else if (p.m <= 16)
    decode_rows<F, 2>(p, stream);
  else
    decode_rows<F, 4>(p, stream);
}

template <template <class> class Q>
void decode_by_scale(const Problem& p, cudaStream_t stream) {
  switch (p.scale_dtype) {
    case DType::kBF16: return decode<Q<__nv_bfloat16>>(p, stream);
    case DType::kF16: return decode<Q<__half>>(p, stream);
    default: return decode<Q<float>>(p, stream);
  }
}

}  // namespace

void launch_decode(const Problem& p, cudaStream_t stream) {
  switch (p.format) {
    case WeightFormat::kDenseBf16: return decode<FormatDense>(p, stream);
    case WeightFormat::kQ4: return decode_by_scale<FormatQ4>(p, stream);
    case WeightFormat::kQ8: return decode_by_scale<FormatQ8>(p, stream);
    case WeightFormat::kPacked:
      switch (p.bits) {
        case 2: return decode<FormatPacked<2>>(p, stream);
        case 3: return decode<FormatPacked<3>>(p, stream);
        case 4: return decode<FormatPacked<4>>(p, stream);
        case 5: return decode<FormatPacked<5>>(p, stream);
        case 6: return decode<FormatPacked<6>>(p, stream);
        default: return decode<FormatPacked<8>>(p, stream);
      }
  }
}

}  // namespace lmx::cuda::linear
