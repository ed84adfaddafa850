// Host stand-ins for the CUDA device API used by ridge's sampling kernel, over the fiber thread
// block of simt_emulator.h. Include before a device-code header (.cuh) to compile it with the host
// compiler. Arithmetic intrinsics (__fmul_rn, ...) are the plain IEEE operations (the test target
// turns off floating-point contraction); expf/logf are the host libm's (a few ulp away from
// CUDA's: the emulation checks logic, the GPU harness checks numerics).
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/simt_emulator.h"

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline

struct alignas(16) float4 {
  float x, y, z, w;
};

#define threadIdx (::simt::thread_idx())
#define blockIdx (::simt::block_idx())
#define __syncthreads() ::simt::Block::cur().syncthreads()

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  return ::simt::shfl(::simt::kShflXor, v, lane_mask);
}
template <class T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta) {
  return ::simt::shfl(::simt::kShflDown, v, int(delta));
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned delta) {
  return ::simt::shfl(::simt::kShflUp, v, int(delta));
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
  return ::simt::shfl(::simt::kShflIdx, v, src);
}
inline unsigned __ballot_sync(unsigned, int pred) {
  return ::simt::ballot(pred != 0);
}

inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(unsigned(x));
}
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}

inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p = int(unsigned(old) + unsigned(v));
  return old;
}

inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned long long __float2ull_rz(float f) {
  return static_cast<unsigned long long>(f);
}
inline float __ull2float_rn(unsigned long long x) {
  return static_cast<float>(x);
}
