// The persistent batch-1 decode kernel (decode_layers.h says what and why).
//
// Work: every phase is a list of units; unit f of the flattened list (all phases of all layers
// in order) belongs to warp f mod W, warps numbered across the blocks first (warp w of block b is
// w · blocks + b). A warp takes its units in order; before a unit it waits
// until the previous phase's counter reaches that phase's unit count (one poller per block reads
// the counters: wait_phase), after it adds one to its own phase's counter. Tickets let the last
// unit of a head merge its attention partials, and the last K split of a row tile add the
// residual, without phases of their own.
//
// The weight ring: each warp owns kRing slots of 8 KB in shared memory. A step is 16 weight rows
// × 256 columns; lane l copies columns [8l, 8l + 8) of each of the 16 rows (16 cp.async of 16
// bytes: every instruction reads 512 contiguous bytes of one row) and later reads back exactly
// what it copied, so cp.async.wait_group is the only ordering (no barrier, no mbarrier). The copy
// cursor keeps every free slot filled (kRing steps in flight at a wait) over the warp's GEMV units
// only: across attention, reductions and phase waits it keeps the next weights in flight.
//
// The arithmetic (M = 1): per step, lane l multiplies its 8 columns of the 16 rows by the same 8
// activations (16-byte loads from L2, issued two steps ahead) in fp32; the 16 row sums are
// reduced over the warp at the end of the unit (a reduce-scatter). Activations and partial sums
// written inside the kernel are read with ld.cg (L2): L1 is not coherent across SMs.
//
// Code length matters: what runs once a layer per warp (attention, merges, residual adds) is on
// the critical path as one warp's serial instruction stream, fetched cold each layer, so it is
// kept short (run 16: 32 inlined sincosf, 28 % of the kernel's instructions, made q's rotation
// take 7.9 us; the RoPE table is now computed once a step in init).
#include "ridge/kernels/cuda/decode/decode_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ridge/kernels/cuda/elementwise/check.h"

namespace ridge::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRing = 3;
static_assert(kRing == 3, "the ring waits (cp.async.wait_group 2, 1, 0) are written for 3 slots");
constexpr int kRows = 16;       // weight rows per step and per tile
constexpr int kStepCols = 256;  // columns per step (8 per lane)
constexpr int kSlotBytes = kRows * kStepCols * 2;
constexpr int kMaxChunks = 32;  // attention units per head
constexpr int kPhasesPerLayer = 5;
constexpr int kResidWidth = 256;  // elements per init unit (8 per lane)

enum Kind : int { kInit, kQkv, kAttn, kO, kGateUp, kDown };

__device__ __forceinline__ int kind_of(int p) {
  if (p == 0) return kInit;
  switch ((p - 1) % kPhasesPerLayer) {
    case 0:
      return kQkv;
    case 1:
      return kAttn;
    case 2:
      return kO;
    case 3:
      return kGateUp;
    default:
      return kDown;
  }
}
__device__ __forceinline__ bool is_gemv(int kind) {
  return kind == kQkv || kind == kO || kind == kGateUp || kind == kDown;
}

struct Shape {
  int H, QKV, F, nh, nkv, hd, qdim;
};
__host__ __device__ __forceinline__ Shape shape_of(const DecodeDims& d) {
  Shape s;
  s.H = d.hidden;
  s.nh = d.heads;
  s.nkv = d.kv_heads;
  s.hd = d.head_dim;
  s.qdim = d.heads * d.head_dim;
  s.QKV = (d.heads + 2 * d.kv_heads) * d.head_dim;
  s.F = d.ffn;
  return s;
}

// Tickets per layer: nh heads (attention chunks), H/16 o tiles, H/16 down tiles.
__device__ __forceinline__ int ticket_stride(const Shape& s) {
  return s.nh + 2 * (s.H / kRows);
}

__device__ __forceinline__ int unit_count(const Shape& s, const DecodePlan& pl, int kind) {
  switch (kind) {
    case kInit:
      return pl.resid_units;
    case kQkv:
      return (s.QKV / kRows) * pl.split_qkv;
    case kAttn:
      return s.nh * pl.chunks;
    case kO:
      return (s.H / kRows) * pl.split_o;
    case kGateUp:
      return s.F / kRows;
    default:
      return (s.H / kRows) * pl.split_down;
  }
}

// One GEMV unit: `groups` blocks of 16 rows (row0, and row0 + goff for the up half of gate|up)
// over columns [k0, k1) of a row-major [*, K] weight.
struct Gemv {
  const bf16* w;
  int K, row0, goff, groups, k0, k1, split;
};

__device__ __forceinline__ Gemv gemv_of(const DecodeLayersArgs& a, const DecodePlan& pl,
                                        const Shape& s, int p, int u) {
  const DecodeLayerPtrs& L = a.layer[(p - 1) / kPhasesPerLayer];
  Gemv g{};
  int splits = 1;
  switch (kind_of(p)) {
    case kQkv:
      g.w = L.wqkv, g.K = s.H, splits = pl.split_qkv;
      break;
    case kO:
      g.w = L.wo, g.K = s.qdim, splits = pl.split_o;
      break;
    case kGateUp:
      g.w = L.wgu, g.K = s.H;
      break;
    default:
      g.w = L.wdown, g.K = s.F, splits = pl.split_down;
      break;
  }
  g.groups = kind_of(p) == kGateUp ? 2 : 1;
  g.goff = kind_of(p) == kGateUp ? s.F : 0;
  g.row0 = (u / splits) * kRows;
  g.split = u % splits;
  const int chunk = ((g.K + splits - 1) / splits + 7) / 8 * 8;
  g.k0 = min(g.K, g.split * chunk);
  g.k1 = min(g.K, g.k0 + chunk);
  return g;
}
__device__ __forceinline__ int steps_of(const Gemv& g) {
  return g.groups * ((g.k1 - g.k0 + kStepCols - 1) / kStepCols);
}

