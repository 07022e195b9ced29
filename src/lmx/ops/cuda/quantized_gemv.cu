// Decode path of the tensor-core projections (dense bf16 and quantized): linear_decode_kernel for every
// weight format, 8, 16 or 32 x rows per block (linear_tiles.cuh); 4-bit weights at batch 1 run
// q4_gemv_kernel (linear_decode_q4.cuh), which computes the same bits faster (and can take a GeGLU input,
// form a GeGLU output, or run the MoE decode's gathered GEMVs).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <atomic>
#include <cstdint>

namespace lmx::cuda::linear {
namespace {

template <class F, int NT>
void decode_rows(const Problem& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.m + 8 * NT - 1) / (8 * NT)),
                  static_cast<unsigned>((p.n + 15) / 16));
  const size_t smem = static_cast<size_t>(p.segments) * NT * 8 * 16 * sizeof(float);
  launch(linear_decode_kernel<F, NT>, grid, 32 * p.segments, smem, stream, p);
}

// What a q4_gemv_kernel launch reads besides the problem: the GeGLU input's up half, and the pairs of
// gathered GEMVs (pair_count blocks in z).
struct Q4Call {
  const float* x_up = nullptr;
  Q4Pairs pairs;
  int pair_count = 1;
};

// q4_gemv_kernel for one plan; the shared-memory opt-in per call (cheap, host-side), so that every device
// the process uses gets it.
template <class F, Q4Io kIo, int kStages, int kTiles>
void launch_gemv_q4(const Problem& p, const Q4Call& call, const Q4GemvPlan& plan, cudaStream_t stream) {
  const int split = plan.split;
  const int64_t row_blocks = q4_gemv_row_blocks(p, kTiles, kIo == Q4Io::kGegluOutput);
  const dim3 grid(static_cast<unsigned>(split), static_cast<unsigned>(row_blocks),
                  static_cast<unsigned>(call.pair_count));
  const unsigned threads = 32 * static_cast<unsigned>(q4_gemv_warps(p, split));
  const size_t smem = q4_gemv_smem_bytes(p, kStages, kTiles, split);
  auto* kernel = q4_gemv_kernel<F, kIo, kStages, kTiles>;
  if (smem > 48 * 1024)
    LMX_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  launch_clustered(kernel, grid, threads, smem, stream, static_cast<unsigned>(split), p, call.x_up,
                   call.pairs, plan.window_shift);
}

template <class F, Q4Io kIo, int kTiles>
void gemv_q4_staged(const Problem& p, const Q4Call& call, const Q4GemvPlan& plan, cudaStream_t stream) {
  if (plan.stages == 2)
    launch_gemv_q4<F, kIo, 2, kTiles>(p, call, plan, stream);
  else
    launch_gemv_q4<F, kIo, 4, kTiles>(p, call, plan, stream);
}

template <class F, Q4Io kIo>
void gemv_q4_planned(const Problem& p, const Q4Call& call, const Q4GemvPlan& plan, cudaStream_t stream) {
  if constexpr (kIo == Q4Io::kGegluOutput) {
    gemv_q4_staged<F, kIo, 2>(p, call, plan, stream);  // (the plan has 2 tiles)
  } else {
    if (plan.tiles == 1)
      gemv_q4_staged<F, kIo, 1>(p, call, plan, stream);
    else
      gemv_q4_staged<F, kIo, 2>(p, call, plan, stream);
  }
}

std::atomic<Q4PlanObserver> g_plan_observer{nullptr};

// Tells the observer (set_q4_plan_observer), if any, what a launch chose.
void observe_plan(const Problem& p, const Q4Call& call, bool geglu, const Q4GemvPlan& plan) {
  const Q4PlanObserver observer = g_plan_observer.load(std::memory_order_relaxed);
  if (observer == nullptr) return;
  Q4PlanEvent e;
  e.n = p.n;
  e.k = p.k;
  e.geglu_output = geglu;
  e.gelu_input = call.x_up != nullptr;
  e.pairs = call.pair_count;
  e.stages = plan.stages;
  e.tiles = plan.tiles;
  e.split = plan.split;
  e.segments = p.segments;
  e.max_segment_chunks = q4_max_segment_chunks(p);
  e.blocks = q4_gemv_row_blocks(p, plan.tiles, geglu) * plan.split * call.pair_count;
  observer(e);
}

