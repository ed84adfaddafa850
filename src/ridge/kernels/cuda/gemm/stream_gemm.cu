// The weight-stream GEMM (gemm_bf16_stream, gemm.h): Y[M,N] = X[M,K] · W[N,K]ᵀ (+ residual) for
// 1-64 tokens, where the weights are the bytes and the kernel's only job is to keep HBM busy.
//
// Swap AB: the weights are wgmma's A operand (64 rows each of two consumer warpgroups, so a
// tile is 128 weight rows) and the tokens its N (8, 16, 32 or 64 columns; rows past M are
// zero-filled by TMA). A producer thread streams 128×64 weight boxes and T×64 activation boxes
// with TMA (128-byte swizzle) into a ring of 6 stages (102-144 KiB a CTA, ~13 MiB in flight on an
// H200: several times HBM's bandwidth-latency product). One CTA per SM, persistent.
//
// Stream-K: the work is tiles × k-blocks iterations (one stage each), and CTA c takes the
// contiguous range [c·total/G, (c+1)·total/G), so every SM streams the same number of bytes
// whatever the shape (no wave quantization: qkv of Llama-2-7B is 96 tiles for 132 SMs). A range
// crosses tile boundaries: a tile covered whole by one CTA is stored directly; the CTAs sharing
// a tile write their fp32 partials to a workspace slot each, count themselves on the tile's
// ticket, and the last to arrive adds the partials in CTA order (deterministic: the same G gives
// the same bits whoever arrives last), stores the tile and resets the ticket for the next call.
// A CTA has at most two partial segments (its first and its last), so the workspace is
// G × 2 partial tiles plus one ticket per tile (gemm_bf16_stream_workspace_bytes).
//
// PDL: the producer issues the first ring's weight loads before griddepcontrol.wait (weights are
// read-only), then the activations; consumers wait before touching the workspace or Y.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/sm90.cuh"
#include "ridge/kernels/cuda/pdl.cuh"
#include "ridge/kernels/cuda/trace/block_trace.h"

namespace ridge::kernels {
namespace {

using namespace sm90;

constexpr int kRows = 128;  // weight rows per tile: two consumer warpgroups of 64
constexpr int kKB = 64;     // k per stage: one 128-byte swizzle row
constexpr int kConsumerThreads = 256;
constexpr int kThreads = 128 + kConsumerThreads;  // warpgroup 0: the producer's

template <int T>
struct StreamConfig {
  static constexpr int kWBytes = kRows * kKB * 2;
  static constexpr int kXBytes = T * kKB * 2;  // a multiple of 1024 for T ≥ 8
  static constexpr int kStageBytes = kWBytes + kXBytes;
  // Six stages (102-144 KiB): 4, 8 and 12 measured slower on the Llama-2-7B shapes at M = 1
  // (H200, run 18: qkv 33.2 / 30.8 / 32.4 µs against 30.8-31.1 at 6; the first stage's arrival
  // grows with the ring, 2.7 µs at 4 stages to 6.5 at 12, as every CTA's whole ring is one burst).
  static constexpr int kStages = 6;
  struct alignas(1024) Shared {
    bf16 w[kStages][kRows * kKB];
    bf16 x[kStages][T * kKB];
    uint64_t full[kStages];
    uint64_t empty[kStages];
    int last;  // the tile's ticket said this CTA arrived last
  };
  static constexpr size_t kSmemBytes = sizeof(Shared) + 1024;  // + slack to align
  static_assert(kXBytes % 1024 == 0, "activation boxes must keep the ring 1024-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

template <int T>
__device__ __forceinline__ void wgmma_tokens(float (&acc)[T / 2], uint64_t da, uint64_t db,
                                             int scale_d) {
  if constexpr (T == 8)
    wgmma_m64n8k16_bf16(acc, da, db, scale_d);
  else if constexpr (T == 16)
    wgmma_m64n16k16_bf16(acc, da, db, scale_d);
  else if constexpr (T == 32)
    wgmma_m64n32k16_bf16(acc, da, db, scale_d);
  else
    wgmma_m64n64k16_bf16(acc, da, db, scale_d);
}

// The CTA whose range holds iteration i (ranges [c·total/G, (c+1)·total/G)).
__device__ __forceinline__ int cta_of(long long i, long long total, int G) {
  return static_cast<int>(((i + 1) * G - 1) / total);
}

template <int T>
__global__ void __launch_bounds__(kThreads, 1)
    stream_gemm_kernel(const __grid_constant__ CUtensorMap tmap_x,
                       const __grid_constant__ CUtensorMap tmap_w, bf16* Y, const bf16* residual,
                       int M, int N, int K, float* partials, unsigned* tickets,
                       unsigned long long* trace) {
  using Cfg = StreamConfig<T>;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ uint8_t smem_raw[];
  typename Cfg::Shared& s = *reinterpret_cast<typename Cfg::Shared*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));

