// RoPE (in place) and the KV-cache store.
//
// rope: eight rotated pairs per thread with 16-byte accesses when hd % 16 == 0 and rows are
//   16-byte aligned (grid: head chunks x tokens), else one thread per rotated pair (token, head,
//   i < hd/2) over q's and k's heads together, blocks of 256 threads, 1-D grid. Pairing
//   (i, i + hd/2) (rotate-half, as HF transformers).
//   angle = float(pos) * inv_freq[i] in fp32, then sincosf (rope.cuh's rope_rotate, which the
//   skinny GEMV's rope_kv epilogue shares). Limits: hd even, T * (nq + nk) * hd/2 < 2^62.
// kv_store: one thread per 16-byte chunk (8 bf16) of a row when rows, strides and pointers allow
//   it, else one thread per element; 1-D grid of 256-thread blocks. Pools are rows of `width`
//   elements (slot = block * block_size + offset). A slot outside [0, num_slots) is skipped: in
//   particular every negative slot, e.g. the -1 of a padding row that the engine adds to fill a
//   captured graph's batch bucket (nothing of that row is stored).
//   Into E4M3 pools (bytes) the same way, each value rounded (8 bytes per chunk of 8).
// rope_kv_store: both in one launch of the vectorized form (grid: chunks of q, k and v, tokens);
//   launched with programmatic dependent launch (pdl.cuh) for the decode chain.
#include <cstdint>
#include <algorithm>

#include <cuda_fp8.h>

#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/elementwise/elementwise.h"
#include "ridge/kernels/cuda/pdl.cuh"
#include "ridge/kernels/cuda/rope.cuh"

namespace ridge::kernels {
namespace {

using detail::bf16_bits_to_f32;
using detail::f32_to_bf16_bits;
using detail::aligned16;

constexpr int kThreads = 256;

__global__ void rope_kernel(uint16_t* __restrict__ q, int64_t ld_q, int64_t nq,
                            uint16_t* __restrict__ k, int64_t ld_k, int64_t nk, int64_t half,
                            const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t total) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t i = idx % half;
  const int64_t th = idx / half;
  const int64_t heads = nq + nk;
  const int64_t t = th / heads, h = th % heads;
  uint16_t* x = h < nq ? q + t * ld_q + h * 2 * half : k + t * ld_k + (h - nq) * 2 * half;
  float ra, rb;
  rope_rotate(bf16_bits_to_f32(x[i]), bf16_bits_to_f32(x[i + half]), float(positions[t]),
              inv_freq[i], ra, rb);
  x[i] = f32_to_bf16_bits(ra);
  x[i + half] = f32_to_bf16_bits(rb);
}

// Rotates the 8 pairs x[i0..i0+8) / x[i0+half..i0+half+8) in place (16-byte accesses); the
// rotated halves are also returned (for the KV pool). Same arithmetic per pair as rope_kernel.
__device__ __forceinline__ void rope8(uint16_t* x, int i0, int half, float pos,
                                      const float* __restrict__ inv_freq, uint4& out_a,
                                      uint4& out_b) {
  const uint4 a4 = *reinterpret_cast<const uint4*>(x + i0);
  const uint4 b4 = *reinterpret_cast<const uint4*>(x + i0 + half);
  const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w}, b[4] = {b4.x, b4.y, b4.z, b4.w};
  uint32_t ra[4], rb[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t oa = 0, ob = 0;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float av = __uint_as_float(e ? (a[w] & 0xffff0000u) : (a[w] << 16));
      const float bv = __uint_as_float(e ? (b[w] & 0xffff0000u) : (b[w] << 16));
      float rav, rbv;
      rope_rotate(av, bv, pos, inv_freq[i0 + 2 * w + e], rav, rbv);
      oa |= uint32_t(f32_to_bf16_bits(rav)) << (16 * e);
      ob |= uint32_t(f32_to_bf16_bits(rbv)) << (16 * e);
    }
    ra[w] = oa;
    rb[w] = ob;
  }
  out_a = make_uint4(ra[0], ra[1], ra[2], ra[3]);
  out_b = make_uint4(rb[0], rb[1], rb[2], rb[3]);
  *reinterpret_cast<uint4*>(x + i0) = out_a;
  *reinterpret_cast<uint4*>(x + i0 + half) = out_b;
}

