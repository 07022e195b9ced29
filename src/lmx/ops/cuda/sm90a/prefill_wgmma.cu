// The prefill kernel of the tensor-core projections on Hopper's warpgroup MMA (wgmma), built for sm_90a only
// (CMakeLists.txt: an object library of its own). It computes exactly what linear_prefill_kernel
// (linear_tiles.cuh) computes — the same 128 x 128 tiles, the same dequantized A fragments and prepared x,
// the same 8 k steps per chunk in the same order, each segment's chain starting at +0, the segments added
// in order — and a chain of wgmma k16 steps gives the bits of the same chain of mma.sync m16n8k16 steps
// (bench/cuda/wgmma_probe.cu, on the H200: 179 200 outputs, none differed), so the outputs are bit-identical
// to the mma.sync kernel's and to the decode kernels' (batch invariance holds whichever kernel runs).
//
// What differs is the issue: two warpgroups of four warps, each warpgroup 64 weight rows x 128 x rows. A
// warp dequantizes only its own 16 weight rows per chunk (the mma.sync kernel's two x-row halves each
// dequantized the same 32 rows) into registers — the A operand of wgmma may come from registers, in
// mma.sync's fragment layout — and the warpgroup issues one asynchronous m64n128k16 per k step, with B (the
// prepared x) read by the tensor cores straight from shared memory in wgmma's 128-byte swizzled K-major
// layout. A fragments are double-buffered across chunks: the warp dequantizes chunk j + 1 while chunk j's
// wgmmas run. A ninth warp (or a third warpgroup: WgmmaConfig) is the producer: one lane loads each chunk's
// stage with three TMA copies (the weight rows' codes, and the two 64-column halves of the x tile, which TMA
// swizzles as wgmma reads them) into a ring of kStages stages, and the copies complete on the stage's `full`
// mbarrier; each consumer warp releases a stage on its `empty` mbarrier once its wgmmas that read it are done
// (two chunks later). No block-wide barrier per chunk: a warp waits only for the data it reads (ncu, before
// TMA: 17 % of the stall samples at the per-chunk __syncthreads, and each thread's share of 2560 16-byte copies
// per chunk).
// A second instance has 32 x rows per tile (m64n32k16) for the MoE's grouped launches: it takes their chunks of
// at most 32 rows, which the 128-row instance then skips (launch_prefill_wgmma).
// Block-to-tile mapping (x-first or rows-first grid): prefill_tile, linear_tiles.cuh.
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/device_memory.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"
#include "lmx/ops/cuda/sm90a/wgmma.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <cuda.h>
#include <cudaTypedefs.h>

