#include "ridge/core/thread_pool.h"

#include <cstdint>
#include <algorithm>

namespace ridge {

namespace {

inline void chunk_range(int64_t n, int chunks, int i, int64_t& b, int64_t& e) {
  b = n * i / chunks;
  e = n * (i + 1) / chunks;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or ThreadPool::kSpin has passed; returns done().
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
    cpu_relax();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
  if (n <= 0) return;
  const int chunks = int(std::clamp<int64_t>(n / std::max<int64_t>(min_chunk, 1), 1, size()));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  job_ = &fn;
  job_n_ = n;
  job_chunks_ = chunks;
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  {
    // Under the mutex: a worker about to sleep checks the generation under it too.
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  int64_t b, e;
  chunk_range(n, chunks, 0, b, e);
  fn(b, e);
  auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, all_done);
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto woken = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(woken)) {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const int chunks = job_chunks_;
    if (index < chunks) {
      int64_t b, e;
      chunk_range(job_n_, chunks, index, b, e);
      (*job_)(b, e);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace ridge
