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

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

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
void launch_gemv_q4(const Problem& p, const Q4Call& call, int split, cudaStream_t stream) {
  const int64_t row_blocks = q4_gemv_row_blocks(p, kTiles, kIo == Q4Io::kGegluOutput);
  const dim3 grid(static_cast<unsigned>(split), static_cast<unsigned>(row_blocks),
                  static_cast<unsigned>(call.pair_count));
  const unsigned threads = 32 * static_cast<unsigned>(q4_gemv_warps(p, split));
  const size_t smem = q4_gemv_smem_bytes(p, kStages, kTiles, split);
  auto* kernel = q4_gemv_kernel<F, kIo, kStages, kTiles>;
  if (smem > 48 * 1024)
    LMX_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int window_shift = q4_window_shift(16 * kTiles, q4_window_blocks(p));
  launch_clustered(kernel, grid, threads, smem, stream, static_cast<unsigned>(split), p, call.x_up,
                   call.pairs, window_shift);
}

template <class F, Q4Io kIo, int kTiles>
void gemv_q4_staged(const Problem& p, const Q4Call& call, const Q4GemvPlan& plan, cudaStream_t stream) {
  if (plan.stages == 2)
    launch_gemv_q4<F, kIo, 2, kTiles>(p, call, plan.split, stream);
  else
    launch_gemv_q4<F, kIo, 4, kTiles>(p, call, plan.split, stream);
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

// LMX_Q4_PLAN_LOG=1: every distinct batch-1 4-bit launch (shape, kind, pairs) prints its plan once to stderr
// — the shapes a model runs, to sweep with LMX_Q4_SHAPE_PLAN (scripts/plan_sweep_gpu.sh).
void log_plan_once(const Problem& p, const Q4Call& call, bool geglu, const Q4GemvPlan& plan) {
  static const bool enabled = env_integer("LMX_Q4_PLAN_LOG", 0, 0, 1) != 0;
  if (!enabled) return;
  const bool gelu_input = call.x_up != nullptr;
  static std::mutex mutex;
  static std::set<std::tuple<int64_t, int64_t, bool, bool, int>> seen;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!seen.emplace(p.n, p.k, geglu, gelu_input, call.pair_count).second) return;
  }
  const int64_t blocks = q4_gemv_row_blocks(p, plan.tiles, geglu) * plan.split * call.pair_count;
  fmt::print(stderr, "lmx: q4 plan {}x{}{}{}: ", p.n, p.k,
             geglu        ? " (GeGLU output)"
             : gelu_input ? " (GeGLU input)"
                          : "",
             call.pair_count > 1 ? fmt::format(", {} pairs", call.pair_count) : std::string());
  if (plan.stages == 0)
    fmt::print(stderr, "not applicable (the generic kernel runs)\n");
  else
    fmt::print(stderr, "ring {}, tiles {}, split {}, {} segments of <= {} chunks, {} blocks\n", plan.stages,
               plan.tiles, plan.split, p.segments, q4_max_segment_chunks(p), blocks);
}

// Batch 1 with 4-bit weights (q4_gemv_applies): q4_gemv_kernel, with the GeGLU input when x_up is set or
// the GeGLU output when `geglu`; false (nothing enqueued) when the plan does not apply.
template <class F>
bool gemv_q4(const Problem& p, const Q4Call& call, bool geglu, cudaStream_t stream) {
  const Q4GemvPlan plan = q4_gemv_plan(p, geglu, call.pair_count);
  log_plan_once(p, call, geglu, plan);
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

// Whether a plain projection takes two 16-row tiles per warp although it is not very tall: at least 4096 rows
// of 4096-8192 columns (31B's q/k/v and o projections). Measured on the H200 (2026-12-02,
// twenty-sixth pass): in isolation 16384 x 5376 went from 48.6 to 61.4 % of read bandwidth and 5376 x 8192
// from 41.3 to 49.0 %, while the long rows of 31B's down projection lost (5376 x 21504: 52.8 to 49.3 %); two
// tiles for every shape lost 1-3 % on E2B, E4B and 26B-A4B (eleventh pass), whose projections this rule
// leaves alone. LMX_Q4_WIDE_TILES=0 turns the rule off (A/B runs).
bool q4_wide_tiles(const Problem& p) {
  static const bool enabled = env_integer("LMX_Q4_WIDE_TILES", 1, 0, 1) != 0;
  return enabled && p.n >= 4096 && p.k >= 4096 && p.k <= 8192;
}

// An A/B override from the environment (env_integer): one of `allowed`, or 0 when unset.
int forced_choice(const char* name, std::initializer_list<int> allowed) {
  const int64_t v = env_integer(name, -1, 1, std::max(allowed));  // -1: unset
  if (v < 0) return 0;
  LMX_REQUIRE(InvalidArgument, std::find(allowed.begin(), allowed.end(), v) != allowed.end(),
              "{}: unsupported value {}", name, v);
  return static_cast<int>(v);
}

}  // namespace

