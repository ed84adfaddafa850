// A thread block on the CPU, for testing device code where no GPU is present: every CUDA thread
// is a fiber (ucontext), run cooperatively until it blocks at __syncthreads or a warp collective
// (shuffles, ballot). Atomics are plain read-modify-writes (fibers never interleave inside one).
// It catches what a schedule can show: barriers some threads never reach (deadlock), warp
// collectives that the lanes of a warp call differently, and - run with reverse and random
// schedules - accesses to shared state that a missing barrier leaves unordered. The random
// schedule also holds back a random half of the warps at each __syncthreads until the others
// block again, so a thread that reads shared state after a barrier can find it already
// overwritten by the next phase of the other threads (as on a GPU, where warps drift apart).
//
// Include cuda_host_shim.h (which includes this) before the device code under test.
#pragma once

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#if defined(SIMT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace simt {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

enum class Order { forward, reverse, random };

class Block {
 public:
  explicit Block(int threads, Order order = Order::forward, uint32_t seed = 1,
                 size_t stack_bytes = size_t(128) << 10)
      : threads_(threads),
        order_(order),
        rng_(seed),
        fibers_(size_t(threads)),
        warps_(size_t((threads + 31) / 32)) {
    for (Fiber& f : fibers_) f.stack.resize(stack_bytes);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Runs body() once in every thread of block `block_id`; returns "" or what went wrong.
  std::string run(int block_id, const std::function<void()>& body) {
    if (threads_ % 32 != 0) return "the block size must be a multiple of 32";
    block_id_ = block_id;
    body_ = &body;
    error_.clear();
    block_count_ = 0;
    block_gen_ = 0;
    for (Warp& w : warps_) w = Warp{};
    for (int t = 0; t < threads_; ++t) {
      Fiber& f = fibers_[size_t(t)];
      f.done = false;
      f.held = false;
      f.wait = Wait::none;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.data();
      f.ctx.uc_stack.ss_size = f.stack.size();
      f.ctx.uc_link = &main_;
      makecontext(&f.ctx, &Block::trampoline, 0);
    }
    Block* saved = active();
    active() = this;
    std::vector<int> order(static_cast<size_t>(threads_));
    for (int t = 0; t < threads_; ++t) order[size_t(t)] = t;
    if (order_ == Order::reverse) std::reverse(order.begin(), order.end());
    while (true) {
      if (order_ == Order::random) std::shuffle(order.begin(), order.end(), rng_);
      bool all_done = true, progressed = false, held = false;
      for (int t : order) {
        Fiber& f = fibers_[size_t(t)];
        if (f.done) continue;
        all_done = false;
        if (!runnable(f)) continue;
        if (f.held) {
          held = true;
          continue;
        }
        current_ = t;
        f.wait = Wait::none;
        switch_to_fiber(f);
        progressed = true;
        if (!error_.empty()) break;
      }
      if (!error_.empty()) break;
      if (all_done) break;
      if (!progressed && held) {  // only held-back threads can run: release them
        for (Fiber& f : fibers_) f.held = false;
        continue;
      }
      if (!progressed) {
        int at_block = 0, at_warp = 0, done = 0;
        for (const Fiber& f : fibers_) {
          done += f.done;
          at_block += !f.done && f.wait == Wait::block;
          at_warp += !f.done && f.wait == Wait::warp;
        }
        error_ = "deadlock: " + std::to_string(at_block) + " threads wait at __syncthreads, " +
                 std::to_string(at_warp) + " at a warp collective, " + std::to_string(done) +
                 " finished";
        break;
      }
    }
    active() = saved;
    return error_;
  }

  // ---- called from device code (inside body) ----
  static Block& cur() { return *active(); }
  int tid() const { return current_; }
  int block_id() const { return block_id_; }
  int threads() const { return threads_; }

  void syncthreads() {
    Fiber& f = fibers_[size_t(current_)];
    if (++block_count_ == threads_) {
      block_count_ = 0;
      ++block_gen_;
      if (order_ == Order::random)  // hold back whole warps, as warps drift apart on a GPU
        for (size_t w = 0; w < warps_.size(); ++w) {
          const bool hold = (rng_() & 1) != 0;
          for (size_t l = 0; l < 32; ++l) fibers_[w * 32 + l].held = hold;
        }
      return;
    }
    f.wait = Wait::block;
    f.wait_gen = block_gen_;
    yield(f);
  }

  // Every lane of the warp deposits `value` (kind and arg must agree across the warp); read(vals,
  // lane) computes this lane's result once all 32 have deposited.
  template <class R, class F>
  R warp_collective(uint32_t kind, uint64_t value, F&& read) {
    Fiber& f = fibers_[size_t(current_)];
    const int w = current_ / 32, lane = current_ % 32;
    Warp& wr = warps_[size_t(w)];
    wr.val[lane] = value;
    wr.kind[lane] = kind;
    warp_barrier(f, wr);
    for (int l = 0; l < 32; ++l)
      if (wr.kind[l] != wr.kind[0]) {
        fail("warp " + std::to_string(w) + ": lanes call different warp collectives (divergence)");
        break;
      }
    const R r = read(wr.val, lane);
    warp_barrier(f, wr);
    return r;
  }

  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
    Fiber& f = fibers_[size_t(current_)];
    f.wait = Wait::forever;
    yield(f);
  }

