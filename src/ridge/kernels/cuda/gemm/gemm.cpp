// Host side of the GEMM kernels: precondition checks (ridge::Error, nothing launched on bad
// input), dispatch by shape, and TMA tensor maps.
#include "ridge/kernels/cuda/gemm/gemm.h"

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "ridge/core/error.h"
#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/launch.h"

namespace ridge::kernels {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void check_common(const char* what, const bf16* X, const bf16* W, const bf16* Y,
                  const bf16* residual, int M, int N, int K) {
  RIDGE_CHECK(M >= 1 && N >= 1 && K >= 1, "{}: shape M={} N={} K={} must be positive", what, M,
              N, K);
  RIDGE_CHECK(K % 8 == 0, "{}: K = {} must be a multiple of 8 (16-byte rows)", what, K);
  RIDGE_CHECK(N % 8 == 0, "{}: N = {} must be a multiple of 8", what, N);
  RIDGE_CHECK(X && W && Y, "{}: null pointer (X={}, W={}, Y={})", what,
              static_cast<const void*>(X), static_cast<const void*>(W),
              static_cast<const void*>(Y));
  RIDGE_CHECK(aligned16(X) && aligned16(W) && aligned16(Y) && aligned16(residual),
              "{}: X, W, Y and residual must be 16-byte aligned", what);
}

void check_sm90(const char* what) {
  int device = 0;
  RIDGE_GEMM_CUDA_CHECK(cudaGetDevice(&device));
  int major = 0, minor = 0;
  RIDGE_GEMM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  RIDGE_GEMM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  RIDGE_CHECK(major == 9 && minor == 0, "{}: needs an sm_90 (Hopper) GPU, device {} is sm_{}{}",
              what, device, major, minor);
}

}  // namespace

void gemm_bf16_skinny(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream, const bf16* residual) {
  check_common("gemm_bf16_skinny", X, W, Y, residual, M, N, K);
  RIDGE_CHECK(N <= 65535 * 16, "gemm_bf16_skinny: N = {} is larger than {}", N, 65535 * 16);
  SkinnyArgs a;
  a.X = X, a.ld_x = K, a.W = W, a.Y = Y, a.residual = residual, a.M = M, a.N = N, a.K = K;
  detail::launch_skinny(a, SkinnyPrologue::none, stream);
}

void gemm_bf16_skinny_rows(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                           cudaStream_t stream, const bf16* residual, int split_k) {
  check_common("gemm_bf16_skinny_rows", X, W, Y, residual, M, N, K);
  check_sm90("gemm_bf16_skinny_rows");
  RIDGE_CHECK(N <= 65535 * 128, "gemm_bf16_skinny_rows: N = {} is larger than {}", N, 65535 * 128);
  RIDGE_CHECK(split_k >= 0 && split_k <= skinny_max_split_k,
              "gemm_bf16_skinny_rows: split_k {} must be 0..{}", split_k, skinny_max_split_k);
  detail::launch_skinny_rows(X, W, Y, residual, M, N, K, split_k, stream);
}

void gemv_bf16_warp_rows(const bf16* X, const bf16* W, bf16* Y, int N, int K, cudaStream_t stream,
                         const bf16* residual, bool pdl, int blocks_per_sm, bool walk) {
  check_common("gemv_bf16_warp_rows", X, W, Y, residual, 1, N, K);
  check_sm90("gemv_bf16_warp_rows");
  RIDGE_CHECK(K <= gemv_warp_max_k, "gemv_bf16_warp_rows: K = {} is larger than {}", K,
              gemv_warp_max_k);
  RIDGE_CHECK(blocks_per_sm >= 0, "gemv_bf16_warp_rows: blocks_per_sm {} must be >= 0",
              blocks_per_sm);
  detail::launch_warp_gemv(X, W, Y, residual, N, K, pdl, blocks_per_sm, walk, stream);
}

void gemm_bf16_stream(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream, void* workspace, size_t workspace_bytes,
                      const bf16* residual, int max_ctas) {
  const char* what = "gemm_bf16_stream";
  check_common(what, X, W, Y, residual, M, N, K);
  check_sm90(what);
  RIDGE_CHECK(M <= stream_gemm_max_tokens, "{}: M = {} tokens, at most {}", what, M,
              stream_gemm_max_tokens);
  RIDGE_CHECK(N <= 128 * stream_gemm_max_tiles, "{}: N = {} is larger than {}", what, N,
              128 * stream_gemm_max_tiles);
  const size_t need = gemm_bf16_stream_workspace_bytes();
  RIDGE_CHECK(workspace != nullptr && workspace_bytes >= need && aligned16(workspace),
              "{}: needs a 16-byte aligned workspace of {} bytes, got {} bytes at {}", what, need,
              workspace_bytes, workspace);
  RIDGE_CHECK(max_ctas >= 0, "{}: max_ctas {} must be ≥ 0", what, max_ctas);
  detail::launch_stream_gemm(X, W, Y, residual, M, N, K, workspace, max_ctas, stream);
}

