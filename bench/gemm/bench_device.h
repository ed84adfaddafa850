// The GEMM ladder's own kernels (steps 1 and 2; steps 3–6 are the library's kernels with options,
// see docs/KERNELS.md). The benchmark's device helpers (random fill, comparison) are shared with
// the other benchmarks: bench/common/bench_common.h.
#pragma once

#include <cuda_runtime_api.h>

#include "bench_common.h"

namespace ridge::bench {

// Ladder step 1: shared-memory tiled GEMM on CUDA cores (128×128×16 tiles, 8×8 per thread).
void ladder_smem_tiled(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                       cudaStream_t stream);
// Ladder step 2: TMA loads + wgmma m64n256k16 by one warpgroup, one stage, no specialization.
void ladder_tma_wgmma(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream);

}  // namespace ridge::bench