int q4_window_shift(int rows, int blocks) {
  static const int forced = forced_choice("LMX_Q4_WINDOW_LANES", {1, 2, 4, 8, 16, 32});
  int lanes = forced != 0 ? forced : rows == 16 ? 2 : 1;
  if (forced == 0 && rows != 16)
    while (lanes < blocks && lanes < 32) lanes <<= 1;
  lanes = std::max(lanes, 32 / rows);
  int shift = 0;
  while ((1 << shift) < lanes) ++shift;
  return shift;
}

Q4GemvPlan q4_gemv_plan(const Problem& p, bool geglu, int pair_count) {
  static const int forced_stages = forced_choice("LMX_Q4_STAGES", {2, 4});
  // LMX_Q4_SHAPE_PLAN (linear.h): one shape's plan, for single projections only.
  static const std::vector<Q4PlanOverride> shape_plans = q4_plan_overrides_from_env();
  static const int forced_tiles = forced_choice("LMX_Q4_TILES", {1, 2});
  static const int forced_split = forced_choice("LMX_Q4_SPLIT", {1, 2});
  Q4PlanOverride shape;  // (zeros: the rules below choose)
  for (const Q4PlanOverride& o : shape_plans)
    if (pair_count == 1 && o.n == p.n && o.k == p.k) shape = o;
  Q4GemvPlan plan;
  // (The scale and bias windows are copied in 16-byte blocks.)
  if (p.format != WeightFormat::kQ4 || p.m != 1 || !p.x_vec4 || !detail::aligned16(p.scales) ||
      !detail::aligned16(p.biases))
    return plan;
  // Measured on the H200 (A/Bs, 2026-11-30): 2 chunks in flight per warp and 16 rows per warp except for
  // very tall matrices (the LM head, 31B's 43008 x 5376 gate_up) and q4_wide_tiles. Deeper rings won some
  // isolated GEMVs (16384 x 4096: 51 % of read bandwidth at 4 vs 49 % at 2) but lost in the model (E4B decode
  // 327 vs 343 tok/s at 4, 300 at 8): their shared memory keeps the next kernel's blocks, launched early
  // (PDL), off the SMs.
  const int tiles = forced_tiles != 0 ? forced_tiles : shape.tiles;
  plan.tiles = tiles != 0 ? tiles : p.n > 16384 || q4_wide_tiles(p) ? 2 : 1;
  if (geglu) {  // a gate tile and an up tile per block
    if (tiles == 1 || p.n % 2 != 0) return plan;
    plan.tiles = 2;
  }
  // Matrices of one to two row blocks per SM split each row tile's segments over a cluster of two blocks
  // (E4B's 2560-row projections: 160 blocks, 1.2 per SM, SMs busy 54 % of the time under ncu).
  const int64_t blocks = q4_gemv_row_blocks(p, plan.tiles, geglu) * pair_count;
  const bool uneven_wave = blocks >= kSplitRowBlocksFrom && blocks < kSplitRowBlocksBelow;
  const int split = forced_split != 0 ? forced_split : shape.split;
  plan.split = split != 0 ? split : uneven_wave && p.segments >= 4 ? 2 : 1;
  if (plan.split > p.segments) plan.split = 1;
  // A grid of fewer blocks than SMs never shares an SM with a block of its own, so a deeper ring costs it no
  // residency and doubles each warp's bytes in flight, where its segments have the chunks to fill it.
  // Measured on the H200 (same-run A/Bs, 2026-12-02): E2B's 96-block 1536 x 12288 down projection (6 chunks
  // per warp) at 4 stages, decode +3.7 %; its 1536 x 6144 (3 chunks) -0.5 %; larger grids lost (E4B, 31B: -1
  // to -5 %).
  const bool deep_ring =
      blocks * plan.split < kSplitRowBlocksFrom && q4_max_segment_chunks(p) >= kDeepRingMinChunks;
  const int chosen = forced_stages != 0 ? forced_stages : shape.stages;
  int stages = chosen != 0 ? chosen : deep_ring ? 4 : 2;
  if (chosen == 0 && stages == 4 && q4_gemv_smem_bytes(p, stages, plan.tiles, plan.split) > kGemvMaxSmem)
    stages = 2;  // (the deep ring does not fit: the default one may)
  if (q4_gemv_smem_bytes(p, stages, plan.tiles, plan.split) <= kGemvMaxSmem) plan.stages = stages;
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