namespace lmx::cuda::linear {
namespace {

using namespace sm90a;

// x rows of the tiles of plain launches whose 128-row grid ends in a partly filled wave (narrow_tiles).
constexpr int kNarrowTileRows = 96;

// kN: the x rows of a tile — kTileM (128); 32 for the MoE's small chunks and for short prompts,
// kWideChunkRows (160) for the MoE's chunks of up to 160 rows, or kNarrowTileRows (96) for plain launches
// whose waves 96-row tiles fill better (launch_prefill_wgmma): other columns per wgmma, the same per-column
// chain (an output's bits do not depend on N).
// The 160-row instance's 80 accumulators per thread do not fit under the register cap of nine warps (168: an
// SM sub-partition holds three of them, 3 x 32 x 168 <= 16 384), nor do the 96- and 128-row instances' accumulators
// with their segment totals, so there the producer is a warpgroup of four warps (one issues the copies) that gives
// its registers to the consumers (setmaxnreg): 128 x 40 + 256 x 232 = the 384 x 168 the block is launched with.
template <class F, bool kSplit, int kN>
struct WgmmaConfig {
  static_assert(kN == 32 || kN == kNarrowTileRows || kN == 128 || kN == kWideChunkRows,
                "wgmma_m64nNk16 exists for N = 32, 96, 128, 160");
  static constexpr int kAcc = kN / 2;  // accumulators per thread: the warpgroup's 64 x kN f32
  static constexpr int kABytes = PrefillConfig<F>::kABytes;
  static constexpr int kBBytes = kN * 256;  // (a multiple of 1024: the swizzled halves stay aligned)
  static constexpr int kStageBytes = kABytes + kBBytes;
  // A split's segment totals: the first kRegisterTotals in registers (a segment's end is then that many
  // adds), the others in shared memory. In shared memory a flush is a read and a write of 1 KB per total (~1
  // us per flush for the 64 totals of a 128-row tile, with the tensor cores idle; E4B's and 26B-A4B's dense
  // projections have 8-16 segments of two chunks each; measured on the H200, 2026-12-02). All of them fit in
  // registers for tiles of up to 128 x rows; the 160-row instance (the MoE's grouped launches, at most 3
  // segments) keeps kWideRegisterTotals of its 80 there (ptxas spills with 56, and with all 80 even at 240
  // registers per consumer; MoE dispatch at 2048 tokens: 32 → 680 us, 48 → 641 us).
  static constexpr int kWideRegisterTotals = 48;
  static constexpr int kRegisterTotals = !kSplit ? 0 : kN <= 128 ? kAcc : kWideRegisterTotals;
  static constexpr int kSmemTotals = kSplit ? kAcc - kRegisterTotals : 0;
  static constexpr int kTotalBytes = kSmemTotals * 256 * 4;
  static constexpr int kMaxSmem = 227 * 1024;
  static constexpr int kStages = 4 * kStageBytes + kTotalBytes + 2 * 4 * 8 <= kMaxSmem ? 4 : 3;
  static constexpr int kSmemBytes = kStages * kStageBytes + kTotalBytes + 2 * kStages * 8;  // + mbarriers
  static_assert(kSmemBytes <= kMaxSmem);
  static constexpr int kConsumers = 256;  // two warpgroups
  // A producer warpgroup for the instances whose consumers need more registers than nine warps allow: 160 x
  // rows, and 96 or 128 with a split (all segment totals in registers: 64 + 64 + the A fragments' 64).
  static constexpr bool kProducerGroup = kN == kWideChunkRows || (kRegisterTotals > 0 && kN >= kNarrowTileRows);
  static constexpr int kThreads = kConsumers + (kProducerGroup ? 128 : 32);  // and the producer warp(group)
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
  static_assert(!kProducerGroup ||
                128 * kProducerRegisters + kConsumers * kConsumerRegisters <= kThreads * 168);
};

// The tensor maps of a launch (TMA): the weight's codes as bytes [rows of the whole stack][row bytes], box 64
// bytes (one chunk of a row) x 128 rows; the prepared x as 2-byte units [rows][chunks * 128], box 64 units
// (128 bytes: half a chunk) x kN rows, 128-byte swizzled (wgmma's B layout). Elements past the arrays' ends
// arrive as zeros.
struct WgmmaMaps {
  CUtensorMap weight, x;
};

// Which chunks of a grouped launch a kernel of kN x rows takes: those of more than min_rows rows (and at most
// kN). A plain launch takes every tile (min_rows 0, kN = kTileM).
struct WgmmaRows {
  int min_rows = 0;
};

#if defined(LMX_HAS_WGMMA)

// D[64 x 128] += A[64 x 16] · B[128 x 16]ᵀ for the warpgroup (wgmma m64n128k16, f32 accumulate): A from
// registers (each warp's 16 rows as an mma.sync m16n8k16 A fragment), B from shared memory (descriptor).
// d[4 nt + i]: row g + 8 (i / 2) of the warp's 16, column 8 nt + 2 c + (i % 2).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, "
      "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, "
      "0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)
      : "memory");
}
// The same for 32 x rows (wgmma m64n32k16): d[4 nt + i], nt < 4.
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)
      : "memory");
}
// The same for 96 x rows (wgmma m64n96k16): d[4 nt + i], nt < 12.
__device__ __forceinline__ void wgmma_m64n96k16(float (&d)[48], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, %52, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)
      : "memory");
}
// The same for 160 x rows (wgmma m64n160k16): d[4 nt + i], nt < 20.
__device__ __forceinline__ void wgmma_m64n160k16(float (&d)[80], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %85, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, "
      "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, "
      "%71, %72, %73, %74, %75, %76, %77, %78, %79}, {%80, %81, %82, %83}, %84, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)
      : "memory");
}
template <int kN>
__device__ __forceinline__ void wgmma_m64nNk16(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc) {
  if constexpr (kN == 128)
    wgmma_m64n128k16(d, a, desc);
  else if constexpr (kN == kNarrowTileRows)
    wgmma_m64n96k16(d, a, desc);
  else if constexpr (kN == kWideChunkRows)
    wgmma_m64n160k16(d, a, desc);
  else
    wgmma_m64n32k16(d, a, desc);
}
// Hopper's per-warpgroup register reallocation (every thread of the warpgroup executes it).
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// TMA: the box at (x0, x1) of a 2-D tensor map into shared memory; its bytes complete on the barrier `bar`
// (whose expected transaction count the producer raised first).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int x0, int x1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x0), "r"(x1), "r"(bar)
      : "memory");
}
#endif

