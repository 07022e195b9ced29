// Probe: does Hopper's warpgroup MMA (wgmma, sm_90a) give the bits of a chain of mma.sync m16n8k16 over the
// same K steps? The batch-1 GEMVs and the prefill GEMM must agree bit for bit (batch invariance,
// linear_tiles.cuh), and they run mma.sync today; a wgmma prefill kernel can keep that contract only if
// the answer is yes. For `trials` random problems D[64, 8] = A[64, K] · B[8, K]ᵀ (bf16 in, f32 accumulate,
// K = 16 * steps, C starting at +0), one warpgroup computes D both ways — wgmma m64n8k16 with A from
// registers and B from shared memory (no swizzle), and each warp's mma.sync chain on its 16 rows — and
// the host compares the two bit for bit and against an f64 reference. Values span 2^-12 .. 2^12 in
// magnitude, so that any difference in rounding or summation order inside a K step shows.
// Usage: wgmma_probe [steps [trials]]   (default 160 steps = K 2560, 50 trials; exit status 1 on a mismatch)
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/sm90a/wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kM = 64, kN = 8;

__device__ __forceinline__ uint32_t load_pair(const uint16_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 16);
}

// Matrix descriptor of a K-major, unswizzled shared-memory operand: start address, leading- and
// stride-dimension byte offsets (both 128 here: the second 8 x 8 core matrix, K 8..15, sits 128 bytes after
// the first whichever field the hardware reads for it; with N = 8 there is no second core matrix along N).
__device__ __forceinline__ uint64_t smem_descriptor(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32);
}

// a: A [64, K] bf16 row-major; b: B [8, K] bf16 row-major (K-major); out_wgmma, out_mma: D [64, 8] f32.
__global__ void __launch_bounds__(128)
    probe_kernel(const uint16_t* a, const uint16_t* b, int steps, float* out_wgmma, float* out_mma) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128)
      uint16_t bs[];  // per step: core matrix K 0..7, then K 8..15 (8 rows of 16 B)
  const int k = 16 * steps;
  for (int i = threadIdx.x; i < steps * 128; i += blockDim.x) {
    const int s = i / 128, r = i % 128, core = r / 64, n = (r % 64) / 8, e = r % 8;
    bs[i] = b[n * k + 16 * s + 8 * core + e];
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const uint16_t* a0 = a + (16 * warp + g) * k;  // rows g and g + 8 of this warp's 16
  const uint16_t* a1 = a0 + 8 * k;
  float dw[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s = 0; s < steps; ++s) {
    const int k0 = 16 * s + 2 * c;
    const uint32_t fa[4] = {load_pair(a0 + k0), load_pair(a1 + k0), load_pair(a0 + k0 + 8),
                            load_pair(a1 + k0 + 8)};
    // mma.sync: B fragment (k 2c, 2c+1 | 2c+8, 2c+9; column n = g).
    const uint32_t b0 = load_pair(b + g * k + k0), b1 = load_pair(b + g * k + k0 + 8);
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(dm[0]), "+f"(dm[1]), "+f"(dm[2]), "+f"(dm[3])
        : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(b0), "r"(b1));
    // wgmma: the same A fragment per warp (its 16 rows of the 64), B from shared memory.
    const uint64_t desc = smem_descriptor(bs + s * 128, 128, 128);
    lmx::cuda::sm90a::wgmma_fence();
    lmx::cuda::sm90a::wgmma_rs_m64n8k16(dw, fa, desc);  // D += A·B, B K-major
    lmx::cuda::sm90a::wgmma_commit();
    lmx::cuda::sm90a::wgmma_wait<0>();
  }
  // D fragment: rows g / g + 8 of the warp's 16, columns 2c, 2c + 1 (both instructions).
  const int r0 = 16 * warp + g;
  for (int i = 0; i < 4; ++i) {
    const int row = r0 + (i >> 1) * 8, col = 2 * c + (i & 1);
    out_wgmma[row * kN + col] = dw[i];
    out_mma[row * kN + col] = dm[i];
  }
#endif
}

uint16_t to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);  // values are generated exact in bf16
}
double from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 160;
  const int trials = argc > 2 ? std::atoi(argv[2]) : 50;
  if (steps < 1 || steps > 512 || trials < 1) {
    fmt::print(stderr, "usage: wgmma_probe [steps (1..512) [trials]]\n");
    return 2;
  }
  int major = 0, minor = 0;
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  LMX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  if (major != 9 || minor != 0) {
    fmt::print(stderr, "wgmma_probe: needs an sm_90 device (this one is sm_{}{})\n", major, minor);
    return 2;
  }
  const int k = 16 * steps;
  const size_t smem = static_cast<size_t>(steps) * 256;
  LMX_CUDA_CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  auto value = [&] { return to_bf16(std::ldexp(normal(rng), exponent(rng))); };
  uint16_t *da = nullptr, *db = nullptr;
  float *dw = nullptr, *dm = nullptr;
  LMX_CUDA_CHECK(cudaMalloc(&da, kM * k * 2));
  LMX_CUDA_CHECK(cudaMalloc(&db, kN * k * 2));
  LMX_CUDA_CHECK(cudaMalloc(&dw, kM * kN * 4));
  LMX_CUDA_CHECK(cudaMalloc(&dm, kM * kN * 4));
  long mismatches = 0, outputs = 0;
  double worst_wgmma = 0, worst_mma = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<uint16_t> a(static_cast<size_t>(kM) * k), b(static_cast<size_t>(kN) * k);
    for (auto& v : a) v = value();
    for (auto& v : b) v = value();
    LMX_CUDA_CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
    LMX_CUDA_CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    LMX_CUDA_CHECK(cudaMemset(dw, 0xFF, kM * kN * 4));
    LMX_CUDA_CHECK(cudaMemset(dm, 0xFF, kM * kN * 4));
    probe_kernel<<<1, 128, smem>>>(da, db, steps, dw, dm);
    LMX_CUDA_CHECK(cudaGetLastError());
    std::vector<float> w(kM * kN), m(kM * kN);
    LMX_CUDA_CHECK(cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost));
    LMX_CUDA_CHECK(cudaMemcpy(m.data(), dm, m.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j) {
        double ref = 0, mag = 0;
        for (int kk = 0; kk < k; ++kk) {
          const double p =
              from_bf16(a[static_cast<size_t>(i) * k + kk]) * from_bf16(b[static_cast<size_t>(j) * k + kk]);
          ref += p;
          mag += std::fabs(p);
        }
        const float vw = w[i * kN + j], vm = m[i * kN + j];
        uint32_t bw, bm;
        std::memcpy(&bw, &vw, 4);
        std::memcpy(&bm, &vm, 4);
        ++outputs;
        if (bw != bm) {
          if (mismatches < 5)
            fmt::print("trial {} D[{}, {}]: wgmma {:a} mma.sync {:a} (f64 {:a})\n", t, i, j, vw, vm, ref);
          ++mismatches;
        }
        worst_wgmma = std::max(worst_wgmma, std::fabs(vw - ref) / mag);
        worst_mma = std::max(worst_mma, std::fabs(vm - ref) / mag);
      }
  }
  fmt::print(
      "K {} ({} steps), {} trials: {} of {} outputs differ between wgmma and mma.sync; worst |error| / "
      "sum |products|: wgmma {:.3g}, mma.sync {:.3g}\n",
      k, steps, trials, mismatches, outputs, worst_wgmma, worst_mma);
  return mismatches == 0 && worst_wgmma < 1e-3 ? 0 : 1;
}
