// Device helpers of the attention benchmark: the fp8 rounding of the KV pools and the bandwidth
// ceilings (a copy kernel and a read-only kernel with several 16-byte loads in flight per thread).
// The random fill and the comparison are shared with the other benchmarks
// (bench/common/bench_common.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ridge::bench_attention {

// fp8[i] = E4M3(src[i]) (round to nearest even, saturating), back[i] = that value as bf16 (exact).
void to_fp8(const uint16_t* src, uint8_t* fp8, uint16_t* back, size_t n, cudaStream_t stream);

// dst = src, 8 independent 16-byte loads per thread before its stores (n_bytes % 16 == 0).
void copy_bytes(void* dst, const void* src, size_t n_bytes, cudaStream_t stream);
// Reads src (8 independent 16-byte loads per thread), xor-reduces, writes one word to sink.
void read_bytes(const void* src, size_t n_bytes, uint32_t* sink, cudaStream_t stream);

}  // namespace ridge::bench_attention
