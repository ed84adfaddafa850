// The warp-row GEMV for one token: gemv_bf16_warp_rows (the plain product, gemm.h) and the fused
// decode GEMVs of gemm_bf16_skinny_fused when SkinnyArgs::warp is set (skinny_warp_applies):
// y[n] = x·W[n]ᵀ with the skinny kernel's prologue (rms_sumsq: the 1/rms scale from the sums of
// squares of the call that wrote x) and epilogues (residual, f32 output, sums of squares, SwiGLU,
// RoPE + KV store), fp32 sums.
//
// Why another GEMV: on the H200 the decode GEMVs that give each block its own 16-row units (the
// MMA kernel, its weight ring, the row-walk GEMV) read their weights at 66-75 % of the read-only
// ceiling, while the same bytes read in "window" order (at any moment the blocks read consecutive
// pieces of the matrix) reach 95 % (docs/KERNELS.md, runs 26-36, the decode-chain probe). The
// window kernels built so far split K across blocks and lost more in the cross-block reduction
// than the order gained. Here no sum crosses a warp: warp w of the grid's Wt warps takes whole
// items (a row, or the pair of rows RoPE needs together), w, w + Wt, w + 2Wt, …, so that
// at any moment the GPU's warps read Wt consecutive items (one window of W, the probe's "window
// rows" order), and each row is reduced by shuffles in the warp that read it. One block barrier
// (x staged; two with the rms prologue, whose sums are added first; one more after the last row
// with sums of squares out), no workspace, deterministic.
//
// Items: plain, row n; swiglu, one row: gate row f (item 2f) or up row F + f (item 2f + 1), so
// that the two rows of output f go to warps 2p and 2p + 1 of one block (Wt is even) in the same
// round, and the up warp hands its sum to the gate warp through shared memory at a barrier of the
// pair (named barrier 1 + p), the gate warp then storing f; rope_kv, pair p < (q_dim + kv_dim)/2:
// rows i and i + hd/2 of q or k head p / (hd/2) (i = p mod hd/2, rotated), else v rows 2j and
// 2j + 1 (not rotated), both in one warp. An item is R rows (1 or 2) × PH phases a row. SwiGLU's
// rows were pairs on one warp too until run 45: a warp then had 2·⌈F / Wt⌉ rows instead of
// ⌈2F / Wt⌉, 12 instead of 11 for Llama-2-7B's gate|up (11,008 pairs on 2,112 warps: a sixth
// round of pairs 21 % full); one row an item took 65 µs off the 32-layer decode chain and ~60 µs
// off the batch-1 step on an H100 (docs/KERNELS.md, "Run 45").
// A lane reads 16 bytes at a time (chunks of 8 values), kLoads chunks a phase (a warp 8 KB: a row
// at K = 4,096), all issued before the first is used, and the next phase's loads are issued
// before the finished row's shuffles and epilogue. One phase a warp is in flight: ptxas tracks
// all of a warp's loads on one scoreboard and waits for it to drain before the first use, so a
// register double buffer would wait for both (docs/KERNELS.md, run 30); the SM's 16 warps keep
// up to 128 KB in flight instead. x is staged in shared memory once a block, after the wait for the
// previous kernel; the first phase of weights is loaded before that wait (programmatic dependent
// launch).
//
// Sums of squares (sumsq_out): one part a block, sumsq_out[b] = the sum of y[n]² of the stored bf16
// values of block b's rows (its warps' sums added in a fixed order at a block barrier after the
// last row), and zeros up to the part count (block 0 writes them): skinny_sumsq_out_parts, one
// slot for each block the grid can have (kMaxBlocksPerSm a SM, at most one per kWarps rows; a
// carveout or a cap can launch fewer). A consumer's rms prologue then reads 264 parts on 132 SMs
// where one a row was 4,096 (16 KB a block, behind the first phase of weights; docs/KERNELS.md,
// run 38; RIDGE_WARP_ROW_PARTS=1 brings the row parts back for A/B runs).
// WALK (plain product only, for A/B runs of the order): warp w takes the contiguous run of rows
// ⌈N/Wt⌉·w … instead (the per-block kernels' order).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/skinny_device.cuh"
#include "ridge/kernels/cuda/pdl.cuh"
#include "ridge/kernels/cuda/trace/block_trace.h"

