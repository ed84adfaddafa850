// The window GEMV for 1-32 tokens: Y[M,N] = X[M,K] · W[N,K]ᵀ (+ residual), bf16 out, with the
// weights read the way the read-only ceiling kernel reads memory (docs/KERNELS.md, runs 26-27).
//
// The MMA skinny kernel (skinny_gemm.cu) has each resident block stream a 16-row tile of its own
// along K: at any moment the GPU reads hundreds of tiles 128 KB apart, a warp instruction 8 rows ×
// 64 bytes, and it reached 84 % of the read ceiling on its addresses alone (run 26); past 16
// tokens every tile also re-reads all of X from L2. Here W is cut into pieces of 16 rows × SEG
// 16-byte chunks of each row (a K segment; SEG a power of two, 2 KB of a row by default), numbered
// unit-major (unit u = rows 16u … 16u + 15, its segments s = 0 … S−1 in order). Block b of G takes
// pieces b, b + G, b + 2G, … with G a multiple of S, so that:
//   - the GPU reads one compact window of consecutive pieces at a time, each block 16 rows × SEG
//     chunks, a warp 32 consecutive chunks (512 bytes of one row) per copy instruction;
//   - every piece of a block is in the same K segment (b mod S): the block stages that segment of
//     X in shared memory once, and nothing re-reads X.
// Copies go with cp.async into a ring of piece slots (4, 6 at 17-32 tokens where pieces are half
// as long: all but one in flight while one is reduced; one block barrier a piece, since the MMA
// fragments read what other threads copied). Rows are padded
// by 4 chunks (64 bytes) so that the fragment reads of rows g and g + 1 fall in different banks.
// The MMAs are the skinny kernel's (m16n8k16, each thread 8 consecutive k of rows g and g + 8 and
// of token g, fed as k positions {2t, 2t+1, 2t+8, 2t+9}); the 8 warps split a piece's columns. A
// unit's S pieces are reduced by S blocks: the warps' partial sums go through a 4-slot ring in
// shared memory (named barriers, as the row-stream GEMV's) to 4 · NG publisher warps (one a slot
// and token tile of 8), which sum them in warp order and store them to scratch. A piece is counted
// on its unit's ticket one of the warp's pieces later, and the add's result is looked at one piece
// after that (its round trip hidden behind the next piece). No fence orders the two: partials are
// stored as bits that are never zero into scratch that is zero, and the block that completes a
// unit reads each of the S partials until it is there (skinny_device.cuh; run 29: the release
// adds and acquire fences of the ticket protocol cost ~8 µs of qkv's 43). It sums them in segment
// order (deterministic), stores the unit's outputs and zeroes the partials and the ticket. The
// loaders never wait for a ticket.
// Limits (host-checked, gemm.cpp): 1 ≤ M ≤ 32, K % 8 == 0, N % 8 == 0, 16-byte aligned X (row
// stride ld_x % 8 == 0), W, Y, residual; N ≤ window_gemm_max_n; the workspace zero before the
// first launch (each launch leaves it zero). The tickets sit at the workspace's start for every
// shape, so one workspace serves calls of any shape it is large enough for.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/skinny_device.cuh"
#include "ridge/kernels/cuda/gemm/sm90.cuh"
#include "ridge/kernels/cuda/pdl.cuh"
#include "ridge/kernels/cuda/trace/block_trace.h"

