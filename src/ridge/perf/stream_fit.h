#pragma once
// A kernel's time over shapes that differ only in how many bytes they stream (the decode GEMVs of
// one K and token count over N, say) as a fixed cost plus bytes ÷ a streaming rate: the
// least-squares line through (bytes, seconds). The two numbers separate what a launch costs
// whatever its size (ramp-up, tail, a cross-block reduction) from how fast it reads, which one
// time per shape mixes (docs/KERNELS.md, run 29: on the H200 the MMA GEMV's gap to cuBLASLt on
// the large shapes is its streaming rate, not its fixed cost).
#include <span>
#include <utility>

namespace ridge::perf {

struct StreamFit {
  double fixed_s = 0;      // the intercept: the time at zero bytes
  double bytes_per_s = 0;  // 1 / slope; 0 where the time does not grow with the bytes
  double r2 = 0;           // the share of the times' variance the line explains (1: all of it)
  int points = 0;
};

// points: (bytes, seconds), finite and non-negative, with at least two distinct byte counts;
// anything else throws ridge::Error naming what is wrong.
StreamFit fit_stream(std::span<const std::pair<double, double>> points);

}  // namespace ridge::perf
