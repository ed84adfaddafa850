// The GPU sampler's per-row algorithm: one thread block samples one row of logits. Written against
// the CUDA device API only (intrinsics, __syncthreads, shared memory passed in by reference, no
// __shared__ declarations of its own, no CUDA headers), so that the host-side emulation test
// (tests/kernels) compiles this same file with a fiber-based stand-in for a thread block.
//
// Rules (engine::Sampler's, which stays the CPU reference):
//   raw stats    log-sum-exp and, when asked, the top-n of the raw logits (ties: lowest id first);
//                reported logprobs are raw: float(double(logit) - lse).
//   biases       each listed bias added to its token's logit (-inf: banned), then the tokens of
//                the row's ban mask set to -inf, before the penalties.
//   penalties    repetition (positive / penalty, negative * penalty) on every listed token, then
//                presence + frequency * count subtracted for tokens with count > 0, with the
//                CPU's float operations in the CPU's order (no fused multiply-add).
//   greedy       temperature 0: argmax of the penalized logits, lowest index among equals.
//   random       the allowed set is a top set in the order (logit desc, index asc): top-k, then
//                top-p over the top-k set's mass, then min-p (p >= min_p * p_max); a token is drawn
//                from it with probability proportional to exp((logit - max) / T).
//
// Passes over the row (the row is read from shared memory when it was staged there, else from
// global memory, where it usually sits in L2 after the first pass):
//   P1       raw max, sum of exp and argmax (one pass; it also stages the row).
//   top-n    radix select of the n-th largest raw logit (3 passes), then one collecting pass.
//   P2       only with biases or penalties: argmax of the adjusted row.
//   top-k    radix select of the k-th largest (3 passes; counts, plus masses when top-p follows).
//   top-p    radix select of the key where the cumulative mass reaches top_p * total (3 passes).
//   ties     only when the cut splits equal logits: one pass over contiguous per-thread chunks
//            finds the index of the last admitted tie (index order, as the CPU's stable order).
//   draw     one pass: Gumbel-max (argmax of log p + Gumbel noise over the allowed set), the
//            noise from Philox4x32-10 keyed by (seed) and counted by (token index, position).
// Radix select: keys are the logits' bits mapped to an unsigned order (-0 as +0), split into
// digits of 11, 11 and 10 bits; each pass builds a shared-memory histogram of the elements that
// match the digits chosen so far (counts, and fixed-point masses: floor(p * 2^45) as 64-bit sums
// made of two 32-bit atomics with carry, so the sums are exact and independent of atomic order),
// and one warp finds the digit where the running count / mass crosses the goal. Everything is
// deterministic: the same row, parameters, seed and step give the same token on a given GPU.
#pragma once

#include <climits>
#include <cstdint>

#include "ridge/kernels/cuda/sampling/philox.h"
#include "ridge/kernels/cuda/sampling/sampling_params.h"

#if defined(__CUDACC__)
#define RIDGE_SAMPLE_UNROLL _Pragma("unroll")
#else
#define RIDGE_SAMPLE_UNROLL
#endif

