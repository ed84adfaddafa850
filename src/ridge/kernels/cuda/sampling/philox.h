// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; Random123's
// philox4x32 with 10 rounds): a counter-based generator, 4 x 32 random bits per (counter, key).
// The GPU sampler keys it with the request's seed and counts with (token index, vocabulary
// position), so a draw depends on nothing else (not the batch, not the launch). Host and device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RIDGE_PHILOX_FN __host__ __device__ __forceinline__
#else
#define RIDGE_PHILOX_FN inline
#endif

namespace ridge::kernels {

struct Philox4x32 {
  uint32_t x, y, z, w;
};

RIDGE_PHILOX_FN uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * uint64_t(b)) >> 32);
#endif
}

// counter (c0, c1, c2, c3), key (k0, k1) -> 4 words. Matches Random123's known-answer vectors.
RIDGE_PHILOX_FN Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                         uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint32_t hi0 = philox_mulhi(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = philox_mulhi(kM1, c2), lo1 = kM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {c0, c1, c2, c3};
}

}  // namespace ridge::kernels
