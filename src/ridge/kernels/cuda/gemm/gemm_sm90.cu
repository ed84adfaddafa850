// Warp-specialized Hopper GEMM: Y[M,N] = X[M,K] · W[N,K]ᵀ (+ residual), or the fused
// gate_up + SwiGLU variant. bf16 in, fp32 accumulate, bf16 out.
//
// Launch shape: 384 threads = 3 warpgroups. Warpgroup 0 is the producer: one thread issues TMA
// loads of 128×64 X tiles and BN×64 W tiles (two BN/2-row boxes; BN = 256 or 128, picked by a
// wave-quantization model) into a ring of shared memory (3 stages of 48 KiB by default, 4 as an
// option, or 6 of 32 KiB), each stage guarded by a `full` mbarrier (TMA transaction count) and an
// `empty` mbarrier (one arrival per consumer warp). Warpgroups 1 and 2 are consumers: each owns
// 64 rows of the 128×BN output tile, issues wgmma m64nBNk16 from shared memory and keeps BN/2
// fp32 accumulators per thread. setmaxnreg moves registers from the producer (40) to the
// consumers (232). The grid is persistent (one CTA per SM) and walks output tiles in grouped
// order (GROUP_M tile rows column by column) so that concurrent tiles share X and W in L2; the
// producer runs ahead into the next tile while the consumers store the last one.
// Epilogue: the consumers stage bf16 64×64 boxes in shared memory and TMA-store them, then go on
// to the next tile while the stores drain (register stores straight to global memory remain as
// an option for the ladder). Clusters of two CTAs sharing each W tile by multicast: an option.
// Layout: X, W, residual, Y row-major, K contiguous; tiles are K-major with 128-byte swizzle.
// Limits (host-checked): sm_90, K % 8 == 0, N % 8 == 0, 16-byte aligned pointers; SwiGLU needs
// F % 128 == 0. Partial M/N/K tiles: TMA zero-fills loads and clips stores (register stores are
// bounds-checked).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/gemm/sm90.cuh"

namespace ridge::kernels {
namespace {

using namespace sm90;

constexpr int kBM = 128;
constexpr int kBK = 64;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);

// BN (256 or 128) output columns per tile; STAGES ring stages of (128 + BN) × 64 operands;
// SLOTS 64×64 bf16 staging boxes per consumer for the TMA-store epilogue (0: the epilogue stores
// from registers straight to global memory). The configurations used keep ≤ 224 KiB in flight.
template <int BN, int STAGES, int SLOTS>
struct Config {
  static constexpr int kStages = STAGES;
  static constexpr uint32_t kStageBytes = (kBM + BN) * kBK * sizeof(bf16);
  static constexpr int kBoxElems = 64 * 64;
  struct alignas(1024) SharedStorage {
    bf16 a[kStages][kBM * kBK];
    bf16 b[kStages][BN * kBK];
    bf16 c[SLOTS > 0 ? kConsumers * SLOTS * kBoxElems : 8];  // 1024-aligned: a, b are 16 KiB multiples
    uint64_t full[kStages];
    uint64_t empty[kStages];
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + slack to align
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

enum class Epilogue : int { kStore = 0, kSwiGLU = 1, kNone = 2 };

struct TileCoord {
  int m;
  int n;
};

// Grouped raster: tiles advance down GROUP_M tile rows, then to the next tile column.
__device__ __forceinline__ TileCoord tile_coord(int tile, int tiles_m, int tiles_n, int group_m) {
  const int per_group = group_m * tiles_n;
  const int group = tile / per_group;
  const int first_m = group * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int local = tile - group * per_group;
  return {first_m + local % rows, local / rows};
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// out_n: columns of Y (N, or F for SwiGLU); ld_y: the row stride of Y and residual (elements; out_n
// unless this launch writes a column range of a wider Y). The W tile is two BN/2-row boxes: rows
// [n0, n0 + BN/2) and, for a plain tile, the next BN/2 rows, for SwiGLU the up rows F + n0.
// tmap_y (SLOTS > 0): Y [M, out_n] in 64×64 boxes with 128-byte swizzle.
// CM = 2: clusters of two CTAs on vertically adjacent tiles (same W tile). Each CTA loads its own
// X tile and one of the two W boxes, multicast into both CTAs' shared memory, so L2 delivers
// each W tile once per pair; a stage is refilled only after the consumers of both CTAs released
// it (each consumer warp arrives on both CTAs' `empty` barriers).
template <int BN, int STAGES, int SLOTS, int CM>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_sm90_ws_kernel(const __grid_constant__ CUtensorMap tmap_x,
                        const __grid_constant__ CUtensorMap tmap_w,
                        const __grid_constant__ CUtensorMap tmap_y, bf16* Y,
                        const bf16* residual, int M, int out_n, int ld_y, int K, int epilogue,
                        int group_m) {
  static_assert(CM == 1 || CM == 2, "clusters of 1 or 2 CTAs");
  using Cfg = Config<BN, STAGES, SLOTS>;
  constexpr int kStages = Cfg::kStages;
  constexpr int kBN = BN;
  extern __shared__ uint8_t smem_raw[];
  typename Cfg::SharedStorage& s = *reinterpret_cast<typename Cfg::SharedStorage*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));