 private:
  enum class Wait { none, block, warp, forever };
  struct Fiber {
    ucontext_t ctx{};
    std::vector<char> stack;
    bool done = false;
    bool held = false;
    void* fake_stack = nullptr;  // AddressSanitizer's, while suspended
    Wait wait = Wait::none;
    uint64_t wait_gen = 0;
  };
  struct Warp {
    uint64_t val[32] = {};
    uint32_t kind[32] = {};
    int count = 0;
    uint64_t gen = 0;
  };

  static Block*& active() {
    static Block* b = nullptr;
    return b;
  }
  static void trampoline() {
    Block& b = cur();
    b.entered_fiber();
    (*b.body_)();
    b.fibers_[size_t(b.current_)].done = true;
    b.leaving_fiber(nullptr);  // returns to main_ through uc_link
  }
  // AddressSanitizer needs to know about stack switches (it would report false stack errors).
  void switch_to_fiber(Fiber& f) {
#if defined(SIMT_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack.data(), f.stack.size());
    swapcontext(&main_, &f.ctx);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    swapcontext(&main_, &f.ctx);
#endif
  }
  void entered_fiber() {
#if defined(SIMT_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &main_stack_, &main_stack_size_);
#endif
  }
  // fake_stack: where ASan keeps the fiber's fake stack while it is suspended; null when the
  // fiber is finishing.
  void leaving_fiber(void** fake_stack) {
#if defined(SIMT_ASAN)
    __sanitizer_start_switch_fiber(fake_stack, main_stack_, main_stack_size_);
#else
    (void)fake_stack;
#endif
  }
  bool runnable(const Fiber& f) const {
    switch (f.wait) {
      case Wait::none:
        return true;
      case Wait::block:
        return block_gen_ != f.wait_gen;
      case Wait::warp:
        return warps_[size_t(&f - fibers_.data()) / 32].gen != f.wait_gen;
      case Wait::forever:
        return false;
    }
    return false;
  }
  void warp_barrier(Fiber& f, Warp& wr) {
    if (++wr.count == 32) {
      wr.count = 0;
      ++wr.gen;
      return;
    }
    f.wait = Wait::warp;
    f.wait_gen = wr.gen;
    yield(f);
  }
  void yield(Fiber& f) {
    leaving_fiber(&f.fake_stack);
    swapcontext(&f.ctx, &main_);
#if defined(SIMT_ASAN)
    __sanitizer_finish_switch_fiber(f.fake_stack, &main_stack_, &main_stack_size_);
#endif
  }

  int threads_;
  Order order_;
  std::mt19937 rng_;
  std::vector<Fiber> fibers_;
  std::vector<Warp> warps_;
  ucontext_t main_{};
  const std::function<void()>* body_ = nullptr;
  int current_ = 0;
  int block_id_ = 0;
  int block_count_ = 0;
  uint64_t block_gen_ = 0;
  std::string error_;
  const void* main_stack_ = nullptr;  // for AddressSanitizer's fiber switches
  size_t main_stack_size_ = 0;
};

inline Dim3 thread_idx() {
  return Dim3{unsigned(Block::cur().tid()), 0, 0};
}
inline Dim3 block_idx() {
  return Dim3{unsigned(Block::cur().block_id()), 0, 0};
}

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

enum : uint32_t {
  kShflXor = 1u << 24,
  kShflDown = 2u << 24,
  kShflUp = 3u << 24,
  kShflIdx = 4u << 24,
  kBallot = 5u << 24
};

template <class T>
T shfl(uint32_t kind, T v, int arg) {
  return Block::cur().warp_collective<T>(
      kind | (uint32_t(arg) & 0xfffffu) | uint32_t(sizeof(T)) << 20, to_bits(v),
      [&](const uint64_t* vals, int lane) {
        int src = lane;
        switch (kind) {
          case kShflXor:
            src = lane ^ arg;
            break;
          case kShflDown:
            src = lane + arg < 32 ? lane + arg : lane;
            break;
          case kShflUp:
            src = lane - arg >= 0 ? lane - arg : lane;
            break;
          default:
            src = arg & 31;
            break;
        }
        return from_bits<T>(vals[src & 31]);
      });
}

inline unsigned ballot(bool pred) {
  return Block::cur().warp_collective<unsigned>(kBallot, pred ? 1 : 0,
                                                [](const uint64_t* vals, int) {
                                                  unsigned m = 0;
                                                  for (int l = 0; l < 32; ++l)
                                                    if (vals[l]) m |= 1u << l;
                                                  return m;
                                                });
}

}  // namespace simt