namespace ridge::kernels::sampling_detail {
// The host emulation compiles this file too: its symbols must not meet the CUDA build's host
// stubs of the same functions at link time.
#if defined(__CUDACC__)
inline namespace cuda_build {
#else
inline namespace host_emulation {
#endif

constexpr int kBins = 2048;                      // 11-bit digits (the last digit has 10 bits)
constexpr int kPaddedBins = kBins + kBins / 32;  // one pad word per 32 bins (scan bank conflicts)
constexpr unsigned kFullMask = 0xffffffffu;

struct Shared {
  uint32_t hist_count[kPaddedBins];
  uint32_t hist_lo[kPaddedBins];  // fixed-point mass, low 32 bits (carries go to hist_hi)
  uint32_t hist_hi[kPaddedBins];
  float red_f[32];
  int32_t red_i[32];
  double red_d[32];
  // Radix-select state, written by the scanning lane of warp 0.
  uint64_t sel_above_count;
  uint64_t sel_above_mass;
  uint64_t sel_goal;
  uint64_t sel_tie_mass;
  uint32_t sel_digit;
  uint32_t sel_tie_count;
  int32_t tie_index;
  int32_t n_collected;
  float top_v[kSampleMaxTopLogprobs];
  int32_t top_i[kSampleMaxTopLogprobs];
};

__device__ __forceinline__ int imin(int a, int b) {
  return a < b ? a : b;
}
__device__ __forceinline__ int imax(int a, int b) {
  return a > b ? a : b;
}
__device__ __forceinline__ int pad_bin(int d) {
  return d + (d >> 5);
}

// Unsigned key with the order of the floats (-0 and +0 equal, as the CPU's comparisons).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (v, i) before (bv, bi) in the order (value desc, index asc).
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ float component(const float4& x, int j) {
  return j == 0 ? x.x : j == 1 ? x.y : j == 2 ? x.z : x.w;
}

// Group g holds elements [4g, 4g + 4) of the row; elements past V read as 0 (callers skip them).
__device__ __forceinline__ float4 load_group(const float* row, int V, bool vec, int g) {
  const int i = 4 * g;
  if (vec && i + 3 < V) return *reinterpret_cast<const float4*>(row + i);
  float4 x;
  x.x = row[i];
  x.y = i + 1 < V ? row[i + 1] : 0.0f;
  x.z = i + 2 < V ? row[i + 2] : 0.0f;
  x.w = i + 3 < V ? row[i + 3] : 0.0f;
  return x;
}

// dst is 16-byte aligned (shared memory, or a workspace row of a multiple of 4 floats).
__device__ __forceinline__ void store_group(float* dst, int V, int g, const float4& x) {
  const int i = 4 * g;
  if (i + 3 < V) {
    *reinterpret_cast<float4*>(dst + i) = x;
    return;
  }
  dst[i] = x.x;
  if (i + 1 < V) dst[i + 1] = x.y;
  if (i + 2 < V) dst[i + 2] = x.z;
}

// Calls f(g, x) for this thread's groups g = tid, tid + kT, ... in increasing order, with four
// loads in flight before their use.
template <int kT, class F>
__device__ __forceinline__ void for_groups(const float* row, int V, bool vec, F&& f) {
  const int ng = (V + 3) >> 2;
  int g = int(threadIdx.x);
  for (; g + 3 * kT < ng; g += 4 * kT) {
    const float4 x0 = load_group(row, V, vec, g);
    const float4 x1 = load_group(row, V, vec, g + kT);
    const float4 x2 = load_group(row, V, vec, g + 2 * kT);
    const float4 x3 = load_group(row, V, vec, g + 3 * kT);
    f(g, x0);
    f(g + kT, x1);
    f(g + 2 * kT, x2);
    f(g + 3 * kT, x3);
  }
  for (; g < ng; g += kT) f(g, load_group(row, V, vec, g));
}

// ---- block reductions (every thread gets the same result) ----

struct ArgMax {
  float v;
  int i;
};

template <int kT>
__device__ ArgMax block_argmax(Shared& sh, float v, int i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int oi = __shfl_xor_sync(kFullMask, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  __syncthreads();  // red_* may still be read by a previous reduction
  if (lane == 0) {
    sh.red_f[warp] = v;
    sh.red_i[warp] = i;
  }
  __syncthreads();
  ArgMax r{sh.red_f[0], sh.red_i[0]};
  for (int w = 1; w < kT / 32; ++w)
    if (better(sh.red_f[w], sh.red_i[w], r.v, r.i)) r = ArgMax{sh.red_f[w], sh.red_i[w]};
  return r;
}

// (m, s): running max and sum of exp(x - m). Symmetric in its arguments (bit for bit), so the
// butterfly gives every lane the same value.
__device__ __forceinline__ void merge_softmax(float& m, double& s, float m2, double s2) {
  if (m2 > m) {
    const float tm = m;
    m = m2;
    m2 = tm;
    const double ts = s;
    s = s2;
    s2 = ts;
  }
  if (!(m2 > -INFINITY)) return;  // the other side is empty
  s += s2 * double(expf(m2 - m));
}

template <int kT>
__device__ void block_softmax(Shared& sh, float& m, double& s) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, o);
    const double s2 = __shfl_xor_sync(kFullMask, s, o);
    merge_softmax(m, s, m2, s2);
  }
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  __syncthreads();
  if (lane == 0) {
    sh.red_f[warp] = m;
    sh.red_d[warp] = s;
  }
  __syncthreads();
  m = sh.red_f[0];
  s = sh.red_d[0];
  for (int w = 1; w < kT / 32; ++w) merge_softmax(m, s, sh.red_f[w], sh.red_d[w]);
}

// Exclusive prefix sum over the threads in thread order.
template <int kT>
__device__ int block_exclusive_scan(Shared& sh, int x) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  int incl = x;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) sh.red_i[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += sh.red_i[w];
  return before + incl - x;
}