namespace ridge::kernels {
namespace {

using namespace skinny_device;

// The block's shape and shared-memory layout constants are gemm.h's (window_gemm_*), which
// window_gemm_smem_bytes sizes from.
constexpr int kWinWarps = window_gemm_warps;  // loader and MMA warps; the publishers come after
constexpr int kWinThreads = 32 * kWinWarps;
constexpr int kWinPad = window_gemm_pad;             // chunks of padding a row in shared memory
constexpr int kWinRedSlots = window_gemm_red_slots;  // the ring of the warps' partial sums
constexpr int kWinPart = window_gemm_part;  // scratch of a piece and token tile: 4 registers × 32
// Publisher warps a token tile: one a partial-sum slot, so that slot p's pieces (i ≡ p mod 4) are
// published by warp p of the tile, four pieces' ticket round trips and epilogues overlapping (run
// 29: one publisher a tile left the MMA warps waiting on its slots ~45 % of their time).
constexpr int kWinPublishers = kWinRedSlots;
constexpr int kWinLoaderBarrier = 1;
constexpr int kWinFull = 2;                        // 2 … 5: partial-sum slot full
constexpr int kWinFree = kWinFull + kWinRedSlots;  // 6 … 9: partial-sum slot read
static_assert(kWinFree + kWinRedSlots <= 16, "named barriers 1 … 15");

template <int NG, WindowLoader LOAD>
__global__ void __launch_bounds__(kWinThreads + 32 * NG * kWinPublishers +
                                      (LOAD != WindowLoader::cp_async ? 32 : 0),
                                  1)
    window_gemm_kernel(const SkinnyArgs a, WindowGemmWorkspace ws, int seg, int ksegs,
                       unsigned long long* trace) {
  constexpr bool BULK = LOAD != WindowLoader::cp_async, DYN = LOAD == WindowLoader::bulk_dynamic;
  constexpr int MT = 8 * NG;
  // A partial-sum slot's barriers: the MMA warps and the slot's NG publishers (not the producer).
  constexpr int kAll = kWinThreads + 32 * NG;
  constexpr int SLOTS = window_gemm_slots(NG);
  const int M = a.M, N = a.N, K = a.K, kchunks = K / 8;
  const int P = seg + kWinPad;  // a shared-memory row, in chunks
  const int units = (N + 15) / 16, pieces = units * ksegs;
  const int G = int(gridDim.x), b = int(blockIdx.x);
  // G is a multiple of ksegs: piece i·G + b of this block is segment b % ksegs of unit
  // b / ksegs + i · (G / ksegs).
  const int c0 = (b % ksegs) * seg;  // this block's K segment: chunks c0 … c0 + seg − 1
  const int unit0 = b / ksegs, unit_step = G / ksegs;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  extern __shared__ __align__(16) uint4 smem[];
  uint4* const ring = smem;                                  // [slot][16 rows][P]
  uint4* const xs = ring + SLOTS * 16 * P;                   // [MT tokens][P]
  float* const red = reinterpret_cast<float*>(xs + MT * P);  // [slot][warp][NG][4][32]
  // BULK: a full and an empty mbarrier a ring slot, after the partial-sum ring.
  uint64_t* const full =
      reinterpret_cast<uint64_t*>(red + kWinRedSlots * kWinWarps * NG * kWinPart);
  uint64_t* const empty = full + SLOTS;
  // DYN: the unit of the piece in each ring slot (−1: no more) and in each partial-sum slot.
  int* const slot_unit = reinterpret_cast<int*>(empty + SLOTS);
  int* const red_unit = slot_unit + SLOTS;
  const int sg = b % ksegs;  // this block's K segment
  // RIDGE_WINDOW_TRACE (diagnostic, block_trace.h): per block, %globaltimer at entry, when the
  // MMA warps have the first piece, when they are done with the last, and when the last publisher
  // warp is done (its epilogues and the block's tail).
  unsigned long long* const stamps = trace ? trace + size_t(b) * detail::kBlockStamps : nullptr;
  if (stamps && threadIdx.x == 0) stamps[0] = globaltimer_ns();

  pdl::launch_dependents();
  const int G_pieces = (pieces - b + G - 1) / G;  // pieces of this block (grid ≤ pieces)
  if constexpr (BULK) {
    // The chunks of this block's segment past K are never copied: zero them in every slot once
    // (the segment is the block's for the whole launch). Then the barriers, seen by the async
    // proxy before the first copy.
    const int valid = min(seg, kchunks - c0);
    for (int e = tid; e < SLOTS * 16 * (seg - valid); e += int(blockDim.x)) {
      const int rs = e / (seg - valid), c = valid + e % (seg - valid);
      ring[rs * P + c] = make_uint4(0, 0, 0, 0);  // rs: slot × 16 + row
    }
    if (tid == 0) {
      for (int s = 0; s < SLOTS; ++s) {
        sm90::mbar_init(&full[s], 1);           // the producer's expect_tx
        sm90::mbar_init(&empty[s], kWinWarps);  // each MMA warp, done reading the slot
      }
      sm90::mbar_fence_init();
    }
    __syncthreads();
    // ---- the producer (the warp after the publishers): one lane issues every piece's copies
    if (warp == kWinWarps + kWinPublishers * NG) {
      if (lane == 0) {
        const uint32_t row_bytes = uint32_t(valid) * 16;
        // DYN: the first ring of pieces as in the static order (units below SLOTS · unit_step of
        // this segment, before the PDL wait: weights only), then the segment's next units from
        // its counter (after the wait: the previous launch resets the counters as it ends).
        const int first_dynamic = SLOTS * unit_step;
        for (int i = 0;; ++i) {
          if constexpr (!DYN)
            if (i >= G_pieces) break;
          int u = unit0 + i * unit_step;
          if constexpr (DYN) {
            if (i == SLOTS) pdl::wait();
            if (i >= SLOTS) u = first_dynamic + int(atomicAdd(ws.counters + sg, 1u));
          }
          const int s = i % SLOTS;
          if (i >= SLOTS) sm90::mbar_wait(&empty[s], uint32_t((i / SLOTS - 1) & 1));
          if constexpr (DYN) {
            if (u >= units) {  // no more: the MMA warps see −1 (the phase completes, no bytes)
              slot_unit[s] = -1;
              sm90::mbar_arrive(&full[s]);
              break;
            }
            slot_unit[s] = u;  // (ordered before the waiters by the arrive's release)
          }
          sm90::mbar_arrive_expect_tx(&full[s], 16 * row_bytes);
          for (int r = 0; r < 16; ++r)
            sm90::bulk_load_1d(ring + (s * 16 + r) * P,
                               a.W + size_t(min(u * 16 + r, N - 1)) * K + size_t(c0) * 8, row_bytes,
                               &full[s]);
        }
        if constexpr (DYN) {
          // This block takes no more units: count it done; the last one resets the counters for
          // the next launch (every other block's last take came before its own count).
          pdl::wait();
          __threadfence();
          if (atomicAdd(ws.counters + window_gemm_counters - 1, 1u) == unsigned(G - 1)) {
            __threadfence();
            for (int k = 0; k < ksegs; ++k) atomicExch(ws.counters + k, 0u);
            atomicExch(ws.counters + window_gemm_counters - 1, 0u);
          }
        }
      }
      pdl::wait();  // (pdl.cuh: every thread reaches the wait before the grid may complete)
      return;       // (the copies complete on the full barriers, which the MMA warps wait on)
    }
  }
  if (warp < kWinWarps) {  // ---- loaders and MMAs
    // Piece i of this block into ring slot s: thread tid copies chunk tid % seg of rows
    // tid / seg, + 256 / seg, … (seg ≤ 128), chunks past K as zeros, rows past N clamped.
    const int row0 = tid / seg, col = tid % seg, row_step = kWinThreads / seg;
    const bool col_ok = c0 + col < kchunks;
    auto issue = [&](int i, int s) {
      if (i < G_pieces) {
        const int u = unit0 + i * unit_step;
        uint4* dst = ring + s * 16 * P + col;
        for (int r = row0; r < 16; r += row_step) {
          const bf16* src =
              a.W + size_t(min(u * 16 + r, N - 1)) * K + size_t(col_ok ? c0 + col : 0) * 8;
          stage_weights16_zfill(dst + r * P, src, col_ok ? 16 : 0);
        }
      }
      stage_commit();
    };
    if constexpr (!BULK)
      for (int i = 0; i < SLOTS - 1; ++i) issue(i, i);  // before the wait: weights only
    pdl::wait();
    // X's segment of this block (tokens past M and chunks past K as zeros).
    for (int e = tid; e < MT * seg; e += kWinThreads) {
      const int m = e / seg, c = e % seg;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (m < M && c0 + c < kchunks)
        v = load_activations16(a.X + size_t(m) * a.ld_x + (c0 + c) * 8);
      xs[m * P + c] = v;
    }
    const int g = lane >> 2, t = lane & 3;
    int i = 0;
    if constexpr (BULK) named_sync(kWinLoaderBarrier, kWinThreads);  // X's segment staged
    for (;; ++i) {
      [[maybe_unused]] int u = 0;  // (DYN: the piece's unit)
      if constexpr (!DYN)
        if (i >= G_pieces) break;
      if constexpr (BULK) {
        sm90::mbar_wait(&full[i % SLOTS], uint32_t((i / SLOTS) & 1));  // piece i landed
        if constexpr (DYN) {
          u = slot_unit[i % SLOTS];
          if (u < 0) break;  // (the same for every warp)
        }
      } else {
        // Piece i has landed (this thread's copies), then everyone's; every warp is done with
        // piece i − 1, whose slot takes piece i + SLOTS − 1.
        asm volatile("cp.async.wait_group %0;" ::"n"(SLOTS - 2) : "memory");
        named_sync(kWinLoaderBarrier, kWinThreads);
        issue(i + SLOTS - 1, (i + SLOTS - 1) % SLOTS);
      }
      if (stamps && i == 0 && tid == 0) stamps[1] = globaltimer_ns();
      const uint4* w = ring + (i % SLOTS) * 16 * P;
      float acc[NG][4];
#pragma unroll
      for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[j][q] = 0.0f;
      for (int c = warp; c < seg / 4; c += kWinWarps) {
        const int k = 4 * c + t;
        const uint4 lo = w[g * P + k], hi = w[(g + 8) * P + k];
#pragma unroll
        for (int j = 0; j < NG; ++j) {
          const uint4 xb = xs[(8 * j + g) * P + k];
          mma_m16n8k16_bf16(acc[j], lo.x, hi.x, lo.y, hi.y, xb.x, xb.y);
          mma_m16n8k16_bf16(acc[j], lo.z, hi.z, lo.w, hi.w, xb.z, xb.w);
        }
      }
      if constexpr (BULK) {  // this warp is done with the slot (its loads fed the MMAs above)
        __syncwarp();
        if (lane == 0) sm90::mbar_arrive(&empty[i % SLOTS]);
      }
      const int rs = i % kWinRedSlots;
      if (i >= kWinRedSlots) named_sync(kWinFree + rs, kAll);  // the publishers have read slot rs
      float* r = red + (rs * kWinWarps + warp) * NG * kWinPart;
#pragma unroll
      for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) r[(j * 4 + q) * 32 + lane] = acc[j][q];
      if constexpr (DYN)
        if (tid == 0) red_unit[rs] = u;
      // The warp converged before it arrives (bar.arrive is warp-aligned), as in the row-stream
      // GEMV. racecheck reports these stores as racing the publishers' loads with or without it
      // (runs 27, 28), where the row-stream GEMV's same hand-off is clean; still open.
      __syncwarp();
      named_arrive(kWinFull + rs, kAll);
    }
    if (stamps && tid == 0) stamps[2] = globaltimer_ns();
    if constexpr (DYN) {  // the end, through every partial-sum slot (its publishers): unit −1
      for (int e = 0; e < kWinRedSlots; ++e, ++i) {
        const int rs = i % kWinRedSlots;
        if (i >= kWinRedSlots) named_sync(kWinFree + rs, kAll);
        if (tid == 0) red_unit[rs] = -1;
        __syncwarp();
        named_arrive(kWinFull + rs, kAll);
      }
    }
    // The publishers' last "free" arrivals, so that every arrival is matched.
    for (int j = std::max(0, i - kWinRedSlots); j < i; ++j)
      named_sync(kWinFree + j % kWinRedSlots, kAll);
    if constexpr (!BULK) stage_wait_all();  // the empty groups committed past the end
    return;
  }

