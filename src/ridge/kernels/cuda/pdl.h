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

}  // namespace ridge::kernels::pdl
