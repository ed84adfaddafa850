// The decode GEMV chain (ridge-bench-gemm --decode-chain): how close does a batch-1 decode step
// made of the skinny GEMVs alone come to its weight bytes over the bandwidth, and what do the
// kernel boundaries and programmatic dependent launch (PDL) cost between them? The engine's step
// (ridge bench model) mixes the GEMVs with norms, RoPE, attention and sampling, so its time
// cannot separate a GEMV's ramp and tail from the small ops; this chain can.
//
// Per layer, as the engine's fused decode chain runs them (CudaBackend::run_fused):
//   q|k|v    X = x, RMSNorm prologue from the sums of squares the previous down left (rms_sumsq)
//   [gap]    optional: a stand-in for RoPE + attention that waits gap_us and reads nothing
//            (light: a few registers; heavy: decode attention's registers and shared memory, so
//            that it takes and blocks SM slots as attention does; either optionally with part of
//            its time before the PDL wait, as attention's early loads are)
//   o        X = the first `hidden` columns of q|k|v, x += product, sums of squares recorded
//   gate|up  X = x, RMSNorm prologue from o's sums, SwiGLU epilogue -> mlp
//   down     X = mlp, x += product, sums of squares recorded
// Every layer has its own weights (13 GB for 32 Llama-2-7B layers: no L2 reuse across layers).
// Variants differ only in which GEMVs are launched with PDL, whether o stages weights
// (SkinnyArgs::stage_steps) and which GEMV kernel runs (the MMA skinny kernel, or the row-stream
// GEMV with SkinnyArgs::stream), so each variant's chain is the same work; each is captured as
// one CUDA graph and replayed. The "read", "tiles", "window" and "walk" rows stream the same
// weights with no arithmetic (read_region, read_tiles, read_pieces below): what the chain's
// structure, the skinny kernel's addresses and the patterns open to a 16-row MMA kernel allow on
// their own (docs/KERNELS.md, "Run 26"). The outputs are not checked here (the kernel tests do
// that); the values stay bounded (weights scaled by 1/sqrt(K), a normalized input each layer).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.h"
#include "decode_chain.h"
#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/stream_load.cuh"
#include "ridge/kernels/cuda/pdl.cuh"

#define CK(call) RIDGE_GEMM_CUDA_CHECK(call)

