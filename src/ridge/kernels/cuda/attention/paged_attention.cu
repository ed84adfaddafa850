// Paged attention kernels (see paged_attention.h for layouts and limits).
//
// paged_attention_kernel<HD>
//   Launch: grid (q tiles, nkv, num_seqs * num_splits), 128 threads (4 warps), dynamic shared
//   memory (5 * 64 * (HD + 8) * 2 bytes: Q tile, 2 stages of K and V tiles; 87 KB at HD 128).
//   A block owns BM = 64 "rows" of one sequence and one KV head: row r is query token r / group
//   with query head kvh * group + r % group, so the query heads sharing a KV head (GQA) read
//   each K/V tile once; a decode token fills `group` rows. Warp w owns rows 16w .. 16w + 15.
//   The block walks its split's KV range in tiles of BN = 64 positions, stopping at the causal
//   limit of its last row. K/V rows are gathered from the pages with cp.async (16 bytes per
//   thread per copy; positions outside the range are zero-filled), double-buffered.
//   Per tile: S = Q K^T (mma.sync m16n8k16, bf16 in, fp32 accumulate), causal/range mask, online
//   softmax in the exp2 domain (row max and sum across the 4 threads of a quad), P rounded to
//   bf16 straight from the accumulator layout into the A-operand layout, O += P V (V read with
//   ldmatrix.trans). Shared-memory rows are padded by 16 bytes: the 32-bit fragment loads and
//   the ldmatrix phases hit 32 distinct banks.
//   Output: one split -> out (bf16, O / l). Several splits -> workspace: O / l as fp32
//   [splits, T * nh, HD] and (m, l) [splits, T * nh, 2], merged by combine_splits_kernel.
// combine_splits_kernel<HD>
//   Launch: one warp per (token, head) row, 4 rows per 128-thread block. out = sum_i w_i O_i /
//   sum_i w_i with w_i = l_i * 2^(m_i - max m); fixed order (deterministic).
#include "ridge/kernels/cuda/attention/paged_attention.h"

#include <cstdint>
#include <algorithm>
#include <string>

#include <cuda_bf16.h>

#include "ridge/kernels/cuda/elementwise/check.h"

namespace ridge::kernels {
namespace {

constexpr int kBM = 64;       // rows per block
constexpr int kBN = 64;       // KV positions per tile
constexpr int kThreads = 128; // 4 warps
constexpr int kMaxSplits = 256;
constexpr float kLog2e = 1.4426950408889634f;

template <int HD>
constexpr int smem_row() { return HD + 8; }  // bf16 elements per padded shared row
template <int HD>
constexpr size_t smem_bytes() { return size_t(5) * kBM * smem_row<HD>() * 2; }

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  // src-size 0 zero-fills the 16 bytes (rows past the range, padding rows).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

struct KernelArgs {
  const uint16_t* q;
  int64_t ld_q;
  uint16_t* out;
  int64_t ld_out;
  const uint16_t* k_pool;
  const uint16_t* v_pool;
  const int32_t* cu_seqlens_q;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int block_size;
  int nkv;
  int nh;
  int group;
  int num_splits;
  int kv_chunk;
  int64_t ws_rows;   // T * nh
  float* ws_o;       // [splits, ws_rows, HD]
  float* ws_ml;      // [splits, ws_rows, 2]
  float scale_log2;  // softmax scale * log2(e)
};

template <int HD>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(const KernelArgs a) {
  constexpr int SROW = smem_row<HD>();
  constexpr int KSTEPS = HD / 16;   // k-steps of Q K^T
  constexpr int DTILES = HD / 8;    // n8 tiles of the output
  constexpr int CHUNKS = HD / 8;    // 16-byte chunks per row
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* qs = smem;
  uint16_t* ks = qs + kBM * SROW;   // [2][kBN][SROW]
  uint16_t* vs = ks + 2 * kBN * SROW;

  const int seq = blockIdx.z / a.num_splits, split = blockIdx.z % a.num_splits;
  const int kvh = blockIdx.y;
  const int q_start = a.cu_seqlens_q[seq];
  const int q_len = a.cu_seqlens_q[seq + 1] - q_start;
  const int ctx = a.context_lens[seq];
  const int rows_total = q_len * a.group;
  const int row0 = blockIdx.x * kBM;
  if (row0 >= rows_total) return;
  const int rows_here = min(kBM, rows_total - row0);

  const int kv_begin = split * a.kv_chunk;
  const int last_pos = ctx - q_len + (row0 + rows_here - 1) / a.group;
  const int kv_end = min(min(ctx, kv_begin + a.kv_chunk), last_pos + 1);
  const int n_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kBN - 1) / kBN : 0;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;

