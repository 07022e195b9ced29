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
// layout (PrefillStageCopies<F, true>). A fragments are double-buffered across chunks: the warp dequantizes
// chunk j + 1 while chunk j's wgmmas run. The cp.async pipeline runs kStages - 2 chunks ahead, so that a
// stage is refilled only after both warpgroups' wgmmas that read it have completed.
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/launch.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"

namespace lmx::cuda::linear {
namespace {

template <class F, bool kSplit>
struct WgmmaConfig {
  static constexpr int kABytes = PrefillConfig<F>::kABytes;
  static constexpr int kBBytes = kTileM * 256;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kTotalBytes = kSplit ? 64 * 256 * 4 : 0;  // segment totals, as the mma.sync kernel's
  static constexpr int kMaxSmem = 227 * 1024;
  static constexpr int kStages = 4 * kStageBytes + kTotalBytes <= kMaxSmem ? 4 : 3;
  static constexpr int kSmemBytes = kStages * kStageBytes + kTotalBytes;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LMX_HAS_WGMMA 1

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
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Makes the generic-proxy writes to shared memory (the cp.async copies) visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Descriptor of a K-major B operand in the 128-byte swizzled layout (PrefillStageCopies<F, true>): the k16
// step's first bytes at `address` (within a 1024-byte aligned block of 8 rows x 128 bytes), the next 8 rows
// 1024 bytes on (the stride byte offset; the leading one is unused by this layout), swizzle mode 1 (128 B).
__device__ __forceinline__ uint64_t b_descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (uint64_t{1} << 62);
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

template <class F, bool kSplit>
__global__ void __launch_bounds__(256, 1)
    prefill_wgmma_kernel(const Problem p, const uint32_t* xp, const PrefillChunks grouped) {
#if defined(LMX_HAS_WGMMA)
  wait_for_prior_kernels();
  allow_next_kernel();
  PrefillTile tile;
  if (!prefill_tile(p, grouped, tile)) return;
  const int64_t tok_tile = tile.tok_tile, m_end = tile.m_end, expert_row0 = tile.expert_row0;
  using C = WgmmaConfig<F, kSplit>;
  constexpr int kStages = C::kStages;
  constexpr int kSlots = F::kScaleSlots > 0 ? F::kScaleSlots : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row_tile = static_cast<int64_t>(blockIdx.y) * kTileN;
  const uint32_t smem_base = smem_address(smem);
  if ((smem_base & 1023) != 0) __trap();  // the swizzled B blocks need 1024-byte alignment

  // This lane's weight rows: warpgroup warp / 4, its warp warp % 4, half h → local row 16 warp + 8 h + g.
  int64_t rows[2];
  bool row_ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows[h] = row_tile + 16 * warp + 8 * h + g;
    row_ok[h] = rows[h] < p.n;
  }

  const PrefillStageCopies<F, true> copies(p, xp, expert_row0, row_tile, tok_tile, m_end);
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  float* total = reinterpret_cast<float*>(smem + kStages * C::kStageBytes) + tid;  // [64][256]

  const int chunks = p.chunks;
  constexpr int kAhead = kStages - 2;  // chunks in flight beyond the one being computed
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < chunks) copies.load(s, smem_base + s * C::kStageBytes);
    cp_async_commit();
  }

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
  auto flush_segment = [&] {
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      float* slot = total + i * 256;
      *slot = segment == 0 ? acc[i] : *slot + acc[i];
      acc[i] = 0.0f;
    }
    ++segment;
    segment_end = segment_begin(segment + 1, p.segments, chunks);
  };

  // Chunk j with A buffer kBuf (= j % 2: register arrays need compile-time indices).
  auto run_chunk = [&](int j, auto buf) {
    constexpr int kBuf = decltype(buf)::value;
    wgmma_wait<1>();  // this warpgroup's chunk j - 2 is done: its A buffer (this one) and its stage are free
    cp_async_wait<kAhead - 1>();  // this thread's copies of chunk j landed
    fence_async_shared();
    __syncthreads();  // every copy of chunk j landed; both warpgroups are past chunk j - 2
    {
      const int next = j + kAhead;  // into the stage of chunk j - 2
      if (next < chunks) copies.load(next, smem_base + (next % kStages) * C::kStageBytes);
      cp_async_commit();
    }
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
      wgmma_m64n128k16(acc, a[kBuf][t], b_descriptor(b_addr + (t >> 2) * (kTileM * 128) + (t & 3) * 32));
    wgmma_commit();
  };

  int j = 0;
  for (; j + 1 < chunks; j += 2) {
    run_chunk(j, std::integral_constant<int, 0>{});
    run_chunk(j + 1, std::integral_constant<int, 1>{});
  }
  if (j < chunks) run_chunk(j, std::integral_constant<int, 0>{});
  wgmma_wait<0>();
  if constexpr (kSplit) flush_segment();  // the last segment
  cp_async_wait<0>();

  // Store: rows g / g + 8 of the warp's 16 (weight rows), columns 8 nt + 2 c + (i % 2) (x rows).
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
    const int64_t token = tok_tile + nt * 8 + 2 * c;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float v = kSplit ? total[(4 * nt + i) * 256] : acc[4 * nt + i];
      const int64_t tk = token + (i & 1);
      const int h = i >> 1;
      if (tk < m_end && row_ok[h]) p.out[tk * p.out_stride + rows[h]] = v;
    }
  }
#else
  __trap();  // (built only for sm_90a; launch_prefill_wgmma checks the device)
#endif
}

bool wgmma_enabled() {
  static const bool enabled = env_flag_on("LMX_PREFILL_WGMMA");
  return enabled;
}

// Whether the current device runs sm_90a code (compute capability 9.0 exactly).
bool device_is_sm90() {
  int device = 0;
  LMX_CUDA_CHECK(cudaGetDevice(&device));
  int major = 0, minor = 0;
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

template <class F, bool kSplit>
void launch_kernel(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t grid_x,
                   cudaStream_t stream) {
  launch_prefill_tiles(prefill_wgmma_kernel<F, kSplit>, WgmmaConfig<F, kSplit>::kSmemBytes, p, xp, grouped,
                       grid_x, stream);
}

}  // namespace

bool launch_prefill_wgmma(const Problem& p, const uint32_t* xp, const PrefillChunks& grouped, int64_t grid_x,
                          cudaStream_t stream) {
  // 4-bit codes with 16-byte aligned rows only (the checkpoints' format): the other formats keep the mma.sync
  // kernel (instantiated for every format, this file grew the xz-compressed device bundle from 7 to 17 MB).
  if (p.format != WeightFormat::kQ4 || !wgmma_enabled() || !device_is_sm90()) return false;
  with_q4_format(p, [&](auto f) {
    using F = decltype(f);
    if (p.segments > 1)
      launch_kernel<F, true>(p, xp, grouped, grid_x, stream);
    else
      launch_kernel<F, false>(p, xp, grouped, grid_x, stream);
  });
  return true;
}

}  // namespace lmx::cuda::linear
