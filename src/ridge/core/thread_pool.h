// ThreadPool: a fixed set of workers for data-parallel loops on the CPU backend.
// parallel_for(n, fn) calls fn(begin, end) on disjoint chunks covering [0, n) and returns when
// all are done; the calling thread works too. Chunks are static (deterministic split).
// Waiting spins for up to kSpin before sleeping on a condition variable: a decode step calls
// parallel_for hundreds of times, tens of microseconds apart, and waking a sleeping thread cost
// ~60 us a call on the 2-core development VM (a 576 x 576 Q4_1 matvec: 82 us on two threads,
// 39 on one).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ridge {

class ThreadPool {
 public:
  // threads <= 0: one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // How long a worker (or the caller, waiting for the workers) spins before it sleeps.
  static constexpr std::chrono::microseconds kSpin{200};
  // fn(begin, end) over [0, n) split into at most size() chunks of at least min_chunk items.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards the sleeps (the condition variables' predicates)
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // The job: written by the caller before it advances generation_ (release), read by a worker
  // after it sees the new generation (acquire). Every worker counts itself off pending_, with a
  // chunk or without, so the next job cannot start while a worker still reads this one.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex call_mutex_;  // one parallel_for at a time
};

}  // namespace ridge