  const bool swiglu = epilogue == static_cast<int>(Epilogue::kSwiGLU);
  const int tile_n_cols = swiglu ? kBN / 2 : kBN;  // output columns per tile
  const int tiles_m = (M + kBM - 1) / kBM;
  const int tiles_n = (out_n + tile_n_cols - 1) / tile_n_cols;
  // Work is walked in cluster tiles of CM vertically adjacent tiles; CTA `rank` takes row CM·m +
  // rank of cluster tile (m, n). A row past the last (odd tiles_m) still loads its W box for its
  // peer; its own X loads are zero-filled and its stores clipped.
  const int tiles_m_cl = (tiles_m + CM - 1) / CM;
  const int cluster_tiles = tiles_m_cl * tiles_n;
  const int k_blocks = (K + kBK - 1) / kBK;
  const int rank = CM > 1 ? static_cast<int>(cluster_ctarank()) : 0;
  const int first_tile = CM > 1 ? static_cast<int>(cluster_id_x()) : blockIdx.x;
  const int tile_stride = CM > 1 ? static_cast<int>(nclusters_x()) : gridDim.x;
  auto coord = [&](int t) {
    const TileCoord c = tile_coord(t, tiles_m_cl, tiles_n, group_m);
    return TileCoord{c.m * CM + rank, c.n};
  };

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], kConsumers * 4 * CM);
    }
    mbar_fence_init();
  }
  // The peer CTA arrives on these barriers and multicasts into this CTA: all initialized first.
  if constexpr (CM > 1)
    cluster_sync();
  else
    __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = first_tile; tile < cluster_tiles; tile += tile_stride) {
        const TileCoord tc = coord(tile);
        const int w_row0 = tc.n * tile_n_cols;
        const int w_row1 = swiglu ? out_n + w_row0 : w_row0 + kBN / 2;
        for (int kb = 0; kb < k_blocks; ++kb) {
          mbar_wait(&s.empty[stage], phase ^ 1);
          mbar_arrive_expect_tx(&s.full[stage], Cfg::kStageBytes);
          tma_load_2d(s.a[stage], &tmap_x, &s.full[stage], kb * kBK, tc.m * kBM);
          if constexpr (CM == 1) {
            tma_load_2d(s.b[stage], &tmap_w, &s.full[stage], kb * kBK, w_row0);
            tma_load_2d(s.b[stage] + (kBN / 2) * kBK, &tmap_w, &s.full[stage], kb * kBK,
                        w_row1);
          } else {
            tma_load_2d_multicast(s.b[stage] + rank * (kBN / 2) * kBK, &tmap_w, &s.full[stage],
                                  kb * kBK, rank == 0 ? w_row0 : w_row1, 0x3);
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int consumer = warpgroup - 1;
    const int lane = threadIdx.x & 31;
    const int warp_in_group = (threadIdx.x / 32) & 3;
    const bool release_thread = lane == 0;
    const bool store_thread = (threadIdx.x & 127) == 0;  // issues this consumer's TMA stores
    float acc[kBN / 2];
    int stage = 0;
    uint32_t phase = 0;
    // Releases a stage: to this CTA's producer, and with clusters to the peer's (whose multicast
    // writes into it).
    auto release = [&](int st) {
      if constexpr (CM == 1) {
        mbar_arrive(&s.empty[st]);
      } else {
        mbar_arrive_cluster(&s.empty[st], 0);
        mbar_arrive_cluster(&s.empty[st], 1);
      }
    };
    for (int tile = first_tile; tile < cluster_tiles; tile += tile_stride) {
      const TileCoord tc = coord(tile);
      int prev_stage = 0;
      for (int kb = 0; kb < k_blocks; ++kb) {
        mbar_wait(&s.full[stage], phase);
        wgmma_fence();
        const bf16* a_tile = s.a[stage] + consumer * 64 * kBK;
        const bf16* b_tile = s.b[stage];
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          const uint64_t da = make_desc_k128(a_tile + kk * 16);
          const uint64_t db = make_desc_k128(b_tile + kk * 16);
          if constexpr (kBN == 256)
            wgmma_m64n256k16_bf16(acc, da, db, (kb > 0 || kk > 0) ? 1 : 0);
          else
            wgmma_m64n128k16_bf16(acc, da, db, (kb > 0 || kk > 0) ? 1 : 0);
        }
        wgmma_commit();
        if (kb > 0) {
          // The previous stage's wgmmas are done once at most this batch is in flight.
          wgmma_wait<1>();
          if (release_thread) release(prev_stage);
        }
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      if (release_thread) release(prev_stage);

      // Accumulator fragment of m64nN: register 4i+{0,1} holds (row 16w + lane/4, cols 8i +
      // 2(lane%4) + {0,1}); 4i+{2,3} the same columns 8 rows lower. For SwiGLU, columns [0, BN/2)
      // of the tile are gate, [BN/2, BN) the matching up columns (BN/16 groups of 4 registers
      // further in the same thread).
      const int row_base = tc.m * kBM + consumer * 64 + warp_in_group * 16 + (lane >> 2);
      const int col_base = tc.n * tile_n_cols + 2 * (lane & 3);
      // The two bf16 outputs of register pair (i, h), one function per epilogue kind (MODE 0
      // plain, 1 residual added, 2 SwiGLU) so that the unrolled loops carry no per-element
      // branches: a lean epilogue is short (it was 4,000 instructions a tile with them, more
      // than the main loop's issue time and the instruction cache).
      auto outputs = [&](auto mode, int i, int h) -> uint32_t {
        constexpr int kMode = decltype(mode)::value;
        if constexpr (kMode == 2) {
          // (i < BN/16 here; the modulo keeps unreachable unrolled copies inside the array)
          const int iu = (i + kBN / 16) % (kBN / 8);
          return pack_bf16x2(silu(acc[4 * i + 2 * h]) * acc[4 * iu + 2 * h],
                             silu(acc[4 * i + 2 * h + 1]) * acc[4 * iu + 2 * h + 1]);
        } else {
          float v0 = acc[4 * i + 2 * h];
          float v1 = acc[4 * i + 2 * h + 1];
          if constexpr (kMode == 1) {
            const int row = row_base + 8 * h, col = col_base + 8 * i;
            if (row < M && col < out_n) {
              const __nv_bfloat162 r = *reinterpret_cast<const __nv_bfloat162*>(
                  residual + static_cast<size_t>(row) * ld_y + col);
              v0 += __low2float(r);
              v1 += __high2float(r);
            }
          }
          return pack_bf16x2(v0, v1);
        }
      };
      using Plain = std::integral_constant<int, 0>;
      using Resid = std::integral_constant<int, 1>;
      using Swi = std::integral_constant<int, 2>;
      const int mode = swiglu ? 2 : (residual != nullptr ? 1 : 0);  // uniform
      if (epilogue == static_cast<int>(Epilogue::kNone)) {
        // Diagnostic: keep the accumulators live so that the main loop is not optimized away.
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kBN / 2; ++i) sum += acc[i];
        if (sum == 12345.678f) Y[0] = __float2bfloat16(sum);
      } else if constexpr (SLOTS == 0) {
        auto store_all = [&](auto md, int n_groups) {
#pragma unroll
          for (int i = 0; i < kBN / 8; ++i) {
            if (i >= n_groups) break;
            const int col = col_base + 8 * i;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = row_base + 8 * h;
              if (row < M && col < out_n)
                *reinterpret_cast<uint32_t*>(Y + static_cast<size_t>(row) * ld_y + col) =
                    outputs(md, i, h);
            }
          }
        };
        if (mode == 0)
          store_all(Plain{}, kBN / 8);
        else if (mode == 1)
          store_all(Resid{}, kBN / 8);
        else
          store_all(Swi{}, kBN / 16);
      } else {
        // TMA-store epilogue: the tile goes out in 64×64 boxes staged in this consumer's SLOTS
        // shared-memory boxes (128-byte swizzle: 16-byte chunk c of row r sits at chunk c ^ (r%8),
        // so a warp's 32 four-byte writes hit 32 banks). The stores drain while the next tile's
        // main loop runs; a slot is rewritten only after the store that read it has read it.
        const int row0 = tc.m * kBM + consumer * 64;
        const int col0 = tc.n * tile_n_cols;
        const int boxes = row0 < M ? min(tile_n_cols, out_n - col0 + 63) / 64 : 0;  // WG-uniform
        // This thread's word of chunk 0 in row r_lo, with its chunk index pre-swizzled: rows r_lo
        // and r_lo + 8 share r % 8 = lane / 4, so chunk ci sits at (t + h·1024) ^ (ci << 4) (box
        // 1024-aligned, bits 4-6 of t are lane / 4).
        const uint32_t t0 = smem_addr(s.c + consumer * SLOTS * Cfg::kBoxElems) +
                            (warp_in_group * 16 + (lane >> 2)) * 128 + ((lane >> 2) << 4) +
                            ((lane & 3) << 2);
        auto stage_box = [&](auto md, int bx, uint32_t t) {
#pragma unroll
          for (int ci = 0; ci < 8; ++ci)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              st_shared_b32((t + h * 1024) ^ (ci << 4), outputs(md, 8 * bx + ci, h));
        };
#pragma unroll
        for (int bx = 0; bx < kBN / 64; ++bx) {
          if (bx >= boxes) break;
          if (bx == 0 || bx >= SLOTS) {
            // Slot bx % SLOTS is free once at most SLOTS - 1 newer stores are still reading
            // (bx = 0: every store of the previous tile has read its slot).
            if (store_thread) {
              if (bx == 0)
                bulk_wait_read<0>();
              else
                bulk_wait_read<SLOTS - 1>();
            }
            named_barrier(1 + consumer, 128);
          }
          const uint32_t t = t0 + (bx % SLOTS) * Cfg::kBoxElems * sizeof(bf16);
          if (mode == 0)
            stage_box(Plain{}, bx, t);
          else if (mode == 1)
            stage_box(Resid{}, bx, t);
          else if (bx < kBN / 128)  // SwiGLU tiles have half the output columns
            stage_box(Swi{}, bx, t);
          fence_proxy_async();
          named_barrier(1 + consumer, 128);
          if (store_thread) {
            tma_store_2d(&tmap_y, s.c + (consumer * SLOTS + bx % SLOTS) * Cfg::kBoxElems,
                         col0 + 64 * bx, row0);
            bulk_commit();
          }
        }
      }
    }
    if constexpr (SLOTS > 0) {
      if (store_thread) bulk_wait_all();  // the staging boxes stay valid until the stores read them
    }
  }
  // No CTA of a cluster leaves while its peer may still arrive on its barriers or multicast into it.
  if constexpr (CM > 1) cluster_sync();
}