// A position in a warp's sequence of units: phase p, unit u of it (flat index f), and for the
// copy cursor the step t of a GEMV unit.
struct Cursor {
  int p, base, f, t, steps;
  Gemv g;
};

__device__ __forceinline__ int normalize(Cursor& c, const Shape& s, const DecodePlan& pl) {
  while (c.p < pl.phases) {
    const int n = unit_count(s, pl, kind_of(c.p));
    if (c.f - c.base < n) break;
    c.base += n;
    ++c.p;
  }
  return c.f - c.base;
}

// Moves the copy cursor to the first step of the next GEMV unit with steps, at or after c.f.
__device__ __forceinline__ void seek_gemv(Cursor& c, const DecodeLayersArgs& a,
                                          const DecodePlan& pl, const Shape& s) {
  for (;;) {
    const int u = normalize(c, s, pl);
    if (c.p >= pl.phases) {
      c.steps = 0;  // past the end: issue() commits empty groups
      return;
    }
    if (is_gemv(kind_of(c.p))) {
      c.g = gemv_of(a, pl, s, c.p, u);
      c.steps = steps_of(c.g);
      c.t = 0;
      if (c.steps > 0) return;
    }
    c.f += pl.warps;
  }
}

__device__ __forceinline__ void advance(Cursor& c, const DecodeLayersArgs& a, const DecodePlan& pl,
                                        const Shape& s) {
  if (c.p >= pl.phases) return;
  if (++c.t < c.steps) return;
  c.f += pl.warps;
  seek_gemv(c, a, pl, s);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Copies the cursor's step into `slot`: one commit group per call (empty for a lane whose 8
// columns lie past the unit's k1; the arithmetic skips those lanes).
__device__ __forceinline__ void issue(const Cursor& c, char* slot, int lane) {
  if (c.steps > 0 && c.t < c.steps) {
    const int ks = c.t / c.g.groups, grp = c.t % c.g.groups;
    const int col = c.g.k0 + ks * kStepCols + lane * 8;
    if (col < c.g.k1) {
      const bf16* src = c.g.w + size_t(c.g.row0 + grp * c.g.goff) * size_t(c.g.K) + col;
#pragma unroll
      for (int j = 0; j < kRows; ++j)
        cp_async16(slot + (j * 32 + lane) * 16, src + size_t(j) * size_t(c.g.K));
    }
  }
  cp_commit();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}
__device__ __forceinline__ uint4 ldcg16(const void* p) {
  return __ldcg(static_cast<const uint4*>(p));
}
__device__ __forceinline__ float4 ldcg_f4(const float* p) {
  return __ldcg(reinterpret_cast<const float4*>(p));
}

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Per-unit trace stamps: arrival at the wait, release, two marks inside the unit (GEMV: the first
// step's weights ready, the last step consumed; attention: q loaded and rotated, the partials
// written), end after the signal.
constexpr int kUnitStamps = 5;

// Phase counters 128 bytes apart: a counter being polled and added to shares its line with none.
constexpr int kDoneStride = 32;

// Waiting for phase q: one warp per block polls the global counter (acquire at GPU scope, backing
// off), the block's other waiting warps read a shared mark of the last phase known complete. The
// poller publishes with a release at block scope, readers acquire at block scope, so the
// counter's acquire orders their later reads too (causality is transitive). So 132 pollers, not
// 1056, load the counter's L2 line (a hot line slows every request to its L2 slice). Phases
// complete in order, so a mark >= q covers q.
struct BlockWait {
  int* seen;    // shared: the last phase known complete (-1 at start)
  int* poller;  // shared: 1 while a warp of the block polls
};
// The mark is read and written with shared-memory atomics and block-scope fences (an acquire and
// a release at block scope), so compute-sanitizer's racecheck sees the synchronization too.
__device__ __forceinline__ int ld_acquire_cta(int* p) {
  const int v = atomicAdd(p, 0);
  __threadfence_block();
  return v;
}
__device__ __forceinline__ void st_release_cta(int* p, int v) {
  __threadfence_block();
  atomicExch(p, v);
}
// The poller walks the phases forward from the mark, raising it as each completes, until its own
// phase q is covered: a warp of the block that waits for an earlier phase is released as soon as
// that one completes (a poller waiting on q alone could hold back the warp whose unit q needs).
__device__ __forceinline__ void wait_phase(const BlockWait& bw, const int* done, const Shape& s,
                                           const DecodePlan& pl, int q, int lane) {
  if (lane == 0) {
    unsigned ns = 32;
    while (ld_acquire_cta(bw.seen) < q) {
      if (atomicCAS(bw.poller, 0, 1) == 0) {
        int k = ld_acquire_cta(bw.seen);
        while (k < q) {
          const int next = k + 1;
          if (ld_acquire(done + size_t(next) * kDoneStride) >= unit_count(s, pl, kind_of(next))) {
            k = next;
            st_release_cta(bw.seen, k);  // only the token's holder writes the mark
            ns = 32;
          } else {
            __nanosleep(ns);
            ns = min(ns * 2, 128u);
          }
        }
        atomicExch(bw.poller, 0);
        break;
      }
      __nanosleep(ns);
      ns = min(ns * 2, 128u);
    }
  }
  __syncwarp();
}

// Every lane's stores of the unit, then one count: the warp barrier orders them before lane 0's
// fence and add (the pattern of a cooperative grid sync, per warp).
__device__ __forceinline__ void signal(int* done, int lane) {
  __syncwarp();
  if (lane == 0) {
    __threadfence();
    atomicAdd(done, 1);
  }
}

struct Work {
  float* x32;
  float* ss;
  float* qkv;
  float* attn_part;
  bf16* attn;
  float* o_part;
  bf16* act;
  float* down_part;
  float2* rope;  // [hd / 2]: (cos, sin) of the step's position times each frequency
  int* done;
  int* tickets;               // per layer: [nh] heads, [H/16] o tiles, [H/16] down tiles
  unsigned long long* trace;       // [phases][4] (DecodePlan::trace_on)
  unsigned long long* unit_trace;  // [units][kUnitStamps]
};

__device__ __forceinline__ Work work_of(const DecodeLayersArgs& a, const DecodePlan& pl) {
  char* w = static_cast<char*>(a.workspace);
  return Work{reinterpret_cast<float*>(w + pl.x32),
              reinterpret_cast<float*>(w + pl.ss),
              reinterpret_cast<float*>(w + pl.qkv),
              reinterpret_cast<float*>(w + pl.attn_part),
              reinterpret_cast<bf16*>(w + pl.attn),
              reinterpret_cast<float*>(w + pl.o_part),
              reinterpret_cast<bf16*>(w + pl.act),
              reinterpret_cast<float*>(w + pl.down_part),
              reinterpret_cast<float2*>(w + pl.rope),
              reinterpret_cast<int*>(w + pl.done),
              reinterpret_cast<int*>(w + pl.tickets),
              reinterpret_cast<unsigned long long*>(w + pl.trace),
              reinterpret_cast<unsigned long long*>(w + pl.unit_trace)};
}

// 1/rms of the residual from the residual units' sums of squares.
__device__ __forceinline__ float inv_rms(const Work& wk, const DecodePlan& pl, int H, float eps,
                                         int lane) {
  // Eight independent loads a pass (a loop of dependent adds would wait for each L2 round trip).
  const int n = H / kRows;
  float s = 0.0f;
  for (int i0 = 0; i0 < n; i0 += 32 * 8) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + 32 * j + lane;
      s += i < n ? __ldcg(wk.ss + i) : 0.0f;
    }
  }
  s = warp_sum(s);
  return 1.0f / sqrtf(s / float(H) + eps);
}

