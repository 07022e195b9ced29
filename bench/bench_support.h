// Shared by the bench programs: best-of timing and the machine's memory read bandwidth (the floor's
// denominator), measured the same way everywhere.
#pragma once

#include <fmt/format.h>

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

}  // namespace lmx::bench