  const int k_blocks = (K + kKB - 1) / kKB;
  const long long total = static_cast<long long>((N + kRows - 1) / kRows) * k_blocks;
  const int G = gridDim.x, c = blockIdx.x;
  const long long begin = c * total / G, end = (c + 1) * total / G;

  // RIDGE_STREAM_TRACE (diagnostic, block_trace.h): per CTA, %globaltimer at entry, the first
  // stage's arrival, the end of the main loop and the end of the CTA's last epilogue.
  auto stamp = [&](int k) {
    if (trace != nullptr) trace[c * detail::kBlockStamps + k] = globaltimer_ns();
  };
  if (threadIdx.x == 0) stamp(0);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], kConsumerThreads / 32);
    }
    mbar_fence_init();
  }
  __syncthreads();
  pdl::launch_dependents();

  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) {
      // The first ring's weights before the wait: they do not depend on the previous kernel.
      const long long pre = end < begin + kStages ? end : begin + kStages;
      for (long long i = begin; i < pre; ++i) {
        const int st = static_cast<int>(i - begin);
        mbar_arrive_expect_tx(&s.full[st], Cfg::kStageBytes);
        tma_load_2d(s.w[st], &tmap_w, &s.full[st], static_cast<int>(i % k_blocks) * kKB,
                    static_cast<int>(i / k_blocks) * kRows);
      }
      pdl::wait();
      for (long long i = begin; i < pre; ++i) {
        const int st = static_cast<int>(i - begin);
        tma_load_2d(s.x[st], &tmap_x, &s.full[st], static_cast<int>(i % k_blocks) * kKB, 0);
      }
      int stage = static_cast<int>(pre - begin) % kStages;
      uint32_t phase = pre - begin == kStages ? 1 : 0;
      for (long long i = pre; i < end; ++i) {
        mbar_wait(&s.empty[stage], phase ^ 1);
        mbar_arrive_expect_tx(&s.full[stage], Cfg::kStageBytes);
        const int kc = static_cast<int>(i % k_blocks) * kKB;
        tma_load_2d(s.w[stage], &tmap_w, &s.full[stage], kc,
                    static_cast<int>(i / k_blocks) * kRows);
        tma_load_2d(s.x[stage], &tmap_x, &s.full[stage], kc, 0);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    } else {
      pdl::wait();
    }
    return;
  }

  pdl::wait();
  const int tid = threadIdx.x - 128;  // 0..255 over the two consumer warpgroups
  const int consumer = tid / 128;
  const int lane = tid & 31, warp_in_group = (tid / 32) & 3;
  float acc[T / 2] = {};
  int stage = 0;
  uint32_t phase = 0;
  // Accumulator fragment of m64nT: register 4j+{0,1} holds (weight row 16w + lane/4, tokens
  // 8j + 2(lane%4) + {0,1}); 4j+{2,3} the same tokens 8 rows further.
  const int row_in_tile = consumer * 64 + warp_in_group * 16 + (lane >> 2);
  const int tok0 = 2 * (lane & 3);
  auto store_tile = [&](int tile) {
#pragma unroll
    for (int r = 0; r < T / 2; ++r) {
      const int n = tile * kRows + row_in_tile + ((r & 2) ? 8 : 0);
      const int m = (r / 4) * 8 + tok0 + (r & 1);
      if (n < N && m < M) {
        const size_t idx = static_cast<size_t>(m) * N + n;
        float v = acc[r];
        if (residual != nullptr) v += __bfloat162float(residual[idx]);
        Y[idx] = __float2bfloat16(v);
      }
    }
  };

  for (long long i = begin; i < end;) {
    const int tile = static_cast<int>(i / k_blocks);
    const long long tile_begin = static_cast<long long>(tile) * k_blocks;
    const long long seg_end = end < tile_begin + k_blocks ? end : tile_begin + k_blocks;
    int prev = -1;
    for (long long j = i; j < seg_end; ++j) {
      mbar_wait(&s.full[stage], phase);
      if (j == begin && tid == 0) stamp(1);
      wgmma_fence();
      const bf16* a = s.w[stage] + consumer * 64 * kKB;
      const bf16* b = s.x[stage];
#pragma unroll
      for (int kk = 0; kk < kKB / 16; ++kk)
        wgmma_tokens<T>(acc, make_desc_k128(a + kk * 16), make_desc_k128(b + kk * 16),
                        (j > i || kk > 0) ? 1 : 0);
      wgmma_commit();
      if (prev >= 0) {
        wgmma_wait<1>();  // the previous stage's wgmmas are done
        if (lane == 0) mbar_arrive(&s.empty[prev]);
      }
      prev = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
    if (lane == 0) mbar_arrive(&s.empty[prev]);

    if (i == tile_begin && seg_end == tile_begin + k_blocks) {
      store_tile(tile);  // the whole tile is this CTA's
    } else {
      // A shared tile: this segment's partial to its slot (0: the CTA's first segment, 1: its
      // last), then the ticket; the last of the tile's CTAs adds all slots in CTA order.
      const int slot = i == begin ? 0 : 1;
      float* mine = partials + static_cast<size_t>(c * 2 + slot) * (T / 2) * kConsumerThreads;
#pragma unroll
      for (int r = 0; r < T / 2; ++r) __stcg(mine + r * kConsumerThreads + tid, acc[r]);
      const int first = cta_of(tile_begin, total, G);
      const int last = cta_of(tile_begin + k_blocks - 1, total, G);
      __threadfence();
      named_barrier(1, kConsumerThreads);
      if (tid == 0) {
        const unsigned arrived = atomicAdd(&tickets[tile], 1u) + 1;
        s.last = arrived == static_cast<unsigned>(last - first + 1);
      }
      named_barrier(1, kConsumerThreads);
      if (s.last) {
        __threadfence();
#pragma unroll
        for (int r = 0; r < T / 2; ++r) acc[r] = 0.f;
        for (int cc = first; cc <= last; ++cc) {
          // CTA cc's segment of this tile is its first unless its range began in an earlier tile.
          const long long cc_begin = cc * total / G;
          const int cc_slot = cc_begin >= tile_begin ? 0 : 1;
          const float* p =
              partials + static_cast<size_t>(cc * 2 + cc_slot) * (T / 2) * kConsumerThreads;
#pragma unroll
          for (int r = 0; r < T / 2; ++r) acc[r] += __ldcg(p + r * kConsumerThreads + tid);
        }
        store_tile(tile);
        if (tid == 0) tickets[tile] = 0;  // for the next call (a later kernel)
      }
    }
    i = seg_end;
    if (tid == 0 && i == end) stamp(2);
  }
  named_barrier(1, kConsumerThreads);
  if (tid == 0) stamp(3);
}

