// Highway SIMD kernels, compiled once per x86 target and dispatched at run time: linear tiles
// (bf16/f32 weights, f32 accumulation), dot and axpy.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lmx/ops/cpu/simd_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/ops.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace lmx::ops::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Largest f32 lane count of any target (2048-bit vectors); sizes the zero-padded tail buffers.
constexpr int kMaxLanes = 64;
// Register tile: up to kTileRows rows of x times kTileCols rows of w, sized so the R*C accumulators
// plus R x vectors and one w vector fit the target's vector registers (32 with AVX-512, else 16).
// Tile shapes only change speed: the per-output reduction order is the same for every shape.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kTileRows = 4;
constexpr int kTileCols = 6;
#else
constexpr int kTileRows = 3;
constexpr int kTileCols = 4;
#endif
// Single-row (GEMV) tiles take this many weight rows at once: independent FMA chains and streams.
constexpr int kGemvCols = 8;
// Columns of K per pass of the batched path (a multiple of every target's lane count): one
// kTileCols-row weight panel (24 KiB f32) stays in L1 while the block's x rows stream from L2.
constexpr int64_t kKBlock = 1024;
// From this many x rows on (compute-bound), a block widens its bf16 weights to f32 once per K pass
// and reuses them for all its x rows; below it (memory-bound), tiles stream the stored weights.
constexpr int64_t kBatchedMinRows = 16;

HWY_INLINE VF load_weights(DF d, const float* p) {
  return hn::LoadU(d, p);
}
HWY_INLINE VF load_weights(DF d, const uint16_t* p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> dh;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, p))));
}

HWY_INLINE float widen_scalar(float v) {
  return v;
}
HWY_INLINE float widen_scalar(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One register tile: rows x[0..R) and w[0..C) over the K range [k0, k0 + n) of the full K.
struct TileArgs {
  const float* x;  // points at column k0 of the first x row
  int64_t ldx;
  const void* w;  // points at column k0 of the first w row (float or bf16 bits)
  int64_t ldw;
  int64_t n;   // columns in this pass; k0 is a multiple of the lane count
  bool first;  // accumulators start at zero (else they are loaded from acc)
  bool last;   // the pass reaching K: add the zero-padded tail, reduce, write out
  float* acc;  // R*C vectors carried between passes (unused when first && last)
  float* out;  // out[r * ldo + c]
  int64_t ldo;
};

// The reduction order documented in kernels.h lives here and only here: every (R, C) instance
// performs, per output, the same FMA sequence on the same lane layout.
template <int R, int C, typename W>
HWY_NOINLINE void tile(const TileArgs& a) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const W* w = static_cast<const W*>(a.w);
  VF acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = a.first ? hn::Zero(d) : hn::LoadU(d, a.acc + (r * C + c) * lanes);
  const int64_t n_full = a.n - a.n % lanes;
  for (int64_t k = 0; k < n_full; k += lanes) {
    VF xv[R];
    for (int r = 0; r < R; ++r) xv[r] = hn::LoadU(d, a.x + r * a.ldx + k);
    for (int c = 0; c < C; ++c) {
      const VF wv = load_weights(d, w + c * a.ldw + k);
      for (int r = 0; r < R; ++r) acc[r][c] = hn::MulAdd(wv, xv[r], acc[r][c]);
    }
  }
  if (!a.last) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) hn::StoreU(acc[r][c], d, a.acc + (r * C + c) * lanes);
    return;
  }
  const int64_t rem = a.n - n_full;
  if (rem > 0) {
    HWY_ALIGN float xt[R][kMaxLanes] = {};
    HWY_ALIGN float wt[C][kMaxLanes] = {};
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < rem; ++i) xt[r][i] = a.x[r * a.ldx + n_full + i];
    for (int c = 0; c < C; ++c)
      for (int64_t i = 0; i < rem; ++i) wt[c][i] = widen_scalar(w[c * a.ldw + n_full + i]);
    for (int c = 0; c < C; ++c) {
      const VF wv = hn::Load(d, wt[c]);
      for (int r = 0; r < R; ++r) acc[r][c] = hn::MulAdd(wv, hn::Load(d, xt[r]), acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a.out[r * a.ldo + c] = hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
}

template <typename W>
using TileFn = void (*)(const TileArgs&);

// tile<R, C, W> for R in [1, kTileRows], C in [1, kTileCols] (up to kGemvCols when R == 1).
template <int R, int C, typename W>
constexpr TileFn<W> tile_entry() {
  if constexpr (C <= (R == 1 ? kGemvCols : kTileCols)) {
    return &tile<R, C, W>;
  } else {
    return nullptr;
  }
}
template <typename W, int R, int... C>
constexpr std::array<TileFn<W>, kGemvCols> tile_row(std::integer_sequence<int, C...>) {
  return {tile_entry<R, C + 1, W>()...};
}
template <typename W, int... R>
constexpr std::array<std::array<TileFn<W>, kGemvCols>, kTileRows> tile_table(
    std::integer_sequence<int, R...>) {
  return {tile_row<W, R + 1>(std::make_integer_sequence<int, kGemvCols>())...};
}
template <typename W>
TileFn<W> tile_fn(int rows, int cols) {
  static constexpr auto kTable = tile_table<W>(std::make_integer_sequence<int, kTileRows>());
  return kTable[static_cast<size_t>(rows - 1)][static_cast<size_t>(cols - 1)];
}

// Few rows of x: every tile runs over the whole K straight from the stored weights.
template <typename W>
void block_direct(const LinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const W* w = static_cast<const W*>(args.w);
  for (int64_t m = m0; m < m1; m += kTileRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m1 - m));
    const int max_cols = rows == 1 ? kGemvCols : kTileCols;
    for (int64_t n = n0; n < n1; n += max_cols) {
      const int cols = static_cast<int>(std::min<int64_t>(max_cols, n1 - n));
      TileArgs t{args.x + m * args.x_stride,
                 args.x_stride,
                 w + n * args.w_stride,
                 args.w_stride,
                 args.k,
                 true,
                 true,
                 nullptr,
                 args.out + m * args.out_stride + n,
                 args.out_stride};
      tile_fn<W>(rows, cols)(t);
    }
  }
}