// Batch 1 with 4-bit weights (q4_gemv_applies): q4_gemv_kernel, with the GeGLU input when x_up is set or
// the GeGLU output when `geglu`; false (nothing enqueued) when the plan does not apply.
template <class F>
bool gemv_q4(const Problem& p, const Q4Call& call, bool geglu, cudaStream_t stream) {
  const Q4GemvPlan plan = q4_gemv_plan(p, geglu, call.pair_count);
  observe_plan(p, call, geglu, plan);
  if (plan.stages == 0) return false;
  if (geglu)
    gemv_q4_planned<F, Q4Io::kGegluOutput>(p, call, plan, stream);
  else if (call.x_up != nullptr)
    gemv_q4_planned<F, Q4Io::kGeluInput>(p, call, plan, stream);
  else
    gemv_q4_planned<F, Q4Io::kPlain>(p, call, plan, stream);
  return true;
}

template <class F>
void decode(const Problem& p, cudaStream_t stream, const float* x_up = nullptr) {
  if constexpr (F::kBits == 4 && F::kLoadBytes == 16) {
    if (gemv_q4<F>(p, Q4Call{x_up}, false, stream)) return;
  }
  LMX_REQUIRE(InvalidArgument, x_up == nullptr, "linear: a GeGLU input needs the batch-1 4-bit kernel");
  if (p.m <= 8)
    decode_rows<F, 1>(p, stream);
  else if (p.m <= 16)
    decode_rows<F, 2>(p, stream);
  else
    decode_rows<F, 4>(p, stream);
}

// Whether a plain projection takes two 16-row tiles per warp although it is not very tall: the rule of
// q4_gemv.wide_tiles (at least 4096 rows of 4096-8192 columns). Measured on the H200 (2026-12-02,
// twenty-sixth pass): in isolation 16384 x 5376 went from 48.6 to 61.4 % of read bandwidth and 5376 x 8192
// from 41.3 to 49.0 %, while the long rows of 5376 x 21504 lost (52.8 to 49.3 %); two tiles for every shape
// lost 1-3 % of decode (eleventh pass) on E2B, E4B and 26B-A4B, whose projections this rule leaves alone.
bool q4_wide_tiles(const Problem& p, const CudaTuning::Q4Gemv& rules) {
  const auto& wide = rules.wide_tiles;
  return wide.enabled && p.n >= wide.min_rows && p.k >= wide.min_cols && p.k <= wide.max_cols;
}

}  // namespace

int q4_window_shift(int rows, int blocks, int forced) {
  int lanes = forced != 0 ? forced : rows == 16 ? 2 : 1;
  if (forced == 0 && rows != 16)
    while (lanes < blocks && lanes < 32) lanes <<= 1;
  lanes = std::max(lanes, 32 / rows);
  int shift = 0;
  while ((1 << shift) < lanes) ++shift;
  return shift;
}

