#include "ridge/kernels/cuda/gemm/cublaslt_gemm.h"

#include <cublasLt.h>

#include "ridge/core/error.h"
#include "ridge/kernels/cuda/gemm/check.h"

namespace ridge::kernels {
namespace {

void check_cublas(cublasStatus_t s, const char* what) {
  RIDGE_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuBLASLt: {} failed with status {}", what,
              static_cast<int>(s));
}

}  // namespace

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct CublasLtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<std::tuple<int, int, int>, Plan> plans;
};

CublasLtGemm::CublasLtGemm(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  check_cublas(cublasLtCreate(&impl_->handle), "cublasLtCreate");
  impl_->workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0) RIDGE_GEMM_CUDA_CHECK(cudaMalloc(&impl_->workspace, workspace_bytes));
}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [shape, p] : impl_->plans) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (impl_->workspace) cudaFree(impl_->workspace);
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

// Row-major Y[M,N] = X·Wᵀ is column-major Yᵀ: in cuBLAS terms D (N×M, ld N) =
// op(A) · B with A = W seen as column-major K×N (ld K) transposed, B = X as K×M (ld K).
void CublasLtGemm::run(const __nv_bfloat16* X, const __nv_bfloat16* W, __nv_bfloat16* Y, int M,
                       int N, int K, cudaStream_t stream) {
  auto key = std::make_tuple(M, N, K);
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    Plan p;
    check_cublas(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc create");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check_cublas(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
                 "transa");
    check_cublas(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
                 "transb");
    check_cublas(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K), "layout A");
    check_cublas(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K), "layout B");
    check_cublas(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, N, M, N), "layout C");
    cublasLtMatmulPreference_t pref = nullptr;
    check_cublas(cublasLtMatmulPreferenceCreate(&pref), "preference");
    check_cublas(cublasLtMatmulPreferenceSetAttribute(pref,
                                                      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &impl_->workspace_bytes,
                                                      sizeof impl_->workspace_bytes),
                 "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check_cublas(cublasLtMatmulAlgoGetHeuristic(impl_->handle, p.op, p.a, p.b, p.c, p.c, pref, 1,
                                                &result, &found),
                 "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    RIDGE_CHECK(found > 0, "cuBLASLt: no algorithm for M={} N={} K={}", M, N, K);
    p.algo = result.algo;
    it = impl_->plans.emplace(key, p).first;
  }
  const Plan& p = it->second;
  const float alpha = 1.f, beta = 0.f;
  check_cublas(cublasLtMatmul(impl_->handle, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c,
                              &p.algo, impl_->workspace, impl_->workspace_bytes, stream),
               "cublasLtMatmul");
}

}  // namespace ridge::kernels
