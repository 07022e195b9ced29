// Prefill path of the tensor-core projections (dense bf16 and quantized): x preparation and
// linear_prefill_kernel for every weight format (linear_tiles.cuh), or its wgmma twin on sm_90
// (sm90a/prefill_wgmma.cu).
#include "lmx/core/error.h"
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"
#include "lmx/ops/cuda/tuning.h"

namespace lmx::cuda::linear {
namespace {

// grid_x: x-row tiles (plain) or the chunk bound (grouped).
template <class F, bool kSplit>
void prefill_kernel(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t grid_x,
                    cudaStream_t stream) {
  launch_prefill_tiles(linear_prefill_kernel<F, kSplit>, PrefillConfig<F, kSplit>::kSmemBytes, 256, p, xp,
                       grouped, grid_x, stream);
}

template <class F>
void prefill(const Problem& p, uint32_t* xp, const XRows& rows, const PrefillChunks& chunk_table,
             int64_t grid_x, cudaStream_t stream) {
  const int64_t x_rows = rows.scatter != nullptr ? p.m / rows.div : p.m;
  const int64_t units = x_rows * p.chunks * 16;  // 16 bytes of xp each
  launch(prepare_x_kernel<F>, dim3(static_cast<unsigned>((units + 255) / 256)), 256, 0, stream, p.x,
         p.x_stride, p.k, p.chunks, xp, rows, units);
  PrefillChunks grouped = chunk_table;  // with the grid order decided here
  grouped.rows_first =
      prefill_rows_first(p, chunk_table.chunks != nullptr, grid_x, tuning().prefill.rows_first);
  if (launch_prefill_wgmma(p, xp, grouped, grid_x, stream)) return;
  LMX_REQUIRE(
      Error, grouped.chunks == nullptr || grouped.chunk_rows <= kTileM,
      "cuda: grouped prefill chunks of {} rows need the wgmma kernel, which refused a {} x {} projection",
      grouped.chunk_rows, p.n, p.k);
  if (p.segments > 1)
    prefill_kernel<F, true>(p, xp, grouped, grid_x, stream);
  else
    prefill_kernel<F, false>(p, xp, grouped, grid_x, stream);
}

// prefill<F> for the problem's format.
void prefill_any(const Problem& p, uint32_t* xp, const XRows& rows, const PrefillChunks& grouped, int64_t grid_x,
                 cudaStream_t stream) {
  with_format(p, [&](auto f) { prefill<decltype(f)>(p, xp, rows, grouped, grid_x, stream); });
}

}  // namespace

// Whichever operand a sweep re-reads should be the one that stays in L2: x-first re-reads every x tile once
// per weight row tile, rows-first every weight tile once per x tile, so the rule takes rows-first when the
// prepared x is the larger (a 2560 x 10240 projection from ~600 rows) and always for the MoE's grouped
// launches, whose chunks each read only their expert's weights (26B-A4B, 128 experts at top 8, at 2048
// tokens: 92 MB of prepared x for the experts' gate/up, 1.4 GB read from DRAM x-first; measured on the H200,
// 2026-12-01).
// Grid y holds at most 65535 tiles, whatever the choice.
bool prefill_rows_first(const Problem& p, bool grouped, int64_t grid_x, Choice rule) {
  if (grid_x > 65535) return false;
  if (rule != Choice::kAuto) return rule == Choice::kAlways;
  const int64_t x_bytes = static_cast<int64_t>(prefill_scratch_bytes(p));
  const int64_t weight_bytes = p.n * p.row_words * 4;
  return grouped || x_bytes > weight_bytes;
}

size_t prefill_scratch_bytes(const Problem& p) {
  return static_cast<size_t>(p.m) * static_cast<size_t>(p.chunks) * kChunk * 2;
}

void launch_prefill(const Problem& p, uint32_t* xp, cudaStream_t stream, const XRows& rows) {
  prefill_any(p, xp, rows, PrefillChunks{}, (p.m + kTileM - 1) / kTileM, stream);
}

void launch_prefill_grouped(const Problem& p, const XRows& rows, const PrefillChunks& grouped, int max_chunks,
                            uint32_t* xp, cudaStream_t stream) {
  prefill_any(p, xp, rows, grouped, max_chunks, stream);
}

}  // namespace lmx::cuda::linear
