// The fp8 decode GEMV (--quantization fp8, 1-4 tokens): Y[t, n] (+)= sx[t] · sw[n] ·
// Σ_k xq[t, k] · wq[n, k], the same product cuBLASLt's fp8 GEMM with outer-vector scales computes
// (E4M3 codes of the activations per token and of the weights per row), for the token counts where
// a GEMM's tiles waste most of the tensor core and the step is the weights' bytes.
//
// Two kernels a call, both on the decode chain with programmatic dependent launch (args.pdl):
//   prep, one 256-thread block a token: the activations (bf16) through an optional prologue, then
//   E4M3 codes and a scale per token into the caller's workspace:
//     - rmsnorm: x := bf16(w · (x · 1/rms(x))), the sum of squares taken by the first 128 threads
//       in the order of the vectorized norm kernel (norm.cu, norm_vec_kernel) and reduced as its
//       block_sum does, so that the result is bit for bit the norm kernel's output;
//     - quantization: s = amax / 448 (1 for a zero row), codes = E4M3(x / s) with IEEE division
//       and saturation, kernels::quantize_rows_fp8's rule, bit for bit.
//   (Each GEMV block quantizing the tokens itself measured slower: 768-1,376 blocks repeating a
//   T x K prologue cost more than the launch it saved, 8.2 against 6.2 ms a step at 4 tokens.)
//   gemv: one warp per kWarpRows = 2 weight rows (swiglu: output j's gate and up rows, j and
//   N/2 + j), 8 warps a block. Each lane reads 16 codes (one 16-byte load) of each row per step,
//   kUnroll = 4 steps in flight before their first use (8 loads, 128 bytes a lane, 32 KB a
//   block), and the matching 16 codes of each token (L1-resident). Codes become floats through the
//   fp8x2 -> half2 conversion (exact: E4M3 is a subset of fp16); products of two codes are exact
//   in fp32 (4 significant bits each), sums are fp32. The warp reduces by shuffles; lane 0 applies
//   both scales, adds the residual or not, and rounds once to bf16 (or stores f32); with swiglu
//   both products are rounded to bf16 as the plain GEMV stores them, then bf16(g / (1 + e^-g) ·
//   u), silu_mul's formula. Its first kUnroll steps of weights (read-only) load before the wait
//   for the prep kernel, so their latency overlaps it.
// So a fused call equals the composed kernels (norm, quantize, GEMV, silu_mul) bit for bit.
// Preconditions (checked by gemv_fp8 in gemm.cpp): 1 <= T <= 4, K % 16 == 0, X rows, W, xq and
// the norm weight 16-byte aligned, N even with swiglu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/pdl.cuh"

namespace ridge::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 2;
constexpr int kUnroll = 4;
constexpr int kNormThreads = 128;  // norm_vec_kernel's block, whose summation order is kept

// 16 E4M3 codes (a uint4) -> their 16 values, accumulated against another 16 (a·b summed).
__device__ __forceinline__ float dot16(const uint4& a, const uint4& b) {
  const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_fp8x2_storage_t pa = __nv_fp8x2_storage_t((wa[i] >> (16 * h)) & 0xffffu);
      const __nv_fp8x2_storage_t pb = __nv_fp8x2_storage_t((wb[i] >> (16 * h)) & 0xffffu);
      const float2 fa = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pa, __NV_E4M3)));
      const float2 fb = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pb, __NV_E4M3)));
      s = fmaf(fa.x, fb.x, s);
      s = fmaf(fa.y, fb.y, s);
    }
  }
  return s;
}

// 8 bf16 values (one 16-byte load) as floats.
__device__ __forceinline__ void load8(const uint16_t* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = __uint_as_float(w[j] << 16);
    v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

// The product's input, chunk `g` (8 values) of token row x: the prologue applied and rounded to
// bf16 as the norm kernel stores it.
__device__ __forceinline__ void input8(const GemvFp8Args& a, const uint16_t* x, int g, float inv,
                                       float (&v)[8]) {
  load8(x + int64_t(g) * 8, v);
  if (a.prologue != GemvFp8Prologue::rmsnorm) return;
  float w[8];
  if (a.norm_w_f32) {
    const float* p = static_cast<const float*>(a.norm_w) + int64_t(g) * 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = p[j];
  } else {
    load8(static_cast<const uint16_t*>(a.norm_w) + int64_t(g) * 8, w);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
    v[j] = detail::bf16_bits_to_f32(detail::f32_to_bf16_bits(w[j] * (v[j] * inv)));
}

// Max over the block (every thread gets it). red: kWarps floats of shared memory.
__device__ __forceinline__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // red may still be read by a previous reduction
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float m = 0.0f;
  for (int i = 0; i < kWarps; ++i) m = fmaxf(m, red[i]);
  return m;
}

// Token blockIdx.x: prologue, then its codes (xq row, stride K) and scale.
__global__ void __launch_bounds__(kThreads) fp8_prep_kernel(const GemvFp8Args a) {
  __shared__ float red[kWarps];
  pdl::begin();
  const int t = blockIdx.x, K = a.K, groups = K / 8;  // 8-value chunks
  const uint16_t* x = reinterpret_cast<const uint16_t*>(a.X) + t * a.ld_x;
  float inv = 1.0f;
  if (a.prologue == GemvFp8Prologue::rmsnorm) {
    float ss = 0.0f;  // norm_vec_kernel's order: thread i takes chunks i, i + 128, ...
    if (threadIdx.x < kNormThreads)
      for (int g = threadIdx.x; g < groups; g += kNormThreads) {
        float v[8];
        load8(x + int64_t(g) * 8, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
      }
    // block_sum over the block; warps 4-7 add zeros after warps 0-3, as 128 threads would.
    inv = 1.0f / sqrtf(detail::block_sum(ss) / float(K) + a.eps);
  }
  // Each thread's chunks stay in registers between the amax and the codes (K <= 16,384 values).
  constexpr int kMaxChunks = 8;
  float v[kMaxChunks][8];
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int g = threadIdx.x + c * kThreads;
    if (g < groups) {
      input8(a, x, g, inv, v[c]);
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[c][j]));
    }
  }
  amax = block_max(amax, red);
  const float s = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  if (threadIdx.x == 0) a.sx[t] = s;
  uint2* q = reinterpret_cast<uint2*>(a.xq + int64_t(t) * K);
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int g = threadIdx.x + c * kThreads;
    if (g >= groups) break;
    uint32_t w[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 lo = make_float2(__fdiv_rn(v[c][4 * i], s), __fdiv_rn(v[c][4 * i + 1], s));
      const float2 hi = make_float2(__fdiv_rn(v[c][4 * i + 2], s), __fdiv_rn(v[c][4 * i + 3], s));
      w[i] = uint32_t(__nv_cvt_float2_to_fp8x2(lo, __NV_SATFINITE, __NV_E4M3)) |
             (uint32_t(__nv_cvt_float2_to_fp8x2(hi, __NV_SATFINITE, __NV_E4M3)) << 16);
    }
    q[g] = make_uint2(w[0], w[1]);
  }
}

