// Highway SIMD kernels for MLX affine-quantized weights, compiled once per x86 target and dispatched at
// run time: decode tiles that unpack codes in registers, prefill panels (dequantized once per pass) with
// f32 register tiles over them, the x column reordering of 4-bit weights, and row dequantization.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lmx/ops/cpu/quantized_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "lmx/core/half.h"
#include "lmx/ops/cpu/kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace lmx::ops::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;

// Register tiles. Decode tiles hold R*C accumulators plus per-row dequantization state (a table or a
// scale/bias pair) and R x vectors per step; prefill tiles hold R*C accumulators (as the dense tiles).
// Tile shapes only change speed: every shape performs the same per-output FMA sequence.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kDecodeCols1 = 8;  // weight rows per tile when it has one x row
constexpr int kDecodeCols = 4;   // ... with 2 or 4 x rows
constexpr int kPanelRows = 4;
constexpr int kPanelCols = 6;
#else
constexpr int kDecodeCols1 = 4;
constexpr int kDecodeCols = 2;
constexpr int kPanelRows = 3;
constexpr int kPanelCols = 4;
#endif
// Below this many x rows a block streams the codes (decode); from it on it dequantizes panels (prefill).
constexpr int64_t kPanelMinRows = 16;
// Columns per prefill pass (a multiple of every group size): one pass's panel of kPanelCols rows
// (24 KiB f32) stays in L1 while the block's x rows stream from L2.
constexpr int64_t kPanelK = 1024;
// __builtin_prefetch locality of the decode tiles' prefetches of the next tile (2: into L2).
constexpr int kPrefetchLocality = 2;
// Groups whose scales and biases are widened to f32 at once.
constexpr int64_t kGroupChunk = 64;
// Largest group size.
constexpr int kMaxGroup = 128;

// Widens `count` scale or bias values of dtype `type` from element `offset` of src to f32 (exactly).
void widen(const void* src, DType type, int64_t offset, int64_t count, float* dst) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (type == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(src) + offset, static_cast<size_t>(count) * sizeof(float));
    return;
  }
  const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
  int64_t i = 0;
  if (type == DType::kBF16) {
    const hn::Rebind<uint16_t, DF> dh;
    for (; i + lanes <= count; i += lanes)
      hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(dh, p + i)))), d, dst + i);
    for (; i < count; ++i) dst[i] = bf16_to_f32(p[i]);
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto* h = reinterpret_cast<const hwy::float16_t*>(p);
    for (; i + lanes <= count; i += lanes) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, h + i)), d, dst + i);
    for (; i < count; ++i) dst[i] = f16_to_f32(p[i]);
  }
}

// Codes [col0, col0 + count) of a row (col0 and count multiples of 32) into out (scalar; for embedding
// rows): each 32 codes are `Bits` whole words; code j of them sits at bit j*Bits (straddling when needed).
template <int Bits>
void unpack_codes(const uint32_t* row_words, int64_t col0, int count, uint32_t* out) {
  constexpr uint32_t kMask = (1u << Bits) - 1;
  for (int c = 0; c < count; c += 32) {
    const uint32_t* w = row_words + (col0 + c) / 32 * Bits;
#pragma GCC unroll 32
    for (int j = 0; j < 32; ++j) {
      const int bit = j * Bits, word = bit / 32, shift = bit % 32;
      uint32_t v = w[word] >> shift;
      if (shift + Bits > 32) v |= w[word + 1] << (32 - shift);
      out[c + j] = v & kMask;
    }
  }
}

void unpack_codes_any(int bits, const uint32_t* row_words, int64_t col0, int count, uint32_t* out) {
  switch (bits) {
    case 2:
      unpack_codes<2>(row_words, col0, count, out);
      break;
    case 3:
      unpack_codes<3>(row_words, col0, count, out);
      break;
    case 4:
      unpack_codes<4>(row_words, col0, count, out);
      break;
    case 5:
      unpack_codes<5>(row_words, col0, count, out);
      break;
    case 6:
      unpack_codes<6>(row_words, col0, count, out);
      break;
    default:
      unpack_codes<8>(row_words, col0, count, out);
      break;
  }
}

