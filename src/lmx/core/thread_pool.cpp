// A fixed pool of worker threads running data-parallel loops; the calling thread joins in.
#include "lmx/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lmx {
namespace {
thread_local bool t_inside_pool = false;

// How long a worker polls for the next job, and a caller for its job's last chunks, before sleeping on
// a condition variable. Waking a sleeping thread took 45-60 us (median; up to 130 us) on the development
// VM, a tenth of a 4096 x 4096 4-bit GEMV; polling this long covers back-to-back ops, and an idle pool
// still sleeps.
constexpr auto kSpinTime = std::chrono::microseconds(100);

// A hint to the core that this thread is polling (yields the pipeline to its hyperthread sibling).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls ready() for up to kSpinTime; returns its last value.
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < 64; ++i) {  // the clock is read once per 64 polls
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  threads = std::max(1, threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks() {
  t_inside_pool = true;
  for (;;) {
    int64_t chunk;
    {
      std::lock_guard lock(mutex_);
      if (next_chunk_ >= chunks_total_) break;
      chunk = next_chunk_++;
    }
    int64_t begin = chunk * chunk_, end = std::min(job_n_, begin + chunk_);
    try {
      (*job_)(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    if (++chunks_done_ == chunks_total_) done_.notify_all();
  }
  t_inside_pool = false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  // Both change under mutex_, so the predicate checked under it cannot miss a notify.
  auto woken = [&] { return stop_.load() || generation_.load() != seen; };
  for (;;) {
    if (!spin_until(woken)) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, woken);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    run_chunks();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = std::max<int64_t>(1, n / grain);
  int64_t chunks = std::min<int64_t>(max_chunks, static_cast<int64_t>(threads()) * 4);
  if (chunks <= 1 || workers_.empty() || t_inside_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    chunks_total_ = (n + chunk_ - 1) / chunk_;
    next_chunk_ = 0;
    chunks_done_.store(0);
    error_ = nullptr;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  run_chunks();
  std::exception_ptr error;
  auto finished = [&] { return chunks_done_.load() == chunks_total_; };
  spin_until(finished);
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, finished);
    job_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool& default_pool() {
  auto& slot = pool_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(static_cast<int>(std::thread::hardware_concurrency()));
  return *slot;
}

void set_default_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  pool_slot() = std::make_unique<ThreadPool>(threads);
}

}  // namespace lmx
