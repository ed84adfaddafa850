// Device helpers shared by the decode GEMV kernels (skinny_gemm.cu: the MMA kernel and the
// row-stream GEMV; window_gemm.cu: the window kernel; warp_gemv.cu: the warp-row GEMV): loads,
// cp.async copies, the m16n8k16 MMA, named barriers, the release/acquire pair of the ticket
// protocols, and the epilogue stores (plain, SwiGLU, RoPE + KV).
// Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <cuda_fp8.h>

#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/rope.cuh"

namespace ridge::kernels::skinny_device {

// Activations are re-read by every row tile: keep them cacheable in L1.
__device__ __forceinline__ uint4 load_activations16(const bf16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// 16 bytes global -> shared without registers, L1 bypassed, the same 256-byte L2 prefetch as
// load_weights16 (stream_load.cuh). The copies of a thread complete in commit-group order
// (stage_commit, cp.async.wait_group); another thread sees them after that wait and a barrier.
__device__ __forceinline__ void stage_weights16(uint4* dst, const void* src) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
// The same copy reading src_bytes (0 or 16) of src and filling the rest of the 16 bytes with
// zeros: chunks past the end of a row come out as 0 (src must still be a valid address).
__device__ __forceinline__ void stage_weights16_zfill(uint4* dst, const void* src, int src_bytes) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void stage_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void stage_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}
// Waits until at most N of this thread's commit groups are pending (the older ones landed).
template <int N>
__device__ __forceinline__ void stage_wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                  uint32_t a2, uint32_t a3, uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Named barriers (ids 1..15; 0 is __syncthreads): sync waits, arrive does not; count is the
// number of threads (a multiple of 32) that arrive or sync on the barrier for it to complete.
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// The row-stream GEMV's ticket protocol: a release add publishes what the warp stored before it
// (after a __syncwarp); the block that reads the completing count issues fence_acq_rel_gpu before
// it reads what the other blocks published. (The window GEMV's hand-off needs no fence: below.)
__device__ __forceinline__ unsigned add_release_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// The window GEMV's hand-off without fences: every partial sum is stored as bits that are never
// zero (partial_bits: −0 made +0, then the sign bit flipped, so only −0 could have given 0), into
// scratch that every launch leaves zero. The count is a relaxed add; the block that completes a
// unit reads each partial until it is not zero (its store was issued before its block's count, so
// it arrives), sums, and zeroes it again. Every access to scratch and tickets is a relaxed
// gpu-scope one, so the per-location (coherence) order holds: the zero written after a read of
// the value cannot be overtaken by the value's own store.
__device__ __forceinline__ unsigned add_relaxed_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}
__device__ __forceinline__ unsigned ld_relaxed_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_gpu(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned partial_bits(float v) {
  return __float_as_uint(__fadd_rn(v, 0.0f)) ^ 0x80000000u;
}
__device__ __forceinline__ float partial_value(unsigned bits) {
  return __uint_as_float(bits ^ 0x80000000u);
}

// The publisher warp's pipeline of the row-stream and window GEMVs, for items i = 0 … n − 1 of a
// block (row groups, pieces): `receive(i)` takes item i's partial sums from the loader warps
// (barrier, shared memory) and returns them, `store(i, sums)` writes them to scratch, `count(j)`
// (lane 0) adds item j to its unit's ticket (with a release in the row-stream GEMV, relaxed in
// the window GEMV) and returns the count before it, and `settle(j, old)` runs the unit's epilogue
// when item j completed it (old from lane 0). Item j is counted one step after its store (its
// stores long acknowledged, so a release does not wait for them; the barrier in receive orders
// every lane's stores before lane 0's add) and settled
// one step after that (the add's round trip hidden behind an item). The counts of even and odd
// items live in two registers, the loop unrolled by two, so that no register copy waits for an
// add's result. (Stored, released and read in one step, the first forms made two L2 round trips
// an item in series.) n ≥ 1.
template <typename Receive, typename Store, typename Count, typename Settle>
__device__ __forceinline__ void ticket_pipeline(int n, int lane, Receive&& receive, Store&& store,
                                                Count&& count, Settle&& settle) {
  auto step = [&](int i, unsigned& old_prev, unsigned& old_prev2) {
    const auto sums = receive(i);
    if (i >= 1 && lane == 0) old_prev = count(i - 1);
    store(i, sums);
    if (i >= 2) settle(i - 2, old_prev2);
  };
  unsigned old0 = 0, old1 = 0;  // the counts of even and odd items
  int i = 0;
  for (; i + 1 < n; i += 2) {
    step(i, old1, old0);      // counts item i − 1 (odd), settles i − 2 (even)
    step(i + 1, old0, old1);  // counts item i (even), settles i − 1 (odd)
  }
  if (i < n) step(i, old1, old0), ++i;
  // The last item: counted after its stores (in its own register, so that settling the item
  // before it does not wait for the add), then the last two settled.
  __syncwarp();
  const int last = i - 1;
  unsigned old_last = 0;
  if (lane == 0) old_last = count(last);
  if (last >= 1) settle(last - 1, last & 1 ? old0 : old1);
  settle(last, old_last);
}

// The plain store of Y[m, n] (+ residual; f32 or bf16); returns the value stored (bf16 output) for
// the sums of squares, 0 for f32.
__device__ __forceinline__ float store_output(const SkinnyArgs& a, int n, int m, float sum) {
  const size_t idx = static_cast<size_t>(m) * a.N + n;
  if (a.residual != nullptr) sum += __bfloat162float(a.residual[idx]);
  if (a.y_f32) {
    static_cast<float*>(a.Y)[idx] = sum;
    return 0.0f;
  }
  const bf16 out = __float2bfloat16(sum);
  static_cast<bf16*>(a.Y)[idx] = out;
  return __bfloat162float(out);
}

// A rotated pair of rope_kv: rows first and second of Y (for q and k rows i and i + head_dim/2
// of a head, freq = i; for v any two rows, freq = -1: not rotated).
struct RopeRows {
  int first, second, freq;
};

// rope_kv: one value into a KV pool row (bf16 as stored in Y, or E4M3 as kv_store rounds it).
__device__ __forceinline__ void store_pool(void* pool, bool fp8, int64_t elem, bf16 v) {
  if (fp8)
    static_cast<uint8_t*>(pool)[elem] =
        uint8_t(__nv_cvt_float_to_fp8(__bfloat162float(v), __NV_SATFINITE, __NV_E4M3));
  else
    static_cast<bf16*>(pool)[elem] = v;
}

// The epilogue formulas on a finished product (the MMA kernel's finish_tile, the row-stream
// GEMV's unit epilogue and the warp-row GEMV's), after the prologue's 1/rms scale.
// rope_kv: rows r.first / r.second of token m, each rounded to bf16 first (as the plain product
// stores it and rope_kv_store_bf16 reads it back), rotated when a q or k pair; into Y, and k and v
// into the KV pools at the token's slot.
__device__ __forceinline__ void store_rope_pair(const SkinnyArgs& a, const RopeRows& r, int m,
                                                float s1, float s2) {
  bf16 o1 = __float2bfloat16(s1), o2 = __float2bfloat16(s2);
  if (r.freq >= 0) {
    float ra, rb;
    rope_rotate(__bfloat162float(o1), __bfloat162float(o2), float(a.rope.positions[m]),
                a.rope.inv_freq[r.freq], ra, rb);
    o1 = __float2bfloat16(ra), o2 = __float2bfloat16(rb);
  }
  bf16* y = static_cast<bf16*>(a.Y) + static_cast<size_t>(m) * a.N;
  y[r.first] = o1;
  y[r.second] = o2;
  if (r.first < a.rope.q_dim) return;  // q: Y only
  const int64_t slot = a.rope.slots[m];
  if (slot < 0 || slot >= a.rope.num_slots) return;
  const bool is_v = r.freq < 0;
  const int col = r.first - a.rope.q_dim - (is_v ? a.rope.kv_dim : 0);
  void* pool = is_v ? a.rope.v_pool : a.rope.k_pool;
  const int64_t at = slot * a.rope.kv_dim + col;
  store_pool(pool, a.rope.kv_fp8, at, o1);
  store_pool(pool, a.rope.kv_fp8, at + (r.second - r.first), o2);
}
// swiglu: output f of token m from the gate and up products, each rounded to bf16 first, as the
// product stored and then read back by silu_mul_bf16 would be.
__device__ __forceinline__ void store_swiglu(const SkinnyArgs& a, int f, int m, float sg,
                                             float su) {
  const float gv = __bfloat162float(__float2bfloat16(sg));
  const float uv = __bfloat162float(__float2bfloat16(su));
  static_cast<bf16*>(a.Y)[static_cast<size_t>(m) * (a.N / 2) + f] =
      __float2bfloat16(gv / (1.0f + expf(-gv)) * uv);
}
}  // namespace ridge::kernels::skinny_device