  // Q tile -> shared (zero rows past the sequence).
  for (int c = tid; c < kBM * CHUNKS; c += kThreads) {
    const int r = c / CHUNKS, cc = c % CHUNKS;
    const bool valid = r < rows_here;
    const int rr = row0 + (valid ? r : 0);
    const int64_t token = q_start + rr / a.group;
    const int head = kvh * a.group + rr % a.group;
    cp_async_16(qs + r * SROW + cc * 8, a.q + token * a.ld_q + int64_t(head) * HD + cc * 8, valid);
  }
  auto load_kv = [&](int tile, int stage) {
    const int kv0 = kv_begin + tile * kBN;
    uint16_t* kd = ks + stage * kBN * SROW;
    uint16_t* vd = vs + stage * kBN * SROW;
    for (int c = tid; c < kBN * CHUNKS; c += kThreads) {
      const int j = c / CHUNKS, cc = c % CHUNKS;
      const int pos = kv0 + j;
      const bool valid = pos < kv_end;
      int64_t off = 0;
      if (valid) {
        const int64_t slot = int64_t(table[pos / a.block_size]) * a.block_size + pos % a.block_size;
        off = (slot * a.nkv + kvh) * HD + cc * 8;
      }
      cp_async_16(kd + j * SROW + cc * 8, a.k_pool + off, valid);
      cp_async_16(vd + j * SROW + cc * 8, a.v_pool + off, valid);
    }
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  // This thread's two rows (g and g + 8 of the warp's 16): their positions; -1 masks a row.
  int row_pos[2];
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    row_pos[h] = r < rows_here ? ctx - q_len + (row0 + r) / a.group : -1;
  }
  const bool warp_active = warp * 16 < rows_here;

  uint32_t qa[KSTEPS][4];
  float o[DTILES][4];
  for (int d = 0; d < DTILES; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 1 < n_tiles) {
      load_kv(tile + 1, (tile + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (tile == 0) {
      const uint16_t* qw = qs + (warp * 16 + g) * SROW + 2 * t4;
#pragma unroll
      for (int s = 0; s < KSTEPS; ++s) {
        qa[s][0] = lds32(qw + s * 16);
        qa[s][1] = lds32(qw + 8 * SROW + s * 16);
        qa[s][2] = lds32(qw + s * 16 + 8);
        qa[s][3] = lds32(qw + 8 * SROW + s * 16 + 8);
      }
    }
    if (warp_active) {
      const uint16_t* kt = ks + (tile & 1) * kBN * SROW;
      const uint16_t* vt = vs + (tile & 1) * kBN * SROW;
      float s[kBN / 8][4];
#pragma unroll
      for (int n = 0; n < kBN / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        const uint16_t* kr = kt + (n * 8 + g) * SROW + 2 * t4;
#pragma unroll
        for (int k = 0; k < KSTEPS; ++k) mma_16816(s[n], qa[k], lds32(kr + k * 16), lds32(kr + k * 16 + 8));
      }
      // Mask, scale, online softmax.
      const int kv0 = kv_begin + tile * kBN;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int pos = kv0 + n * 8 + 2 * t4 + (e & 1);
          const bool ok = pos <= row_pos[h] && pos < kv_end;
          s[n][e] = ok ? s[n][e] * a.scale_log2 : -INFINITY;
          mx[h] = fmaxf(mx[h], s[n][e]);
        }
      float alpha[2], base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float m_new = fmaxf(m[h], mx[h]);
        base[h] = m_new == -INFINITY ? 0.0f : m_new;
        alpha[h] = exp2f(m[h] - base[h]);  // 0 while the row has seen nothing
        m[h] = m_new;
        l[h] *= alpha[h];
      }
#pragma unroll
      for (int d = 0; d < DTILES; ++d) {
        o[d][0] *= alpha[0];
        o[d][1] *= alpha[0];
        o[d][2] *= alpha[1];
        o[d][3] *= alpha[1];
      }
#pragma unroll
      for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[n][e] = exp2f(s[n][e] - base[e / 2]);
          l[e / 2] += s[n][e];
        }
      // O += P V, 16 KV positions per k-step.
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]),
                                pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
        const uint16_t* vrow = vt + (kk * 16 + (lane & 15)) * SROW + (lane >> 4) * 8;
#pragma unroll
        for (int d = 0; d < DTILES; d += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vrow + d * 8);
          mma_16816(o[d], pa, b[0], b[1]);
          mma_16816(o[d + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the stage just read is refilled by the next iteration's load
  }
  cp_async_wait<0>();

  if (!warp_active) return;
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    inv_l[h] = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    if (r >= rows_here) continue;
    const int rr = row0 + r;
    const int64_t token = q_start + rr / a.group;
    const int head = kvh * a.group + rr % a.group;
    if (a.num_splits == 1) {
      uint16_t* dst = a.out + token * a.ld_out + int64_t(head) * HD + 2 * t4;
#pragma unroll
      for (int d = 0; d < DTILES; ++d)
        *reinterpret_cast<uint32_t*>(dst + d * 8) =
            pack_bf16(o[d][2 * h] * inv_l[h], o[d][2 * h + 1] * inv_l[h]);
    } else {
      const int64_t ws_row = int64_t(split) * a.ws_rows + token * a.nh + head;
      float* dst = a.ws_o + ws_row * HD + 2 * t4;
#pragma unroll
      for (int d = 0; d < DTILES; ++d)
        *reinterpret_cast<float2*>(dst + d * 8) =
            make_float2(o[d][2 * h] * inv_l[h], o[d][2 * h + 1] * inv_l[h]);
      if (t4 == 0) *reinterpret_cast<float2*>(a.ws_ml + ws_row * 2) = make_float2(m[h], l[h]);
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    combine_splits_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                          int64_t ws_rows, int num_splits, int nh, uint16_t* __restrict__ out,
                          int64_t ld_out) {
  constexpr int PER_LANE = HD / 32;
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= ws_rows) return;
  float mx = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, ws_ml[(s * ws_rows + row) * 2]);
  float acc[PER_LANE] = {};
  float total = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float2 ml = *reinterpret_cast<const float2*>(ws_ml + (s * ws_rows + row) * 2);
    if (ml.y <= 0.0f) continue;  // a split this row saw nothing of
    const float w = ml.y * exp2f(ml.x - mx);
    total += w;
    const float* src = ws_o + (s * ws_rows + row) * HD;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] += w * src[lane + 32 * i];
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int64_t token = row / nh, head = row % nh;
  uint16_t* dst = out + token * ld_out + head * HD;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i)
    dst[lane + 32 * i] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[i] * inv));
}