// 8 rotated pairs per thread with 16-byte accesses, 32-bit index arithmetic within a token (the
// per-pair kernel above spends most of its time in four 64-bit divisions per pair).
// Grid: (chunks of the token's heads * half/8 pairs, tokens).
__global__ void rope_vec_kernel(uint16_t* __restrict__ q, int64_t ld_q, int nq,
                                uint16_t* __restrict__ k, int64_t ld_k, int nk, int half,
                                const int32_t* __restrict__ positions,
                                const float* __restrict__ inv_freq, int64_t row0) {
  pdl::begin();
  const int64_t t = row0 + blockIdx.y;
  const int cpr = half / 8;  // 8-pair chunks per head
  const int j = int(blockIdx.x) * blockDim.x + int(threadIdx.x);
  if (j >= (nq + nk) * cpr) return;
  const int h = j / cpr, i0 = (j % cpr) * 8;
  uint16_t* x = h < nq ? q + t * ld_q + int64_t(h) * 2 * half
                       : k + t * ld_k + int64_t(h - nq) * 2 * half;
  uint4 ra, rb;
  rope8(x, i0, half, float(positions[t]), inv_freq, ra, rb);
}

// RoPE and the KV store in one launch (decode): threads [0, (nq+nk)·cpr) rotate q and k chunks
// as rope_vec_kernel (k's rotated chunks also go to the pool), the next nk·2·cpr threads copy
// v's 16-byte chunks to the pool. Slots outside [0, num_slots) store nothing. Launched with PDL.
// 8 bf16 values (one 16-byte chunk) as 8 E4M3 bytes: round to nearest even, saturating.
__device__ __forceinline__ uint2 bf16x8_to_fp8x8(uint4 c) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
  uint32_t b[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    b[i] = uint32_t(__nv_cvt_float2_to_fp8x2(
        make_float2(bf16_bits_to_f32(uint16_t(w[i] & 0xffffu)), bf16_bits_to_f32(uint16_t(w[i] >> 16))),
        __NV_SATFINITE, __NV_E4M3));
  return make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
}

// A chunk of 8 values into a pool row: bf16 as they are (16 bytes), or E4M3 (8 bytes).
template <bool FP8>
__device__ __forceinline__ void store_chunk(void* pool, int64_t elem, uint4 c) {
  if constexpr (FP8)
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(pool) + elem) = bf16x8_to_fp8x8(c);
  else
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(pool) + elem) = c;
}

template <bool FP8>
__global__ void rope_store_vec_kernel(uint16_t* __restrict__ q, int64_t ld_q, int nq,
                                      uint16_t* __restrict__ k, int64_t ld_k, int nk,
                                      const uint16_t* __restrict__ v, int64_t ld_v, int half,
                                      const int32_t* __restrict__ positions,
                                      const float* __restrict__ inv_freq,
                                      const int32_t* __restrict__ slots,
                                      void* __restrict__ k_pool, void* __restrict__ v_pool,
                                      int64_t num_slots) {
  pdl::begin();
  const int64_t t = blockIdx.y;
  const int cpr = half / 8;
  const int j = int(blockIdx.x) * blockDim.x + int(threadIdx.x);
  const int rotated = (nq + nk) * cpr;
  if (j >= rotated + nk * 2 * cpr) return;
  const int64_t slot = slots[t];
  const bool store = slot >= 0 && slot < num_slots;
  const int64_t width = int64_t(nk) * 2 * half;
  if (j < rotated) {
    const int h = j / cpr, i0 = (j % cpr) * 8;
    uint16_t* x = h < nq ? q + t * ld_q + int64_t(h) * 2 * half
                         : k + t * ld_k + int64_t(h - nq) * 2 * half;
    uint4 ra, rb;
    rope8(x, i0, half, float(positions[t]), inv_freq, ra, rb);
    if (h >= nq && store) {
      const int64_t dst = slot * width + int64_t(h - nq) * 2 * half;
      store_chunk<FP8>(k_pool, dst + i0, ra);
      store_chunk<FP8>(k_pool, dst + i0 + half, rb);
    }
  } else if (store) {
    const int64_t c = int64_t(j - rotated) * 8;
    store_chunk<FP8>(v_pool, slot * width + c, *reinterpret_cast<const uint4*>(v + t * ld_v + c));
  }
}