void gemm_bf16_window(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                      cudaStream_t stream, void* workspace, size_t workspace_bytes,
                      const bf16* residual, int seg, bool pdl, WindowLoader loader) {
  const char* what = "gemm_bf16_window";
  check_common(what, X, W, Y, residual, M, N, K);
  check_sm90(what);
  RIDGE_CHECK(M <= window_gemm_max_tokens, "{}: M = {} tokens, at most {}", what, M,
              window_gemm_max_tokens);
  RIDGE_CHECK(N <= window_gemm_max_n, "{}: N = {} is larger than {}", what, N, window_gemm_max_n);
  RIDGE_CHECK(seg == 0 || (seg >= 16 && seg <= 128 && (seg & (seg - 1)) == 0),
              "{}: seg = {} chunks must be 0 (automatic) or a power of two in [16, 128]", what,
              seg);
  const WindowGemmPlan plan = window_gemm_plan(M, K, seg, loader);
  RIDGE_CHECK(loader != WindowLoader::bulk_dynamic || plan.ksegs < window_gemm_counters,
              "{}: K = {} in segments of {} chunks is {} segments; the dynamic loader takes at "
              "most {}",
              what, K, plan.seg, plan.ksegs, window_gemm_counters - 1);
  static const int optin = [] {  // (every GPU of one ridge process is the same model)
    int device = 0, v = 0;
    RIDGE_GEMM_CUDA_CHECK(cudaGetDevice(&device));
    RIDGE_GEMM_CUDA_CHECK(
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return v;
  }();
  RIDGE_CHECK(window_gemm_smem_bytes(plan) <= size_t(optin),
              "{}: {} tokens with segments of {} chunks need {} bytes of shared memory a block, "
              "the device allows {}",
              what, M, plan.seg, window_gemm_smem_bytes(plan), optin);
  const size_t need = gemm_bf16_window_workspace_bytes(M, N, K, seg);
  RIDGE_CHECK(workspace != nullptr && workspace_bytes >= need && aligned16(workspace),
              "{}: needs a 16-byte aligned workspace of {} bytes, got {} bytes at {}", what, need,
              workspace_bytes, workspace);
  SkinnyArgs a;
  a.X = X, a.ld_x = K, a.W = W, a.Y = Y, a.residual = residual, a.M = M, a.N = N, a.K = K;
  a.pdl_launch = pdl;
  detail::launch_window(a, plan, workspace, stream);
}

void gemm_bf16_skinny_fused(const SkinnyArgs& a, SkinnyPrologue prologue, cudaStream_t stream) {
  const char* what = "gemm_bf16_skinny_fused";
  check_common(what, a.X, a.W, static_cast<const bf16*>(a.Y), a.residual, a.M, a.N, a.K);
  RIDGE_CHECK(a.N <= 65535 * 16, "{}: N = {} is larger than {}", what, a.N, 65535 * 16);
  RIDGE_CHECK(a.ld_x >= a.K && a.ld_x % 8 == 0,
              "{}: X row stride {} must be a multiple of 8 and at least {}", what, a.ld_x, a.K);
  RIDGE_CHECK(!a.swiglu || (a.N % 16 == 0 && !a.y_f32 && !a.residual && !a.sumsq_out),
              "{}: the SwiGLU epilogue needs N = 2F with F % 8 == 0 (N = {}), a bf16 output, no "
              "residual and no sums of squares",
              what, a.N);
  RIDGE_CHECK(!(a.y_f32 && a.residual), "{}: an f32 output takes no residual", what);
  RIDGE_CHECK(prologue == SkinnyPrologue::none || a.M <= skinny_prologue_max_tokens,
              "{}: the prologues run up to {} tokens, got M = {}", what,
              skinny_prologue_max_tokens, a.M);
  // The producers' counts: skinny_sumsq_parts(K) (the MMA kernel), skinny_warp_sumsq_parts(K)
  // (the warp-row GEMV), embedding_sumsq_parts(K) (the embedding, fewer than either).
  const int max_parts = std::max(skinny_sumsq_parts(a.K), skinny_warp_sumsq_parts(a.K));
  RIDGE_CHECK(prologue != SkinnyPrologue::rms_sumsq ||
                  (a.sumsq_in != nullptr && a.sumsq_parts >= 1 && a.sumsq_parts <= max_parts),
              "{}: rms_sumsq needs 1 to {} partial sums of squares per row (sumsq_in), got {}",
              what, max_parts, a.sumsq_in ? a.sumsq_parts : 0);
  RIDGE_CHECK(a.sumsq_out == nullptr || (!a.y_f32 && a.M <= skinny_prologue_max_tokens),
              "{}: sumsq_out needs a bf16 output and at most {} tokens (M = {})", what,
              skinny_prologue_max_tokens, a.M);
  RIDGE_CHECK(a.stage_steps >= 0 && a.stage_steps <= skinny_max_stage_steps &&
                  (a.stage_steps == 0 || (prologue == SkinnyPrologue::none && a.M <= 8)),
              "{}: stage_steps {} must be 0..{}, and above 0 only with the plain prologue and at "
              "most 8 tokens (M = {})",
              what, a.stage_steps, skinny_max_stage_steps, a.M);
  RIDGE_CHECK(a.split_k >= 0 && a.split_k <= skinny_max_split_k &&
                  (a.split_k <= 1 || (a.M <= 16 && a.stage_steps == 0)),
              "{}: split_k {} must be 0..{}, and above 1 only with at most 16 tokens (M = {}) "
              "and no staged steps",
              what, a.split_k, skinny_max_split_k, a.M);
  RIDGE_CHECK(a.ring == 0 || a.ring == -1 || ((a.ring == 2 || a.ring == 3) && a.stage_steps == 0),
              "{}: ring {} must be -1, 0, 2 or 3, and above 0 only without staged steps", what,
              a.ring);
  if (a.rope.positions) {
    const int hd = a.rope.head_dim;
    RIDGE_CHECK(hd > 0 && hd % 16 == 0 && a.rope.q_dim > 0 && a.rope.q_dim % hd == 0 &&
                    a.rope.kv_dim > 0 && a.rope.kv_dim % hd == 0 &&
                    a.N == a.rope.q_dim + 2 * a.rope.kv_dim,
                "{}: the rope_kv epilogue needs head_dim % 16 == 0 (got {}) and N = q_dim + 2 "
                "kv_dim in whole heads (N = {}, q_dim {}, kv_dim {})",
                what, hd, a.N, a.rope.q_dim, a.rope.kv_dim);
    RIDGE_CHECK(a.M <= skinny_prologue_max_tokens && !a.swiglu && !a.residual && !a.y_f32 &&
                    !a.sumsq_out && a.stage_steps == 0 && a.split_k <= 1,
                "{}: the rope_kv epilogue runs up to {} tokens (M = {}) with a bf16 output and no "
                "swiglu, residual, sums of squares, staged steps or split",
                what, skinny_prologue_max_tokens, a.M);
    RIDGE_CHECK(
        a.rope.inv_freq && a.rope.slots && a.rope.k_pool && a.rope.v_pool && a.rope.num_slots >= 0,
        "{}: the rope_kv epilogue needs inv_freq, slots and both KV pools", what);
  }
  detail::launch_skinny(a, prologue, stream);
}

void gemm_bf16_sm90(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K,
                    cudaStream_t stream, const bf16* residual, const Sm90GemmOptions& options) {
  check_common("gemm_bf16_sm90", X, W, Y, residual, M, N, K);
  check_sm90("gemm_bf16_sm90");
  const int bn = options.block_n, st = options.stages;
  RIDGE_CHECK(bn == 0 || bn == 128 || bn == 256, "gemm_bf16_sm90: block_n {} is not 0, 128 or 256",
              bn);
  RIDGE_CHECK(options.cluster_m == 1 || options.cluster_m == 2,
              "gemm_bf16_sm90: cluster_m {} is not 1 or 2", options.cluster_m);
  // The instantiated configurations (gemm_sm90.cu): BN 256 with 3 stages (the default) or 4, with
  // register stores (4 stages) or clusters of two (4 stages); BN 128 with 6 stages.
  const bool plain = options.tma_store && options.cluster_m == 1;
  const bool ok = bn == 128 ? plain && (st == 0 || st == 6)
                            : st == 0 || st == 4 || (st == 3 && plain);
  RIDGE_CHECK(ok,
              "gemm_bf16_sm90: no configuration with block_n {}, {} stages, {} stores, clusters of "
              "{} (BN 256: 3 or 4 stages, register stores and clusters with 4; BN 128: 6 stages, "
              "TMA stores, no clusters; 0 = the default)",
              bn, st, options.tma_store ? "TMA" : "register", options.cluster_m);
  detail::launch_sm90(X, W, Y, residual, M, N, N, K, false, options, stream);
}

void gemm_bf16_swiglu(const bf16* X, const bf16* W_gate_up, bf16* Out, int M, int F, int K,
                      cudaStream_t stream) {
  check_common("gemm_bf16_swiglu", X, W_gate_up, Out, nullptr, M, F, K);
  RIDGE_CHECK(F % 128 == 0, "gemm_bf16_swiglu: F = {} must be a multiple of 128", F);
  check_sm90("gemm_bf16_swiglu");
  detail::launch_sm90(X, W_gate_up, Out, nullptr, M, F, 2 * F, K, true, {}, stream);
}

void scale_columns_bf16(bf16* W, int64_t N, int64_t K, const float* scale, cudaStream_t stream) {
  RIDGE_CHECK(N >= 1 && K >= 8 && K % 8 == 0 && W && scale && aligned16(W),
              "scale_columns_bf16: W [{}, {}] must have K % 8 == 0 and be 16-byte aligned", N, K);
  detail::launch_scale_columns(W, N, K, scale, stream);
}

void gemv_fp8(const GemvFp8Args& a, cudaStream_t stream) {
  const int out_n = a.swiglu ? a.N / 2 : a.N;
  RIDGE_CHECK(a.T >= 1 && a.T <= kGemvFp8MaxTokens && a.N >= 1 && a.K >= 16 && a.K % 16 == 0 &&
                  a.K <= kGemvFp8MaxK && a.ld_x >= a.K && a.ld_x % 8 == 0 && a.ld_y >= out_n &&
                  (!a.swiglu || (a.N % 2 == 0 && !a.accumulate && !a.y_f32)),
              "gemv_fp8: T={} N={} K={} ld_x={} ld_y={} swiglu={} (1 <= T <= {}, K % 16 == 0, K "
              "<= {}, ld_x % 8 == 0, ld_y >= the output's columns; swiglu: N even, bf16 out, no "
              "accumulate)",
              a.T, a.N, a.K, a.ld_x, a.ld_y, a.swiglu, kGemvFp8MaxTokens, kGemvFp8MaxK);
  RIDGE_CHECK(a.X && a.W && a.sw && a.Y && a.xq && a.sx && aligned16(a.X) && aligned16(a.W) &&
                  aligned16(a.xq) &&
                  (a.prologue == GemvFp8Prologue::none || (a.norm_w && aligned16(a.norm_w))),
              "gemv_fp8: null pointer, or X, W, xq or the norm weight not 16-byte aligned");
  detail::launch_gemv_fp8(a, stream);
}

// Measured on the H200 (docs/KERNELS.md, run 2): the skinny kernel wins up to M = 32; from
// M = 64 the wgmma kernel is faster on every Llama projection shape.
void gemm_bf16(const bf16* X, const bf16* W, bf16* Y, int M, int N, int K, cudaStream_t stream,
               const bf16* residual) {
  if (M <= 32)
    gemm_bf16_skinny(X, W, Y, M, N, K, stream, residual);
  else
    gemm_bf16_sm90(X, W, Y, M, N, K, stream, residual);
}

namespace detail {

int current_device() {
  int d = 0;
  RIDGE_GEMM_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

int device_sms(int device) {
  static thread_local int last = -1, sms = 0;
  if (device != last) {
    RIDGE_GEMM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    last = device;
  }
  return sms;
}

namespace {
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  RIDGE_GEMM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &status));
  RIDGE_CHECK(fn != nullptr && status == cudaDriverEntryPointSuccess,
              "cuTensorMapEncodeTiled not found in the CUDA driver (status {})",
              static_cast<int>(status));
  return reinterpret_cast<EncodeTiledFn>(fn);
}
}  // namespace

CUtensorMap make_tensor_map_bf16(const void* base, uint64_t rows, uint64_t cols,
                                 uint32_t box_rows, uint32_t box_cols, uint64_t row_stride) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {(row_stride ? row_stride : cols) * 2};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  static const EncodeTiledFn encode = encode_tiled_fn();  // one driver query per process
  const CUresult r = encode(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  RIDGE_CHECK(r == CUDA_SUCCESS,
              "cuTensorMapEncodeTiled failed ({}) for a [{}, {}] bf16 matrix, box {}x{}",
              static_cast<int>(r), rows, cols, box_rows, box_cols);
  return map;
}

}  // namespace detail
}  // namespace ridge::kernels
