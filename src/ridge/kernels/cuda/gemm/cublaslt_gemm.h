// cuBLASLt as a GEMM peer: the same Y[M,N] = X[M,K] · W[N,K]ᵀ contract as gemm.h (bf16 in,
// fp32 accumulate, bf16 out, row-major), through cuBLASLt's top heuristic. Benchmarks and tests
// compare ridge's kernels against it in the same process; the tuner can later pick it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <tuple>

namespace ridge::kernels {

class CublasLtGemm {
 public:
  // workspace_bytes: device workspace cuBLASLt may use (allocated here, freed in the destructor).
  explicit CublasLtGemm(size_t workspace_bytes = 32u << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Plans per shape are cached (first call of a shape queries the heuristic); capturable in a
  // CUDA graph after that first call.
  void run(const __nv_bfloat16* X, const __nv_bfloat16* W, __nv_bfloat16* Y, int M, int N, int K,
           cudaStream_t stream);

 private:
  struct Plan;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::kernels
