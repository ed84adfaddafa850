// The fp8 decode GEMV (--quantization fp8, 1-4 tokens): Y[t, n] (+)= sx[t] · sw[n] ·
// Σ_k xq[t, k] · wq[n, k], the same product cuBLASLt's fp8 GEMM with outer-vector scales computes
// (E4M3 codes of the activations per token and of the weights per row, kernels::quantize_rows_fp8),
// for the token counts where a GEMM's tiles waste most of the tensor core and the step is the
// weights' bytes.
//
// Layout: one warp per kWarpRows = 2 weight rows, 8 warps a block. Each lane reads 16 codes (one
// 16-byte load) of each row per step, kUnroll = 4 steps in flight before their first use (8
// loads, 128 bytes a lane, 32 KB a block), and the matching 16 codes of each token's activations
// (small, L1-resident). Codes become floats through the fp8x2 -> half2 conversion (exact: E4M3 is
// a subset of fp16); products of two codes are exact in fp32 (4 significant bits each), sums are
// fp32. The warp reduces by shuffles; lane 0 applies both scales, adds the residual or not, and
// rounds once to bf16 (or stores f32).
// Preconditions (checked by gemv_fp8 in gemm.cpp): 1 <= T <= 4, K % 16 == 0, N >= 1, xq/wq 16-byte
// aligned with row strides ld_x (>= K, % 16) and K.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/launch.h"

namespace ridge::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kWarpRows = 2;
constexpr int kUnroll = 4;

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

template <int T>
__global__ void __launch_bounds__(kWarps * 32)
    fp8_gemv_kernel(const uint8_t* __restrict__ xq, int64_t ld_x, const float* __restrict__ sx,
                    const uint8_t* __restrict__ wq, const float* __restrict__ sw, int N, int K,
                    void* __restrict__ y, bool y_f32, int64_t ld_y, bool accumulate) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row0 = (blockIdx.x * kWarps + warp) * kWarpRows;
  if (row0 >= N) return;
  const int chunks = K / 16;  // 16-byte chunks a row
  const uint4* w[kWarpRows];
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r)
    w[r] = reinterpret_cast<const uint4*>(wq + int64_t(min(row0 + r, N - 1)) * K);
  float acc[kWarpRows][T] = {};
  for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint4 wv[kUnroll][kWarpRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
#pragma unroll
      for (int r = 0; r < kWarpRows; ++r)
        wv[u][r] = c < chunks ? __ldcs(w[r] + c) : make_uint4(0, 0, 0, 0);  // streamed once
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(xq + t * ld_x) + c);
#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) acc[r][t] += dot16(wv[u][r], xv);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r) {
    const int n = row0 + r;
    if (n >= N) break;
    const float s = sw[n];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float v = acc[r][t] * (sx[t] * s);
      if (y_f32) {
        float* o = static_cast<float*>(y) + t * ld_y + n;
        *o = accumulate ? *o + v : v;
      } else {
        __nv_bfloat16* o = static_cast<__nv_bfloat16*>(y) + t * ld_y + n;
        if (accumulate) v += __bfloat162float(*o);
        *o = __float2bfloat16_rn(v);
      }
    }
  }
}

}  // namespace

void detail::launch_gemv_fp8(const uint8_t* xq, int64_t ld_x, const float* sx, const uint8_t* wq,
                             const float* sw, int T, int N, int K, void* y, bool y_f32,
                             int64_t ld_y, bool accumulate, cudaStream_t stream) {
  const int rows_per_block = kWarps * kWarpRows;
  const dim3 grid(unsigned((N + rows_per_block - 1) / rows_per_block)), block(kWarps * 32);
  switch (T) {
    case 1:
      fp8_gemv_kernel<1>
          <<<grid, block, 0, stream>>>(xq, ld_x, sx, wq, sw, N, K, y, y_f32, ld_y, accumulate);
      break;
    case 2:
      fp8_gemv_kernel<2>
          <<<grid, block, 0, stream>>>(xq, ld_x, sx, wq, sw, N, K, y, y_f32, ld_y, accumulate);
      break;
    case 3:
      fp8_gemv_kernel<3>
          <<<grid, block, 0, stream>>>(xq, ld_x, sx, wq, sw, N, K, y, y_f32, ld_y, accumulate);
      break;
    default:
      fp8_gemv_kernel<4>
          <<<grid, block, 0, stream>>>(xq, ld_x, sx, wq, sw, N, K, y, y_f32, ld_y, accumulate);
      break;
  }
  RIDGE_GEMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ridge::kernels