// A scale or bias as raw bits (a 2-byte dtype in the low half), and those bits widened to the f32 that
// load_scale_as gives.
template <class Scale>
__device__ __forceinline__ uint32_t scale_bits(const Scale* p) {
  if constexpr (sizeof(Scale) == 2)
    return *reinterpret_cast<const uint16_t*>(p);
  else
    return *reinterpret_cast<const uint32_t*>(p);
}
template <class Scale>
__device__ __forceinline__ float scale_from_bits(uint32_t bits) {
  if constexpr (std::is_same_v<Scale, __nv_bfloat16>)
    return __uint_as_float(bits << 16);
  else if constexpr (std::is_same_v<Scale, __half>)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  else
    return __uint_as_float(bits);
}

template <class F, bool kSplit, int kN>
__global__ void __launch_bounds__(WgmmaConfig<F, kSplit, kN>::kThreads, 1)
    prefill_wgmma_kernel(const Problem p, const uint32_t* xp, const PrefillChunks grouped,
                         const __grid_constant__ WgmmaMaps maps, const WgmmaRows take) {
#if defined(LMX_HAS_WGMMA)
  wait_for_prior_kernels();
  allow_next_kernel();
  PrefillTile tile;
  if (!prefill_tile(p, grouped, tile, kN)) return;
  const int64_t tok_tile = tile.tok_tile, m_end = tile.m_end, expert_row0 = tile.expert_row0;
  if (grouped.chunks != nullptr && (m_end - tok_tile <= take.min_rows || m_end - tok_tile > kN)) return;
  using C = WgmmaConfig<F, kSplit, kN>;
  constexpr int kStages = C::kStages;
  constexpr int kSlots = F::kScaleSlots > 0 ? F::kScaleSlots : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row_tile = tile.row_tile;
  const uint32_t smem_base = smem_address(smem);
  if ((smem_base & 1023) != 0) __trap();  // the swizzled B blocks need 1024-byte alignment
  const int chunks = p.chunks;

  // Stage s holds a chunk's weight codes (kABytes) and prepared x (kBBytes). full[s]: the chunk landed
  // (the producer's expect_tx and the TMA bytes); empty[s]: all 8 consumer warps are done with it.
  const uint32_t full = smem_base + kStages * C::kStageBytes + C::kTotalBytes, empty = full + 8 * kStages;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(full + 8 * st, 1);
      mbarrier_init(empty + 8 * st, C::kConsumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp >= C::kConsumers / 32) {  // the producer warp(group): one lane issues every chunk's copies
    if constexpr (C::kProducerGroup) set_max_registers_down<C::kProducerRegisters>();
    if (warp == C::kConsumers / 32 && lane == 0) {
      const int weight_row = static_cast<int>(expert_row0 + row_tile), x_row = static_cast<int>(tok_tile);
      for (int n = 0; n < chunks; ++n) {
        const int st = n % kStages;
        if (n >= kStages) mbarrier_wait(empty + 8 * st, (n / kStages - 1) & 1);  // chunk n - kStages is done
        const uint32_t stage = smem_base + st * C::kStageBytes, bar = full + 8 * st;
        mbarrier_arrive_expect_tx(bar, C::kStageBytes);
        tma_load_2d(stage, &maps.weight, n * (kChunk / 2), weight_row, bar);
        tma_load_2d(stage + C::kABytes, &maps.x, n * kChunk, x_row, bar);
        tma_load_2d(stage + C::kABytes + kN * 128, &maps.x, n * kChunk + 64, x_row, bar);
      }
    }
    return;
  }
  if constexpr (C::kProducerGroup) set_max_registers_up<C::kConsumerRegisters>();

  // This lane's weight rows: warpgroup warp / 4, its warp warp % 4, half h → local row 16 warp + 8 h + g.
  int64_t rows[2];
  bool row_ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows[h] = row_tile + 16 * warp + 8 * h + g;
    row_ok[h] = rows[h] < p.n;
  }

  float acc[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
  // Segment totals (kSplit): total i in reg_total[i] for i < kRegisterTotals, else in shared memory at
  // smem_total[(i - kRegisterTotals) * 256] (this thread's column of [kSmemTotals][256]).
  float* smem_total = reinterpret_cast<float*>(smem + kStages * C::kStageBytes) + tid;
  float reg_total[C::kAcc];  // (only the first kRegisterTotals are used, so only those take registers)
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) reg_total[i] = 0.0f;

  // Scales and biases of chunk j in buffer j % 2, loaded two chunks ahead (a chunk of asynchronous wgmmas
  // is much shorter than the mma.sync kernel's chunk, which hides the loads of one chunk ahead). They are
  // kept as raw bits and widened where the dequantization uses them: widened right after the load, the
  // widening waited for the load there (ncu: long-scoreboard stalls on the widening instructions).
  using Scale = typename F::ScaleType;
  static_assert(kSlots == 1, "FormatQ4: one scale slot per lane and chunk, at column 32 c");
  uint32_t sc_bits[2][2], bi_bits[2][2];
  int64_t first_group[2];  // each row's first group in the scale and bias arrays
