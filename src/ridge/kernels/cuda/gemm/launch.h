// Internal: the raw launchers behind gemm.h. Callers have checked the preconditions (gemm.cpp);
// these only pick the configuration and launch on `stream`.
#pragma once

#include <cstdint>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "ridge/kernels/cuda/gemm/gemm.h"

namespace ridge::kernels::detail {

// The calling thread's current CUDA device, and a device's SM count (remembered per thread for
// the last device asked about): what every launcher sizes its grid by.
int current_device();
int device_sms(int device);

// tokens_per_block (prologue none only): 0 = by M and N (8, 16, 32 or 64 tokens per block);
// 16 = always 16-token tiles (several tiles re-read the weights, mostly from L2), an alternative
// the benchmark times.
void launch_skinny(const SkinnyArgs& args, SkinnyPrologue prologue, cudaStream_t stream,
                   int tokens_per_block = 0);

// The row-warp skinny kernel (skinny_rows.cu); split_k 0 = automatic.
void launch_skinny_rows(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int N,
                        int K, int split_k, cudaStream_t stream);

// Blocks of `smem` bytes of shared memory that fit an SM whose carveout is `percent` of the
// maximum (sm_90: the driver rounds up to a capacity of 0, 8, 16, 32, 64, 100, 132, 164, 196 or
// 228 KB; each block also reserves 1 KB).
int blocks_in_carveout(int percent, size_t smem);

// The warp-row GEMV (warp_gemv.cu), one token.
void launch_warp_gemv(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int N, int K,
                      bool pdl, int blocks_per_sm, bool walk, cudaStream_t stream);
// The warp-row GEMV with the skinny kernel's prologue and epilogues (skinny_warp_applies(a)).
void launch_warp_gemv_fused(const SkinnyArgs& a, SkinnyPrologue prologue, cudaStream_t stream);

// The weight-stream kernel (stream_gemm.cu): workspace as gemm_bf16_stream's; max_ctas 0 = one
// CTA per SM (a smaller grid is for the benchmark's and the tests' use).
size_t stream_gemm_workspace_bytes(int sms);
void launch_stream_gemm(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int N,
                        int K, void* workspace, int max_ctas, cudaStream_t stream);

// The window GEMV (window_gemm.cu): `a` plain (X, ld_x, W, Y bf16, residual, M, N, K,
// pdl_launch), the plan window_gemm_plan made (its shared memory checked against the device's
// opt-in limit), the workspace laid out as WindowGemmWorkspace.
void launch_window(const SkinnyArgs& a, const WindowGemmPlan& plan, void* workspace,
                   cudaStream_t stream);

// W [N, K] := W · diag(scale), K % 8 == 0, W 16-byte aligned (checked by the caller).
void launch_scale_columns(bf16* W, int64_t N, int64_t K, const float* scale, cudaStream_t stream);
void launch_gemv_fp8(const GemvFp8Args& args, cudaStream_t stream);

// out_n: columns of Y; w_rows: rows of W (N, or 2F for SwiGLU); swiglu: gate/up epilogue.
void launch_sm90(const bf16* X, const bf16* W, bf16* Y, const bf16* residual, int M, int out_n,
                 int w_rows, int K, bool swiglu, const Sm90GemmOptions& options,
                 cudaStream_t stream);

// The wave split (Sm90GemmOptions::wave_split): of a grid of tiles_m × tiles_n 256-wide tiles on
// `wave` CTAs, how many tile columns to run as one launch before the rest runs as 128-wide tiles;
// 0 = no split (the last wave is not thin enough to pay for a second launch).
long long sm90_wave_split_columns(long long tiles_m, long long tiles_n, long long wave);

// Tensor map of a row-major bf16 matrix [rows, cols] (cols contiguous, base 16-byte aligned) whose
// rows are row_stride elements apart (0: cols; a multiple of 8), read or written in boxes of
// box_rows × box_cols with 128-byte swizzle (box_cols = 64).
CUtensorMap make_tensor_map_bf16(const void* base, uint64_t rows, uint64_t cols,
                                 uint32_t box_rows, uint32_t box_cols, uint64_t row_stride = 0);

}  // namespace ridge::kernels::detail