// init: x32 = x (the embedding row) and the sums of squares of x per 16-row tile; unit 0 also the
// RoPE table of the step's position (every layer and head uses the same angles: computed once, the
// attention code stays short).
__device__ void init_unit(const DecodeLayersArgs& a, const Work& wk, int H, int hd, int u,
                          int lane) {
  if (u == 0) {
    const float pos = float(__ldg(a.positions));
    for (int i = lane; i < hd / 2; i += 32) {
      float sn, cs;
      sincosf(pos * __ldg(a.inv_freq + i), &sn, &cs);
      wk.rope[i] = make_float2(cs, sn);
    }
  }
  const int i0 = u * kResidWidth + lane * 8;
  float sq = 0.0f;
  if (i0 < H) {
    float v[8];
    unpack8(ldcg16(a.x + i0), v);
    reinterpret_cast<float4*>(wk.x32 + i0)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(wk.x32 + i0)[1] = make_float4(v[4], v[5], v[6], v[7]);
#pragma unroll
    for (int e = 0; e < 8; ++e) sq += v[e] * v[e];
  }
  sq += __shfl_xor_sync(0xffffffffu, sq, 1);  // lanes 2k, 2k+1: one 16-row tile
  if (i0 < H && (lane & 1) == 0) wk.ss[i0 / kRows] = sq;
}

// The residual add of one 16-row tile once every K split of it is in parts: lane r < 16 adds
// row row0 + r (splits in order: deterministic) to x_prev (its x32, loaded before the ticket:
// only this call writes it in this phase), stores x32 and x (bf16), and the tile's sum of
// squares of the stored bf16 values goes to ss (for the next norm).
__device__ void resid_tile(const DecodeLayersArgs& a, const Work& wk, int H, const float* parts,
                           int splits, int row0, float x_prev, int lane) {
  float sq = 0.0f;
  if (lane < kRows) {
    const int row = row0 + lane;
    float v = x_prev;
#pragma unroll
    for (int sp = 0; sp < 8; ++sp)  // splits in order: deterministic
      v += sp < splits ? __ldcg(parts + size_t(sp) * H + row) : 0.0f;
    wk.x32[row] = v;
    const bf16 b = __float2bfloat16_rn(v);
    a.x[row] = b;
    const float r = __bfloat162float(b);
    sq = r * r;
  }
  sq = warp_sum(sq);
  if (lane == 0) wk.ss[row0 / kRows] = sq;
}

// A ticket among `n` units (one lane adds after a fence; every lane gets the count before its
// own add). The unit that draws n - 1 is the last: it fences again before reading the others'.
__device__ __forceinline__ bool last_of(int* ticket, int n, int lane) {
  __syncwarp();
  int t = 0;
  if (lane == 0) {
    __threadfence();
    t = atomicAdd(ticket, 1);
  }
  t = __shfl_sync(0xffffffffu, t, 0);
  if (t != n - 1) return false;
  __threadfence();
  return true;
}

// 16 rotated values of one head: lane j of a group of G lanes holds dims [16j, 16j + 16); the
// rotate-half partner of dim d < hd/2 is d + hd/2, held by lane j ^ (G/2).
// cs: the 16 (cos, sin) pairs of dims [16j, 16j + 16) mod hd/2, from the step's table.
__device__ __forceinline__ void rope16(float (&v)[16], int j, int G, const float2 (&cs)[16]) {
  const bool first = j < G / 2;
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const float partner = __shfl_xor_sync(0xffffffffu, v[e], G / 2);
    const float c = cs[e].x, sn = cs[e].y;
    v[e] = round_bf16(first ? v[e] * c - partner * sn : v[e] * c + partner * sn);
  }
}
__device__ __forceinline__ void load_rope16(const Work& wk, int j, int hd, float2 (&cs)[16]) {
  const float4* t = reinterpret_cast<const float4*>(wk.rope + (16 * j) % (hd / 2));
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float4 f = __ldcg(t + e);
    cs[2 * e] = make_float2(f.x, f.y), cs[2 * e + 1] = make_float2(f.z, f.w);
  }
}