template <int T>
__global__ void __launch_bounds__(kThreads) fp8_gemv_kernel(const GemvFp8Args a) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int K = a.K, chunks = K / 16;  // 16-byte chunks a row
  // This warp's rows: two consecutive rows, or output j's gate and up rows.
  const int F = a.N / 2;
  const int unit = blockIdx.x * kWarps + warp;
  const bool active = a.swiglu ? unit < F : unit * kWarpRows < a.N;
  int rows[kWarpRows];
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r)
    rows[r] = min(a.swiglu ? unit + r * F : unit * kWarpRows + r, a.N - 1);
  const uint4* w[kWarpRows];
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r)
    w[r] = reinterpret_cast<const uint4*>(a.W + int64_t(rows[r]) * K);

  // Weights are read-only: the first steps load before the wait for the prep kernel.
  uint4 wv[kUnroll][kWarpRows];
  const auto load_steps = [&](int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
#pragma unroll
      for (int r = 0; r < kWarpRows; ++r)
        wv[u][r] = active && c < chunks ? __ldcs(w[r] + c) : make_uint4(0, 0, 0, 0);
    }
  };
  load_steps(lane);
  pdl::begin();

  float acc[kWarpRows][T] = {};
  if (active) {
    for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      if (c0 != lane) load_steps(c0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + 32 * u;
        if (c >= chunks) break;
#pragma unroll
        for (int t = 0; t < T; ++t) {
          const uint4 xv = __ldg(reinterpret_cast<const uint4*>(a.xq + int64_t(t) * K) + c);
#pragma unroll
          for (int r = 0; r < kWarpRows; ++r) acc[r][t] += dot16(wv[u][r], xv);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
  if (lane != 0 || !active) return;
  if (a.swiglu) {  // output `unit`: silu(gate) · up of the bf16-rounded products
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float st = a.sx[t];
      const float g = __bfloat162float(__float2bfloat16_rn(acc[0][t] * (st * a.sw[rows[0]])));
      const float u = __bfloat162float(__float2bfloat16_rn(acc[1][t] * (st * a.sw[rows[1]])));
      static_cast<uint16_t*>(a.Y)[t * a.ld_y + unit] =
          detail::f32_to_bf16_bits(g / (1.0f + expf(-g)) * u);
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r) {
    const int n = unit * kWarpRows + r;
    if (n >= a.N) break;
    const float s = a.sw[n];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float v = acc[r][t] * (a.sx[t] * s);
      if (a.y_f32) {
        float* o = static_cast<float*>(a.Y) + t * a.ld_y + n;
        *o = a.accumulate ? *o + v : v;
      } else {
        __nv_bfloat16* o = static_cast<__nv_bfloat16*>(a.Y) + t * a.ld_y + n;
        if (a.accumulate) v += __bfloat162float(*o);
        *o = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int T>
void launch_t(const GemvFp8Args& a, cudaStream_t stream) {
  const int units = a.swiglu ? a.N / 2 : (a.N + kWarpRows - 1) / kWarpRows;
  const dim3 grid(unsigned((units + kWarps - 1) / kWarps)), block(kThreads);
  RIDGE_GEMM_CUDA_CHECK(pdl::launch(a.pdl, fp8_gemv_kernel<T>, grid, block, 0, stream, a));
}

}  // namespace

void detail::launch_gemv_fp8(const GemvFp8Args& a, cudaStream_t stream) {
  RIDGE_GEMM_CUDA_CHECK(
      pdl::launch(a.pdl, fp8_prep_kernel, dim3(unsigned(a.T)), dim3(kThreads), 0, stream, a));
  switch (a.T) {
    case 1:
      launch_t<1>(a, stream);
      break;
    case 2:
      launch_t<2>(a, stream);
      break;
    case 3:
      launch_t<3>(a, stream);
      break;
    default:
      launch_t<4>(a, stream);
      break;
  }
}

}  // namespace ridge::kernels