// ---- probability mass in fixed point ----

__device__ __forceinline__ float scaled_logit(float v, float vmax, float inv_t) {
  return __fmul_rn(__fsub_rn(v, vmax), inv_t);
}

// floor(p * 2^45), p = exp((v - vmax) / T) in [0, 1].
__device__ __forceinline__ uint64_t fixed_mass(float v, float vmax, float inv_t) {
  const float p = expf(scaled_logit(v, vmax, inv_t));
  return __float2ull_rz(p * 0x1p45f);
}

__device__ __forceinline__ uint64_t bin_mass(const Shared& sh, int pb) {
  return (uint64_t(sh.hist_hi[pb]) << 32) + uint64_t(sh.hist_lo[pb]);
}

// Adds f to the 64-bit mass of padded bin pb with 32-bit atomics: the low word wraps exactly
// floor(sum of low words / 2^32) times whatever the order, and each wrap carries one into hi.
__device__ __forceinline__ void add_mass(Shared& sh, int pb, uint64_t f) {
  const uint32_t lo = uint32_t(f);
  uint32_t hi = uint32_t(f >> 32);
  if (lo != 0) {
    const uint32_t old = atomicAdd(&sh.hist_lo[pb], lo);
    if (uint32_t(old + lo) < old) ++hi;
  }
  if (hi != 0) atomicAdd(&sh.hist_hi[pb], hi);
}

// ceil(top_p * total) in [1, total]: the mass the nucleus must reach (engine::Sampler keeps the
// smallest prefix whose mass is >= top_p * total).
__device__ __forceinline__ uint64_t mass_goal(float top_p, uint64_t total) {
  const double t = ceil(double(top_p) * double(total));
  if (!(t >= 1.0)) return 1;
  if (t >= double(total)) return total;
  const uint64_t g = uint64_t(t);
  return g < 1 ? 1 : (g > total ? total : g);
}

// ---- radix select ----

struct Select {
  uint32_t key;            // the key of the element where the goal is reached
  uint32_t tie_count;      // elements with exactly that key
  uint64_t above_count;    // elements with a larger key (count goals only)
  uint64_t above_mass;     // their fixed-point mass (when masses were tracked)
  uint64_t tie_mass_each;  // fixed-point mass of one element with the key
  uint64_t goal;           // the goal used (mass goals computed from the total are returned)
};

