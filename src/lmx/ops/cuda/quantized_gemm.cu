// Prefill path of the tensor-core projections (dense bf16 and quantized): x preparation and
// linear_prefill_kernel for every weight format (linear_tiles.cuh).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"

namespace lmx::cuda::linear {
namespace {

template <class F, bool kSplit>
void prefill_kernel(const Problem& p, const uint32_t* xp, cudaStream_t stream) {
  constexpr int kSmem = PrefillConfig<F, kSplit>::kSmemBytes;
  // Per call (cheap, host-side) so that every device the process uses gets the attribute.
  LMX_CUDA_CHECK(cudaFuncSetAttribute(linear_prefill_kernel<F, kSplit>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>((p.m + kTileM - 1) / kTileM), static_cast<unsigned>((p.n + kTileN - 1) / kTileN));
  launch(linear_prefill_kernel<F, kSplit>, grid, 256, kSmem, stream, p, xp);
}

template <class F>
void prefill(const Problem& p, uint32_t* xp, cudaStream_t stream) {
  const dim3 prep_grid(static_cast<unsigned>(p.m), static_cast<unsigned>((p.chunks * 64 + 255) / 256));
  launch(prepare_x_kernel<F>, prep_grid, 256, 0, stream, p.x, p.x_stride, p.k, p.chunks, xp);
  if (p.segments > 1)
    prefill_kernel<F, true>(p, xp, stream);
  else
    prefill_kernel<F, false>(p, xp, stream);
}

}  // namespace

size_t prefill_scratch_bytes(const Problem& p) {
  return static_cast<size_t>(p.m) * static_cast<size_t>(p.chunks) * kChunk * 2;
}

void launch_prefill(const Problem& p, uint32_t* xp, cudaStream_t stream) {
  switch (p.format) {
    case WeightFormat::kDenseBf16: return prefill<FormatDense>(p, xp, stream);
    case WeightFormat::kQ4: return with_q4_format(p, [&](auto f) { prefill<decltype(f)>(p, xp, stream); });
    case WeightFormat::kQ8: return with_scale_type<FormatQ8>(p, [&](auto f) { prefill<decltype(f)>(p, xp, stream); });
    case WeightFormat::kPacked:
      switch (p.bits) {
        case 2: return prefill<FormatPacked<2>>(p, xp, stream);
        case 3: return prefill<FormatPacked<3>>(p, xp, stream);
        case 4: return prefill<FormatPacked<4>>(p, xp, stream);
        case 5: return prefill<FormatPacked<5>>(p, xp, stream);
        case 6: return prefill<FormatPacked<6>>(p, xp, stream);
        default: return prefill<FormatPacked<8>>(p, xp, stream);
      }
  }
}

}  // namespace lmx::cuda::linear
