// The decode GEMV chain (decode_chain.cu says what it asks and how).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace ridge::bench {

struct DecodeChainRow {
  std::string name;
  std::string what;
  double us = 0;           // median time of one replay of the whole chain
  double weight_bytes = 0; // weights streamed per replay
};

// A Llama-2-7B-shaped batch-1 decode as GEMVs only: per layer q|k|v (RMSNorm prologue), o
// (residual, sums of squares), gate|up (RMSNorm prologue, SwiGLU), down (residual, sums of
// squares), each layer its own weights, captured as one CUDA graph per variant and replayed
// `rounds` times (median). `gap_us` > 0 adds a latency-bound stand-in for RoPE + attention (a
// few blocks that wait that long, no memory traffic) between q|k|v and o; in the rows that say
// so, `gap_pre_us` of it before the PDL wait (attention's loads that need nothing of q|k|v).
std::vector<DecodeChainRow> decode_chain(int layers, int hidden, int intermediate, double gap_us,
                                         double gap_pre_us, int rounds, cudaStream_t stream);

}  // namespace ridge::bench