// Warp 0: finds the highest digit d at which (above + everything in digits >= d) reaches the goal
// (by count or by mass) and records it with the count / mass strictly above it.
__device__ __forceinline__ void scan_bins(Shared& sh, int nb, bool by_mass, bool goal_from_total,
                                          float top_p) {
  const int lane = int(threadIdx.x) & 31;
  const int per = nb / 32;
  const int first = lane * per;
  uint64_t c_own = 0, m_own = 0;
  for (int b = first; b < first + per; ++b) {
    const int pb = pad_bin(b);
    c_own += sh.hist_count[pb];
    m_own += bin_mass(sh, pb);
  }
  // Inclusive suffix sums: lanes >= this one (higher digits are higher keys).
  uint64_t c_inc = c_own, m_inc = m_own;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t c2 = __shfl_down_sync(kFullMask, c_inc, o);
    const uint64_t m2 = __shfl_down_sync(kFullMask, m_inc, o);
    if (lane + o < 32) {
      c_inc += c2;
      m_inc += m2;
    }
  }
  const uint64_t above_c = sh.sel_above_count, above_m = sh.sel_above_mass;
  uint64_t goal = sh.sel_goal;
  const uint64_t total_m = __shfl_sync(kFullMask, m_inc, 0);
  if (goal_from_total) goal = mass_goal(top_p, total_m);
  const uint64_t reach = by_mass ? above_m + m_inc : above_c + c_inc;
  const unsigned mask = __ballot_sync(kFullMask, reach >= goal);
  const int crossing = mask ? 31 - __clz(int(mask)) : 0;
  if (lane == crossing) {
    uint64_t rc = above_c + (c_inc - c_own), rm = above_m + (m_inc - m_own);
    int d = -1;
    for (int b = first + per - 1; b >= first; --b) {
      const int pb = pad_bin(b);
      const uint64_t cb = sh.hist_count[pb], mb = bin_mass(sh, pb);
      if ((by_mass ? rm + mb : rc + cb) >= goal) {
        d = b;
        break;
      }
      rc += cb;
      rm += mb;
    }
    if (d < 0) {  // unreachable goal (cannot happen for valid goals): take the lowest digit
      d = first;
      rc -= sh.hist_count[pad_bin(d)];
      rm -= bin_mass(sh, pad_bin(d));
    }
    sh.sel_digit = uint32_t(d);
    sh.sel_above_count = rc;
    sh.sel_above_mass = rm;
    sh.sel_goal = goal;
    sh.sel_tie_count = sh.hist_count[pad_bin(d)];
    sh.sel_tie_mass = bin_mass(sh, pad_bin(d));
  }
}

// The key at which the goal is reached, going down from the largest key: by count (goal = k:
// the k-th largest) or by fixed-point mass (goal given, or ceil(top_p * total) when
// goal_from_total). track_mass: also sum masses (needed by mass goals, optional for counts).
template <int kT>
__device__ Select radix_select(Shared& sh, const float* row, int V, bool vec, bool by_mass,
                               bool track_mass, uint64_t goal, bool goal_from_total, float top_p,
                               float vmax, float inv_t) {
  if (threadIdx.x == 0) {
    sh.sel_above_count = 0;
    sh.sel_above_mass = 0;
    sh.sel_goal = goal;
  }
  uint32_t prefix = 0, prefix_mask = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = level == 0 ? 21 : level == 1 ? 10 : 0;
    const int nb = level < 2 ? kBins : kBins / 2;
    // A mass goal needs counts only for the final ties (one atomic less per element before).
    const bool counting = !by_mass || level == 2;
    for (int b = int(threadIdx.x); b < kPaddedBins; b += kT) {
      sh.hist_count[b] = 0;
      sh.hist_lo[b] = 0;
      sh.hist_hi[b] = 0;
    }
    __syncthreads();
    for_groups<kT>(row, V, vec, [&](int g, const float4& x) {
      RIDGE_SAMPLE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * g + j;
        if (i >= V) continue;
        const float v = component(x, j);
        const uint32_t k = order_key(v);
        if ((k & prefix_mask) != prefix) continue;
        const int pb = pad_bin(int((k >> shift) & uint32_t(nb - 1)));
        if (counting) atomicAdd(&sh.hist_count[pb], 1u);
        if (track_mass) add_mass(sh, pb, fixed_mass(v, vmax, inv_t));
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) scan_bins(sh, nb, by_mass, level == 0 && goal_from_total, top_p);
    __syncthreads();
    prefix |= sh.sel_digit << shift;
    prefix_mask |= uint32_t(nb - 1) << shift;
  }
  Select s;
  s.key = prefix;
  s.tie_count = sh.sel_tie_count;
  s.above_count = sh.sel_above_count;
  s.above_mass = sh.sel_above_mass;
  s.tie_mass_each = s.tie_count ? sh.sel_tie_mass / s.tie_count : 0;
  s.goal = sh.sel_goal;
  __syncthreads();  // everyone has read sh.sel_* before they are written again
  return s;
}

