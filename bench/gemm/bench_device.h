// Device helpers of the GEMM benchmark and the ladder's own kernels (steps 1 and 2; steps 3–6
// are the library's kernels with options, see docs/KERNELS.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ridge::bench {

using bf16 = __nv_bfloat16;

// Uniform in [-scale, scale], never exactly zero, from a counter-based hash of (seed, index).
void fill_random_bf16(bf16* p, size_t n, uint64_t seed, float scale, cudaStream_t stream);

struct Diff {
  double rel = 0;                     // ‖a − b‖ / ‖b‖ over finite pairs
  unsigned long long non_finite = 0;  // elements of a that are NaN/Inf (unwritten outputs)
};
// Compares a against b on the device; synchronizes the stream.
Diff compare_bf16(const bf16* a, const bf16* b, size_t n, cudaStream_t stream);

// Ladder step 1: shared-memory tiled GEMM on CUDA cores (128×128×16 tiles, 8×8 per thread).
void ladder_smem_tiled(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                       cudaStream_t stream);
// Ladder step 2: TMA loads + wgmma m64n256k16 by one warpgroup, one stage, no specialization.
void ladder_tma_wgmma(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream);

}  // namespace ridge::bench