template <int T>
void launch_stream(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int N,
                   int K, float* partials, unsigned* tickets, int ctas, cudaStream_t stream,
                   unsigned long long* trace) {
  using Cfg = StreamConfig<T>;
  auto kernel = stream_gemm_kernel<T>;
  static const bool configured = [&] {
    RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Cfg::kSmemBytes)));
    return true;
  }();
  (void)configured;
  const CUtensorMap tx = detail::make_tensor_map_bf16(X, M, K, T, kKB);
  const CUtensorMap tw = detail::make_tensor_map_bf16(W, N, K, kRows, kKB);
  RIDGE_GEMM_CUDA_CHECK(pdl::launch(true, 1, kernel, dim3(ctas), dim3(kThreads), Cfg::kSmemBytes,
                                    stream, tx, tw, Y, residual, M, N, K, partials, tickets,
                                    trace));
}

}  // namespace

// The workspace: two partial tiles per CTA (at most one CTA per SM), then the tickets.
static size_t partials_bytes(int sms) {
  return static_cast<size_t>(sms) * 2 * kRows * stream_gemm_max_tokens * sizeof(float);
}

size_t detail::stream_gemm_workspace_bytes(int sms) {
  return partials_bytes(sms) + static_cast<size_t>(stream_gemm_max_tiles) * sizeof(unsigned);
}

size_t gemm_bf16_stream_workspace_bytes() {
  return detail::stream_gemm_workspace_bytes(detail::device_sms(detail::current_device()));
}

void detail::launch_stream_gemm(const bf16* X, const bf16* W, bf16* Y, const bf16* residual,
                                int M, int N, int K, void* workspace, int max_ctas,
                                cudaStream_t stream) {
  const int sms = detail::device_sms(detail::current_device());
  const long long total =
      static_cast<long long>((N + kRows - 1) / kRows) * ((K + kKB - 1) / kKB);
  const int ctas = static_cast<int>(
      std::min<long long>(total, max_ctas > 0 ? std::min(max_ctas, sms) : sms));
  auto* partials = static_cast<float*>(workspace);
  auto* tickets =
      reinterpret_cast<unsigned*>(static_cast<uint8_t*>(workspace) + partials_bytes(sms));
  // RIDGE_STREAM_TRACE=1 (diagnostic): launches outside stream capture are traced and the
  // per-CTA times summarized on stderr (this synchronizes the stream).
  static const bool tracing = detail::block_trace_requested("RIDGE_STREAM_TRACE");
  unsigned long long* const trace =
      tracing ? detail::block_trace("RIDGE_STREAM_TRACE", ctas, stream) : nullptr;
  if (M <= 8)
    launch_stream<8>(X, W, Y, residual, M, N, K, partials, tickets, ctas, stream, trace);
  else if (M <= 16)
    launch_stream<16>(X, W, Y, residual, M, N, K, partials, tickets, ctas, stream, trace);
  else if (M <= 32)
    launch_stream<32>(X, W, Y, residual, M, N, K, partials, tickets, ctas, stream, trace);
  else
    launch_stream<64>(X, W, Y, residual, M, N, K, partials, tickets, ctas, stream, trace);
  static const char* const names[detail::kBlockStamps] = {"entry", "first", "loop_end", "exit"};
  if (trace) detail::print_block_trace("stream", trace, ctas, names, M, N, K, stream);
}

}  // namespace ridge::kernels