// 16 values of q (or k, v) for lane j: the sum of the qkv GEMV's K splits, rounded to bf16.
__device__ __forceinline__ void load_head16(const Work& wk, const DecodePlan& pl, int QKV, int off,
                                            float (&v)[16]) {
#pragma unroll
  for (int e = 0; e < 16; ++e) v[e] = 0.0f;
  for (int s = 0; s < pl.split_qkv; ++s) {
    const float* p = wk.qkv + size_t(s) * QKV + off;
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      const float4 f = ldcg_f4(p + 4 * q4);
      v[4 * q4] += f.x, v[4 * q4 + 1] += f.y, v[4 * q4 + 2] += f.z, v[4 * q4 + 3] += f.w;
    }
  }
#pragma unroll
  for (int e = 0; e < 16; ++e) v[e] = round_bf16(v[e]);
}

// Combine unit (head h): the `active` chunks' partials merged; lane l writes dims
// [l·hd/32, (l+1)·hd/32). Every load is independent of the others, so they overlap: lane c reads
// chunk c's (max, sum) while every lane reads the first four chunks' accumulators, the weights go
// round the warp, and the other accumulators are read four chunks at a time (run 16: a loop of
// dependent L2 round trips over 32 chunks took ~25 us a layer; run 17: the merge was ~2.5 us of
// the attention phase's critical path). Four chunks of up to 8 dims a round trip: the kernel is at
// its register limit (254 of 255), and more in flight here spilled in the GEMV loop (run 17: 4.74
// ms; a spill now fails the build).
__device__ void combine_unit(const Work& wk, const Shape& s, int h, int active, int lane) {
  const int hd = s.hd, per = hd / 32;
  const float* part = wk.attn_part + size_t(h) * kMaxChunks * size_t(hd + 4);
  float mc = -INFINITY, lc = 0.0f;
  if (lane < active) {
    const float2 ml = __ldcg(reinterpret_cast<const float2*>(part + size_t(lane) * (hd + 4)));
    mc = ml.x, lc = ml.y;
  }
  float v[4][8];
  auto load4 = [&](int c0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float* pc = part + size_t(min(c0 + i, active - 1)) * (hd + 4) + 4 + lane * per;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[i][e] = e < per ? __ldcg(pc + e) : 0.0f;
    }
  };
  load4(0);
  float mx = lc > 0.0f ? mc : -INFINITY;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float wc = lc > 0.0f ? __expf(mc - mx) : 0.0f;
  const float L = warp_sum(wc * lc);
  float out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int c0 = 0; c0 < active; c0 += 4) {
    if (c0 > 0) load4(c0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float w = __shfl_sync(0xffffffffu, wc, min(c0 + i, 31));
      if (c0 + i < active) {
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] += w * v[i][e];
      }
    }
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (e < per) wk.attn[size_t(h) * hd + lane * per + e] = __float2bfloat16_rn(out[e] * inv);
}

// Positions per attention unit for a context of ctx positions: spread over the plan's chunks,
// at least pl.chunk (a multiple of 16), so that short contexts use few units with little
// merging and long ones every chunk.
__device__ __forceinline__ int runtime_chunk(const DecodePlan& pl, int ctx) {
  return max(pl.chunk, ((ctx + pl.chunks - 1) / pl.chunks + 15) / 16 * 16);
}

constexpr int kAttnUnroll = 4;  // passes of positions whose K and V loads are in flight together

