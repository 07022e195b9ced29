// A fixed pool of worker threads running data-parallel loops; the calling thread joins in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lmx {

class ThreadPool {
 public:
  // `threads` counts the caller too: ThreadPool(1) runs everything on the caller.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `grain` long
  // (except possibly the last), in parallel. Returns when all chunks are done. The first
  // exception thrown by a chunk is rethrown here. Nested calls from inside fn run serially.
  // Between calls a worker polls for the next one for a bounded time before it sleeps (and the
  // caller polls for its last chunks likewise), so back-to-back calls pay no wake-up latency.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // serialises parallel_for calls from different threads
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The job: written under mutex_ before generation_ is bumped (also under mutex_), which publishes it.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t chunk_ = 1;
  int64_t next_chunk_ = 0;  // guarded by mutex_
  int64_t chunks_total_ = 0;
  // Modified under mutex_ only; atomic so that waiters can poll them without it.
  std::atomic<int64_t> chunks_done_ = 0;
  std::atomic<uint64_t> generation_ = 0;
  std::atomic<bool> stop_ = false;
  std::exception_ptr error_;  // guarded by mutex_
};

// The process-wide pool used by ops. Sized by set_default_threads (or hardware concurrency).
ThreadPool& default_pool();
// Recreates the default pool with `threads` threads (0 = hardware concurrency). Not thread-safe
// against concurrent parallel_for calls.
void set_default_threads(int threads);

// Convenience: default_pool().parallel_for(n, grain, fn).
inline void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  default_pool().parallel_for(n, grain, fn);
}

}  // namespace lmx