  // ---- publisher warp (pw, ps): token tile pw's partial sums of the pieces in slot ps (pieces
  // i ≡ ps mod kWinRedSlots), and the epilogues of the units they complete
  const int pw = (warp - kWinWarps) % NG, ps = (warp - kWinWarps) / NG;
  pdl::wait();
  // The partial sums of (unit u, segment s) for this token tile, as bits (skinny_device.cuh's
  // hand-off without fences).
  unsigned* const scratch = reinterpret_cast<unsigned*>(ws.scratch);
  auto partial = [&](int u, int s) {
    return scratch + ((size_t(u) * ksegs + s) * NG + pw) * kWinPart + lane;
  };
  // Unit u's outputs for token tile pw, once every block has counted its segment: the ksegs
  // partials read until they are there, summed in segment order, and zeroed for the next launch
  // (bf16 out; the residual, which may alias Y, read for all four registers before any store).
  auto epilogue = [&](int u) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    constexpr int kGroup = 4;  // segments whose loads are in flight at once
    for (int s0 = 0; s0 < ksegs; s0 += kGroup) {
      unsigned bits[kGroup][4];
#pragma unroll
      for (int j = 0; j < kGroup; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          bits[j][q] = s0 + j < ksegs ? ld_relaxed_gpu(partial(u, s0 + j) + q * 32) : 0u;
#pragma unroll
      for (int j = 0; j < kGroup; ++j)
        if (s0 + j < ksegs)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            while (bits[j][q] == 0u) bits[j][q] = ld_relaxed_gpu(partial(u, s0 + j) + q * 32);
            v[q] += partial_value(bits[j][q]);
          }
    }
    for (int s = 0; s < ksegs; ++s)
#pragma unroll
      for (int q = 0; q < 4; ++q) st_relaxed_gpu(partial(u, s) + q * 32, 0u);
    // C fragment of m16n8: registers 0, 1 at (row g, tokens 2t, 2t + 1), 2, 3 at row g + 8.
    size_t idx[4];
    bool ok[4];
    float res[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int n = u * 16 + (lane >> 2) + (q >= 2 ? 8 : 0);
      const int m = pw * 8 + 2 * (lane & 3) + (q & 1);
      ok[q] = n < N && m < M;
      idx[q] = size_t(m) * N + n;
      res[q] = ok[q] && a.residual != nullptr ? __bfloat162float(a.residual[idx[q]]) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (ok[q]) static_cast<bf16*>(a.Y)[idx[q]] = __float2bfloat16(v[q] + res[q]);
    if (lane == 0) st_relaxed_gpu(ws.tickets + size_t(u) * NG + pw, 0u);  // for the next launch
  };
  // The ticket pipeline (skinny_device.cuh): piece i's partial sums for token tile pw from the
  // warps to scratch, counted on the unit's ticket, and the unit's epilogue in the block that
  // completes it. A piece's partials go to scratch at (unit, segment).
  struct Sums {
    float v[4];
  };
  auto receive = [&](int i, int* unit) {  // (DYN: the piece's unit, −1 for the end)
    const int rs = i % kWinRedSlots;
    named_sync(kWinFull + rs, kAll);
    Sums sums{{0.0f, 0.0f, 0.0f, 0.0f}};
    if constexpr (DYN) *unit = red_unit[rs];
    if (!DYN || *unit >= 0) {
      const float* r = red + rs * kWinWarps * NG * kWinPart + pw * kWinPart + lane;
#pragma unroll
      for (int w = 0; w < kWinWarps; ++w)
#pragma unroll
        for (int q = 0; q < 4; ++q) sums.v[q] += r[w * NG * kWinPart + q * 32];
    }
    __syncwarp();
    named_arrive(kWinFree + rs, kAll);
    return sums;
  };
  auto store = [&](int u, const Sums& sums) {
    unsigned* const dst = partial(u, sg);
#pragma unroll
    for (int q = 0; q < 4; ++q) st_relaxed_gpu(dst + q * 32, partial_bits(sums.v[q]));
  };
  auto count = [&](int u) { return add_relaxed_gpu(ws.tickets + size_t(u) * NG + pw, 1u); };
  auto settle = [&](int u, unsigned old) {
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old + 1 != unsigned(ksegs)) return;  // warp-uniform
    epilogue(u);
  };
  // This warp's n-th piece: piece ps + n · kWinRedSlots of the block.
  auto piece_of = [&](int n) { return ps + n * kWinRedSlots; };
  if constexpr (!DYN) {
    auto unit_of = [&](int n) { return unit0 + piece_of(n) * unit_step; };
    const int mine = G_pieces > ps ? (G_pieces - ps + kWinRedSlots - 1) / kWinRedSlots : 0;
    if (mine > 0)
      ticket_pipeline(
          mine, lane, [&](int n) { return receive(piece_of(n), nullptr); },
          [&](int n, const Sums& sums) { store(unit_of(n), sums); },
          [&](int n) { return count(unit_of(n)); },
          [&](int n, unsigned old) { settle(unit_of(n), old); });
  } else {
    // ticket_pipeline's order with the count unknown until the end: at step n, piece n received
    // and stored, piece n − 1 counted, piece n − 2 settled with the count issued a step earlier.
    // As there, even and odd pieces keep their unit and count in registers of their own (two
    // steps a loop), so that no copy of a count waits for its atomic before the next step.
    int u0 = -1, u1 = -1;     // the units of the last even and odd pieces
    unsigned cnt0 = 0, cnt1 = 0;  // their counts (lane 0)
    // Step n: (u_same, c_same) hold piece n − 2, (u_other, c_other) piece n − 1. False at the end.
    auto step = [&](int n, int& u_same, unsigned& c_same, int u_other, unsigned& c_other) {
      int u = -1;
      const Sums sums = receive(piece_of(n), &u);
      if (u < 0) return false;
      if (n >= 1 && lane == 0) c_other = count(u_other);
      store(u, sums);
      if (n >= 2) settle(u_same, c_same);
      u_same = u;
      return true;
    };
    int n = 0;  // this warp's pieces received
    for (;; n += 2) {
      if (!step(n, u0, cnt0, u1, cnt1)) break;
      if (!step(n + 1, u1, cnt1, u0, cnt0)) {
        ++n;
        break;
      }
    }
    // The last piece counted after its stores, then the last two settled.
    __syncwarp();
    if (n >= 1) {
      const bool odd = ((n - 1) & 1) != 0;  // the last piece's parity
      unsigned c_last = 0;
      if (lane == 0) c_last = count(odd ? u1 : u0);
      if (n >= 2) settle(odd ? u0 : u1, odd ? cnt0 : cnt1);
      settle(odd ? u1 : u0, c_last);
    }
  }
  if (stamps && lane == 0) atomicMax(stamps + 3, globaltimer_ns());
}