// ---- Row unpackers: one weight row's dequantized values, a step of columns at a time -----------------
// init(w, n) selects row n; begin_group(col0, scale, bias) enters the group starting at column col0;
// step(col, out) writes the kVectors vectors of columns [col, col + step_cols) in the kernel's column
// order. Every unpacker yields w = MulAdd(q, scale, bias) per element (fma(scale, q, bias) on FMA targets).

// 4-bit: a step is 2L columns (L bytes): out[0] holds the even columns, out[1] the odd ones.
struct Unpack4 {
  static constexpr int kVectors = 2;
  static int64_t step_cols() { return 2 * static_cast<int64_t>(hn::Lanes(DF())); }
  const uint8_t* bytes = nullptr;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // 16 lanes: the group's 16 possible values form a table that vpermps indexes with the low 4 bits of
  // each byte (the bits above are ignored, so the low nibble needs no mask).
  VF table;
  void begin_group(int64_t, float scale, float bias) {
    const DF d;
    table = hn::MulAdd(hn::Iota(d, 0.0f), hn::Set(d, scale), hn::Set(d, bias));
  }
  HWY_INLINE void step(int64_t col, VF* out) const {
    const auto v = hn::PromoteTo(DU(), hn::LoadU(DU8(), bytes + col / 2));
    out[0] = VF{_mm512_permutexvar_ps(v.raw, table.raw)};
    out[1] = VF{_mm512_permutexvar_ps(hn::ShiftRight<4>(v).raw, table.raw)};
  }
#else
  VF scale_v, bias_v;
  void begin_group(int64_t, float scale, float bias) {
    scale_v = hn::Set(DF(), scale);
    bias_v = hn::Set(DF(), bias);
  }
  HWY_INLINE void step(int64_t col, VF* out) const {
    const DF d;
    const auto v = hn::PromoteTo(DU(), hn::LoadU(DU8(), bytes + col / 2));
    const VF lo = hn::ConvertTo(d, hn::BitCast(DI(), hn::And(v, hn::Set(DU(), 0xFu))));
    const VF hi = hn::ConvertTo(d, hn::BitCast(DI(), hn::ShiftRight<4>(v)));
    out[0] = hn::MulAdd(lo, scale_v, bias_v);
    out[1] = hn::MulAdd(hi, scale_v, bias_v);
  }
#endif
  void init(const QuantizedMatrix& w, int64_t n) {
    bytes = reinterpret_cast<const uint8_t*>(w.codes + n * w.words_per_row());
  }
};

// 8-bit: a step is L columns (L bytes), natural order.
struct Unpack8 {
  static constexpr int kVectors = 1;
  static int64_t step_cols() { return static_cast<int64_t>(hn::Lanes(DF())); }
  const uint8_t* bytes = nullptr;
  VF scale_v, bias_v;
  void init(const QuantizedMatrix& w, int64_t n) {
    bytes = reinterpret_cast<const uint8_t*>(w.codes + n * w.words_per_row());
  }
  void begin_group(int64_t, float scale, float bias) {
    scale_v = hn::Set(DF(), scale);
    bias_v = hn::Set(DF(), bias);
  }
  HWY_INLINE void step(int64_t col, VF* out) const {
    const DF d;
    const auto v = hn::PromoteTo(DU(), hn::LoadU(DU8(), bytes + col));
    out[0] = hn::MulAdd(hn::ConvertTo(d, hn::BitCast(DI(), v)), scale_v, bias_v);
  }
};

