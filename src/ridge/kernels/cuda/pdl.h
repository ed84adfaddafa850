// Host side of programmatic dependent launch (pdl.cuh): the process-wide switch, settable from
// host code compiled without nvcc (the backend's --no-pdl).
#pragma once

#include <atomic>

namespace ridge::kernels::pdl {

inline std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag{true};
  return flag;
}
// Off: launch_pdl launches without the attribute (each kernel waits for the previous one).
inline void set_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }
inline bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }

// The shared-memory carveout (percent of the SM's maximum shared memory) that launches through
// pdl::launch on this thread ask for, as a per-launch attribute; -1: none (the driver's choice per
// kernel). Kernels with different carveouts cannot share an SM, so a chain of kernels launched
// early with PDL (pdl.cuh) runs best with one carveout for all of them: a GEMV launched early
// beside decode attention otherwise runs with attention's small L1 (H200, run 13).
inline int& launch_carveout_ref() {
  thread_local int percent = -1;
  return percent;
}
inline void set_launch_carveout(int percent) { launch_carveout_ref() = percent; }
inline int launch_carveout() { return launch_carveout_ref(); }

// Turns PDL off for a scope (then restores the previous setting): for timing one kernel alone,
// where back-to-back launches of a PDL kernel would overlap each other (the skinny GEMM's first
// weight loads run during the previous launch's tail) and flatter it against kernels that do not
// overlap (cuBLASLt's). Not thread safe against other launching threads (the switch is
// process-wide).
class ScopedDisable {
 public:
  ScopedDisable() : previous_(enabled()) { set_enabled(false); }
  ~ScopedDisable() { set_enabled(previous_); }
  ScopedDisable(const ScopedDisable&) = delete;
  ScopedDisable& operator=(const ScopedDisable&) = delete;

 private:
  bool previous_;
};

}  // namespace ridge::kernels::pdl