// One value into a pool: bf16 as it is, or E4M3 (round to nearest even, saturating at +-448:
// __NV_SATFINITE, as the host's f32_to_fp8e4m3).
template <bool FP8>
__device__ __forceinline__ void store_value(void* pool, int64_t elem, uint16_t x) {
  if constexpr (FP8)
    static_cast<uint8_t*>(pool)[elem] =
        uint8_t(__nv_cvt_float_to_fp8(bf16_bits_to_f32(x), __NV_SATFINITE, __NV_E4M3));
  else
    static_cast<uint16_t*>(pool)[elem] = x;
}

// One thread per chunk: 8 values (Chunk = uint4) or one (uint16_t).
template <typename Chunk, bool FP8>
__global__ void kv_store_kernel(const Chunk* __restrict__ k, int64_t ld_k,
                                const Chunk* __restrict__ v, int64_t ld_v,
                                const int32_t* __restrict__ slots, int64_t chunks_per_row,
                                void* __restrict__ k_pool, void* __restrict__ v_pool,
                                int64_t num_slots, int64_t total) {
  constexpr int kValues = int(sizeof(Chunk) / 2);
  pdl::begin();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t t = idx / chunks_per_row, c = idx % chunks_per_row;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t elem = (slot * chunks_per_row + c) * kValues;
  if constexpr (kValues == 8) {
    store_chunk<FP8>(k_pool, elem, k[t * ld_k + c]);
    store_chunk<FP8>(v_pool, elem, v[t * ld_v + c]);
  } else {
    store_value<FP8>(k_pool, elem, k[t * ld_k + c]);
    store_value<FP8>(v_pool, elem, v[t * ld_v + c]);
  }
}

template <bool FP8>
void kv_store(const uint16_t* k, int64_t ld_k, const uint16_t* v, int64_t ld_v,
              const int32_t* slots, int64_t T, int64_t width, void* k_pool, void* v_pool,
              int64_t num_slots, cudaStream_t stream) {
  const bool vec = width % 8 == 0 && ld_k % 8 == 0 && ld_v % 8 == 0 && aligned16(k) &&
                   aligned16(v) && aligned16(k_pool) && aligned16(v_pool);
  if (vec) {
    const int64_t cpr = width / 8, total = T * cpr;
    RIDGE_CHECK_CUDA(pdl::launch_pdl(
        kv_store_kernel<uint4, FP8>, dim3(unsigned(detail::ceil_div(total, kThreads))),
        dim3(kThreads), 0, stream, reinterpret_cast<const uint4*>(k), ld_k / 8,
        reinterpret_cast<const uint4*>(v), ld_v / 8, slots, cpr, k_pool, v_pool, num_slots, total));
  } else {
    const int64_t total = T * width;
    RIDGE_CHECK_CUDA(pdl::launch_pdl(kv_store_kernel<uint16_t, FP8>,
                                     dim3(unsigned(detail::ceil_div(total, kThreads))),
                                     dim3(kThreads), 0, stream, k, ld_k, v, ld_v, slots, width,
                                     k_pool, v_pool, num_slots, total));
  }
}

}  // namespace

void rope_bf16(uint16_t* q, int64_t ld_q, int64_t nq, uint16_t* k, int64_t ld_k, int64_t nk,
               int64_t head_dim, const int32_t* positions, const float* inv_freq, int64_t T,
               cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT(head_dim >= 2 && head_dim % 2 == 0 && nq >= 0 && nk >= 0 &&
                          ld_q >= nq * head_dim && ld_k >= nk * head_dim && T >= 0,
                      "rope_bf16",
                      "q " + detail::shape_text(T, nq * head_dim, ld_q) + ", k " +
                          detail::shape_text(T, nk * head_dim, ld_k) + ", head_dim " +
                          std::to_string(head_dim));
  const int64_t total = T * (nq + nk) * (head_dim / 2);
  if (total == 0) return;
  const int64_t half = head_dim / 2;
  if (half % 8 == 0 && ld_q % 8 == 0 && ld_k % 8 == 0 && aligned16(q) && aligned16(k) &&
      (nq + nk) * (half / 8) < (int64_t(1) << 30)) {
    const unsigned gx = unsigned(detail::ceil_div((nq + nk) * (half / 8), kThreads));
    for (int64_t r0 = 0; r0 < T; r0 += 65535) {
      const unsigned gy = unsigned(std::min<int64_t>(65535, T - r0));
      RIDGE_CHECK_CUDA(pdl::launch_pdl(rope_vec_kernel, dim3(gx, gy), dim3(kThreads), 0, stream,
                                       q, ld_q, int(nq), k, ld_k, int(nk), int(half), positions,
                                       inv_freq, r0));
    }
    return;
  }
  rope_kernel<<<unsigned(detail::ceil_div(total, kThreads)), kThreads, 0, stream>>>(
      q, ld_q, nq, k, ld_k, nk, head_dim / 2, positions, inv_freq, total);
  RIDGE_CHECK_LAUNCH("rope_kernel");
}