// The grid: the resident blocks (one a SM with these rings), rounded down to a multiple of the
// segments so that a block keeps its segment, at least one unit's worth, at most every piece.
template <int NG, WindowLoader LOAD>
void launch_window_config(const SkinnyArgs& a, const WindowGemmPlan& plan,
                          const WindowGemmWorkspace& ws, cudaStream_t stream) {
  auto kernel = window_gemm_kernel<NG, LOAD>;
  constexpr int threads =
      kWinThreads + 32 * NG * kWinPublishers + (LOAD != WindowLoader::cp_async ? 32 : 0);
  const size_t smem = window_gemm_smem_bytes(plan);
  struct Limits {  // (gemm_bf16_window checked that smem fits the opt-in limit)
    int sms = 0, optin = 0;
  };
  static const Limits lim = [&] {
    Limits l;
    const int device = detail::current_device();
    l.sms = detail::device_sms(device);
    RIDGE_GEMM_CUDA_CHECK(
        cudaDeviceGetAttribute(&l.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    RIDGE_GEMM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, l.optin));
    return l;
  }();
  // Resident blocks a SM, by segment length (16 … 128 chunks: four values), taken once each.
  static int per_sm_by_seg[4] = {};
  int& per_sm = per_sm_by_seg[std::min(3, __builtin_ctz(unsigned(plan.seg)) - 4)];
  if (per_sm == 0) {
    RIDGE_GEMM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    per_sm = std::max(per_sm, 1);
  }
  const int units = (a.N + 15) / 16, pieces = units * plan.ksegs;
  const int resident = lim.sms * per_sm;
  const int grid = std::min(pieces, std::max(plan.ksegs, resident / plan.ksegs * plan.ksegs));
  // RIDGE_WINDOW_TRACE=1 (diagnostic): launches outside stream capture are traced and the
  // per-block times summarized on stderr (this synchronizes the stream).
  static const bool tracing = detail::block_trace_requested("RIDGE_WINDOW_TRACE");
  unsigned long long* const trace =
      tracing ? detail::block_trace("RIDGE_WINDOW_TRACE", grid, stream) : nullptr;
  RIDGE_GEMM_CUDA_CHECK(pdl::launch(a.pdl_launch, kernel, dim3(unsigned(grid)), dim3(threads), smem,
                                    stream, a, ws, plan.seg, plan.ksegs, trace));
  static const char* const names[detail::kBlockStamps] = {"entry", "first", "mma_end", "exit"};
  if (trace) detail::print_block_trace("window", trace, grid, names, a.M, a.N, a.K, stream);
}