// Attention unit (head h, chunk c): positions [c·chunk, min((c+1)·chunk, ctx)). Groups of
// G = hd/16 lanes take one position each (32/G positions per pass), online softmax per group,
// merged over the groups at the end. The step's own position (ctx - 1) comes from the qkv
// output in registers; its chunk's unit for the first query head of each KV head stores it.
// The cached K and V of the first pass are loaded before `wait` (the wait for q|k|v): they were
// written by earlier steps, and their DRAM round trip then leaves the phase's critical path.
template <class Wait>
__device__ void attn_unit(const DecodeLayersArgs& a, const Work& wk, const DecodePlan& pl,
                          const Shape& s, int layer, int h, int c, int lane,
                          unsigned long long (&mid)[2], Wait&& wait) {
  const int hd = s.hd, G = hd / 16, P = 32 / G;
  const int group = s.nh / s.nkv, g = h / group;
  const int ctx = __ldg(a.context_lens), cur = ctx - 1;
  const int chunk = runtime_chunk(pl, ctx), active = (ctx + chunk - 1) / chunk;
  const int start = c * chunk, end = min(start + chunk, ctx);
  float* part = wk.attn_part + (size_t(h) * kMaxChunks + c) * size_t(hd + 4);
  if (start >= end) {  // past the context: not one of the head's `active` units
    wait();
    return;
  }
  const int pg = lane / G, j = lane % G, d0 = 16 * j;
  const DecodeLayerPtrs& L = a.layer[layer];
  const int bs = a.dims.block_size;
  uint4 kr[kAttnUnroll][2], vr[kAttnUnroll][2];
  auto load_pass = [&](int p0) {
#pragma unroll
    for (int n = 0; n < kAttnUnroll; ++n) {
      const int p = p0 + n * P + pg;
      kr[n][0] = kr[n][1] = vr[n][0] = vr[n][1] = make_uint4(0, 0, 0, 0);
      if (p < end && p != cur) {
        const int blk = __ldg(a.block_table + p / bs);
        const size_t at = ((size_t(blk) * bs + p % bs) * s.nkv + g) * hd + d0;
        kr[n][0] = __ldg(reinterpret_cast<const uint4*>(L.k_pool + at));
        kr[n][1] = __ldg(reinterpret_cast<const uint4*>(L.k_pool + at + 8));
        vr[n][0] = __ldg(reinterpret_cast<const uint4*>(L.v_pool + at));
        vr[n][1] = __ldg(reinterpret_cast<const uint4*>(L.v_pool + at + 8));
      }
    }
  };
  load_pass(start);
  wait();
  float2 cs[16];
  load_rope16(wk, j, hd, cs);
  // q (with the table's loads: one L2 round trip); the unit holding the step's own position
  // then loads its k and v together (all three at once spilled registers in run 17).
  const bool has_cur = cur >= start && cur < end;
  float q[16], kc[16], vc[16];
  load_head16(wk, pl, s.QKV, h * hd + d0, q);
  rope16(q, j, G, cs);
  if (pl.trace_on) mid[0] = now_ns();
  if (has_cur) {
    load_head16(wk, pl, s.QKV, s.qdim + g * hd + d0, kc);
    load_head16(wk, pl, s.QKV, s.qdim + s.nkv * hd + g * hd + d0, vc);
    rope16(kc, j, G, cs);
    const int slot = __ldg(a.slots);
    if (h % group == 0 && slot >= 0 && pg == 0) {
      const size_t at = (size_t(slot) * s.nkv + g) * hd + d0;
      float t[8];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int e = 0; e < 8; ++e) t[e] = kc[8 * half + e];
        *reinterpret_cast<uint4*>(L.k_pool + at + 8 * half) = pack8(t);
#pragma unroll
        for (int e = 0; e < 8; ++e) t[e] = vc[8 * half + e];
        *reinterpret_cast<uint4*>(L.v_pool + at + 8 * half) = pack8(t);
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < 16; ++e) kc[e] = vc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f, acc[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) acc[e] = 0.0f;
  for (int p0 = start; p0 < end; p0 += P * kAttnUnroll) {
    if (p0 != start) load_pass(p0);
    // The pass's kAttnUnroll positions together (independent dependency chains: run 16 traced
    // ~6.5 us a unit in this loop when each position's score, shuffles and softmax update waited
    // for the previous one's).
    float sc[kAttnUnroll];
#pragma unroll
    for (int n = 0; n < kAttnUnroll; ++n) {
      const bool own = p0 + n * P + pg == cur;
      float k0[8], k1[8];
      unpack8(kr[n][0], k0);
      unpack8(kr[n][1], k1);
      float d0a = 0.0f, d0b = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        d0a = fmaf(q[e], own ? kc[e] : k0[e], d0a);
        d0b = fmaf(q[8 + e], own ? kc[8 + e] : k1[e], d0b);
      }
      sc[n] = d0a + d0b;
    }
    for (int o = 1; o < G; o <<= 1) {
#pragma unroll
      for (int n = 0; n < kAttnUnroll; ++n) sc[n] += __shfl_xor_sync(0xffffffffu, sc[n], o);
    }
    float mn = m;
#pragma unroll
    for (int n = 0; n < kAttnUnroll; ++n) {
      sc[n] = p0 + n * P + pg < end ? sc[n] * a.scale : -INFINITY;
      mn = fmaxf(mn, sc[n]);
    }
    if (mn != -INFINITY) {  // else no position of this group yet
      const float corr = __expf(m - mn);
      float w[kAttnUnroll];
      l *= corr;
#pragma unroll
      for (int n = 0; n < kAttnUnroll; ++n) {
        w[n] = __expf(sc[n] - mn);
        l += w[n];
      }
#pragma unroll
      for (int e = 0; e < 16; ++e) acc[e] *= corr;
#pragma unroll
      for (int n = 0; n < kAttnUnroll; ++n) {
        const bool own = p0 + n * P + pg == cur;
        float v0[8], v1[8];
        unpack8(vr[n][0], v0);
        unpack8(vr[n][1], v1);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          acc[e] = fmaf(w[n], own ? vc[e] : v0[e], acc[e]);
          acc[8 + e] = fmaf(w[n], own ? vc[8 + e] : v1[e], acc[8 + e]);
        }
      }
      m = mn;
    }
  }
  // Merge the P groups' states.
  for (int o = G; o < 32; o <<= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    const float mn = fmaxf(m, m2);
    const float w1 = m == -INFINITY ? 0.0f : __expf(m - mn);
    const float w2 = m2 == -INFINITY ? 0.0f : __expf(m2 - mn);
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const float a2 = __shfl_xor_sync(0xffffffffu, acc[e], o);
      acc[e] = acc[e] * w1 + a2 * w2;
    }
    l = l * w1 + l2 * w2;
    m = mn;
  }
  if (pg == 0) {
    float4* out = reinterpret_cast<float4*>(part + 4 + d0);
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4)
      out[q4] = make_float4(acc[4 * q4], acc[4 * q4 + 1], acc[4 * q4 + 2], acc[4 * q4 + 3]);
    if (lane == 0) part[0] = m, part[1] = l;
  }
  if (pl.trace_on) mid[1] = now_ns();
  if (last_of(wk.tickets + size_t(layer) * ticket_stride(s) + h, active, lane))
    combine_unit(wk, s, h, active, lane);
}

