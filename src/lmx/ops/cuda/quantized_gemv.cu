// Decode path of the tensor-core projections (dense bf16 and quantized): linear_decode_kernel for every
// weight format, 8, 16 or 32 x rows per block (linear_tiles.cuh); 4-bit weights at batch 1 run
// q4_gemv_kernel (linear_decode_q4.cuh), which computes the same bits faster (and can take a GeGLU input).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"

namespace lmx::cuda::linear {
namespace {

template <class F, int NT>
void decode_rows(const Problem& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.m + 8 * NT - 1) / (8 * NT)), static_cast<unsigned>((p.n + 15) / 16));
  const size_t smem = static_cast<size_t>(p.segments) * NT * 8 * 16 * sizeof(float);
  launch(linear_decode_kernel<F, NT>, grid, 32 * p.segments, smem, stream, p);
}

// Batch 1 with 4-bit weights (q4_gemv_applies): q4_gemv_kernel, with the GeGLU input when x_up is set.
template <class Scale>
bool gemv_q4(const Problem& p, const float* x_up, cudaStream_t stream) {
  if (!q4_gemv_applies(p)) return false;
  const dim3 grid(1, static_cast<unsigned>((p.n + kGemvRows - 1) / kGemvRows));
  const unsigned threads = 32 * static_cast<unsigned>(p.segments);
  if (x_up != nullptr)
    launch(q4_gemv_kernel<Scale, true>, grid, threads, q4_gemv_smem_bytes(p), stream, p, x_up);
  else
    launch(q4_gemv_kernel<Scale, false>, grid, threads, q4_gemv_smem_bytes(p), stream, p, nullptr);
  return true;
}

template <class F>
void decode(const Problem& p, cudaStream_t stream, const float* x_up = nullptr) {
  if constexpr (F::kBits == 4 && F::kLoadBytes == 16) {
    if (gemv_q4<typename F::ScaleType>(p, x_up, stream)) return;
  }
  LMX_REQUIRE(InvalidArgument, x_up == nullptr, "linear: a GeGLU input needs the batch-1 4-bit kernel");
  if (p.m <= 8)
    decode_rows<F, 1>(p, stream);
  else if (p.m <= 16)
    decode_rows<F, 2>(p, stream);
  else
    decode_rows<F, 4>(p, stream);
}

template <template <class> class Q>
void decode_by_scale(const Problem& p, cudaStream_t stream, const float* x_up) {
  switch (p.scale_dtype) {
    case DType::kBF16: return decode<Q<__nv_bfloat16>>(p, stream, x_up);
    case DType::kF16: return decode<Q<__half>>(p, stream, x_up);
    default: return decode<Q<float>>(p, stream, x_up);
  }
}

}  // namespace

void launch_decode(const Problem& p, cudaStream_t stream, const float* x_up) {
  LMX_REQUIRE(InvalidArgument, x_up == nullptr || p.format == WeightFormat::kQ4,
              "linear: a GeGLU input needs the batch-1 4-bit kernel");
  switch (p.format) {
    case WeightFormat::kDenseBf16: return decode<FormatDense>(p, stream);
    case WeightFormat::kQ4: return decode_by_scale<FormatQ4>(p, stream, x_up);
    case WeightFormat::kQ8: return decode_by_scale<FormatQ8>(p, stream, nullptr);
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