#pragma unroll
  for (int h = 0; h < 2; ++h) first_group[h] = (expert_row0 + rows[h]) * p.groups_per_row;
  auto load_scales = [&](int j, auto buf) {
    constexpr int kBuf = decltype(buf)::value;
    if (j >= chunks) return;
    const int column = j * kChunk + 32 * c;  // the lane's slot (32-bit: k < 2^31)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sc_bits[kBuf][h] = bi_bits[kBuf][h] = 0;  // (zeros: a row past n, a slot past k)
      if (row_ok[h] && column < p.k) {
        const int64_t i = first_group[h] + (column >> p.group_shift);
        sc_bits[kBuf][h] = scale_bits(static_cast<const Scale*>(p.scales) + i);
        bi_bits[kBuf][h] = scale_bits(static_cast<const Scale*>(p.biases) + i);
      }
    }
  };
  load_scales(0, std::integral_constant<int, 0>{});
  load_scales(1, std::integral_constant<int, 1>{});

  int segment = 0;
  int segment_end = segment_begin(1, p.segments, chunks);
  uint32_t a[2][8][4];  // A fragments of two chunks (buffer j % 2), 8 k steps each

  // The finished segment's sums (acc, its wgmmas complete) added to the total, in segment order; acc zeroed.
  // (The first segment's are stored, not added: a shared-memory total is not read then.)
  auto flush_segment = [&] {
#pragma unroll
    for (int i = 0; i < C::kRegisterTotals; ++i) reg_total[i] = segment == 0 ? acc[i] : reg_total[i] + acc[i];
    if (segment == 0) {
#pragma unroll
      for (int i = C::kRegisterTotals; i < C::kAcc; ++i) smem_total[(i - C::kRegisterTotals) * 256] = acc[i];
    } else {
#pragma unroll
      for (int i = C::kRegisterTotals; i < C::kAcc; ++i) smem_total[(i - C::kRegisterTotals) * 256] += acc[i];
    }
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
    ++segment;
    segment_end = segment_begin(segment + 1, p.segments, chunks);
  };

  // Chunk j with A buffer kBuf (= j % 2: register arrays need compile-time indices).
  auto run_chunk = [&](int j, auto buf) {
    constexpr int kBuf = decltype(buf)::value;
    wgmma_wait<1>();  // this warpgroup's chunk j - 2 is done: its A buffer (this one) and its stage are free
    if (j >= 2 && lane == 0) mbarrier_arrive(empty + 8 * ((j - 2) % kStages));
    mbarrier_wait(full + 8 * (j % kStages), (j / kStages) & 1);  // chunk j landed
    const int stage = j % kStages;
    const unsigned char* a_ptr = smem + stage * C::kStageBytes;
    const uint32_t b_addr = smem_base + stage * C::kStageBytes + C::kABytes;
    const int k_left = static_cast<int>(p.k - static_cast<int64_t>(j) * kChunk);
    // The A fragments of the chunk's 8 steps (the mma.sync kernel's weight_pair sequence for one m-tile).
    float sc[2][1], bi[2][1];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sc[h][0] = scale_from_bits<Scale>(sc_bits[kBuf][h]);
      bi[h][0] = scale_from_bits<Scale>(bi_bits[kBuf][h]);
    }
    uint32_t raw[2][F::kWords];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      constexpr int kStepsPerLoad = F::kLoadBytes == 16 ? 8 / F::kLoads : 8;
      if (t % kStepsPerLoad == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int local_row = 16 * warp + 8 * h + g;
          if constexpr (F::kLoadBytes == 16) {
            load_raw_smem<F>(a_ptr, local_row, c, F::pair_load(2 * t), raw[h]);
          } else {
#pragma unroll
            for (int l = 0; l < F::kLoads; ++l) load_raw_smem<F>(a_ptr, local_row, c, l, raw[h]);
          }
        }
      }
      a[kBuf][t][0] = weight_pair<F>(raw[0], 2 * t, sc[0], bi[0], c, k_left);
      a[kBuf][t][1] = weight_pair<F>(raw[1], 2 * t, sc[1], bi[1], c, k_left);
      a[kBuf][t][2] = weight_pair<F>(raw[0], 2 * t + 1, sc[0], bi[0], c, k_left);
      a[kBuf][t][3] = weight_pair<F>(raw[1], 2 * t + 1, sc[1], bi[1], c, k_left);
    }
    load_scales(j + 2, buf);  // (this chunk's are in registers of a[] now)
    if constexpr (kSplit) {
      // Chunk j starts a segment: the previous one's sum joins the total now, after this chunk's
      // dequantization (which overlapped the previous chunk's wgmmas), and the chain restarts at +0.
      if (j == segment_end) {
        wgmma_wait<0>();
        flush_segment();
      }
    }
    wgmma_fence();
    // Step t: columns 16 t .. 16 t + 15 of the chunk, in block t / 4 at byte 32 (t % 4) of each row.
