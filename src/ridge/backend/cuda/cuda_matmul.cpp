#include "ridge/backend/cuda/cuda_matmul.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "ridge/backend/cuda/cuda_resources.h"
#include "ridge/core/error.h"

namespace ridge::backend::cuda {

namespace {
constexpr size_t kMaxPlans = 4096;

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristics assume 256-byte
// aligned operands unless told otherwise, and the model's k/v/up views are offset into a buffer.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : uint32_t(std::min<uintptr_t>(256, a & (~a + 1)));
}
}  // namespace

struct LtMatmul::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algos[kMaxAlgos]{};
  int found = 0;
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtMatmul::LtMatmul(cublasLtHandle_t handle) : handle_(handle) {}
LtMatmul::~LtMatmul() = default;

LtMatmul::Plan& LtMatmul::plan_for(const Key& key, size_t workspace_bytes) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  if (plans_.size() >= kMaxPlans) plans_.clear();
  const auto [T, N, K, ld_x, ld_out, out_f32, align_bits, ws] = key;
  auto p = std::make_unique<Plan>();
  RIDGE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RIDGE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  RIDGE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  RIDGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, uint64_t(K), uint64_t(N), K));
  RIDGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, uint64_t(K), uint64_t(T), ld_x));
  RIDGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, out_f32 ? CUDA_R_32F : CUDA_R_16BF,
                                                uint64_t(N), uint64_t(T), ld_out));
  cublasLtMatmulPreference_t pref = nullptr;
  RIDGE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t ws_bytes = workspace_bytes;
  RIDGE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  const uint32_t align_a = (align_bits >> 0) & 0x1ff, align_b = (align_bits >> 9) & 0x1ff,
                 align_d = (align_bits >> 18) & 0x1ff;
  RIDGE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  RIDGE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  RIDGE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
  RIDGE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t results[kMaxAlgos]{};
  int found = 0;
  RIDGE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->a, p->b, p->d, p->d, pref,
                                                    kMaxAlgos, results, &found));
  if (found == 0)
    fail("cuBLASLt has no algorithm for bf16 matmul T={} N={} K={} (ld_x {}, ld_out {}, {} out)",
         T, N, K, ld_x, ld_out, out_f32 ? "f32" : "bf16");
  p->found = std::min(found, kMaxAlgos);
  for (int i = 0; i < p->found; ++i) p->algos[i] = results[i].algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

LtMatmul::Key LtMatmul::key_for(uint32_t align_x, uint32_t align_w, uint32_t align_out,
                                int64_t ld_x, int64_t T, int64_t N, int64_t K, DType out_dtype,
                                int64_t ld_out, size_t workspace_bytes) {
  const int align_bits = int(align_w | (align_x << 9) | (align_out << 18));
  return Key{T, N, K, ld_x, ld_out, out_dtype == DType::f32 ? 1 : 0, align_bits, workspace_bytes};
}

LtMatmul::Key LtMatmul::key_for(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T,
                                int64_t N, int64_t K, const void* out, DType out_dtype,
                                int64_t ld_out, size_t workspace_bytes) {
  return key_for(alignment_of(x), alignment_of(w), alignment_of(out), ld_x, T, N, K, out_dtype,
                 ld_out, workspace_bytes);
}

int LtMatmul::algorithms(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t N,
                         int64_t K, const void* out, DType out_dtype, int64_t ld_out,
                         size_t workspace_bytes) {
  if (T <= 0) return 1;
  std::lock_guard lock(mutex_);
  return plan_for(key_for(x, ld_x, w, T, N, K, out, out_dtype, ld_out, workspace_bytes),
                  workspace_bytes)
      .found;
}

int LtMatmul::algorithms_aligned(int64_t ld_x, int64_t T, int64_t N, int64_t K, DType out_dtype,
                                 int64_t ld_out, size_t workspace_bytes) {
  if (T <= 0) return 1;
  std::lock_guard lock(mutex_);
  return plan_for(key_for(256, 256, 256, ld_x, T, N, K, out_dtype, ld_out, workspace_bytes),
                  workspace_bytes)
      .found;
}

void LtMatmul::run(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t N,
                   int64_t K, void* out, DType out_dtype, int64_t ld_out, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream, bool accumulate, int algo) {
  RIDGE_CHECK(out_dtype == DType::bf16 || out_dtype == DType::f32,
              "matmul: output must be bf16 or f32, got {}", dtype_name(out_dtype));
  RIDGE_CHECK(T >= 0 && N >= 1 && K >= 1 && ld_x >= K && ld_out >= N,
              "matmul: T={} N={} K={} with ld_x {} and ld_out {}", T, N, K, ld_x, ld_out);
  if (T == 0) return;
  std::lock_guard lock(mutex_);
  Plan& p = plan_for(key_for(x, ld_x, w, T, N, K, out, out_dtype, ld_out, workspace_bytes),
                     workspace_bytes);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasLtMatmulAlgo_t& chosen = p.algos[algo >= 0 && algo < p.found ? algo : 0];
  RIDGE_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.d, out,
                                    p.d, &chosen, workspace, workspace_bytes, stream));
}

}  // namespace ridge::backend::cuda