// 2, 3, 5 or 6 bits: a step is one 32-column chunk (Bits whole words), natural order, 32/L vectors.
// Code j of the chunk occupies bits [j*Bits, j*Bits + Bits), inside the two bytes starting at byte
// j*Bits/8 (its offset in the first byte plus Bits is at most 14). Per vector, the 16 bytes from the
// first one it needs are broadcast to every 128-bit block; a byte shuffle puts each lane's two bytes
// at its bottom, a per-lane shift and a mask leave the code. The group's words are first copied into a
// zero-padded buffer, so the loads never read past the codes.
template <int Bits>
struct UnpackBits {
  static constexpr int kLanes = HWY_LANES(float);
  static constexpr int kVectors = 32 / kLanes;
  static int64_t step_cols() { return 32; }
  const uint32_t* row_words = nullptr;
  int group_words = 0;
  int64_t col0 = 0;
  VF scale_v, bias_v;
  HWY_ALIGN uint32_t words[kMaxGroup * 6 / 32 + 8] = {};
  void init(const QuantizedMatrix& w, int64_t n) {
    row_words = w.codes + n * w.words_per_row();
    group_words = w.group_size * Bits / 32;
  }
  void begin_group(int64_t col, float scale, float bias) {
    col0 = col;
    std::memcpy(words, row_words + col / 32 * Bits, static_cast<size_t>(group_words) * sizeof(uint32_t));
    scale_v = hn::Set(DF(), scale);
    bias_v = hn::Set(DF(), bias);
  }
  HWY_INLINE void step(int64_t col, VF* out) const {
    const DF d;
    const DU du;
    const auto* chunk = reinterpret_cast<const uint8_t*>(words + (col - col0) / 32 * Bits);
    for (int v = 0; v < kVectors; ++v) {
      constexpr uint32_t kMask = (1u << Bits) - 1;
      const int first_bit = v * kLanes * Bits;
      hn::Vec<DU> code;
#if HWY_TARGET != HWY_SCALAR
      {
        const hn::Repartition<uint8_t, DU> d8;
        const auto bytes = hn::LoadDup128(d8, chunk + first_bit / 8);
        // Lane i's first bit, counted from that first byte; its two bytes; its shift within them.
        const auto bit = hn::Add(hn::Mul(hn::Iota(du, 0), hn::Set(du, Bits)), hn::Set(du, first_bit % 8));
        const auto byte = hn::ShiftRight<3>(bit);
        const auto select = hn::Or(byte, hn::ShiftLeft<8>(hn::Add(byte, hn::Set(du, 1))));
        const auto window = hn::BitCast(du, hn::TableLookupBytes(bytes, hn::BitCast(d8, select)));
        code = hn::And(window >> hn::And(bit, hn::Set(du, 7)), hn::Set(du, kMask));
      }
#else  // 1 lane
      {
        HWY_ALIGN uint32_t lanes[kLanes];
        for (int i = 0; i < kLanes; ++i) {
          const int bit = first_bit + i * Bits;
          lanes[i] = ((chunk[bit / 8] | static_cast<uint32_t>(chunk[bit / 8 + 1]) << 8) >> (bit % 8)) & kMask;
        }
        code = hn::Load(du, lanes);
      }
#endif
      out[v] = hn::MulAdd(hn::ConvertTo(d, hn::BitCast(DI(), code)), scale_v, bias_v);
    }
  }
};

// Calls fn(col0, scale, bias) for each group of the column range [k0, k0 + kn) (group aligned) of rows
// n..n+C-1, in column order: col0 is the group's first column; row n + c's scale and bias (widened to
// f32 a chunk of groups at a time) are scale[c * kGroupChunk] and bias[c * kGroupChunk].
template <int C, typename Fn>
HWY_INLINE void for_each_group(const QuantizedMatrix& w, int64_t n, int64_t k0, int64_t kn, Fn&& fn) {
  const int64_t groups = w.groups_per_row();
  const int64_t g_begin = k0 / w.group_size, g_end = (k0 + kn) / w.group_size;
  HWY_ALIGN float scales[C][kGroupChunk];
  HWY_ALIGN float biases[C][kGroupChunk];
  for (int64_t g0 = g_begin; g0 < g_end; g0 += kGroupChunk) {
    const int64_t gn = std::min(kGroupChunk, g_end - g0);
    for (int c = 0; c < C; ++c) {
      widen(w.scales, w.scale_dtype, (n + c) * groups + g0, gn, scales[c]);
      widen(w.biases, w.scale_dtype, (n + c) * groups + g0, gn, biases[c]);
    }
    for (int64_t gi = 0; gi < gn; ++gi) fn((g0 + gi) * w.group_size, &scales[0][gi], &biases[0][gi]);
  }
}

// ---- Decode: R x rows × C weight rows over the whole K, codes unpacked in registers ---------------------

// Prefetch hint for [address, address + bytes) into L2. The address may lie past the weight (the tile after
// the last one): prefetches never fault, and the pointer is only formed as an integer.
HWY_INLINE void prefetch_bytes(uintptr_t address, int64_t bytes) {
  for (int64_t offset = 0; offset < bytes; offset += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(address + static_cast<uintptr_t>(offset)), 0,
                       kPrefetchLocality);
}