#pragma unroll
    for (int t = 0; t < 8; ++t)
      wgmma_m64nNk16<kN>(acc, a[kBuf][t], kmajor_descriptor(b_addr + (t >> 2) * (kN * 128) + (t & 3) * 32));
    wgmma_commit();
  };

  int j = 0;
  for (; j + 1 < chunks; j += 2) {
    run_chunk(j, std::integral_constant<int, 0>{});
    run_chunk(j + 1, std::integral_constant<int, 1>{});
  }
  if (j < chunks) run_chunk(j, std::integral_constant<int, 0>{});
  wgmma_wait<0>();
  // Output i: the last segment's sums added to the total of the segments before it (a flush's addition, without
  // writing a shared-memory total back).
  auto result = [&](int i) {
    if constexpr (!kSplit)
      return acc[i];
    else
      return segment == 0                ? acc[i]
             : i < C::kRegisterTotals ? reg_total[i] + acc[i]
                                        : smem_total[(i - C::kRegisterTotals) * 256] + acc[i];
  };

  // Store: rows g / g + 8 of the warp's 16 (weight rows), columns 8 nt + 2 c + (i % 2) (x rows).
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
    const int64_t token = tok_tile + nt * 8 + 2 * c;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float v = result(4 * nt + i);
      const int64_t tk = token + (i & 1);
      const int h = i >> 1;
      if (tk < m_end && row_ok[h]) p.out[tk * p.out_stride + rows[h]] = v;
    }
  }
#else
  __trap();  // (built only for sm_90a; launch_prefill_wgmma checks the device)
#endif
}