// The launch configuration of `grid` CTAs in clusters of `cm` along x (none when cm = 1); `attr`
// holds the cluster attribute the configuration points to.
cudaLaunchConfig_t cluster_launch(unsigned grid, size_t smem, int cm, cudaStream_t stream,
                                  cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid, 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cm);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = cm > 1 ? 1 : 0;
  return cfg;
}

// How many clusters of CM CTAs of this configuration can be resident at once (CM = 1: SMs).
template <int BN, int STAGES, int SLOTS, int CM>
int max_resident_clusters(int sms) {
  if constexpr (CM == 1) {
    return sms;
  } else {
    static const int clusters = [] {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg =
          cluster_launch(CM * 64, Config<BN, STAGES, SLOTS>::kSmemBytes, CM, nullptr, attr);
      int n = 0;
      RIDGE_GEMM_CUDA_CHECK(cudaOccupancyMaxActiveClusters(
          &n, gemm_sm90_ws_kernel<BN, STAGES, SLOTS, CM>, &cfg));
      return n;
    }();
    return clusters;
  }
}

// cluster_tiles: cluster tiles to run; max_clusters: the persistent grid's cap (0: one cluster
// per cluster tile).
template <int BN, int STAGES, int SLOTS, int CM>
void launch_config(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M,
                   int out_n, int ld_y, int w_rows, int K, Epilogue epilogue,
                   long long cluster_tiles,
                   int max_clusters, int group_m, int sms, cudaStream_t stream) {
  using Cfg = Config<BN, STAGES, SLOTS>;
  auto kernel = gemm_sm90_ws_kernel<BN, STAGES, SLOTS, CM>;
  constexpr size_t smem = Cfg::kSmemBytes;
  RIDGE_GEMM_CUDA_CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  long long clusters = cluster_tiles;
  if (max_clusters > 0)
    clusters = std::min<long long>(
        clusters, std::min(max_clusters, max_resident_clusters<BN, STAGES, SLOTS, CM>(sms)));
  clusters = std::min<long long>(clusters, 0x7fffffff / CM);  // a grid this large strides anyway
  const CUtensorMap tmap_x = detail::make_tensor_map_bf16(X, M, K, kBM, kBK);
  const CUtensorMap tmap_w = detail::make_tensor_map_bf16(W, w_rows, K, BN / 2, kBK);
  // Y's map only matters to the TMA-store epilogue (a dummy copy of X's otherwise).
  const CUtensorMap tmap_y =
      SLOTS > 0 ? detail::make_tensor_map_bf16(Y, M, out_n, 64, 64, ld_y) : tmap_x;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg =
      cluster_launch(static_cast<unsigned>(clusters * CM), smem, CM, stream, attr);
  RIDGE_GEMM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, tmap_x, tmap_w, tmap_y, Y, residual, M,
                                           out_n, ld_y, K, static_cast<int>(epilogue),
                                           group_m));
}

