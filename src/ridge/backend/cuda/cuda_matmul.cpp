#include "ridge/backend/cuda/cuda_matmul.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>

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

LtMatmul::Plan& LtMatmul::plan_for(const Key& key, size_t workspace_bytes, const float* scale_a,
                                   const float* scale_b) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  if (plans_.size() >= kMaxPlans) plans_.clear();
  const auto [T, N, K, ld_x, ld_out, kind, align_bits, ws] = key;
  // kind: bit 0 f32 out; bit 1 fp8 with per-row scales; bit 2 fp8 unscaled (scales of 1).
  const bool out_f32 = kind & 1, fp8_scaled = kind & 2, fp8 = kind & 6;
  auto p = std::make_unique<Plan>();
  RIDGE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // (fp8 needs this "TN" form: A transposed, B not.)
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RIDGE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  RIDGE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (fp8) {
    // RIDGE_FP8_FAST_ACCUM=1: accumulate in the tensor cores' reduced precision (A/B runs only).
    static const int8_t fast = [] {
      const char* e = std::getenv("RIDGE_FP8_FAST_ACCUM");
      return int8_t(e && e[0] == '1');
    }();
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                      sizeof(fast)));
  }
  if (fp8_scaled) {
    // Per-row scales of W (A's N rows) and per-token scales of X (B's T columns).
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                      &mode, sizeof(mode)));
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                      &mode, sizeof(mode)));
    // Set before the heuristic query (whether it needs them is not documented): the first
    // call's vectors; each call sets its own again.
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &scale_a, sizeof(scale_a)));
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &scale_b, sizeof(scale_b)));
  }
  RIDGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in_type, uint64_t(K), uint64_t(N), K));
  RIDGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in_type, uint64_t(K), uint64_t(T), ld_x));
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
    fail("cuBLASLt has no algorithm for {} matmul T={} N={} K={} (ld_x {}, ld_out {}, {} out)",
         fp8_scaled ? "fp8 (E4M3, per-row scales)"
         : fp8      ? "fp8 (E4M3)"
                    : "bf16",
         T, N, K, ld_x, ld_out, out_f32 ? "f32" : "bf16");
  p->found = std::min(found, kMaxAlgos);
  for (int i = 0; i < p->found; ++i) p->algos[i] = results[i].algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

LtMatmul::Key LtMatmul::key_for(uint32_t align_x, uint32_t align_w, uint32_t align_out,
                                int64_t ld_x, int64_t T, int64_t N, int64_t K, DType out_dtype,
                                int64_t ld_out, size_t workspace_bytes, int fp8) {
  const int align_bits = int(align_w | (align_x << 9) | (align_out << 18));
  return Key{T,          N,
             K,          ld_x,
             ld_out,     (out_dtype == DType::f32 ? 1 : 0) | (fp8 << 1),
             align_bits, workspace_bytes};
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

bool LtMatmul::run_fp8(const uint8_t* xq, const float* sx, int64_t ld_x, const uint8_t* wq,
                       const float* sw, int64_t T, int64_t N, int64_t K, void* out, DType out_dtype,
                       int64_t ld_out, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       bool accumulate) {
  RIDGE_CHECK(out_dtype == DType::bf16 || out_dtype == DType::f32,
              "matmul (fp8): output must be bf16 or f32, got {}", dtype_name(out_dtype));
  RIDGE_CHECK(T >= 0 && N >= 1 && K >= 16 && K % 16 == 0 && ld_x >= K && ld_x % 16 == 0 &&
                  ld_out >= N && bool(sx) == bool(sw),
              "matmul (fp8): T={} N={} K={} with ld_x {} and ld_out {} (K and ld_x must be "
              "multiples of 16, with both scale vectors)",
              T, N, K, ld_x, ld_out);
  if (T == 0) return true;
  std::lock_guard lock(mutex_);
  const bool scaled = sx != nullptr;
  const Key key = key_for(alignment_of(xq), alignment_of(wq), alignment_of(out), ld_x, T, N, K,
                          out_dtype, ld_out, workspace_bytes, scaled ? 1 : 2);
  if (scaled && refused_.count({key, accumulate})) return false;
  Plan* p = nullptr;
  try {
    p = &plan_for(key, workspace_bytes, sw, sx);
  } catch (const Error&) {
    if (!scaled) throw;
    refused_.insert({key, accumulate});  // (a heuristic query enqueues nothing)
    return false;
  }
  if (scaled) {
    // The scale vectors are arguments of this call (the plan is shared by every weight of the
    // shape): set under the lock, read by cublasLtMatmul when it enqueues.
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &sw, sizeof(sw)));
    RIDGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &sx, sizeof(sx)));
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(handle_, p->op, &alpha, wq, p->a, xq, p->b, &beta, out, p->d, out, p->d,
                     &p->algos[0], workspace, workspace_bytes, stream);
  // A scale configuration the library does not run is refused here too (documented for the
  // scale pointers), before anything is enqueued.
  if (scaled && (st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_NOT_SUPPORTED)) {
    refused_.insert({key, accumulate});
    return false;
  }
  RIDGE_CUBLAS_CHECK(st);
  return true;
}

}  // namespace ridge::backend::cuda