template <int R, int C, class U>
HWY_NOINLINE void decode_tile(const QuantizedLinearArgs& a, int64_t m, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const QuantizedMatrix& w = a.w;
  VF acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = hn::Zero(d);
  U u[C];
  for (int c = 0; c < C; ++c) u[c].init(w, n + c);
  const float* x = a.x + m * a.x_stride;
  // Decode streams each weight once: the tile fetches the next tile's rows (n + C ...) as it goes, at
  // the same columns, plus their scales and biases up front, so rows as short as 2 KiB stay ahead of
  // DRAM latency (the hardware prefetchers ramp up per row).
  const uint64_t row_bytes = static_cast<uint64_t>(w.words_per_row()) * 4;
  const int64_t group_bytes = w.group_size * w.bits / 8;
  const uintptr_t next_codes =
      reinterpret_cast<uintptr_t>(w.codes) + static_cast<uint64_t>(n + C) * row_bytes;
  {
    const int64_t sb_row = w.groups_per_row() * static_cast<int64_t>(dtype_size(w.scale_dtype));
    const uintptr_t offset = static_cast<uintptr_t>((n + C) * sb_row);
    prefetch_bytes(reinterpret_cast<uintptr_t>(w.scales) + offset, C * sb_row);
    prefetch_bytes(reinterpret_cast<uintptr_t>(w.biases) + offset, C * sb_row);
  }
  for_each_group<C>(w, n, 0, w.k, [&](int64_t col0, const float* s, const float* b) {
    for (int c = 0; c < C; ++c) u[c].begin_group(col0, s[c * kGroupChunk], b[c * kGroupChunk]);
    // The next tile's cache lines that start inside this group's bytes (none for most groups under 64 B).
    const uint64_t first = static_cast<uint64_t>(col0) * static_cast<uint64_t>(w.bits) / 8;
    const uint64_t line = (first + 63) / 64 * 64, end = first + static_cast<uint64_t>(group_bytes);
    if (line < end) {
      for (int c = 0; c < C; ++c)
        prefetch_bytes(next_codes + c * row_bytes + line, static_cast<int64_t>(end - line));
    }
    for (int64_t col = col0; col < col0 + w.group_size; col += U::step_cols()) {
      VF xv[R][U::kVectors];
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < U::kVectors; ++v) xv[r][v] = hn::LoadU(d, x + r * a.x_stride + col + v * lanes);
      for (int c = 0; c < C; ++c) {
        VF wv[U::kVectors];
        u[c].step(col, wv);
        for (int v = 0; v < U::kVectors; ++v)
          for (int r = 0; r < R; ++r) acc[r][c] = hn::MulAdd(wv[v], xv[r][v], acc[r][c]);
      }
    }
  });
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a.out[(m + r) * a.out_stride + n + c] = hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
}

template <int R, class U>
void decode_rows(const QuantizedLinearArgs& a, int64_t m, int64_t n0, int64_t n1) {
  constexpr int kCols = R == 1 ? kDecodeCols1 : kDecodeCols;
  int64_t n = n0;
  for (; n + kCols <= n1; n += kCols) decode_tile<R, kCols, U>(a, m, n);
  for (; n < n1; ++n) decode_tile<R, 1, U>(a, m, n);
}

// kPairs: whether 2-row tiles are instantiated (else pairs of rows run as single rows: the fast paths
// get them, the other widths keep fewer template instances).
template <class U, bool kPairs>
void decode_block(const QuantizedLinearArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  int64_t m = m0;
  for (; m + 4 <= m1; m += 4) decode_rows<4, U>(a, m, n0, n1);
  if constexpr (kPairs) {
    for (; m + 2 <= m1; m += 2) decode_rows<2, U>(a, m, n0, n1);
  }
  for (; m < m1; ++m) decode_rows<1, U>(a, m, n0, n1);
}

// ---- Prefill: dequantized panels and f32 register tiles -------------------------------------------------