void kv_store_bf16(const uint16_t* k, int64_t ld_k, const uint16_t* v, int64_t ld_v,
                   const int32_t* slots, int64_t T, int64_t width, void* k_pool, void* v_pool,
                   int64_t num_slots, bool fp8_pools, cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT(T >= 0 && width >= 1 && ld_k >= width && ld_v >= width && num_slots >= 0,
                      "kv_store_bf16",
                      "k " + detail::shape_text(T, width, ld_k) + ", v " +
                          detail::shape_text(T, width, ld_v));
  if (T == 0) return;
  if (fp8_pools)
    kv_store<true>(k, ld_k, v, ld_v, slots, T, width, k_pool, v_pool, num_slots, stream);
  else
    kv_store<false>(k, ld_k, v, ld_v, slots, T, width, k_pool, v_pool, num_slots, stream);
}

namespace {
template <bool FP8>
bool rope_kv_store(uint16_t* q, int64_t ld_q, int64_t nq, uint16_t* k, int64_t ld_k, int64_t nk,
                   const uint16_t* v, int64_t ld_v, int64_t head_dim, const int32_t* positions,
                   const float* inv_freq, const int32_t* slots, int64_t T, void* k_pool,
                   void* v_pool, int64_t num_slots, cudaStream_t stream) {
  const int64_t half = head_dim / 2;
  const bool vec = head_dim % 16 == 0 && ld_q % 8 == 0 && ld_k % 8 == 0 && ld_v % 8 == 0 &&
                   aligned16(q) && aligned16(k) && aligned16(v) && aligned16(k_pool) &&
                   aligned16(v_pool) && T >= 1 && T <= 65535 && ld_q >= nq * head_dim &&
                   ld_k >= nk * head_dim && ld_v >= nk * head_dim && nk >= 1 &&
                   (nq + 3 * nk) * (half / 8) < (int64_t(1) << 30);
  if (!vec) return false;
  const int64_t threads = (nq + nk) * (half / 8) + nk * 2 * (half / 8);
  const dim3 grid(unsigned(detail::ceil_div(threads, kThreads)), unsigned(T));
  RIDGE_CHECK_CUDA(pdl::launch_pdl(rope_store_vec_kernel<FP8>, grid, dim3(kThreads), 0, stream, q,
                                   ld_q, int(nq), k, ld_k, int(nk), v, ld_v, int(half), positions,
                                   inv_freq, slots, k_pool, v_pool, num_slots));
  return true;
}
}  // namespace

bool rope_kv_store_bf16(uint16_t* q, int64_t ld_q, int64_t nq, uint16_t* k, int64_t ld_k,
                        int64_t nk, const uint16_t* v, int64_t ld_v, int64_t head_dim,
                        const int32_t* positions, const float* inv_freq, const int32_t* slots,
                        int64_t T, void* k_pool, void* v_pool, int64_t num_slots, bool fp8_pools,
                        cudaStream_t stream) {
  return fp8_pools ? rope_kv_store<true>(q, ld_q, nq, k, ld_k, nk, v, ld_v, head_dim, positions,
                                         inv_freq, slots, T, k_pool, v_pool, num_slots, stream)
                   : rope_kv_store<false>(q, ld_q, nq, k, ld_k, nk, v, ld_v, head_dim, positions,
                                          inv_freq, slots, T, k_pool, v_pool, num_slots, stream);
}

}  // namespace ridge::kernels
