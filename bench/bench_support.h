// Shared by the bench programs: best-of timing and the machine's memory read bandwidth (the floor's
// denominator), measured the same way everywhere.
#pragma once

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace lmx::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best-of-`reps` seconds per call of fn, after one warm-up call; each rep runs fn `inner` times.
template <typename Fn>
double best_seconds(int reps, int inner, Fn fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < inner; ++i) fn();
    best = std::min(best, seconds_since(start) / inner);
  }
  return best;
}

// ---- Memory read bandwidth ------------------------------------------------------------------------------

using Line = uint64_t __attribute__((vector_size(64)));  // one 64-byte cache line

// Sums `lines` cache lines as `streams` interleaved independent streams (stream s covers the s-th
// contiguous part), each with its own accumulator: enough misses in flight, nothing else to wait on.
template <int kStreams>
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t sum_lines(const Line* p,
                                                                                int64_t lines) {
  const int64_t per = lines / kStreams;
  Line acc[kStreams] = {};
  for (int64_t i = 0; i < per; ++i)
    for (int s = 0; s < kStreams; ++s) acc[s] += p[s * per + i];
  uint64_t sum = 0;
  for (int s = 0; s < kStreams; ++s)
    for (int j = 0; j < 8; ++j) sum += acc[s][j];
  return sum;
}

struct Bandwidth {
  double gbs;
  int threads, streams;
};

// Read bandwidth of one configuration: `threads` threads each summing its slice of a 1 GiB buffer (far
// larger than the last-level cache) as `streams` interleaved streams (4, 8 or 16), best of `reps` passes.
// Keeps its buffer, so a bench can measure again next to each kernel (a shared machine's bandwidth drifts).
class BandwidthProbe {
 public:
  BandwidthProbe() : buffer_(static_cast<Line*>(std::aligned_alloc(64, static_cast<size_t>(kBytes)))) {
    std::memset(buffer_, 1, static_cast<size_t>(kBytes));
  }
  ~BandwidthProbe() {
    std::free(buffer_);
    if (sink_.load() == 42) fmt::print("");  // keeps the sums observable
  }
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  double gbs(int threads, int streams, int reps) {
    const int64_t per_thread = kLines / threads;
    double fastest = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto start = Clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          const Line* p = buffer_ + t * per_thread;
          const uint64_t s = streams == 4   ? sum_lines<4>(p, per_thread)
                             : streams == 8 ? sum_lines<8>(p, per_thread)
                                            : sum_lines<16>(p, per_thread);
          sink_ += s;
        });
      for (auto& th : pool) th.join();
      fastest = std::min(fastest, seconds_since(start));
    }
    return static_cast<double>(per_thread * threads * 64) / fastest / 1e9;
  }

 private:
  static constexpr int64_t kBytes = int64_t{1} << 30;
  static constexpr int64_t kLines = kBytes / 64;
  Line* buffer_;
  std::atomic<uint64_t> sink_{0};
};

// Best read bandwidth over thread counts min_threads, 2 min_threads, .., max_threads and 4/8/16 streams
// per thread (or only `only_streams`), each the best of `reps` passes of `probe`; prints each.
inline Bandwidth read_bandwidth(BandwidthProbe& probe, int max_threads, int reps, int min_threads = 1,
                                int only_streams = 0) {
  Bandwidth best{0, 0, 0};
  std::vector<int> thread_counts;
  for (int t = min_threads; t < max_threads; t *= 2) thread_counts.push_back(t);
  thread_counts.push_back(max_threads);
  for (int threads : thread_counts)
    for (int streams : {4, 8, 16}) {
      if (only_streams != 0 && streams != only_streams) continue;
      const double gbs = probe.gbs(threads, streams, reps);
      fmt::print("  read bandwidth: {} thread(s) × {:>2} streams: {:6.1f} GB/s\n", threads, streams, gbs);
      if (gbs > best.gbs) best = {gbs, threads, streams};
    }
  return best;
}

// ---- Compute peak ---------------------------------------------------------------------------------------

// Multiply-adds per second of one instruction kind when nothing else runs: 12 independent accumulator
// chains (more than latency × issue width on current x86 cores) of the instruction on register operands.
// The prefill kernels are reported as a fraction of these.
struct ComputePeak {
  double vnni_int8 = 0;  // vpdpbusd zmm: 64 u8×s8 multiply-adds each (0: the CPU lacks AVX-512 VNNI)
  double fma_f32 = 0;    // vfmadd zmm: 16 f32 multiply-adds each (0: no AVX-512)
  double bf16_dot = 0;   // vdpbf16ps zmm: 32 bf16 multiply-adds each (0: no AVX-512 BF16)
};