// The 16 row sums of a unit over the warp as a reduce-scatter (16 shuffles, 5 dependent rounds,
// instead of 16 full reductions): after the rounds over lane bits 4..1 each lane holds one row's
// sum over its lane pair, the final round adds the pair; lanes 2i and 2i + 1 then hold row
// reduced_row(2i).
template <int N>
__device__ __forceinline__ void reduce_round(float (&v)[kRows], int lane) {
  constexpr int o = N;  // rounds of 16, 8, 4, 2 values over lane bits 4, 3, 2, 1
  const bool upper = (lane & o) != 0;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float send = upper ? v[i] : v[i + N / 2];
    const float keep = upper ? v[i + N / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
  }
}
__device__ __forceinline__ float reduce_rows(float (&v)[kRows], int lane) {
  reduce_round<16>(v, lane);
  reduce_round<8>(v, lane);
  reduce_round<4>(v, lane);
  reduce_round<2>(v, lane);
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}
// Lane bit 4 chose the row's bit 3 (upper half kept), bit 3 its bit 2, bit 2 its bit 1, bit 1 its
// bit 0.
__device__ __forceinline__ int reduced_row(int lane) {
  return ((lane >> 4) & 1) * 8 + ((lane >> 3) & 1) * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1);
}

// The arithmetic of one ring step: lane's 8 columns of 16 rows times 8 activations.
__device__ __forceinline__ void consume(const char* slot, int lane, const float (&xv)[8],
                                        float (&acc)[kRows]) {
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const uint4 wv = *reinterpret_cast<const uint4*>(slot + (j * 32 + lane) * 16);
    float w[8];
    unpack8(wv, w);
    float s = acc[j];
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(w[e], xv[e], s);
    acc[j] = s;
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    decode_layers_kernel(const __grid_constant__ DecodeLayersArgs a, const DecodePlan pl) {
  extern __shared__ __align__(128) char smem[];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  // Consecutive units go to consecutive blocks (SMs), not to the warps of one block: a phase with
  // fewer units than warps then spreads over every SM instead of filling the first ones (each
  // SM's load path would have to carry 4.2 TB/s / 96 SMs for a 768-unit phase).
  const int wid = warp * int(gridDim.x) + int(blockIdx.x);
  const Shape s = shape_of(a.dims);
  const Work wk = work_of(a, pl);
  char* ring = smem + size_t(warp) * kRing * kSlotBytes;
  __shared__ int seen_phase, poller_flag;
  if (threadIdx.x == 0) seen_phase = -1, poller_flag = 0;
  __syncthreads();
  const BlockWait bw{&seen_phase, &poller_flag};

  // The copy cursor fills every free slot of the ring (issued - consumed < kRing).
  Cursor pf{0, 0, wid, 0, 0, Gemv{}};
  seek_gemv(pf, a, pl, s);
  int issued = 0, consumed = 0;
  auto fill = [&] {
    while (issued - consumed < kRing && pf.p < pl.phases) {
      issue(pf, ring + (issued % kRing) * kSlotBytes, lane);
      ++issued;
      advance(pf, a, pl, s);
    }
  };
  fill();

  Cursor cc{0, 0, wid, 0, 0, Gemv{}};
  for (;; cc.f += pl.warps) {
    const int u = normalize(cc, s, pl);
    if (cc.p >= pl.phases) break;
    const int p = cc.p, kind = kind_of(p), layer = (p - 1) / kPhasesPerLayer;
    // Each kind waits for the previous phase where its dependent work starts: GEMV units after
    // filling their ring, attention units after issuing their first cached K/V loads (so the
    // trace's arrival stamp of an attention unit comes after those loads are issued).
    unsigned long long t_arrive = 0, t_release = 0, t_mid[2] = {0, 0};
    auto wait_previous = [&] {
      if (pl.trace_on) t_arrive = now_ns();
      if (p > 0 && !pl.no_wait) wait_phase(bw, wk.done, s, pl, p - 1, lane);
      if (pl.trace_on) t_release = now_ns();
    };
    switch (kind) {
      case kInit:
        wait_previous();
        init_unit(a, wk, s.H, s.hd, u, lane);
        break;
      case kAttn:
        attn_unit(a, wk, pl, s, layer, u / pl.chunks, u % pl.chunks, lane, t_mid, wait_previous);
        break;
      default: {  // the GEMVs
        const Gemv g = gemv_of(a, pl, s, p, u);
        const int steps = steps_of(g);
        fill();  // the ring full, then the wait
        wait_previous();
        const bf16* xin = kind == kO ? wk.attn : kind == kDown ? wk.act : a.x;
        const float scale =
            (kind == kQkv || kind == kGateUp) ? inv_rms(wk, pl, s.H, a.eps, lane) : 1.0f;
        float acc0[kRows], acc1[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) acc0[j] = acc1[j] = 0.0f;
        // Activations two k-steps ahead in registers (an L2 round trip each): the loads for
        // steps ks + 1 and ks + 2 are in flight while step ks is consumed (run 16: with one, a
        // 4-step o unit took ~4 L2 round trips under load, 7 us, with its weights in the ring).
        float xv[8];
        uint4 xnext = make_uint4(0, 0, 0, 0), xnext2 = make_uint4(0, 0, 0, 0);
        if (steps > 0 && g.k0 + lane * 8 < g.k1) xnext = ldcg16(xin + g.k0 + lane * 8);
        if (steps > 0 && g.k0 + kStepCols + lane * 8 < g.k1)
          xnext2 = ldcg16(xin + g.k0 + kStepCols + lane * 8);
        for (int t = 0; t < steps; ++t) {
          fill();
          const int ks = t / g.groups, grp = t % g.groups;
          const int col = g.k0 + ks * kStepCols + lane * 8;
          if (grp == 0) {
            unpack8(xnext, xv);
            xnext = xnext2;
            const int ncol = col + 2 * kStepCols;
            if (ncol < g.k1) xnext2 = ldcg16(xin + ncol);
          }
          // This step's group complete: at most `newer` groups committed after it still pending.
          const int newer = issued - consumed - 1;
          if (newer >= 2)
            asm volatile("cp.async.wait_group 2;" ::: "memory");
          else if (newer == 1)
            asm volatile("cp.async.wait_group 1;" ::: "memory");
          else
            asm volatile("cp.async.wait_group 0;" ::: "memory");
          if (pl.trace_on && t == 0) t_mid[0] = now_ns();
          const char* slot = ring + (consumed % kRing) * kSlotBytes;
          ++consumed;
          if (col < g.k1) {
            if (grp == 0)
              consume(slot, lane, xv, acc0);
            else
              consume(slot, lane, xv, acc1);
          }
        }
        if (pl.trace_on) t_mid[1] = now_ns();
        const float r0 = reduce_rows(acc0, lane);
        const float r1 = g.groups == 2 ? reduce_rows(acc1, lane) : 0.0f;
        if ((lane & 1) == 0) {
          const int row = g.row0 + reduced_row(lane);
          if (kind == kQkv) {
            wk.qkv[size_t(g.split) * s.QKV + row] = r0 * scale;
          } else if (kind == kO) {
            wk.o_part[size_t(g.split) * s.H + row] = r0;
          } else if (kind == kDown) {
            wk.down_part[size_t(g.split) * s.H + row] = r0;
          } else {
            const float gt = r0 * scale, up = r1 * scale;
            wk.act[row] = __float2bfloat16_rn(gt / (1.0f + __expf(-gt)) * up);
          }
        }
        if (kind == kO || kind == kDown) {  // the last split of the tile adds the residual
          const int splits = kind == kO ? pl.split_o : pl.split_down;
          const float* parts = kind == kO ? wk.o_part : wk.down_part;
          int* ticket = wk.tickets + size_t(layer) * ticket_stride(s) + s.nh +
                        (kind == kDown ? s.H / kRows : 0) + g.row0 / kRows;
          // The tile's residual is read now, its L2 round trip under the ticket's.
          const float x_prev = lane < kRows ? __ldcg(wk.x32 + g.row0 + lane) : 0.0f;
          if (splits == 1) __syncwarp();
          if (splits == 1 || last_of(ticket, splits, lane))
            resid_tile(a, wk, s.H, parts, splits, g.row0, x_prev, lane);
        }
        break;
      }
    }
    signal(wk.done + size_t(p) * kDoneStride, lane);
    if (pl.trace_on && lane == 0) {
      unsigned long long* tr = wk.trace + size_t(p) * 4;
      atomicMax(tr + 0, ~t_arrive);
      atomicMax(tr + 1, t_release);
      atomicMax(tr + 2, ~t_release);
      const unsigned long long t_end = now_ns();
      atomicMax(tr + 3, t_end);
      unsigned long long* ut = wk.unit_trace + size_t(cc.f) * kUnitStamps;
      ut[0] = t_arrive, ut[1] = t_release, ut[2] = t_mid[0], ut[3] = t_mid[1], ut[4] = t_end;
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

}  // namespace

const char* decode_layers_unsupported(const DecodeDims& d) {
  if (d.layers < 1 || d.layers > kDecodeMaxLayers) return "layer count outside 1..160";
  if (d.head_dim != 64 && d.head_dim != 128 && d.head_dim != 256) return "head_dim not 64/128/256";
  if (d.heads < 1 || d.kv_heads < 1 || d.heads % d.kv_heads)
    return "heads not a multiple of KV heads";
  const int qkv = (d.heads + 2 * d.kv_heads) * d.head_dim;
  if (d.hidden % kRows || qkv % kRows || d.ffn % kRows)
    return "a projection's rows not a multiple of 16";
  if (d.hidden % 8 || d.ffn % 8) return "hidden or ffn not a multiple of 8";
  if (d.block_size < 1 || d.max_blocks < 1) return "no KV blocks";
  if (int64_t(d.block_size) * d.max_blocks > int64_t(kMaxChunks) * 1024)
    return "context capacity above 32768 positions";
  return "";
}

DecodePlan decode_layers_plan(const DecodeDims& d, int sm_count) {
  DecodePlan p;
  p.warps = sm_count * kWarps;
  // K splits: enough units for every warp where the row tiles alone are few, at least 64 columns
  // a split, at most 8 splits.
  auto split = [&](int tiles, int K) {
    int s = std::max(1, p.warps / std::max(tiles, 1));
    s = std::min({s, 8, std::max(1, K / 64)});
    return s;
  };
  const int qkv = (d.heads + 2 * d.kv_heads) * d.head_dim;
  p.split_qkv = split(qkv / kRows, d.hidden);
  p.split_o = split(d.hidden / kRows, d.heads * d.head_dim);
  p.split_down = split(d.hidden / kRows, d.ffn);
  // A/B knobs for the GPU machine: RIDGE_DECODE_SPLITS=q,o,d (K splits, 1..8 each),
  // RIDGE_DECODE_CHUNK=positions (the least per attention unit, a multiple of 16),
  // RIDGE_DECODE_NO_WAIT=1 (timing only: wrong results).
  static const char* splits_env = std::getenv("RIDGE_DECODE_SPLITS");
  if (splits_env) {
    int q = 0, o = 0, dn = 0;
    if (std::sscanf(splits_env, "%d,%d,%d", &q, &o, &dn) == 3) {
      p.split_qkv = std::clamp(q, 1, 8);
      p.split_o = std::clamp(o, 1, 8);
      p.split_down = std::clamp(dn, 1, 8);
    }
  }
  static const int min_chunk = [] {
    const char* v = std::getenv("RIDGE_DECODE_CHUNK");
    return v ? std::clamp((std::atoi(v) + 15) / 16 * 16, 16, 4096) : 16;  // run 17: 16 beat 32
  }();
  static const bool trace = [] {
    const char* v = std::getenv("RIDGE_DECODE_TRACE");
    return v && v[0] == '1';
  }();
  p.trace_on = trace ? 1 : 0;
  static const bool no_wait = [] {
    const char* v = std::getenv("RIDGE_DECODE_NO_WAIT");
    return v && v[0] == '1';
  }();
  p.no_wait = no_wait ? 1 : 0;
  const int capacity = d.block_size * d.max_blocks;
  p.chunk = min_chunk;
  p.chunks = std::min(kMaxChunks, std::max(1, (capacity + min_chunk - 1) / min_chunk));
  p.resid_units = (d.hidden + kResidWidth - 1) / kResidWidth;
  p.phases = 1 + kPhasesPerLayer * d.layers;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += align256(bytes);
    return here;
  };
  p.x32 = take(size_t(d.hidden) * 4);
  p.ss = take(size_t(d.hidden / kRows) * 4);
  p.qkv = take(size_t(p.split_qkv) * qkv * 4);
  p.attn_part = take(size_t(d.heads) * kMaxChunks * (d.head_dim + 4) * 4);
  p.attn = take(size_t(d.heads) * d.head_dim * 2);
  p.rope = take(size_t(d.head_dim / 2) * 8);
  p.o_part = take(size_t(p.split_o) * d.hidden * 4);
  p.act = take(size_t(d.ffn) * 2);
  p.down_part = take(size_t(p.split_down) * d.hidden * 4);
  p.done = take(size_t(p.phases) * kDoneStride * 4);
  p.tickets = take(size_t(d.layers) * (d.heads + 2 * (d.hidden / kRows)) * 4);
  p.trace = take(size_t(p.phases) * 4 * 8);
  const int qkv_rows = qkv / kRows, h_rows = d.hidden / kRows;
  p.units = p.resid_units + d.layers * (qkv_rows * p.split_qkv + d.heads * p.chunks +
                                        h_rows * p.split_o + d.ffn / kRows + h_rows * p.split_down);
  // Sized for kMaxChunks attention units a head, as the rest of the workspace: the bytes do not
  // depend on the context capacity.
  const int64_t max_units = p.units + int64_t(d.layers) * d.heads * (kMaxChunks - p.chunks);
  p.unit_trace = take(p.trace_on ? size_t(max_units) * kUnitStamps * 8 : 0);
  p.bytes = at;
  return p;
}

std::vector<uint64_t> decode_layers_trace(const DecodeLayersArgs& a, const DecodePlan& plan,
                                          cudaStream_t stream) {
  if (!plan.trace_on) return {};
  std::vector<uint64_t> t(size_t(plan.phases) * 4);
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));
  RIDGE_CHECK_CUDA(cudaMemcpy(t.data(), static_cast<const char*>(a.workspace) + plan.trace,
                              t.size() * 8, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < t.size(); i += 4) t[i] = ~t[i], t[i + 2] = ~t[i + 2];
  static const char* file = std::getenv("RIDGE_DECODE_TRACE_FILE");
  static int launches = 0, dumps = 0;
  if (file && launches++ % 16 == 8 && dumps < 4) {
    ++dumps;
    std::vector<uint64_t> u(size_t(plan.units) * kUnitStamps);
    RIDGE_CHECK_CUDA(cudaMemcpy(u.data(), static_cast<const char*>(a.workspace) + plan.unit_trace,
                                u.size() * 8, cudaMemcpyDeviceToHost));
    // Header: magic ("RTD2"), warps, layers, units per kind (init, qkv, attention, o, gate|up,
    // down), then the query heads and the o projection's K splits (to split units by role).
    const Shape s = shape_of(a.dims);
    const int64_t head[11] = {0x32445452,
                             plan.warps,
                             a.dims.layers,
                             plan.resid_units,
                             int64_t(s.QKV / kRows) * plan.split_qkv,
                             int64_t(s.nh) * plan.chunks,
                             int64_t(s.H / kRows) * plan.split_o,
                             s.F / kRows,
                             int64_t(s.H / kRows) * plan.split_down,
                             s.nh,
                             plan.split_o};
    if (FILE* f = std::fopen(file, "ab")) {
      std::fwrite(head, sizeof head, 1, f);
      std::fwrite(u.data(), 8, u.size(), f);
      std::fclose(f);
    }
  }
  return t;
}

void decode_layers(const DecodeLayersArgs& a, const DecodePlan& plan, cudaStream_t stream) {
  const char* why = decode_layers_unsupported(a.dims);
  RIDGE_KERNEL_EXPECT(why[0] == 0, "decode_layers", std::string(why));
  RIDGE_KERNEL_EXPECT(a.workspace && a.workspace_bytes >= plan.bytes, "decode_layers",
                      "workspace of " + std::to_string(a.workspace_bytes) + " bytes, needs " +
                          std::to_string(plan.bytes));
  RIDGE_KERNEL_EXPECT(plan.phases == 1 + kPhasesPerLayer * a.dims.layers && plan.warps > 0,
                      "decode_layers", "a plan made for other dimensions");
  RIDGE_KERNEL_EXPECT(plan.chunk >= 16 && plan.chunk % 16 == 0 && plan.chunks >= 1 &&
                          plan.chunks <= kMaxChunks,
                      "decode_layers", "a plan with bad attention chunks");
  constexpr size_t smem = size_t(kWarps) * kRing * kSlotBytes;
  static const bool configured = [] {
    RIDGE_CHECK_CUDA(cudaFuncSetAttribute(decode_layers_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
  // The phase counters and the tickets (contiguous, at the end): zero at every launch.
  RIDGE_CHECK_CUDA(cudaMemsetAsync(static_cast<char*>(a.workspace) + plan.done, 0,
                                   plan.bytes - plan.done, stream));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(plan.warps / kWarps));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  RIDGE_CHECK_CUDA(cudaLaunchKernelEx(&config, decode_layers_kernel, a, plan));
}

}  // namespace ridge::kernels