// The index of the c-th (1-based, c <= count) element whose key is `key`, in index order.
// Threads own contiguous index ranges so that a prefix sum over threads is index order.
template <int kT>
__device__ int find_tie_index(Shared& sh, const float* row, int V, uint32_t key, int c) {
  const int chunk = (V + kT - 1) / kT;
  const int begin = imin(V, int(threadIdx.x) * chunk), end = imin(V, begin + chunk);
  int own = 0;
  for (int i = begin; i < end; ++i) own += order_key(row[i]) == key;
  if (threadIdx.x == 0) sh.tie_index = INT_MAX;
  const int before = block_exclusive_scan<kT>(sh, own);  // its barriers publish tie_index
  if (own > 0 && before < c && c <= before + own) {
    int want = c - before;
    for (int i = begin; i < end; ++i)
      if (order_key(row[i]) == key && --want == 0) {
        sh.tie_index = i;
        break;
      }
  }
  __syncthreads();
  const int r = sh.tie_index;
  __syncthreads();
  return r;
}

// ---- the row ----

// Raw top-n ids and logprobs (n = min(top_logprobs, V)) into this row's top_n slots.
template <int kT>
__device__ void raw_top_logprobs(Shared& sh, const float* row, int V, bool vec, int n, int top_n,
                                 double lse, int32_t* ids_out, float* lp_out) {
  if (n > 0) {
    const Select s =
        radix_select<kT>(sh, row, V, vec, false, false, uint64_t(n), false, 0.0f, 0.0f, 0.0f);
    const int need = n - int(s.above_count);  // ties admitted, 1..tie_count
    const int icut =
        uint32_t(need) < s.tie_count ? find_tie_index<kT>(sh, row, V, s.key, need) : INT_MAX;
    if (threadIdx.x == 0) sh.n_collected = 0;
    __syncthreads();
    for_groups<kT>(row, V, vec, [&](int g, const float4& x) {
      RIDGE_SAMPLE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * g + j;
        if (i >= V) continue;
        const float v = component(x, j);
        const uint32_t k = order_key(v);
        if (k > s.key || (k == s.key && i <= icut)) {
          const int slot = atomicAdd(&sh.n_collected, 1);
          if (slot < kSampleMaxTopLogprobs) {
            sh.top_v[slot] = v;
            sh.top_i[slot] = i;
          }
        }
      }
    });
    __syncthreads();
    if (int(threadIdx.x) < n) {
      const float v = sh.top_v[threadIdx.x];
      const int i = sh.top_i[threadIdx.x];
      int rank = 0;
      for (int j = 0; j < n; ++j) rank += better(sh.top_v[j], sh.top_i[j], v, i);
      ids_out[rank] = i;
      lp_out[rank] = float(double(v) - lse);
    }
    __syncthreads();
  }
  for (int j = n + int(threadIdx.x); j < top_n; j += kT) {
    ids_out[j] = -1;
    lp_out[j] = -INFINITY;
  }
}

// Gumbel noise candidate: the 64 random bits (hi:lo) give eps in (0, 1] with 24 significant bits
// at every scale, E = -log(1 - eps) ~ Exp(1), and the score log p - log E (= log p + Gumbel).
__device__ __forceinline__ void gumbel_candidate(float lp, uint32_t lo, uint32_t hi, int i,
                                                 float& best, int& best_i) {
  const uint64_t bits = (uint64_t(hi) << 32) | uint64_t(lo);
  const float eps = __fmul_rn(__fadd_rn(__ull2float_rn(bits), 0.5f), 0x1p-64f);
  const float e = -log1pf(-eps);
  const float score = lp - logf(e);
  if (better(score, i, best, best_i)) {
    best = score;
    best_i = i;
  }
}