namespace ridge::kernels {
namespace {

using namespace skinny_device;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxBlocksPerSm = 2;         // 128 registers a thread: two blocks fill the SM's file
constexpr int kLoads = 16;                 // 16-byte chunks a lane per phase
constexpr int kPhaseChunks = 32 * kLoads;  // a warp's chunks per phase (8 KB)
constexpr size_t kStaticSmem = 64;         // red[kWarps] and inv_rms_s, rounded up

std::atomic<int64_t> g_warp_launches{0};

enum class Epi { plain, swiglu, rope };

// 16 bytes of streamed weights, issued where written (volatile: not moved to their use), no L1
// allocation, 256-byte L2 prefetch.
__device__ __forceinline__ uint4 load_stream16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// acc[j] += w_j · x_j over the 8 bf16 pairs of two chunks (bf16 → f32 is a shift).
__device__ __forceinline__ void dot8(float (&acc)[8], const uint4& w, const uint4& x) {
  const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i] = fmaf(__uint_as_float(wv[i] << 16), __uint_as_float(xv[i] << 16), acc[2 * i]);
    acc[2 * i + 1] = fmaf(__uint_as_float(wv[i] & 0xffff0000u),
                          __uint_as_float(xv[i] & 0xffff0000u), acc[2 * i + 1]);
  }
}

template <Epi E>
constexpr int item_rows() {
  return E == Epi::rope ? 2 : 1;
}

// The rows of item `it` (r = 0 or 1) and, for rope_kv, the pair's rotation index.
template <Epi E>
__device__ __forceinline__ int item_row(const SkinnyArgs& a, int it, int r) {
  if constexpr (E == Epi::plain) {
    return it;
  } else if constexpr (E == Epi::swiglu) {
    return (it >> 1) + (it & 1) * (a.N / 2);
  } else {
    const int half = a.rope.head_dim / 2, qk_pairs = (a.rope.q_dim + a.rope.kv_dim) / 2;
    if (it < qk_pairs) return (it / half) * a.rope.head_dim + it % half + r * half;
    return a.rope.q_dim + a.rope.kv_dim + 2 * (it - qk_pairs) + r;
  }
}

template <Epi E>
__device__ __forceinline__ int item_count(const SkinnyArgs& a) {
  return E == Epi::rope ? a.N / 2 : a.N;
}