// cuTensorMapEncodeTiled from the driver (through the runtime: no link to libcuda), or null.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2-D tensor map over [rows][row_bytes] of `base` (elements of elem_bytes), box box_elems x box_rows.
bool encode_map(CUtensorMap& map, const void* base, int elem_bytes, int64_t row_bytes, int64_t rows,
                int box_elems, int box_rows, bool swizzle_128b) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes / elem_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_elems), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode(&map, elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2,
             const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// The prepared x's map, boxes of x_rows rows (half a chunk of columns each).
bool encode_x_map(const Problem& p, const uint32_t* xp, int x_rows, CUtensorMap& map) {
  return encode_map(map, xp, 2, static_cast<int64_t>(p.chunks) * 256, p.m, 64, x_rows, true);
}

// The launch's tensor maps for tiles of x_rows x rows, or false when TMA cannot describe the arrays (a driver
// without the entry point, an address or a row length that is not a multiple of 16 bytes).
bool make_maps(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int x_rows,
               WgmmaMaps& maps) {
  const int64_t row_bytes = p.row_words * 4;
  const int64_t weight_rows = grouped.chunks != nullptr ? static_cast<int64_t>(grouped.experts) * p.n : p.n;
  if (row_bytes % 16 != 0 || weight_rows >= (int64_t{1} << 31) || p.m >= (int64_t{1} << 31)) return false;
  return encode_map(maps.weight, p.weight, 1, row_bytes, weight_rows, kChunk / 2, kTileN, false) &&
         encode_x_map(p, xp, x_rows, maps.x);
}

template <class F, int kN>
void launch_kernel(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t grid_x,
                   const WgmmaMaps& maps, WgmmaRows take, cudaStream_t stream) {
  auto run = [&](auto split) {
    constexpr bool kSplit = decltype(split)::value;
    using C = WgmmaConfig<F, kSplit, kN>;
    launch_prefill_tiles(prefill_wgmma_kernel<F, kSplit, kN>, C::kSmemBytes, C::kThreads, p, xp, grouped,
                         grid_x, stream, maps, take);
  };
  if (p.segments > 1)
    run(std::true_type{});
  else
    run(std::false_type{});
}

// Grouped launches give chunks of at most kSmallChunkRows rows (an expert's last, partly filled chunk, or a
// rarely chosen expert's only one) a second kernel of 32-row tiles, a quarter of the tensor-core work of a
// 128-row tile; the 128-row kernel skips them (the tuning table's prefill.small_chunk_kernel). 128 experts at
// top 8 and 2048 tokens (26B-A4B): ~128 pairs per expert, so about half the experts end with a chunk of a few
// rows (H200, 2026-12-01).
constexpr int kSmallChunkRows = 32;

// A plain launch of `tiles` x tiles of kN rows each on the kN-row instance. False (nothing enqueued) where
// TMA cannot describe the arrays, or for a format without that instance (96 rows: bf16 scales only).
template <int kN>
bool launch_plain(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t tiles,
                  cudaStream_t stream) {
  WgmmaMaps maps;
  if (!make_maps(p, xp, grouped, kN, maps)) return false;
  bool launched = false;
  with_q4_format(p, [&](auto f) {
    using F = decltype(f);
    if constexpr (kN != kNarrowTileRows || std::is_same_v<typename F::ScaleType, __nv_bfloat16>) {
      launch_kernel<F, kN>(p, xp, grouped, tiles, maps, WgmmaRows{0}, stream);
      launched = true;
    }
  });
  return launched;
}

}  // namespace

// Plain launches of one 128-row x tile (prompts of 33..128 tokens) run on the 32-row instance when its blocks
// still fit one wave: a block of 32 x rows does a quarter of the tensor-core work over the same weight tile,
// so the wave ends sooner (H200, 128-token prompts: E4B prefill +36 %, 26B-A4B +10 %). Same per-column
// chains, so the same bits. Not for several x tiles: the MoE router at 2048 tokens (16 blocks of 128 rows,
// which run beside the dense MLP on the routing stream) on 64 blocks of 32 made 26B-A4B's prefill 0.9 %
// slower.
int64_t prefill_short_tiles(const Problem& p, int64_t grid_x, int64_t sms, const CudaTuning::Prefill& rules) {
  if (!rules.short_tiles || grid_x != 1) return 0;
  const int64_t tiles = (p.m + kSmallChunkRows - 1) / kSmallChunkRows,
                row_tiles = (p.n + kTileN - 1) / kTileN;
  return tiles > 1 && tiles * row_tiles <= sms ? tiles : 0;
}

