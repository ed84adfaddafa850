// The GEMV layout probe (gemv_layout_probe.cu says what it asks and how).
#pragma once

#include <cuda_runtime_api.h>

namespace ridge::bench {

struct GemvProbe {
  int N = 0, K = 0;
  double weight_bytes = 0;
  double row_major_us = 0, packed_us = 0, skinny_us = 0;  // medians over the rounds
  bool bitwise_equal = false;  // the two layouts' outputs
  double rel_vs_skinny = 0;    // row-major probe against the library's skinny kernel
  bool ok = false;
};

// M = 1, W [N, K] random: the same GEMV over row-major and tile-packed weights, and the library's
// skinny kernel, checked, then timed in `rounds` rotated rounds. N % 16 == 0, K % 128 == 0,
// K >= 1024.
GemvProbe gemv_layout_probe(int N, int K, int rounds, cudaStream_t stream);

}  // namespace ridge::bench