std::string int_text(int64_t v) { return std::to_string(v); }

}  // namespace

void init_paged_attention() {
  RIDGE_CHECK_CUDA(cudaFuncSetAttribute(paged_attention_kernel<64>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(smem_bytes<64>())));
  RIDGE_CHECK_CUDA(cudaFuncSetAttribute(paged_attention_kernel<128>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(smem_bytes<128>())));
}

PagedAttentionPlan plan_paged_attention(const PagedAttentionArgs& a, int target_blocks,
                                        size_t workspace_capacity) {
  const char* kName = "paged_attention_bf16";
  RIDGE_KERNEL_EXPECT(a.head_dim == 64 || a.head_dim == 128, kName,
                      "head_dim must be 64 or 128, got " + int_text(a.head_dim));
  RIDGE_KERNEL_EXPECT(a.num_kv_heads >= 1 && a.num_q_heads % a.num_kv_heads == 0 &&
                          a.num_q_heads / a.num_kv_heads <= kBM,
                      kName,
                      "query heads " + int_text(a.num_q_heads) + " / KV heads " +
                          int_text(a.num_kv_heads) + " must be a whole group of at most 64");
  RIDGE_KERNEL_EXPECT(a.block_size >= 1 && a.num_seqs >= 0 && a.num_seqs < 65536 &&
                          a.host_cu_seqlens_q && a.host_context_lens,
                      kName,
                      "block size " + int_text(a.block_size) + ", " + int_text(a.num_seqs) +
                          " sequences, host mirrors of cu_seqlens_q and context_lens needed");
  RIDGE_KERNEL_EXPECT(a.ld_q % 8 == 0 && reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
                          a.ld_out % 2 == 0 && reinterpret_cast<uintptr_t>(a.out) % 4 == 0 &&
                          reinterpret_cast<uintptr_t>(a.k_pool) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(a.v_pool) % 16 == 0,
                      kName,
                      "q rows must be 16-byte aligned (row stride " + int_text(a.ld_q) +
                          "), out rows 4-byte aligned (row stride " + int_text(a.ld_out) +
                          "), pools 16-byte aligned");
  const int group = a.num_q_heads / a.num_kv_heads;
  PagedAttentionPlan p;
  int64_t blocks = 0;
  int max_ctx = 0;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int q_len = a.host_cu_seqlens_q[s + 1] - a.host_cu_seqlens_q[s];
    const int ctx = a.host_context_lens[s];
    RIDGE_KERNEL_EXPECT(q_len >= 0 && q_len <= ctx && a.host_cu_seqlens_q[s] >= 0, kName,
                        "sequence " + int_text(s) + " has " + int_text(q_len) +
                            " new tokens but context " + int_text(ctx));
    RIDGE_KERNEL_EXPECT((int64_t(ctx) + a.block_size - 1) / a.block_size <= a.max_blocks_per_seq,
                        kName,
                        "sequence " + int_text(s) + " context " + int_text(ctx) +
                            " needs more than " + int_text(a.max_blocks_per_seq) + " blocks");
    const int tiles = int((int64_t(q_len) * group + kBM - 1) / kBM);
    p.max_q_tiles = std::max(p.max_q_tiles, tiles);
    blocks += int64_t(tiles) * a.num_kv_heads;
    max_ctx = std::max(max_ctx, ctx);
  }
  p.num_tokens = a.num_seqs ? a.host_cu_seqlens_q[a.num_seqs] : 0;
  const int max_tiles = std::max(1, (max_ctx + kBN - 1) / kBN);
  int splits = 1;
  if (blocks > 0 && blocks < target_blocks)
    splits = int(std::min<int64_t>({(target_blocks + blocks - 1) / blocks, max_tiles, kMaxSplits,
                                    65535 / std::max(1, a.num_seqs)}));
  const size_t per_split = size_t(p.num_tokens) * a.num_q_heads * (a.head_dim + 2) * sizeof(float);
  if (per_split > 0) splits = int(std::min<size_t>(size_t(splits), workspace_capacity / per_split));
  splits = std::max(splits, 1);
  p.kv_chunk = ((max_tiles + splits - 1) / splits) * kBN;
  p.num_splits = (std::max(max_ctx, 1) + p.kv_chunk - 1) / p.kv_chunk;
  p.workspace_bytes = p.num_splits > 1 ? per_split * p.num_splits : 0;
  return p;
}

