// Tests for ThreadPool::parallel_for: coverage, exceptions, nesting, waking polling and sleeping workers,
// concurrent callers, destruction.
#include "lmx/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace lmx {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 7, 100, 10007}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, RethrowsChunkException) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int64_t b, int64_t) {
                                   if (b == 0) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum = 0;
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

TEST(ThreadPool, NestedCallsRunSerially) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum = 0;
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, 1, [&](int64_t b2, int64_t e2) { sum += e2 - b2; });
  });
  EXPECT_EQ(sum.load(), 80);
}

// Runs a call whose `threads` chunks each wait until all of them have started: it only returns if every
// worker took part. Returns false if that took longer than 10 s (a worker missed its wake-up).
bool all_threads_join_in(ThreadPool& pool) {
  const int threads = pool.threads();
  std::atomic<int> arrived = 0;
  std::atomic<bool> timed_out = false;
  pool.parallel_for(threads, 1, [&](int64_t, int64_t) {
    ++arrived;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < threads && !timed_out.load()) {
      if (std::chrono::steady_clock::now() > deadline) timed_out = true;
      std::this_thread::yield();  // the pool may have more threads than the machine has cores
    }
  });
  return !timed_out.load();
}

TEST(ThreadPool, WakesPollingAndSleepingWorkers) {
  ThreadPool pool(3);
  for (int call = 0; call < 20; ++call)
    EXPECT_TRUE(all_threads_join_in(pool)) << "back to back, call " << call;
  for (int call = 0; call < 3; ++call) {
    // Far longer than the workers poll before sleeping.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(all_threads_join_in(pool)) << "after sleeping, call " << call;
  }
}

TEST(ThreadPool, ConcurrentCallersEachCoverTheirRange) {
  ThreadPool pool(2);
  std::atomic<int64_t> sums[2] = {0, 0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 2; ++c)
    callers.emplace_back([&, c] {
      for (int call = 0; call < 200; ++call)
        pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) { sums[c] += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(sums[0].load(), 200 * 1000);
  EXPECT_EQ(sums[1].load(), 200 * 1000);
}

TEST(ThreadPool, DestroysPollingAndSleepingWorkers) {
  for (int sleep_ms : {0, 20}) {
    ThreadPool pool(3);
    std::atomic<int64_t> sum = 0;
    pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    EXPECT_EQ(sum.load(), 100);
  }  // each pool's destructor joins its workers, polling (0 ms) or asleep (20 ms)
}

}  // namespace
}  // namespace lmx