namespace ridge::bench {
namespace {

namespace kn = ridge::kernels;

// Spins `ns` on the global timer.
__device__ __forceinline__ void spin_ns(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// A latency-bound stand-in: launched with PDL like the engine's small ops (trigger, wait), it
// spends `pre_ns` before the wait (decode attention's work that needs nothing of the kernel before
// it: the metadata, the page table and the first KV tiles, early_kv) and `ns` after it. No memory
// traffic.
__global__ void gap_kernel(unsigned long long ns, unsigned long long pre_ns) {
  kn::pdl::launch_dependents();
  if (pre_ns > 0) spin_ns(pre_ns);
  kn::pdl::wait();
  spin_ns(ns);
}

// The same with decode attention's footprint at batch 1 (Llama-2-7B: 32 blocks of 128 threads,
// paged_decode_kernel<128, 3>: ~108 KB of shared memory and 161 registers a thread). On an SM
// where a GEMV's blocks hold the register file or the carveout (two ring blocks of the q|k|v
// GEMV: 2 × 28.7 K registers, 2 × 69 KB), such a block cannot become resident until they leave,
// so its work before the wait no longer overlaps the kernel before it; while it is resident it
// keeps a GEMV block off that SM. The light gap (8 registers, no shared memory) fits beside
// anything. `r` is kept live across the spin so that ptxas gives the kernel attention's register
// count.
constexpr int kHeavyGapRegs = 152;
constexpr size_t kHeavyGapSmem = 108800;  // (16 + 2·3·64) rows × (128 + 8) bf16
__global__ void __launch_bounds__(128, 1)
    heavy_gap_kernel(unsigned long long ns, unsigned long long pre_ns, float* sink) {
  extern __shared__ float heavy_smem[];
  kn::pdl::launch_dependents();
  if (pre_ns > 0) spin_ns(pre_ns);
  kn::pdl::wait();
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  float r[kHeavyGapRegs];
#pragma unroll
  for (int i = 0; i < kHeavyGapRegs; ++i) r[i] = float((t0 >> (i % 13)) & 255) + float(i);
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const float f = float(t & 7);
#pragma unroll
    for (int i = 0; i < kHeavyGapRegs; ++i) r[i] = fmaf(r[i], 0.5f, f);
  } while (t - t0 < ns);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kHeavyGapRegs; ++i) sum += r[i];
  heavy_smem[threadIdx.x] = sum;
  __syncthreads();
  if (heavy_smem[(threadIdx.x + 1) % 128] == -1.0f) sink[0] = sum;  // never: keeps r live
}

// Pure weight streams over the same weights, no arithmetic and no activations: what the chain's
// structure (a kernel a GEMV, PDL between them) allows with an ideal access pattern, and what the
// GEMVs' own access pattern allows, apart from their MMAs, reductions and epilogues.
// read_region: the ceilings' read-only kernel (grid-stride 16-byte streaming loads, 4 in flight
// per thread: at any moment the whole GPU reads one compact window of the region); its first
// round of loads is issued before the PDL wait, like a GEMV's first step.
constexpr int kReadThreads = 512;
__global__ void __launch_bounds__(kReadThreads)
    read_region(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  kn::pdl::launch_dependents();
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  bool waited = false;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                d = __ldcs(p + i + 3 * stride);
    if (!waited) kn::pdl::wait(), waited = true;
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (!waited) kn::pdl::wait();
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never: the loads stay
}

// read_tiles: the skinny kernel's weight addresses at M = 1 (skinny_gemm.cu: 8 warps, one 16-row
// tile per block at a time, each warp the steps warp, warp + 8, ... of 128 columns, a thread 8
// loads of 16 bytes a step (rows g and g + 8, chunks 32c + 8t), the same load instruction, the
// next step loaded before the current one is consumed, the next tile's first step after the
// last), persistent over the row tiles; PAIRED: the SwiGLU pairing (gate rows f, up rows F + f,
// 8 of each a tile). XOR instead of MMAs; no reduction, no epilogue.
template <bool PAIRED>
__global__ void __launch_bounds__(256)
    read_tiles(const bf16* __restrict__ W, int N, int K, unsigned* sink) {
  kn::pdl::launch_dependents();
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  const int F = N / 2;
  const int n_tiles = PAIRED ? (F + 7) / 8 : (N + 15) / 16;
  const int steps = (K + 127) / 128;
  const int my_steps = steps > warp ? (steps - warp + 7) / 8 : 0;
  const int my_tiles = int(blockIdx.x) < n_tiles
                           ? (n_tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x)
                           : 0;
  const int items = my_steps * my_tiles;
  auto load = [&](uint4(&dst)[8], int item) {
    const int tile = int(blockIdx.x) + (item / my_steps) * int(gridDim.x);
    const int s = warp + (item % my_steps) * 8;
    int r0, r1;
    if (PAIRED) {
      const int f = min(tile * 8 + g, F - 1);
      r0 = f, r1 = F + f;
    } else {
      r0 = min(tile * 16 + g, N - 1), r1 = min(tile * 16 + 8 + g, N - 1);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int k = s * 128 + 32 * c + 8 * t;
      const bool ok = k < K;
      dst[2 * c] = ok ? kn::load_weights16(W + size_t(r0) * K + k) : make_uint4(0, 0, 0, 0);
      dst[2 * c + 1] = ok ? kn::load_weights16(W + size_t(r1) * K + k) : make_uint4(0, 0, 0, 0);
    }
  };
  uint4 cur[8], nxt[8];
  if (items > 0) load(cur, 0);
  kn::pdl::wait();
  unsigned acc = 0;
  for (int i = 0; i < items; ++i) {
    if (i + 1 < items) load(nxt, i + 1);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc ^= cur[j].x ^ cur[j].y ^ cur[j].z ^ cur[j].w;
#pragma unroll
    for (int j = 0; j < 8; ++j) cur[j] = nxt[j];
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// read_pieces: which read pattern reaches the read ceiling, for kernels that reduce 16-row units
// with MMAs (3-32 tokens) and so must hold 16 rows of a K segment at once. A GEMV's weights are cut
// into pieces of 16 rows x SEG 16-byte chunks of each row (SEG = 0: whole rows), pieces numbered
// unit-major (unit u = rows 16u.., its K segments in order); a piece's chunks row by row. WINDOW:
// the GPU reads that sequence of chunks as one window (block b takes the block-sized runs b, b + G,
// ...), so that consecutive pieces are read at once by different blocks; else each block walks its
// own units (b, b + G, ...) through all their K segments, as the MMA skinny kernel does. A thread
// has kPieceLoads loads in flight, kReadThreads apart; the first ones before the PDL wait.
// seg < 0 (walking only): the addresses as if each 16-row unit were stored contiguously (a
// tile-packed weight layout): a block walks its own units, each one contiguous run of bytes.
// ORDER (walking only) 1, interleaved: block b's j-th unit is not rows 16u.. but rows
// 16·jG + r·Gj + b (r = 0..15, Gj the blocks with a unit in round j), the order of run 32's
// row-walk GEMV (since removed): at each piece the blocks read the same K segment of consecutive
// rows. 2, skewed: block b reads each of its units rotated to start b/G of the way in (in
// 512-byte steps), so that at any moment the blocks' addresses are not one power-of-two stride
// apart (b x 128 KB at K = 4,096).
constexpr int kPieceLoads = 4;
constexpr int kPieceRows = 16;
template <bool WINDOW>
__global__ void __launch_bounds__(kReadThreads, 4)
    read_pieces(const bf16* __restrict__ W, int N, int K, int seg, int order, unsigned* sink) {
  kn::pdl::launch_dependents();
  // 32-bit chunk positions: a GEMV of up to 2^31 16-byte chunks (32 GB).
  const int kchunks = K / 8;
  const bool linear = !WINDOW && seg < 0;
  if (seg <= 0 || seg > kchunks) seg = kchunks;
  const int ksegs = (kchunks + seg - 1) / seg;
  const int units = (N + kPieceRows - 1) / kPieceRows;
  const int piece = kPieceRows * seg;  // chunks of a piece (the last segment's padded)
  const int unit_chunks = ksegs * piece;
  const int total = units * unit_chunks;
  constexpr int kRun = kReadThreads * kPieceLoads;  // chunks a block reads per iteration
  const int G = int(gridDim.x), b = int(blockIdx.x), t = int(threadIdx.x);
  const int owned = b < units ? (units - b + G - 1) / G : 0;  // units a walking block owns
  const int skew = order == 2 ? int(int64_t(b) * unit_chunks / G) & ~31 : 0;
  const int iters =
      WINDOW ? (total + G * kRun - 1) / (G * kRun) : (owned * unit_chunks + kRun - 1) / kRun;
  unsigned acc = 0;
  bool waited = false;
  for (int i = 0; i < iters; ++i) {
    uint4 v[kPieceLoads];
#pragma unroll
    for (int j = 0; j < kPieceLoads; ++j) {
      // The position in the chunk sequence of iteration i, load j of this thread.
      const int r = t + j * kReadThreads;
      int g;
      bool ok;
      if (WINDOW) {
        g = (i * G + b) * kRun + r;
        ok = g < total;
      } else {  // iteration i is the i-th run of this block's own chunk sequence
        const int q = i * kRun + r;
        ok = q < owned * unit_chunks;
        g = (b + (q / unit_chunks) * G) * unit_chunks + (q % unit_chunks + skew) % unit_chunks;
      }
      const int u = g / unit_chunks, w = g % unit_chunks;
      const int ks = w / piece, in = w % piece;
      int row = u * kPieceRows + in / seg;
      const int col = ks * seg + in % seg;
      if (!WINDOW && order == 1) {  // u = b + jG
        const int first = u - b, Gj = min(G, units - first);
        row = first * kPieceRows + (in / seg) * Gj + b;
      }
      ok = ok && row < N && col < kchunks;
      const uint4* at = linear ? reinterpret_cast<const uint4*>(W) + g
                               : reinterpret_cast<const uint4*>(W + size_t(row) * K) + col;
      v[j] = ok ? __ldcs(at) : make_uint4(0, 0, 0, 0);
    }
    if (!waited) kn::pdl::wait(), waited = true;
#pragma unroll
    for (int j = 0; j < kPieceLoads; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (!waited) kn::pdl::wait();
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void fill_positive(float* p, size_t n, float v) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

struct Edge {  // how one GEMV of the layer is launched
  bool pdl = false;
  int stage = 0;
  bool stream = false;  // the row-stream GEMV (SkinnyArgs::stream) instead of the MMA kernel
  bool warp = false;    // the warp-row GEMV (SkinnyArgs::warp; sums of squares one part a row)
};
// kLightGap: the light gap, all of it after the wait (the rows kept from earlier runs);
// kLightPre / kHeavyPre: the light and the heavy gap with pre_us of it before the wait.
enum Gap { kNoGap, kLightGap, kLightPre, kHeavyPre };
struct Variant {
  const char* name;
  const char* what;
  Edge qkv, o, gate_up, down;
  int gap;  // Gap: a gap kernel before o (when gap_us > 0)
  // Every kernel with the engine's decode-chain carveout (CudaBackend::kDecodeCarveout), as
  // CudaBackend::begin_forward sets it; else each kernel's own.
  bool engine_carveout = false;
};
constexpr int kEngineCarveout = 58;

class ScopedPdl {  // the benchmark's main turns PDL off for single-kernel timing
 public:
  ScopedPdl() : previous_(kn::pdl::enabled()) { kn::pdl::set_enabled(true); }
  ~ScopedPdl() { kn::pdl::set_enabled(previous_); }
  ScopedPdl(const ScopedPdl&) = delete;
  ScopedPdl& operator=(const ScopedPdl&) = delete;

 private:
  bool previous_;
};

}  // namespace

std::vector<DecodeChainRow> decode_chain(int layers, int hidden, int intermediate, double gap_us,
                                         double gap_pre_us, int rounds, cudaStream_t s) {
  const ScopedPdl pdl_on;
  const int H = hidden, I = intermediate, L = layers;
  const size_t per_layer = size_t(3 * H) * H + size_t(H) * H + size_t(2 * I) * H + size_t(H) * I;
  DeviceMemory weights(per_layer * L * sizeof(bf16));
  DeviceMemory x(size_t(H) * 2), qkv(size_t(3 * H) * 2), mlp(size_t(I) * 2);
  // Room for the warp-row GEMV's sums of squares too (one part a block, or a row with
  // RIDGE_WARP_ROW_PARTS=1).
  DeviceMemory ss_o(size_t(H) * 4), ss_down(size_t(H) * 4);
  fill_random_bf16(x.as<bf16>(), size_t(H), 7, 1.0f, s);
  fill_positive<<<(H + 255) / 256, 256, 0, s>>>(ss_down.as<float>(), size_t(H), 1.0f);
  CK(cudaGetLastError());
  struct LayerW {
    const bf16 *qkv, *o, *gate_up, *down;
  };
  std::vector<LayerW> lw(static_cast<size_t>(L));
  {
    bf16* next = weights.as<bf16>();
    uint64_t seed = 100;
    // The next n weights, uniform in ±1/sqrt(k).
    const auto take = [&](size_t n, int k) {
      bf16* p = next;
      fill_random_bf16(p, n, seed++, 1.0f / std::sqrt(float(k)), s);
      next += n;
      return p;
    };
    for (LayerW& w : lw) {
      w.qkv = take(size_t(3 * H) * H, H);
      w.o = take(size_t(H) * H, H);
      w.gate_up = take(size_t(2 * I) * H, H);
      w.down = take(size_t(H) * I, I);
    }
  }
  // The row-stream GEMV's workspace (tickets zeroed once).
  constexpr int kStreamRows = 32768;
  DeviceMemory stream_ws(kn::skinny_stream_workspace_bytes(kStreamRows));
  CK(cudaMemsetAsync(stream_ws.ptr, 0, kn::skinny_stream_workspace_bytes(kStreamRows), s));
  CK(cudaStreamSynchronize(s));

  const auto run_layer_gemv = [&](int which, int l, const Edge& e) {
    kn::SkinnyArgs a;
    a.M = 1;
    a.pdl_launch = e.pdl;
    a.stage_steps = e.stage;
    if (e.stream) a.stream = kn::skinny_stream_workspace(stream_ws.ptr, kStreamRows);
    a.warp = e.warp;
    // What the producer of this GEMV's x left: down's sums for q|k|v, o's for gate|up.
    kn::SkinnyArgs producer;
    producer.M = 1, producer.N = H, producer.K = which == 0 ? I : H, producer.warp = e.warp;
    const int parts = kn::skinny_sumsq_out_parts(producer);
    kn::SkinnyPrologue pro = kn::SkinnyPrologue::none;
    const LayerW& w = lw[size_t(l)];
    switch (which) {
      case 0:  // q|k|v
        a.X = x.as<bf16>(), a.ld_x = H, a.W = w.qkv, a.Y = qkv.ptr, a.N = 3 * H, a.K = H;
        a.sumsq_in = ss_down.as<float>(), a.sumsq_parts = parts, a.eps = 1e-5f;
        pro = kn::SkinnyPrologue::rms_sumsq;
        break;
      case 1:  // o
        a.X = qkv.as<bf16>(), a.ld_x = 3 * H, a.W = w.o, a.Y = x.ptr, a.N = H, a.K = H;
        a.residual = x.as<bf16>(), a.sumsq_out = ss_o.as<float>();
        break;
      case 2:  // gate|up + SwiGLU
        a.X = x.as<bf16>(), a.ld_x = H, a.W = w.gate_up, a.Y = mlp.ptr, a.N = 2 * I, a.K = H;
        a.sumsq_in = ss_o.as<float>(), a.sumsq_parts = parts, a.eps = 1e-5f, a.swiglu = true;
        pro = kn::SkinnyPrologue::rms_sumsq;
        break;
      default:  // down
        a.X = mlp.as<bf16>(), a.ld_x = I, a.W = w.down, a.Y = x.ptr, a.N = H, a.K = I;
        a.residual = x.as<bf16>(), a.sumsq_out = ss_down.as<float>();
        break;
    }
    kn::gemm_bf16_skinny_fused(a, pro, s);
  };
  const double gap_ns = std::max(gap_us, 0.0) * 1000.0;
  const double pre_ns = std::clamp(gap_pre_us, 0.0, std::max(gap_us, 0.0)) * 1000.0;
  CK(cudaFuncSetAttribute(heavy_gap_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(kHeavyGapSmem)));
  DeviceMemory gap_sink(16);
  const auto gap = [&](int kind) {
    const auto ns = [](double v) { return static_cast<unsigned long long>(v); };
    if (kind == kHeavyPre)
      CK(kn::pdl::launch(true, heavy_gap_kernel, dim3(32), dim3(128), kHeavyGapSmem, s,
                         ns(gap_ns - pre_ns), ns(pre_ns), gap_sink.as<float>()));
    else if (kind == kLightPre)
      CK(kn::pdl::launch(true, gap_kernel, dim3(32), dim3(128), 0, s, ns(gap_ns - pre_ns),
                         ns(pre_ns)));
    else
      CK(kn::pdl::launch(true, gap_kernel, dim3(32), dim3(128), 0, s, ns(gap_ns), 0ull));
  };

  // Times one replay of whatever `record` captures (median over rounds; one warm-up replay).
  const auto time_graph = [&](const auto& record) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    record();
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> us;
    for (int r = 0; r <= rounds; ++r) {
      CK(cudaEventRecord(a, s));
      CK(cudaGraphLaunch(exec, s));
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r > 0) us.push_back(1000.0 * ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return median(us);
  };

  std::vector<DecodeChainRow> rows;
  const double layer_bytes = double(per_layer) * 2;
  // Each GEMV kind alone: its 32 layers' launches back to back, plainly (ramp and tail each).
  const char* kinds[] = {"q|k|v", "o", "gate|up", "down"};
  const size_t kind_elems[] = {size_t(3 * H) * H, size_t(H) * H, size_t(2 * I) * H,
                               size_t(H) * I};
  for (int k = 0; k < 4; ++k) {
    const double us = time_graph([&] {
      for (int l = 0; l < L; ++l) run_layer_gemv(k, l, Edge{});
    });
    rows.push_back({std::string("alone ") + kinds[k], "that GEMV of every layer, plain launches",
                    us, double(kind_elems[k]) * 2 * L});
    const double us_stream = time_graph([&] {
      for (int l = 0; l < L; ++l) run_layer_gemv(k, l, Edge{false, 0, true});
    });
    rows.push_back({std::string("stream ") + kinds[k],
                    "that GEMV of every layer in the row-stream GEMV, plain launches", us_stream,
                    double(kind_elems[k]) * 2 * L});
  }
  const Edge plain{}, pdl{true, 0}, ew3{true, 3}, spdl{true, 0, true}, splain{false, 0, true};
  const Edge wpdl{true, 0, false, true}, ew1{true, 1};
  const Variant variants[] = {
      {"plain", "every GEMV launched plainly (a full barrier before each)", plain, plain, plain,
       plain, kNoGap},
      {"pdl-all", "every GEMV with PDL", pdl, pdl, pdl, pdl, kNoGap},
      {"warp fused", "every GEMV in the warp-row GEMV with the engine's fusions, PDL", wpdl, wpdl,
       wpdl, wpdl, kNoGap},
      {"gap warp", "gap before o; every GEMV in the warp-row GEMV, fused, PDL", wpdl, wpdl, wpdl,
       wpdl, kLightGap},
      {"stream pdl", "every GEMV in the row-stream GEMV, with PDL", spdl, spdl, spdl, spdl, kNoGap},
      {"stream plain", "every GEMV in the row-stream GEMV, plain launches", splain, splain, splain,
       splain, kNoGap},
      {"gap stream", "gap before o; every GEMV in the row-stream GEMV, with PDL", spdl, spdl, spdl,
       spdl, kLightGap},
      {"pdl-qkv", "PDL on q|k|v only", pdl, plain, plain, plain, kNoGap},
      {"pdl-o", "PDL on o only", plain, pdl, plain, plain, kNoGap},
      {"pdl-gate_up", "PDL on gate|up only", plain, plain, pdl, plain, kNoGap},
      {"pdl-down", "PDL on down only", plain, plain, plain, pdl, kNoGap},
      {"ew3-o", "o with PDL and 3 staged steps", plain, ew3, plain, plain, kNoGap},
      {"gap plain", "gap before o; plain GEMVs", plain, plain, plain, plain, kLightGap},
      {"gap pdl-o", "gap before o; o with PDL", plain, pdl, plain, plain, kLightGap},
      {"gap ew3-o", "gap before o; o with PDL and 3 staged steps (the engine's)", plain, ew3, plain,
       plain, kLightGap},
      {"gap ew1-o", "gap before o; o with PDL and 1 staged step", plain, ew1, plain, plain,
       kLightGap},
      // The engine's configuration (PDL everywhere, o with one staged step, which the ring
      // replaces at one token, as in the engine), a gap with part of its time before the PDL wait
      // (attention's early loads), light against heavy (decode attention's footprint), with each
      // kernel's carveout and with the engine's.
      {"pre engine", "light gap (pre_us of it before the wait) before o; PDL, o 1 staged step", pdl,
       ew1, pdl, pdl, kLightPre},
      {"heavy engine", "heavy gap (pre_us before the wait) before o; PDL, o 1 staged step", pdl,
       ew1, pdl, pdl, kHeavyPre},
      {"pre warp", "light gap (pre_us before the wait) before o; the warp-row GEMV, fused, PDL",
       wpdl, wpdl, wpdl, wpdl, kLightPre},
      {"heavy warp", "heavy gap (pre_us before the wait) before o; the warp-row GEMV, fused, PDL",
       wpdl, wpdl, wpdl, wpdl, kHeavyPre},
      {"pre eng c58", "as pre engine, the engine's carveout", pdl, ew1, pdl, pdl, kLightPre, true},
      {"heavy eng c58", "as heavy engine, the engine's carveout", pdl, ew1, pdl, pdl, kHeavyPre,
       true},
      {"pre warp c58", "as pre warp, the engine's carveout", wpdl, wpdl, wpdl, wpdl, kLightPre,
       true},
      {"heavy warp c58", "as heavy warp, the engine's carveout", wpdl, wpdl, wpdl, wpdl, kHeavyPre,
       true},
  };
  for (const Variant& v : variants) {
    if (v.gap && gap_ns <= 0) continue;
    if (v.engine_carveout) kn::pdl::set_launch_carveout(kEngineCarveout);
    const double us = time_graph([&] {
      for (int l = 0; l < L; ++l) {
        run_layer_gemv(0, l, v.qkv);
        if (v.gap) gap(v.gap);
        run_layer_gemv(1, l, v.o);
        run_layer_gemv(2, l, v.gate_up);
        run_layer_gemv(3, l, v.down);
      }
    });
    if (v.engine_carveout) kn::pdl::set_launch_carveout(-1);
    rows.push_back({v.name, v.what, us, layer_bytes * L});
  }
  // The warp-row GEMV (gemv_bf16_warp_rows): each GEMV its plain product (+ the residual on o
  // and down; gate|up's 2I rows into a buffer of their own, no SwiGLU), PDL between them, in the
  // window order and in the walk order.
  DeviceMemory gate_up_out(size_t(2 * I) * 2);
  for (const bool walk : {false, true}) {
    const double us = time_graph([&] {
      for (int l = 0; l < L; ++l) {
        const LayerW& w = lw[size_t(l)];
        kn::gemv_bf16_warp_rows(x.as<bf16>(), w.qkv, qkv.as<bf16>(), 3 * H, H, s, nullptr, true, 0,
                                walk);
        kn::gemv_bf16_warp_rows(qkv.as<bf16>(), w.o, x.as<bf16>(), H, H, s, x.as<bf16>(), true, 0,
                                walk);
        kn::gemv_bf16_warp_rows(x.as<bf16>(), w.gate_up, gate_up_out.as<bf16>(), 2 * I, H, s,
                                nullptr, true, 0, walk);
        kn::gemv_bf16_warp_rows(gate_up_out.as<bf16>(), w.down, x.as<bf16>(), H, I, s, x.as<bf16>(),
                                true, 0, walk);
      }
    });
    rows.push_back(
        {walk ? "warp walk" : "warp pdl",
         walk ? "the warp-row GEMV, each warp a contiguous run of rows, PDL"
              : "the warp-row GEMV (whole rows a warp, window order), plain products, PDL",
         us, layer_bytes * L});
  }
  // The pure streams (read_region, read_tiles) over the same weights.
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DeviceMemory sink(16);
  const size_t kind_offsets[] = {0, kind_elems[0], kind_elems[0] + kind_elems[1],
                                 kind_elems[0] + kind_elems[1] + kind_elems[2]};
  const int kind_n[] = {3 * H, H, 2 * I, H}, kind_k[] = {H, H, H, I};
  const auto read = [&](bool pdl_launch, const bf16* p, size_t elems) {
    CK(kn::pdl::launch(pdl_launch, read_region, dim3(unsigned(4 * sms)), dim3(kReadThreads), 0, s,
                       reinterpret_cast<const uint4*>(p), elems / 8, sink.as<unsigned>()));
  };
  const auto tiles = [&](bool pdl_launch, int per_sm, int k, const bf16* p) {
    const dim3 grid(unsigned(per_sm * sms));
    if (k == 2)
      CK(kn::pdl::launch(pdl_launch, read_tiles<true>, grid, dim3(256), 0, s, p, kind_n[k],
                         kind_k[k], sink.as<unsigned>()));
    else
      CK(kn::pdl::launch(pdl_launch, read_tiles<false>, grid, dim3(256), 0, s, p, kind_n[k],
                         kind_k[k], sink.as<unsigned>()));
  };
  const auto pieces = [&](int mode, int per_sm, int seg, int k, const bf16* p) {
    const dim3 grid(unsigned(per_sm * sms));
    if (mode == 4)
      CK(kn::pdl::launch(true, read_pieces<true>, grid, dim3(kReadThreads), 0, s, p, kind_n[k],
                         kind_k[k], seg, 0, sink.as<unsigned>()));
    else
      CK(kn::pdl::launch(true, read_pieces<false>, grid, dim3(kReadThreads), 0, s, p, kind_n[k],
                         kind_k[k], seg, mode - 5, sink.as<unsigned>()));
  };
  const bf16* w0 = lw[0].qkv;
  struct Stream {
    const char* name;
    const char* what;
    int mode;  // 0: read_region a GEMV, 1: a layer, 2: everything; 3: read_tiles a GEMV;
               // 4: read_pieces a GEMV as one window, 5: read_pieces, each block its own units,
               // 6: the same with interleaved rows, 7: with each unit's start skewed
    bool pdl;
    int per_sm;
    int seg = 0;  // read_pieces: 16-byte chunks of a row a piece holds (0: the whole row;
                  // -1: walking units stored contiguously)
  };
  const Stream streams[] = {
      {"read all", "read_region over all layers' weights in one launch (the ceiling)", 2, false, 0},
      {"read layer", "read_region a layer, plain launches", 1, false, 0},
      {"read plain", "read_region a GEMV's weights, plain launches", 0, false, 0},
      {"read pdl", "read_region a GEMV's weights, PDL (first loads before the wait)", 0, true, 0},
      {"tiles2 pdl", "read_tiles a GEMV (the skinny kernel's addresses), 2 blocks/SM, PDL", 3, true,
       2},
      {"tiles3 pdl", "read_tiles, 3 blocks/SM, PDL", 3, true, 3},
      {"tiles4 pdl", "read_tiles, 4 blocks/SM, PDL", 3, true, 4},
      {"tiles3 plain", "read_tiles, 3 blocks/SM, plain launches", 3, false, 3},
      // The patterns open to an MMA kernel that holds 16-row pieces (read_pieces), with PDL.
      {"window rows", "16 whole rows a piece, one window, 4 blocks/SM", 4, true, 4, 0},
      {"window 2K", "16 rows x 2 KB pieces, one window, 4 blocks/SM", 4, true, 4, 128},
      {"window 1K", "16 rows x 1 KB pieces, one window, 4 blocks/SM", 4, true, 4, 64},
      {"window 512", "16 rows x 512 B pieces, one window, 4 blocks/SM", 4, true, 4, 32},
      {"window 512 b2", "16 rows x 512 B pieces, one window, 2 blocks/SM", 4, true, 2, 32},
      {"window 256", "16 rows x 256 B pieces, one window, 4 blocks/SM", 4, true, 4, 16},
      {"window 128", "16 rows x 128 B pieces, one window, 4 blocks/SM", 4, true, 4, 8},
      {"walk 2K", "16 rows x 2 KB pieces, each block its own units, 4 blocks/SM", 5, true, 4, 128},
      {"walk 512", "16 rows x 512 B pieces, each block its own units, 4 blocks/SM", 5, true, 4, 32},
      {"walk 256", "16 rows x 256 B pieces, each block its own units, 4 blocks/SM", 5, true, 4, 16},
      {"walk 128", "16 rows x 128 B pieces, each block its own units, 4 blocks/SM", 5, true, 4, 8},
      {"walk 2K b2", "16 rows x 2 KB pieces, each block its own units, 2 blocks/SM", 5, true, 2,
       128},
      // The same units stored contiguously (a tile-packed layout): is it the rows' stride or the
      // many concurrent per-block streams that costs the walk its bandwidth?
      {"walk packed", "16-row units stored contiguously, each block its own, 4 blocks/SM", 5, true,
       4, -1},
      {"walk packed b2", "16-row units stored contiguously, each block its own, 2 blocks/SM", 5,
       true, 2, -1},
      {"walk 2K b1", "16 rows x 2 KB pieces, each block its own units, 1 block/SM", 5, true, 1,
       128},
      {"walk packed b1", "16-row units stored contiguously, each block its own, 1 block/SM", 5,
       true, 1, -1},
      // Each block its own units, their rows interleaved over the grid (run 32's row-walk order):
      // whole rows, and the MMA kernel's 2 KB pieces.
      {"inter rows b2", "16 whole rows a unit, interleaved over the blocks, 2 blocks/SM", 6, true,
       2, 0},
      {"inter rows", "16 whole rows a unit, interleaved over the blocks, 4 blocks/SM", 6, true, 4,
       0},
      {"inter 2K b2", "16 rows x 2 KB pieces, rows interleaved over the blocks, 2 blocks/SM", 6,
       true, 2, 128},
      {"inter 2K", "16 rows x 2 KB pieces, rows interleaved over the blocks, 4 blocks/SM", 6, true,
       4, 128},
      // Each block its own units, each started b/G of the way in: the same bytes a block reads,
      // without every block at the same offset of its unit (a power-of-two stride apart).
      {"skew 2K", "16 rows x 2 KB pieces, own units, starts skewed, 4 blocks/SM", 7, true, 4, 128},
      {"skew 2K b2", "16 rows x 2 KB pieces, own units, starts skewed, 2 blocks/SM", 7, true, 2,
       128},
      {"skew packed", "units stored contiguously, own units, starts skewed, 4 blocks/SM", 7, true,
       4, -1},
      {"skew packed b2", "units stored contiguously, own units, starts skewed, 2 blocks/SM", 7,
       true, 2, -1},
  };
  for (const Stream& v : streams) {
    const double us = time_graph([&] {
      if (v.mode == 2) {
        read(false, w0, per_layer * L);
        return;
      }
      for (int l = 0; l < L; ++l) {
        const bf16* base = lw[size_t(l)].qkv;
        if (v.mode == 1) {
          read(v.pdl, base, per_layer);
          continue;
        }
        for (int k = 0; k < 4; ++k) {
          if (v.mode == 0)
            read(v.pdl, base + kind_offsets[k], kind_elems[k]);
          else if (v.mode == 3)
            tiles(v.pdl, v.per_sm, k, base + kind_offsets[k]);
          else
            pieces(v.mode, v.per_sm, v.seg, k, base + kind_offsets[k]);
        }
      }
    });
    rows.push_back({v.name, v.what, us, layer_bytes * L});
  }
  if (gap_ns > 0) {  // the gaps alone: what the GEMVs could hide
    const double us = time_graph([&] {
      for (int l = 0; l < L; ++l) gap(kLightGap);
    });
    rows.push_back({"gaps alone", "the gap kernel once per layer", us, 0});
    const double heavy_us = time_graph([&] {
      for (int l = 0; l < L; ++l) gap(kHeavyPre);
    });
    rows.push_back({"heavy alone", "the heavy gap kernel once per layer", heavy_us, 0});
  }
  CK(cudaStreamSynchronize(s));
  return rows;
}

}  // namespace ridge::bench