// Many rows of x: K in passes of kKBlock; per pass the block's weight rows (widened to f32 once
// when bf16) are walked kTileCols at a time, each panel reused by every x row tile of the block.
void block_batched(const LinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t k = args.k;
  const int64_t rows_m = m1 - m0, rows_n = n1 - n0;
  const int64_t m_tiles = (rows_m + kTileRows - 1) / kTileRows;
  const int64_t n_tiles = (rows_n + kTileCols - 1) / kTileCols;
  const int64_t tile_acc = kTileRows * kTileCols * lanes;
  thread_local std::vector<float> widened;
  thread_local std::vector<float> acc;
  if (k > kKBlock) acc.resize(static_cast<size_t>(m_tiles * n_tiles * tile_acc));
  float* widened_rows = nullptr;  // 64-byte aligned start inside `widened`
  if (args.w_bf16) {
    widened.resize(static_cast<size_t>(rows_n * std::min(k, kKBlock) + 16));
    const auto address = reinterpret_cast<uintptr_t>(widened.data());
    widened_rows = widened.data() + ((64 - address % 64) % 64) / sizeof(float);
  }
  for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
    const int64_t kn = std::min(kKBlock, k - k0);
    const float* panel;
    int64_t ldw;
    if (args.w_bf16) {
      const auto* w = static_cast<const uint16_t*>(args.w);
      const hn::RebindToUnsigned<DF> du;
      const hn::Rebind<uint16_t, DF> dh;
      const int64_t kn_full = kn - kn % lanes;
      for (int64_t r = 0; r < rows_n; ++r) {
        const uint16_t* src = w + (n0 + r) * args.w_stride + k0;
        float* dst = widened_rows + r * kn;
        int64_t i = 0;
        for (; i < kn_full; i += lanes)
          hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, src + i)))), d,
                     dst + i);
        for (; i < kn; ++i) dst[i] = widen_scalar(src[i]);
      }
      panel = widened_rows;
      ldw = kn;
    } else {
      panel = static_cast<const float*>(args.w) + n0 * args.w_stride + k0;
      ldw = args.w_stride;
    }
    const bool first = k0 == 0, last = k0 + kn == k;
    for (int64_t nt = 0; nt < n_tiles; ++nt) {
      const int64_t n = nt * kTileCols;
      const int cols = static_cast<int>(std::min<int64_t>(kTileCols, rows_n - n));
      for (int64_t mt = 0; mt < m_tiles; ++mt) {
        const int64_t m = m0 + mt * kTileRows;
        const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m1 - m));
        TileArgs t{args.x + m * args.x_stride + k0,
                   args.x_stride,
                   panel + n * ldw,
                   ldw,
                   kn,
                   first,
                   last,
                   acc.empty() ? nullptr : acc.data() + (mt * n_tiles + nt) * tile_acc,
                   args.out + m * args.out_stride + n0 + n,
                   args.out_stride};
        tile_fn<float>(rows, cols)(t);
      }
    }
  }
}

void linear_block_impl(const LinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 <= m0 || n1 <= n0) return;
  if (m1 - m0 >= kBatchedMinRows) {
    block_batched(args, m0, m1, n0, n1);
  } else if (args.w_bf16) {
    block_direct<uint16_t>(args, m0, m1, n0, n1);
  } else {
    block_direct<float>(args, m0, m1, n0, n1);
  }
}

float dot_impl(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * lanes), hn::LoadU(d, b + i + 2 * lanes), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * lanes), hn::LoadU(d, b + i + 3 * lanes), s3);
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_impl(float alpha, const float* x, float* y, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void axpy_bf16_impl(float alpha, const uint16_t* x, float* y, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::MulAdd(va, load_weights(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += alpha * widen_scalar(x[i]);
}

int64_t target_impl() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace lmx::ops::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmx::ops::cpu {

HWY_EXPORT(linear_block_impl);
HWY_EXPORT(dot_impl);
HWY_EXPORT(axpy_impl);
HWY_EXPORT(axpy_bf16_impl);
HWY_EXPORT(target_impl);

void linear_block(const LinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  HWY_DYNAMIC_DISPATCH(linear_block_impl)(args, m0, m1, n0, n1);
}

float dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(dot_impl)(a, b, n);
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(axpy_impl)(alpha, x, y, n);
}

void axpy(float alpha, const uint16_t* x_bf16, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(axpy_bf16_impl)(alpha, x_bf16, y, n);
}

}  // namespace lmx::ops::cpu

namespace lmx::ops {

std::string simd_target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(cpu::target_impl)()); }

std::vector<std::string> simd_target_names() {
  std::vector<std::string> names;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) names.emplace_back(hwy::TargetName(target));
  return names;
}

}  // namespace lmx::ops
#endif  // HWY_ONCE