// Rows [n0, n1) × columns [k0, k0 + kn) of w, dequantized into panel (row stride kn) in kernel order.
template <class U>
void dequantize_panel(const QuantizedMatrix& w, int64_t n0, int64_t n1, int64_t k0, int64_t kn,
                      float* panel) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t n = n0; n < n1; ++n) {
    U u;
    u.init(w, n);
    float* row = panel + (n - n0) * kn;  // column k0 of row n
    for_each_group<1>(w, n, k0, kn, [&](int64_t col0, const float* s, const float* b) {
      u.begin_group(col0, s[0], b[0]);
      for (int64_t col = col0; col < col0 + w.group_size; col += U::step_cols()) {
        VF wv[U::kVectors];
        u.step(col, wv);
        for (int v = 0; v < U::kVectors; ++v) hn::StoreU(wv[v], d, row + (col - k0) + v * lanes);
      }
    });
  }
}

// One f32 tile over a panel pass of n columns (a multiple of L): rows x[0..R) and panel rows [0..C).
struct PanelTileArgs {
  const float* x;  // column k0 of the first x row
  int64_t ldx;
  const float* w;  // first panel row of the tile
  int64_t ldw;
  int64_t n;
  bool first, last;  // accumulators start at zero / the pass reaching K writes out
  float* acc;        // R*C vectors carried between passes
  float* out;
  int64_t ldo;
};

template <int R, int C>
HWY_NOINLINE void panel_tile(const PanelTileArgs& a) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = a.first ? hn::Zero(d) : hn::LoadU(d, a.acc + (r * C + c) * lanes);
  for (int64_t k = 0; k < a.n; k += lanes) {
    VF xv[R];
    for (int r = 0; r < R; ++r) xv[r] = hn::LoadU(d, a.x + r * a.ldx + k);
    for (int c = 0; c < C; ++c) {
      const VF wv = hn::LoadU(d, a.w + c * a.ldw + k);
      for (int r = 0; r < R; ++r) acc[r][c] = hn::MulAdd(wv, xv[r], acc[r][c]);
    }
  }
  if (!a.last) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) hn::StoreU(acc[r][c], d, a.acc + (r * C + c) * lanes);
    return;
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a.out[r * a.ldo + c] = hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
}

using PanelTileFn = void (*)(const PanelTileArgs&);

template <int R>
PanelTileFn panel_tile_fn(int cols) {
  return cols == kPanelCols ? &panel_tile<R, kPanelCols> : &panel_tile<R, 1>;
}
PanelTileFn panel_tile_fn(int rows, int cols) {
  static_assert(kPanelRows == 3 || kPanelRows == 4);
  switch (rows) {
    case 1:
      return panel_tile_fn<1>(cols);
    case 2:
      return panel_tile_fn<2>(cols);
    case 3:
      return panel_tile_fn<3>(cols);
    default:
      return panel_tile_fn<kPanelRows>(cols);
  }
}

template <class U>
void panel_block(const QuantizedLinearArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t k = a.w.k;
  const int64_t rows_m = m1 - m0, rows_n = n1 - n0;
  // Column tiles: full kPanelCols tiles, then single rows; row tiles of kPanelRows, then the rest.
  const int64_t n_full = rows_n / kPanelCols * kPanelCols;
  const int64_t n_tiles = n_full / kPanelCols + (rows_n - n_full);
  const int64_t m_tiles = (rows_m + kPanelRows - 1) / kPanelRows;
  const int64_t tile_acc = kPanelRows * kPanelCols * lanes;
  thread_local std::vector<float> panel_buffer;
  thread_local std::vector<float> acc;
  panel_buffer.resize(static_cast<size_t>(rows_n * std::min(k, kPanelK)));
  if (k > kPanelK) acc.resize(static_cast<size_t>(m_tiles * n_tiles * tile_acc));
  for (int64_t k0 = 0; k0 < k; k0 += kPanelK) {
    const int64_t kn = std::min(kPanelK, k - k0);
    dequantize_panel<U>(a.w, n0, n1, k0, kn, panel_buffer.data());
    const bool first = k0 == 0, last = k0 + kn == k;
    for (int64_t nt = 0; nt < n_tiles; ++nt) {
      const int64_t n = nt < n_full / kPanelCols ? nt * kPanelCols : n_full + (nt - n_full / kPanelCols);
      const int cols = n < n_full ? kPanelCols : 1;
      for (int64_t mt = 0; mt < m_tiles; ++mt) {
        const int64_t m = m0 + mt * kPanelRows;
        const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, m1 - m));
        PanelTileArgs t{a.x + m * a.x_stride + k0,
                        a.x_stride,
                        panel_buffer.data() + n * kn,
                        kn,
                        kn,
                        first,
                        last,
                        acc.empty() ? nullptr : acc.data() + (mt * n_tiles + nt) * tile_acc,
                        a.out + m * a.out_stride + n0 + n,
                        a.out_stride};
        panel_tile_fn(rows, cols)(t);
      }
    }
  }
}