long long tile_count(int M, int out_n, int bn, bool swiglu) {
  const int cols = swiglu ? bn / 2 : bn;
  return static_cast<long long>((M + kBM - 1) / kBM) * ((out_n + cols - 1) / cols);
}

}  // namespace

namespace detail {

int sm90_choose_block_n(int M, int out_n, bool swiglu, int sms) {
  // Waves × tile cost: a 128-wide tile costs ~0.55 of a 256-wide one (half the MMAs, less
  // operand reuse), so the narrow tile wins only when it fixes wave quantization.
  const long long t256 = tile_count(M, out_n, 256, swiglu);
  const long long t128 = tile_count(M, out_n, 128, swiglu);
  const double cost256 = static_cast<double>((t256 + sms - 1) / sms);
  const double cost128 = 0.55 * static_cast<double>((t128 + sms - 1) / sms);
  return cost128 < cost256 ? 128 : 256;
}

long long sm90_wave_split_columns(long long tiles_m, long long tiles_n, long long wave) {
  const long long total = tiles_m * tiles_n;
  const long long waves = (total + wave - 1) / wave;
  const long long c = (waves - 1) * wave / tiles_m;  // 256-wide columns in whole waves
  if (waves < 2 || c < 1 || c >= tiles_n) return 0;
  // Waves of work: 256-wide tiles cost 1, 128-wide ones ~0.55 (the wave model above).
  const double split_cost = static_cast<double>((c * tiles_m + wave - 1) / wave) +
                            0.55 * static_cast<double>((2 * (tiles_n - c) * tiles_m + wave - 1) / wave);
  return split_cost + 0.25 < static_cast<double>(waves) ? c : 0;
}

void launch_sm90(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int out_n,
                 int w_rows, int K, bool swiglu, const Sm90GemmOptions& options,
                 cudaStream_t stream) {
  const int sms = device_sms(current_device());
  // Register stores and clusters exist for 256-wide tiles only (gemm_bf16_sm90 refuses 128).
  const int bn = options.block_n == 128 || options.block_n == 256 ? options.block_n
                 : !options.tma_store || options.cluster_m == 2
                     ? 256
                     : sm90_choose_block_n(M, out_n, swiglu, sms);
  const int cm = options.cluster_m;
  const long long tiles_m = (M + kBM - 1) / kBM;
  const int max_clusters =
      options.persistent ? std::max(1, (options.max_ctas > 0 ? options.max_ctas : sms) / cm) : 0;
  const int group_m = std::max(1, options.group_m);
  const Epilogue epilogue =
      swiglu ? Epilogue::kSwiGLU : (options.store ? Epilogue::kStore : Epilogue::kNone);
  // One launch over `cols` columns of Y (row stride out_n) from W rows w (w_rows of them).
  auto launch = [&](int width, const bf16* w, bf16* y, const bf16* r, int cols, int rows_w) {
    const long long cluster_tiles =
        tile_count(M, cols, width, swiglu) / tiles_m * ((tiles_m + cm - 1) / cm);
    // (tile width, ring stages, staging boxes, cluster): the instantiated configurations (the
    // options were checked by gemm_bf16_sm90).
#define RIDGE_SM90_LAUNCH(BN, ST, SL, CM)                                                      \
  launch_config<BN, ST, SL, CM>(X, w, y, r, M, cols, out_n, rows_w, K, epilogue, cluster_tiles, \
                                max_clusters, group_m, sms, stream)
    if (width == 256 && !options.tma_store)
      RIDGE_SM90_LAUNCH(256, 4, 0, 1);
    else if (width == 256 && cm == 2)
      RIDGE_SM90_LAUNCH(256, 4, 2, 2);
    else if (width == 256 && options.stages == 4)
      RIDGE_SM90_LAUNCH(256, 4, 2, 1);
    else if (width == 256)  // the default: as fast or faster than 4 stages on 5 of 7 shapes
      RIDGE_SM90_LAUNCH(256, 3, 4, 1);
    else
      RIDGE_SM90_LAUNCH(128, 6, 2, 1);
#undef RIDGE_SM90_LAUNCH
  };
  // Wave split (on by default): when the last wave of 256-wide tiles is mostly empty, the columns
  // that fill whole waves run as one launch and the rest as 128-wide tiles in a second launch
  // (Llama-2 gate|up at M = 2048: 1,376 tiles = 10.4 waves on 132 SMs become 1,312 tiles in 10
  // waves + 128 narrow tiles in one, ~10.6 waves of work instead of 11).
  if (options.wave_split && !swiglu && bn == 256 && options.tma_store && cm == 1 &&
      options.persistent) {
    const long long c =
        sm90_wave_split_columns(tiles_m, (out_n + 255) / 256, std::min(max_clusters, sms));
    if (c > 0) {
      const long long done = 256 * c;  // columns of the first launch
      launch(256, W, Y, residual, static_cast<int>(done), static_cast<int>(done));
      launch(128, W + done * K, Y + done, residual ? residual + done : nullptr,
             out_n - static_cast<int>(done), out_n - static_cast<int>(done));
      return;
    }
  }
  launch(bn, W, Y, residual, out_n, w_rows);
}

}  // namespace detail
}  // namespace ridge::kernels