template <int NG>
void launch_window_loader(const SkinnyArgs& a, const WindowGemmPlan& plan,
                          const WindowGemmWorkspace& ws, cudaStream_t stream) {
  switch (plan.loader) {
    case WindowLoader::cp_async:
      return launch_window_config<NG, WindowLoader::cp_async>(a, plan, ws, stream);
    case WindowLoader::bulk:
      return launch_window_config<NG, WindowLoader::bulk>(a, plan, ws, stream);
    case WindowLoader::bulk_dynamic:
      return launch_window_config<NG, WindowLoader::bulk_dynamic>(a, plan, ws, stream);
  }
}

}  // namespace

WindowGemmPlan window_gemm_plan(int M, int K, int seg, WindowLoader loader) {
  WindowGemmPlan p;
  p.loader = loader;
  p.token_tiles = M <= 8 ? 1 : M <= 16 ? 2 : 4;
  const int kchunks = K / 8;
  if (seg == 0) {
    // 2 KB of a row (1 KB at 17-32 tokens, where X's segment is twice as large), shorter where
    // the row needs less or where the last segment would be mostly padding (over 1/16 of the
    // row read as zeros).
    seg = p.token_tiles <= 2 ? 128 : 64;
    const auto padding = [&](int sg) { return (kchunks + sg - 1) / sg * sg - kchunks; };
    while (seg > 16 && (seg / 2 >= kchunks || padding(seg) * 16 > kchunks)) seg /= 2;
  }
  p.seg = seg;
  p.ksegs = (kchunks + seg - 1) / seg;
  return p;
}

size_t gemm_bf16_window_workspace_bytes(int M, int N, int K, int seg) {
  const WindowGemmPlan p = window_gemm_plan(M, K, seg);
  const size_t units = size_t((N + 15) / 16);
  return window_gemm_ticket_bytes + units * p.ksegs * p.token_tiles * kWinPart * sizeof(float);
}

namespace detail {

void launch_window(const SkinnyArgs& a, const WindowGemmPlan& plan, void* workspace,
                   cudaStream_t stream) {
  WindowGemmWorkspace ws;
  ws.tickets = static_cast<unsigned*>(workspace);
  ws.counters = ws.tickets + window_gemm_max_n / 16 * 4;
  ws.scratch = reinterpret_cast<float*>(static_cast<char*>(workspace) + window_gemm_ticket_bytes);
  switch (plan.token_tiles) {
    case 1:
      return launch_window_loader<1>(a, plan, ws, stream);
    case 2:
      return launch_window_loader<2>(a, plan, ws, stream);
    default:
      return launch_window_loader<4>(a, plan, ws, stream);
  }
}

}  // namespace detail
}  // namespace ridge::kernels