namespace peak_detail {
#define LMX_PEAK_CHAINS(OP)                                                               \
  for (int64_t it = 0; it < iters; ++it) {                                                \
    a0 = OP(a0);                                                                          \
    a1 = OP(a1);                                                                          \
    a2 = OP(a2);                                                                          \
    a3 = OP(a3);                                                                          \
    a4 = OP(a4);                                                                          \
    a5 = OP(a5);                                                                          \
    a6 = OP(a6);                                                                          \
    a7 = OP(a7);                                                                          \
    a8 = OP(a8);                                                                          \
    a9 = OP(a9);                                                                          \
    a10 = OP(a10);                                                                        \
    a11 = OP(a11);                                                                        \
    __asm__ volatile("" : "+v"(x)); /* x changes each round: the loop cannot be folded */ \
  }
// Seconds for `iters` rounds of 12 instructions; the sum of the chains is returned through `sink`.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline double vnni_rounds(int64_t iters,
                                                                                 int64_t& sink) {
  __m512i a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
  a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = _mm512_set1_epi32(1);
  __m512i x = _mm512_set1_epi8(3);
  const __m512i y = _mm512_set1_epi8(5);
  const auto start = Clock::now();
#define LMX_PEAK_OP(a) _mm512_dpbusd_epi32(a, x, y)
  LMX_PEAK_CHAINS(LMX_PEAK_OP)
#undef LMX_PEAK_OP
  const double s = seconds_since(start);
  const __m512i sum =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                        _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
                       _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  sink += _mm512_reduce_add_epi32(sum);
  return s;
}
// The 12 f32 chains' total (kept so the compiler cannot drop them).
__attribute__((target("avx512f"))) inline int64_t sum_of_chains(__m512 a0, __m512 a1, __m512 a2, __m512 a3,
                                                                __m512 a4, __m512 a5, __m512 a6, __m512 a7,
                                                                __m512 a8, __m512 a9, __m512 a10,
                                                                __m512 a11) {
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
                                   _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return static_cast<int64_t>(_mm512_reduce_add_ps(sum));
}
__attribute__((target("avx512f"))) inline double fma_rounds(int64_t iters, int64_t& sink) {
  __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
  a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = _mm512_set1_ps(1.0f);
  __m512 x = _mm512_set1_ps(0.9999f);
  const __m512 y = _mm512_set1_ps(1e-4f);
  const auto start = Clock::now();
#define LMX_PEAK_OP(a) _mm512_fmadd_ps(a, x, y)
  LMX_PEAK_CHAINS(LMX_PEAK_OP)
#undef LMX_PEAK_OP
  const double s = seconds_since(start);
  sink += sum_of_chains(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
  return s;
}
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline double bf16_rounds(int64_t iters,
                                                                                 int64_t& sink) {
  __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
  a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = _mm512_set1_ps(1.0f);
  __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));        // 1.0
  const __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3800));  // 2^-15
  const auto start = Clock::now();
#define LMX_PEAK_OP(a) _mm512_dpbf16_ps(a, x, y)
  LMX_PEAK_CHAINS(LMX_PEAK_OP)
#undef LMX_PEAK_OP
  const double s = seconds_since(start);
  sink += sum_of_chains(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
  return s;
}
#undef LMX_PEAK_CHAINS

// Multiply-adds per second of `rounds` on `threads` threads at once (best of 3 runs of ~0.1 s each).
template <class Rounds>
double peak_rate(Rounds rounds, int macs_per_instruction, int threads) {
  constexpr int64_t kIters = 10'000'000;  // 120M instructions per thread and run
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> seconds(static_cast<size_t>(threads));
    std::vector<int64_t> sinks(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back(
          [&, t] { seconds[static_cast<size_t>(t)] = rounds(kIters, sinks[static_cast<size_t>(t)]); });
    seconds[0] = rounds(kIters, sinks[0]);
    for (auto& th : pool) th.join();
    const double slowest = *std::max_element(seconds.begin(), seconds.end());
    best = std::max(best, 12.0 * static_cast<double>(kIters) * macs_per_instruction * threads / slowest);
  }
  return best;
}
}  // namespace peak_detail

// The peak multiply-add rates of `threads` threads running at once (per second, not per core).
inline ComputePeak compute_peak(int threads) {
  ComputePeak p;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    p.fma_f32 = peak_detail::peak_rate(peak_detail::fma_rounds, 16, threads);
  if (__builtin_cpu_supports("avx512vnni"))
    p.vnni_int8 = peak_detail::peak_rate(peak_detail::vnni_rounds, 64, threads);
  if (__builtin_cpu_supports("avx512bf16"))
    p.bf16_dot = peak_detail::peak_rate(peak_detail::bf16_rounds, 32, threads);
  return p;
}

}  // namespace lmx::bench