Q4GemvPlan q4_gemv_plan(const Problem& p, bool geglu, int pair_count, const CudaTuning::Q4Gemv& rules) {
  ShapePlan shape;  // (zeros: the rules below choose)
  if (pair_count == 1)
    for (const ShapePlan& o : rules.shapes)
      if (o.n == p.n && o.k == p.k) shape = o;
  Q4GemvPlan plan;
  // (The scale and bias windows are copied in 16-byte blocks.)
  if (p.format != WeightFormat::kQ4 || p.m != 1 || !p.x_vec4 || !detail::aligned16(p.scales) ||
      !detail::aligned16(p.biases))
    return plan;
  // Measured on the H200 (A/Bs, 2026-11-30): 2 chunks in flight per warp and 16 rows per warp except for
  // very tall matrices (rules.tall_rows: the LM head, 43008 x 5376) and q4_wide_tiles. Deeper rings won some
  // isolated GEMVs (16384 x 4096: 51 % of read bandwidth at 4 vs 49 % at 2) but lost in a model (E4B decode
  // 327 vs 343 tok/s at 4, 300 at 8): their shared memory keeps the next kernel's blocks, launched early
  // (PDL), off the SMs.
  const int tiles = rules.tiles != 0 ? rules.tiles : shape.tiles;
  plan.tiles = tiles != 0 ? tiles : p.n > rules.tall_rows || q4_wide_tiles(p, rules) ? 2 : 1;
  if (geglu) {  // a gate tile and an up tile per block
    if (tiles == 1 || p.n % 2 != 0) return plan;
    plan.tiles = 2;
  }
  // Matrices of one to two row blocks per SM split each row tile's segments over a cluster of two blocks
  // (2560-row projections: 160 blocks, 1.2 per SM, SMs busy 54 % of the time under ncu).
  const int64_t blocks = q4_gemv_row_blocks(p, plan.tiles, geglu) * pair_count;
  const bool uneven_wave = blocks >= rules.split_blocks_from && blocks < rules.split_blocks_below;
  const int split = rules.split != 0 ? rules.split : shape.split;
  plan.split = split != 0 ? split : uneven_wave && p.segments >= rules.split_min_segments ? 2 : 1;
  if (plan.split > p.segments) plan.split = 1;
  // A grid of fewer blocks than SMs never shares an SM with a block of its own, so a deeper ring costs it no
  // residency and doubles each warp's bytes in flight, where its segments have the chunks to fill it.
  // Measured on the H200 (same-run A/Bs, 2026-12-02): the 96-block 1536 x 12288 projection (6 chunks per
  // warp; E2B's down projection) at 4 stages, E2B decode +3.7 %; 1536 x 6144 (3 chunks) -0.5 %; larger grids
  // lost (E4B, 31B: -1 to -5 %).
  const bool deep_ring = blocks * plan.split < rules.deep_ring_blocks_below &&
                         q4_max_segment_chunks(p) >= rules.deep_ring_min_chunks;
  const int chosen = rules.stages != 0 ? rules.stages : shape.stages;
  int stages = chosen != 0 ? chosen : deep_ring ? 4 : 2;
  if (chosen == 0 && stages == 4 && q4_gemv_smem_bytes(p, stages, plan.tiles, plan.split) > kGemvMaxSmem)
    stages = 2;  // (the deep ring does not fit: the default one may)
  if (q4_gemv_smem_bytes(p, stages, plan.tiles, plan.split) <= kGemvMaxSmem) plan.stages = stages;
  plan.window_shift = q4_window_shift(16 * plan.tiles, q4_window_blocks(p), rules.window_lanes);
  return plan;
}

bool launch_decode_geglu(const Problem& p, cudaStream_t stream) {
  if (p.format != WeightFormat::kQ4) return false;
  return with_q4_format(p, [&](auto f) { return gemv_q4<decltype(f)>(p, Q4Call{}, true, stream); });
}

bool launch_decode_pairs(const Problem& p, const Q4Pairs& pairs, int pair_count, bool geglu,
                         cudaStream_t stream) {
  if (p.format != WeightFormat::kQ4 || pair_count < 1) return false;
  const Q4Call call{nullptr, pairs, pair_count};
  return with_q4_format(p, [&](auto f) { return gemv_q4<decltype(f)>(p, call, geglu, stream); });
}

void launch_decode(const Problem& p, cudaStream_t stream, const float* x_up) {
  LMX_REQUIRE(InvalidArgument, x_up == nullptr || p.format == WeightFormat::kQ4,
              "linear: a GeGLU input needs the batch-1 4-bit kernel");
  with_format(p, [&](auto f) { decode<decltype(f)>(p, stream, x_up); });
}

}  // namespace lmx::cuda::linear

namespace lmx::cuda {

void set_q4_plan_observer(Q4PlanObserver observer) {
  linear::g_plan_observer.store(observer, std::memory_order_relaxed);
}

}  // namespace lmx::cuda
