// The weight-streaming load of the decode GEMVs (skinny_gemm.cu, and the layout probe in
// bench/gemm that must issue the same instruction). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ridge::kernels {

// 16 bytes of streamed weights: no L1 allocation (read once), 256-byte L2 prefetch (a warp reads
// 128-256 contiguous bytes of each row per step). p is 16-byte aligned.
__device__ __forceinline__ uint4 load_weights16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

}  // namespace ridge::kernels