// Plain launches of at least one full wave of 128-row tiles whose last wave is partly filled run on 96-row x
// tiles where that takes less time by waves: a 96-row block dequantizes the same weight tile for three
// quarters of the tensor work and costs rules.narrow_tile_cost of a 128-row block (H200, whole waves of
// 8192 x 2816 and 20480 x 2560 at 2048 rows: 0.78-0.79). At 2048 rows an N = 1536 projection takes 192 blocks
// of 128 rows, 1.45 waves of 132 SMs, or 264 blocks of 96 rows, two full waves: 134 -> 111 us for E2B's
// 1536 x 6144 down projection, its prefill +4.8 % (same-run A/B on the H200, 2026-12-01). Launches under
// one wave keep 128-row tiles (the one-tile ones are prefill_short_tiles'): taking them too gave E4B at 512
// tokens +5.7 % but 26B-A4B -1.2 %, whose dense MLP runs beside the routing stream, so more blocks may take
// SMs from it (not profiled). Same per-column chains, so the same bits. rules.narrow_tiles kAlways takes
// 96-row tiles for every plain launch of more than one tile.
int64_t prefill_narrow_tiles(const Problem& p, int64_t grid_x, int64_t sms,
                             const CudaTuning::Prefill& rules) {
  if (rules.narrow_tiles == Choice::kNever || grid_x < 2) return 0;
  const int64_t tiles = (p.m + kNarrowTileRows - 1) / kNarrowTileRows,
                row_tiles = (p.n + kTileN - 1) / kTileN;
  if (tiles > 65535) return 0;  // (grid y holds at most 65535 tiles in the rows-first order)
  if (rules.narrow_tiles == Choice::kAlways) return tiles;
  const int64_t blocks = grid_x * row_tiles;
  if (blocks < sms) return 0;
  const auto waves = [&](int64_t n) { return static_cast<double>((n + sms - 1) / sms); };
  return waves(tiles * row_tiles) * rules.narrow_tile_cost < waves(blocks) ? tiles : 0;
}

int prefill_chunk_rows(const Problem& p) {
  const CudaTuning::Prefill& rules = tuning().prefill;
  const bool applies = rules.wide_chunks && p.format == WeightFormat::kQ4 && p.scale_dtype == DType::kBF16 &&
                       (p.row_words * 4) % 16 == 0 && rules.wgmma && device_is_sm90();
  return applies ? kWideChunkRows : kTileM;
}

bool launch_prefill_wgmma(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t grid_x,
                          cudaStream_t stream) {
  // 4-bit codes with 16-byte aligned rows only (the checkpoints' format): the other formats keep the mma.sync
  // kernel (instantiated for every format, this file grew the xz-compressed device bundle from 7 to 17 MB).
  const CudaTuning::Prefill& rules = tuning().prefill;
  if (p.format != WeightFormat::kQ4 || !rules.wgmma || !device_is_sm90()) return false;
  const bool grouping = grouped.chunks != nullptr;
  // Wide chunks (prefill_chunk_rows: bf16 scales only, the checkpoints' kind — every instance adds to the
  // device bundle) run on the 160-row instance, others on the 128-row one.
  const bool wide = grouping && grouped.chunk_rows > kTileM;
  if (wide && (grouped.chunk_rows != kWideChunkRows || p.scale_dtype != DType::kBF16)) return false;
  const bool small = grouping && rules.small_chunk_kernel;
  if (!grouping) {  // plain launches on other x tile heights (same bits)
    const int64_t sms = current_multiprocessors();
    if (const int64_t tiles = prefill_short_tiles(p, grid_x, sms, rules); tiles > 0)
      return launch_plain<kSmallChunkRows>(p, xp, grouped, tiles, stream);
    // (96-row tiles for bf16 scales only, the checkpoints' kind: every instance adds to the device bundle.)
    if (const int64_t tiles = p.scale_dtype == DType::kBF16 ? prefill_narrow_tiles(p, grid_x, sms, rules) : 0;
        tiles > 0)
      return launch_plain<kNarrowTileRows>(p, xp, grouped, tiles, stream);
  }
  WgmmaMaps maps, small_maps;
  if (!make_maps(p, xp, grouped, wide ? kWideChunkRows : kTileM, maps)) return false;
  if (small) {  // the same weight map; only the x boxes are shorter
    small_maps.weight = maps.weight;
    if (!encode_x_map(p, xp, kSmallChunkRows, small_maps.x)) return false;
  }
  const WgmmaRows big_rows{small ? kSmallChunkRows : 0};
  with_q4_format(p, [&](auto f) {
    using F = decltype(f);
    if constexpr (std::is_same_v<typename F::ScaleType, __nv_bfloat16>) {
      if (wide)
        launch_kernel<F, kWideChunkRows>(p, xp, grouped, grid_x, maps, big_rows, stream);
      else
        launch_kernel<F, kTileM>(p, xp, grouped, grid_x, maps, big_rows, stream);
    } else {
      launch_kernel<F, kTileM>(p, xp, grouped, grid_x, maps, big_rows, stream);
    }
    if (small) launch_kernel<F, kSmallChunkRows>(p, xp, grouped, grid_x, small_maps, WgmmaRows{0}, stream);
  });
  return true;
}

}  // namespace lmx::cuda::linear
