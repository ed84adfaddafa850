// The CUDA backend's one matmul entry point: out[T, N] = x[T, K] · w[N, K]ᵀ, bf16 operands, fp32
// accumulation, bf16 or f32 output, through cuBLASLt for now. It sits behind this one class so
// that ridge's own GEMM kernels (kernels/cuda/gemm) can replace it per shape later.
//
// Layouts: x row-major with row stride ld_x, w row-major contiguous [N, K] (nn.Linear), out
// row-major with row stride ld_out (a column slice of a wider buffer is fine). In cuBLASLt's
// column-major terms: D (N x T, ld ld_out) = op_T(W: K x N, ld K) · X (K x T, ld ld_x).
//
// Plans (descriptors + the heuristic's first kMaxAlgos algorithms) are cached per (T, N, K,
// strides, output dtype, pointer alignment); the cache is cleared when it grows past a bound.
// The cuBLASLt workspace is passed in by the caller (one per stream).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "ridge/core/dtype.h"

namespace ridge::backend::cuda {

class LtMatmul {
 public:
  explicit LtMatmul(cublasLtHandle_t handle);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // accumulate: out += x·wᵀ (beta 1). algo: which of the heuristic's algorithms for these
  // operands (0 its first; one past those it offers runs the first).
  void run(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t N, int64_t K,
           void* out, DType out_dtype, int64_t ld_out, void* workspace, size_t workspace_bytes,
           cudaStream_t stream, bool accumulate = false, int algo = 0);

  // The fp8 form: out[T, N] (+)= (sx[t] · sw[n]) · Σ_k xq[t, k] · wq[n, k], xq and wq E4M3 codes
  // ([T, K] with row stride ld_x, [N, K] contiguous; K % 16 == 0), sx and sw their per-row fp32
  // scales (device pointers: cuBLASLt's outer-vector scaling), fp32 accumulation, bf16 or f32 out.
  // sx and sw both null: the unscaled product (scales of 1), for a caller that scales it itself
  // where this library refuses per-row scales. Returns false, enqueuing nothing, where it refuses
  // them for these operands (its heuristic or its matmul call says so; remembered per plan and
  // beta, so a refused shape is asked once); the unscaled form throws ridge::Error instead.
  bool run_fp8(const uint8_t* xq, const float* sx, int64_t ld_x, const uint8_t* wq, const float* sw,
               int64_t T, int64_t N, int64_t K, void* out, DType out_dtype, int64_t ld_out,
               void* workspace, size_t workspace_bytes, cudaStream_t stream,
               bool accumulate = false);

  // The algorithms the heuristic offers for these operands (1 to kMaxAlgos), as run() sees them.
  static constexpr int kMaxAlgos = 4;
  int algorithms(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t N,
                 int64_t K, const void* out, DType out_dtype, int64_t ld_out,
                 size_t workspace_bytes);
  // The same for operands that are all 256-byte aligned (fresh allocations), without them.
  int algorithms_aligned(int64_t ld_x, int64_t T, int64_t N, int64_t K, DType out_dtype,
                         int64_t ld_out, size_t workspace_bytes);

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, size_t>;
  static Key key_for(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t N,
                     int64_t K, const void* out, DType out_dtype, int64_t ld_out,
                     size_t workspace_bytes);
  static Key key_for(uint32_t align_x, uint32_t align_w, uint32_t align_out, int64_t ld_x,
                     int64_t T, int64_t N, int64_t K, DType out_dtype, int64_t ld_out,
                     size_t workspace_bytes, int fp8 = 0);  // 1 scaled, 2 unscaled
  // scale_a, scale_b: an fp8 plan's first scale vectors (set before its heuristic query).
  Plan& plan_for(const Key& key, size_t workspace_bytes, const float* scale_a = nullptr,
                 const float* scale_b = nullptr);

  cublasLtHandle_t handle_;
  std::mutex mutex_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::set<std::pair<Key, bool>> refused_;  // fp8 per-row scales refused: (plan, accumulate)
};

}  // namespace ridge::backend::cuda
