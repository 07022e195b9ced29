// A fixed pool of worker threads running data-parallel loops; the calling thread joins in.
#include "lmx/core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace lmx {
namespace {
thread_local bool t_inside_pool = false;
}

ThreadPool::ThreadPool(int threads) {
  threads = std::max(1, threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
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
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
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
    chunks_done_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return chunks_done_ == chunks_total_; });
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