// trace (RIDGE_WARP_TRACE=1, diagnostic, block_trace.h): per block, %globaltimer at entry, after
// x is staged (the streaming starts), when warp 0 has finished its items, and when every warp has
// (a barrier only traced launches pass), and the SM: where the fixed cost of a launch goes.
template <Epi E, bool RMS, bool WALK>
__global__ void __launch_bounds__(kThreads)
    warp_gemv_kernel(const SkinnyArgs a, unsigned long long* trace, int out_parts) {
  extern __shared__ uint4 xs[];  // x: K / 8 chunks
  __shared__ float red[kWarps];
  __shared__ float inv_rms_s;
  __shared__ float up_sum[kWarps / 2][2];  // swiglu: each warp pair's up row, by round parity
  constexpr int R = item_rows<E>();
  static_assert(!(WALK && E == Epi::swiglu), "a SwiGLU pair of warps takes its rows in one round");
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int Wt = int(gridDim.x) * kWarps, gw = int(blockIdx.x) * kWarps + warp;
  const int K = a.K, C = K / 8;                          // chunks a row
  const int PH = (C + kPhaseChunks - 1) / kPhaseChunks;  // phases a row
  const int IPH = R * PH;                                // phases an item
  const int items = item_count<E>(a);
  const int per_warp = (items + Wt - 1) / Wt;  // WALK: items a warp
  const int mine = WALK ? max(0, min(per_warp, items - gw * per_warp))
                        : (gw < items ? (items - gw + Wt - 1) / Wt : 0);
  const int Q = mine * IPH;  // this warp's phases
  unsigned long long* const stamps = trace != nullptr && threadIdx.x == 0
                                         ? trace + size_t(blockIdx.x) * detail::kPhaseEntries
                                         : nullptr;
  if (stamps) stamps[0] = globaltimer_ns(), stamps[4] = sm_id();
  auto item_of = [&](int j) { return WALK ? gw * per_warp + j : gw + j * Wt; };
  auto load = [&](uint4(&buf)[kLoads], int q) {
    const int j = q / IPH, w = q - j * IPH, r = w / PH, p = w - r * PH;
    const uint4* row =
        reinterpret_cast<const uint4*>(a.W + size_t(item_row<E>(a, item_of(j), r)) * K);
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int c = p * kPhaseChunks + i * 32 + lane;
      buf[i] = c < C ? load_stream16(row + c) : make_uint4(0, 0, 0, 0);
    }
  };

  uint4 buf[kLoads];
  if (Q > 0) load(buf, 0);  // weights are read-only: before the wait
  pdl::begin();
  for (int c = int(threadIdx.x); c < C; c += kThreads)
    xs[c] = *reinterpret_cast<const uint4*>(a.X + size_t(c) * 8);
  if constexpr (RMS) {
    // 1/rms of x from the parts the call that wrote x left: thread t adds parts t, t + 256, …,
    // then the warps and the block in a fixed order. Eight loads in flight a thread, for the
    // counts that take more than one a thread (the row parts of RIDGE_WARP_ROW_PARTS=1: 4,096
    // for Llama-2-7B, which a plain loop reads one L2 round trip after another).
    constexpr int kBatch = 8;
    float ss = 0.0f;
    int p = int(threadIdx.x);
    for (; p + (kBatch - 1) * kThreads < a.sumsq_parts; p += kBatch * kThreads) {
      float v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) v[i] = a.sumsq_in[p + i * kThreads];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) ss += v[i];
    }
    for (; p < a.sumsq_parts; p += kThreads) ss += a.sumsq_in[p];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) t += red[w];
      inv_rms_s = 1.0f / sqrtf(t / float(K) + a.eps);
    }
  }
  __syncthreads();
  const float inv_rms = RMS ? inv_rms_s : 1.0f;
  if (stamps) stamps[1] = globaltimer_ns();

  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
  float first = 0.0f;  // an item's first row's sum (rope pairs)
  float sq = 0.0f;     // lane 0 (plain): the squares of this warp's stored rows, in item order
  for (int q = 0; q < Q; ++q) {
    const int j = q / IPH, w = q - j * IPH, r = w / PH, p = w - r * PH;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int c = p * kPhaseChunks + i * 32 + lane;
      if (c < C) dot8(acc, buf[i], xs[c]);
    }
    if (q + 1 < Q) load(buf, q + 1);  // in flight during the reduction and the epilogue
    if (p != PH - 1) continue;
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
    s *= inv_rms;
    if constexpr (E == Epi::swiglu) {  // one row of output item / 2; the pair's other warp has
                                       // the other
      float* const slot = &up_sum[warp >> 1][j & 1];
      if ((warp & 1) && lane == 0) *slot = s;
      asm volatile("bar.sync %0, 64;" ::"r"(1 + (warp >> 1)) : "memory");
      if (!(warp & 1) && lane == 0) store_swiglu(a, item_of(j) >> 1, 0, s, *slot);
    } else if (R == 2 && r == 0) {
      first = s;
    } else if (lane == 0) {
      const int it = item_of(j);
      if constexpr (E == Epi::plain) {
        const float stored = store_output(a, it, 0, s);
        if (a.sumsq_out != nullptr) {
          if (out_parts < 0)  // RIDGE_WARP_ROW_PARTS=1: one part a row
            a.sumsq_out[it] = stored * stored;
          else
            sq += stored * stored;
        }
      } else {
        const int half = a.rope.head_dim / 2, qk_pairs = (a.rope.q_dim + a.rope.kv_dim) / 2;
        const RopeRows rr{item_row<E>(a, it, 0), item_row<E>(a, it, 1),
                          it < qk_pairs ? it % half : -1};
        store_rope_pair(a, rr, 0, first, s);
      }
    }
  }
  if (E == Epi::plain && a.sumsq_out != nullptr && out_parts >= 0) {  // uniform
    if (lane == 0) red[warp] = sq;  // red's prologue use ended at the barrier before the loop
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) t += red[w];
      a.sumsq_out[blockIdx.x] = t;
    }
    if (blockIdx.x == 0)
      for (int p = int(gridDim.x + threadIdx.x); p < out_parts; p += kThreads)
        a.sumsq_out[p] = 0.0f;
  }
  if (trace != nullptr) {  // uniform: every thread of every block
    if (stamps) stamps[2] = globaltimer_ns();
    __syncthreads();
    if (stamps) stamps[3] = globaltimer_ns();
  }
}

// The sums-of-squares parts of a plain launch of N rows on `sms` SMs: a slot for each block the
// grid can have (launch below).
int block_parts(int sms, int N) {
  return std::min(sms * kMaxBlocksPerSm, (N + kWarps - 1) / kWarps);
}

// RIDGE_WARP_ROW_PARTS=1 (A/B runs of the consumers' cost): one part a row, as before run 38.
bool row_parts() {
  static const bool on = [] {
    const char* v = std::getenv("RIDGE_WARP_ROW_PARTS");
    return v && *v == '1';
  }();
  return on;
}

// RIDGE_WARP_GEMV_BLOCKS_PER_SM=n (A/B runs): at most n blocks a SM.
int blocks_per_sm_cap() {
  static const int cap = [] {
    const char* v = std::getenv("RIDGE_WARP_GEMV_BLOCKS_PER_SM");
    return v && *v ? std::max(0, std::atoi(v)) : 0;
  }();
  return cap;
}