template <class U, bool kPairs>
void block_for(const QuantizedLinearArgs& a, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 >= kPanelMinRows) {
    panel_block<U>(a, m0, m1, n0, n1);
  } else {
    decode_block<U, kPairs>(a, m0, m1, n0, n1);
  }
}

void quantized_linear_block_impl(const QuantizedLinearArgs& a, int64_t m0, int64_t m1, int64_t n0,
                                 int64_t n1) {
  if (m1 <= m0 || n1 <= n0) return;
  switch (a.w.bits) {
    case 4:
      block_for<Unpack4, true>(a, m0, m1, n0, n1);
      break;
    case 8:
      block_for<Unpack8, true>(a, m0, m1, n0, n1);
      break;
    case 2:
      block_for<UnpackBits<2>, false>(a, m0, m1, n0, n1);
      break;
    case 3:
      block_for<UnpackBits<3>, false>(a, m0, m1, n0, n1);
      break;
    case 5:
      block_for<UnpackBits<5>, false>(a, m0, m1, n0, n1);
      break;
    default:
      block_for<UnpackBits<6>, false>(a, m0, m1, n0, n1);
      break;
  }
}

bool quantized_reorders_columns_impl(int bits) {
  return bits == 4;
}

void quantized_prepare_x_impl(const float* x, int64_t x_stride, int64_t rows, int64_t k, int bits,
                              float* out) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * x_stride;
    float* dst = out + r * k;
    if (bits != 4) {
      std::copy_n(src, k, dst);
      continue;
    }
    for (int64_t b = 0; b < k; b += 2 * lanes)
      for (int64_t i = 0; i < lanes; ++i) {
        dst[b + i] = src[b + 2 * i];
        dst[b + lanes + i] = src[b + 2 * i + 1];
      }
  }
}

void quantized_dequantize_row_impl(const QuantizedMatrix& w, int64_t row, float mul, float* out) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const uint32_t* words = w.codes + row * w.words_per_row();
  const VF mul_v = hn::Set(d, mul);
  HWY_ALIGN uint32_t codes[kMaxGroup];
  for_each_group<1>(w, row, 0, w.k, [&](int64_t col0, const float* s, const float* b) {
    unpack_codes_any(w.bits, words, col0, w.group_size, codes);
    const VF scale = hn::Set(d, s[0]), bias = hn::Set(d, b[0]);
    for (int64_t j = 0; j < w.group_size; j += lanes) {
      const VF q = hn::ConvertTo(d, hn::BitCast(DI(), hn::Load(DU(), codes + j)));
      hn::StoreU(hn::Mul(hn::MulAdd(q, scale, bias), mul_v), d, out + col0 + j);
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace lmx::ops::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lmx::ops::cpu {

HWY_EXPORT(quantized_linear_block_impl);
HWY_EXPORT(quantized_reorders_columns_impl);
HWY_EXPORT(quantized_prepare_x_impl);
HWY_EXPORT(quantized_dequantize_row_impl);

void quantized_f32_block(const QuantizedLinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  HWY_DYNAMIC_DISPATCH(quantized_linear_block_impl)(args, m0, m1, n0, n1);
}

bool quantized_reorders_columns(int bits) {
  return HWY_DYNAMIC_DISPATCH(quantized_reorders_columns_impl)(bits);
}

void quantized_prepare_x(const float* x, int64_t x_stride, int64_t rows, int64_t k, int bits, float* out) {
  HWY_DYNAMIC_DISPATCH(quantized_prepare_x_impl)(x, x_stride, rows, k, bits, out);
}

void quantized_dequantize_row(const QuantizedMatrix& w, int64_t row, float mul, float* out) {
  HWY_DYNAMIC_DISPATCH(quantized_dequantize_row_impl)(w, row, mul, out);
}

}  // namespace lmx::ops::cpu
#endif  // HWY_ONCE