// Samples row r. staged: shared memory for a copy of the row (4-float aligned, vocab rounded up
// to 4) or null.
template <int kT>
__device__ void sample_row(const SampleArgs& a, int r, float* staged, Shared& sh) {
  const SampleRowParams p = a.params[r];
  const int V = int(a.vocab);
  const float* in = a.logits + int64_t(r) * a.ld;
  const bool in_vec = (reinterpret_cast<uintptr_t>(in) & 15u) == 0;
  const bool penalize =
      p.penalty_end > p.penalty_begin &&
      (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
  const bool bias = p.bias_end > p.bias_begin;
  const bool mask = p.ban_mask >= 0;
  const bool adjust = penalize || bias || mask;
  const int n_top = imin(imax(p.top_logprobs, 0), imin(imin(kSampleMaxTopLogprobs, a.top_n), V));
  // The row is read again after P1 from a copy: in shared memory when it fits, else (only when
  // biases or penalties must change it) in the workspace; otherwise from the input.
  float* copy = staged ? staged : (adjust ? a.workspace + int64_t(r) * a.ws_ld : nullptr);

  // P1: raw max / sum of exp / argmax; stage the copy.
  float m = -INFINITY, bv = -INFINITY;
  double s = 0.0;
  int bi = INT_MAX;
  for_groups<kT>(in, V, in_vec, [&](int g, const float4& x) {
    if (copy) store_group(copy, V, g, x);
    RIDGE_SAMPLE_UNROLL
    for (int j = 0; j < 4; ++j) {
      const int i = 4 * g + j;
      if (i >= V) continue;
      const float v = component(x, j);
      if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
      if (v > m) {
        s = s * double(expf(m - v)) + 1.0;
        m = v;
      } else if (v > -INFINITY) {
        s += double(expf(v - m));
      }
    }
  });
  block_softmax<kT>(sh, m, s);
  const double lse = double(m) + log(s);
  ArgMax best = block_argmax<kT>(sh, bv, bi);  // its barriers also publish the copy

  const float* work = copy ? copy : in;
  const bool work_vec = copy ? true : in_vec;

  if (a.top_n > 0)
    raw_top_logprobs<kT>(sh, work, V, work_vec, n_top, a.top_n, lse,
                         a.top_ids + int64_t(r) * a.top_n, a.top_logprobs + int64_t(r) * a.top_n);

  // Biases, the ban mask, then penalties on the copy (each listed token once in each list; a
  // barrier between the steps, which may touch the same token), then P2: the adjusted argmax.
  if (bias) {
    for (int e = p.bias_begin + int(threadIdx.x); e < p.bias_end; e += kT) {
      const int t = a.bias_ids[e];
      if (t >= 0 && t < V) copy[t] = __fadd_rn(copy[t], a.bias_values[e]);
    }
    __syncthreads();
  }
  if (mask) {
    const uint32_t* words = a.ban_masks + int64_t(p.ban_mask) * ((V + 31) / 32);
    for (int i = int(threadIdx.x); i < V; i += kT)
      if (words[i >> 5] >> (i & 31) & 1u) copy[i] = -INFINITY;
    __syncthreads();
  }
  if (penalize) {
    const float rep = p.repetition_penalty;
    const bool pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    for (int e = p.penalty_begin + int(threadIdx.x); e < p.penalty_end; e += kT) {
      const int t = a.penalty_ids[e];
      if (t < 0 || t >= V) continue;
      const int count = a.penalty_counts[e];
      float l = copy[t];
      if (rep != 1.0f) l = l > 0.0f ? __fdiv_rn(l, rep) : __fmul_rn(l, rep);
      if (pf && count > 0)
        l = __fsub_rn(l,
                      __fadd_rn(p.presence_penalty, __fmul_rn(p.frequency_penalty, float(count))));
      copy[t] = l;
    }
    __syncthreads();
  }
  if (adjust) {
    bv = -INFINITY;
    bi = INT_MAX;
    for_groups<kT>(work, V, work_vec, [&](int g, const float4& x) {
      RIDGE_SAMPLE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * g + j;
        if (i < V && better(component(x, j), i, bv, bi)) {
          bv = component(x, j);
          bi = i;
        }
      }
    });
    best = block_argmax<kT>(sh, bv, bi);
  }

  int chosen = best.i;
  const float inv_t = p.temperature > 0.0f ? __fdiv_rn(1.0f, p.temperature) : 0.0f;
  // A draw when there is anything to draw from (every token banned: greedy's token 0).
  if (p.temperature > 0.0f && inv_t <= 3.4028234e38f && best.v > -INFINITY) {
    const float vmax = best.v;
    const bool top_k = p.top_k > 0 && p.top_k < V;
    const bool top_p = p.top_p < 1.0f;
    const bool min_p = p.min_p > 0.0f;
    // The cut: keys above `key`, and the first `admit` of the `ties` elements equal to it.
    bool cut = false;
    uint32_t key = 0;
    uint64_t admit = 0, ties = 0, total = 0;
    if (top_k) {
      const Select k = radix_select<kT>(sh, work, V, work_vec, false, top_p, uint64_t(p.top_k),
                                        false, 0.0f, vmax, inv_t);
      cut = true;
      key = k.key;
      admit = uint64_t(p.top_k) - k.above_count;
      ties = k.tie_count;
      total = k.above_mass + admit * k.tie_mass_each;
    }
    if (top_p) {
      // With top-k, the goal is top_p of the top-k set's mass; the crossing then lies at or
      // above the top-k key, so the select may run over the whole row.
      const uint64_t goal = top_k ? mass_goal(p.top_p, total) : 0;
      const Select n =
          radix_select<kT>(sh, work, V, work_vec, true, true, goal, !top_k, p.top_p, vmax, inv_t);
      const uint64_t q = n.tie_mass_each > 0 ? n.tie_mass_each : 1;
      uint64_t c = n.goal > n.above_mass ? (n.goal - n.above_mass + q - 1) / q : 1;
      if (c > n.tie_count) c = n.tie_count;
      if (c < 1) c = 1;
      if (top_k && n.key == key && c > admit) c = admit;
      cut = true;
      key = n.key;
      admit = c;
      ties = n.tie_count;
    }
    const int icut =
        cut && admit < ties ? find_tie_index<kT>(sh, work, V, key, int(admit)) : INT_MAX;

    // Draw: Gumbel-max over the allowed set. Element i takes the words of Philox counter
    // (i / 2, 0, step) (x, y for even i, z, w for odd i) under key seed.
    const uint32_t s_lo = uint32_t(p.step), s_hi = uint32_t(p.step >> 32);
    const uint32_t k_lo = uint32_t(p.seed), k_hi = uint32_t(p.seed >> 32);
    float bs = -INFINITY;
    int bsi = INT_MAX;
    for_groups<kT>(work, V, work_vec, [&](int g, const float4& x) {
      bool ok[4];
      float lp[4];
      RIDGE_SAMPLE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * g + j;
        const float v = component(x, j);
        const uint32_t k = order_key(v);
        ok[j] = i < V && (!cut || k > key || (k == key && i <= icut));
        lp[j] = scaled_logit(v, vmax, inv_t);
        if (ok[j] && min_p) ok[j] = expf(lp[j]) >= p.min_p;
      }
      RIDGE_SAMPLE_UNROLL
      for (int h = 0; h < 2; ++h) {
        if (!ok[2 * h] && !ok[2 * h + 1]) continue;
        const Philox4x32 w = philox4x32_10(uint32_t(2 * g + h), 0u, s_lo, s_hi, k_lo, k_hi);
        if (ok[2 * h]) gumbel_candidate(lp[2 * h], w.x, w.y, 4 * g + 2 * h, bs, bsi);
        if (ok[2 * h + 1]) gumbel_candidate(lp[2 * h + 1], w.z, w.w, 4 * g + 2 * h + 1, bs, bsi);
      }
    });
    const ArgMax drawn = block_argmax<kT>(sh, bs, bsi);
    if (drawn.i >= 0 && drawn.i < V) chosen = drawn.i;
  }

  if (threadIdx.x == 0) {
    const int t = chosen >= 0 && chosen < V ? chosen : 0;
    a.tokens[r] = t;
    a.logprobs[r] = float(double(in[t]) - lse);
  }
}

}  // inline namespace
}  // namespace ridge::kernels::sampling_detail