template <Epi E, bool RMS, bool WALK>
void launch(const SkinnyArgs& a, bool pdl, int blocks_per_sm, cudaStream_t stream) {
  auto kernel = warp_gemv_kernel<E, RMS, WALK>;
  const size_t smem = size_t(a.K) * sizeof(bf16);
  // Resident blocks a SM by device and x size, remembered per thread for the few sizes a model's
  // GEMVs have (each GEMV's K; a fifth replaces the oldest). On a miss (a device or size not seen
  // yet) the shared-memory attribute is raised on the current device first.
  struct Occupancy {
    int device = -1;
    size_t smem = 0;
    int per_sm = 0;
  };
  static thread_local Occupancy seen[4];
  static thread_local int next = 0;
  const int device = detail::current_device();
  Occupancy* o = std::find_if(std::begin(seen), std::end(seen), [&](const Occupancy& e) {
    return e.device == device && e.smem == smem;
  });
  if (o == std::end(seen)) {
    o = &seen[next];
    next = (next + 1) % 4;
    *o = Occupancy{};
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(gemv_warp_max_k * sizeof(bf16))));
    RIDGE_GEMM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o->per_sm, kernel, kThreads, smem));
    o->device = device, o->smem = smem;
  }
  const int sms = detail::device_sms(device);
  int per_sm = o->per_sm;
  // A launch carveout (the decode chain's, pdl.h) can leave room for fewer blocks than the
  // occupancy calculator assumes: the grid would then run in two waves, and the window order
  // (every warp's items interleaved with every other's) assumes one.
  if (const int percent = pdl::launch_carveout(); percent >= 0)
    per_sm = std::min(per_sm, detail::blocks_in_carveout(percent, smem + kStaticSmem));
  per_sm = std::clamp(per_sm, 1, kMaxBlocksPerSm);
  if (blocks_per_sm > 0) per_sm = std::min(per_sm, blocks_per_sm);
  if (const int cap = blocks_per_sm_cap(); cap > 0) per_sm = std::min(per_sm, cap);
  const int items = E == Epi::rope ? a.N / 2 : a.N;
  const int grid = std::max(1, std::min(sms * per_sm, (items + kWarps - 1) / kWarps));
  // RIDGE_WARP_TRACE=1 (diagnostic): launches outside stream capture are traced and summarized on
  // stderr (this synchronizes the stream).
  static const bool tracing = detail::block_trace_requested("RIDGE_WARP_TRACE");
  unsigned long long* const trace =
      tracing ? detail::block_trace("RIDGE_WARP_TRACE", grid, stream, detail::kPhaseEntries)
              : nullptr;
  RIDGE_GEMM_CUDA_CHECK(pdl::launch(pdl, kernel, dim3(grid), dim3(kThreads), smem, stream, a, trace,
                                    row_parts() ? -1 : block_parts(sms, a.N)));
  g_warp_launches.fetch_add(1, std::memory_order_relaxed);
  if (trace) {
    static const char* const phases[3] = {"start", "stream", "finish"};
    detail::print_block_phases("warp-row GEMV", trace, grid, phases, stream);
  }
}

template <Epi E>
void launch_epi(const SkinnyArgs& a, bool rms, cudaStream_t stream) {
  if (rms)
    launch<E, true, false>(a, a.pdl_launch, 0, stream);
  else
    launch<E, false, false>(a, a.pdl_launch, 0, stream);
}

}  // namespace

bool skinny_warp_applies(const SkinnyArgs& a) {
  return a.warp && a.M == 1 && a.K % 8 == 0 && a.K <= gemv_warp_max_k && a.split_k <= 1 &&
         (!a.rope.positions || a.rope.head_dim % 2 == 0);
}

int skinny_warp_sumsq_parts(int N) {
  return row_parts() ? N : block_parts(detail::device_sms(detail::current_device()), N);
}

int skinny_sumsq_out_parts(const SkinnyArgs& a) {
  return skinny_warp_applies(a) ? skinny_warp_sumsq_parts(a.N) : skinny_sumsq_parts(a.N);
}

int64_t skinny_warp_launches() {
  return g_warp_launches.load(std::memory_order_relaxed);
}

void detail::launch_warp_gemv_fused(const SkinnyArgs& a, SkinnyPrologue prologue,
                                    cudaStream_t stream) {
  const bool rms = prologue == SkinnyPrologue::rms_sumsq;
  if (a.rope.positions)
    launch_epi<Epi::rope>(a, rms, stream);
  else if (a.swiglu)
    launch_epi<Epi::swiglu>(a, rms, stream);
  else
    launch_epi<Epi::plain>(a, rms, stream);
}

void detail::launch_warp_gemv(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int N,
                              int K, bool pdl, int blocks_per_sm, bool walk, cudaStream_t stream) {
  SkinnyArgs a;
  a.X = X, a.ld_x = K, a.W = W, a.Y = Y, a.residual = residual, a.M = 1, a.N = N, a.K = K;
  if (walk)
    launch<Epi::plain, false, true>(a, pdl, blocks_per_sm, stream);
  else
    launch<Epi::plain, false, false>(a, pdl, blocks_per_sm, stream);
}

}  // namespace ridge::kernels