void paged_attention_bf16(const PagedAttentionArgs& a, const PagedAttentionPlan& p,
                          void* workspace, cudaStream_t stream) {
  if (p.max_q_tiles == 0 || p.num_tokens == 0) return;
  RIDGE_KERNEL_EXPECT(p.num_splits == 1 || workspace, "paged_attention_bf16",
                      "a split plan needs a workspace");
  KernelArgs k{};
  k.q = a.q;
  k.ld_q = a.ld_q;
  k.out = a.out;
  k.ld_out = a.ld_out;
  k.k_pool = a.k_pool;
  k.v_pool = a.v_pool;
  k.cu_seqlens_q = a.cu_seqlens_q;
  k.context_lens = a.context_lens;
  k.block_tables = a.block_tables;
  k.max_blocks_per_seq = a.max_blocks_per_seq;
  k.block_size = a.block_size;
  k.nkv = a.num_kv_heads;
  k.nh = a.num_q_heads;
  k.group = a.num_q_heads / a.num_kv_heads;
  k.num_splits = p.num_splits;
  k.kv_chunk = p.kv_chunk;
  k.ws_rows = p.num_tokens * a.num_q_heads;
  k.ws_o = static_cast<float*>(workspace);
  k.ws_ml = k.ws_o ? k.ws_o + size_t(p.num_splits) * k.ws_rows * a.head_dim : nullptr;
  k.scale_log2 = a.scale * kLog2e;
  const dim3 grid(unsigned(p.max_q_tiles), unsigned(a.num_kv_heads),
                  unsigned(a.num_seqs * p.num_splits));
  const unsigned combine_blocks = unsigned((k.ws_rows + kThreads / 32 - 1) / (kThreads / 32));
  if (a.head_dim == 64) {
    paged_attention_kernel<64><<<grid, kThreads, smem_bytes<64>(), stream>>>(k);
    RIDGE_CHECK_LAUNCH("paged_attention_kernel<64>");
    if (p.num_splits > 1) {
      combine_splits_kernel<64><<<combine_blocks, kThreads, 0, stream>>>(
          k.ws_o, k.ws_ml, k.ws_rows, p.num_splits, k.nh, a.out, a.ld_out);
      RIDGE_CHECK_LAUNCH("combine_splits_kernel<64>");
    }
  } else {
    paged_attention_kernel<128><<<grid, kThreads, smem_bytes<128>(), stream>>>(k);
    RIDGE_CHECK_LAUNCH("paged_attention_kernel<128>");
    if (p.num_splits > 1) {
      combine_splits_kernel<128><<<combine_blocks, kThreads, 0, stream>>>(
          k.ws_o, k.ws_ml, k.ws_rows, p.num_splits, k.nh, a.out, a.ld_out);
      RIDGE_CHECK_LAUNCH("combine_splits_kernel<128>");
    }
  }
}

}  // namespace ridge::kernels
