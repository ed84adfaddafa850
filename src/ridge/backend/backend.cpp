#include "ridge/backend/backend.h"

#include <cstdlib>
#include <algorithm>
#include <new>

#include "ridge/core/error.h"

namespace ridge::backend {

Buffer Backend::allocate_host(size_t bytes) {
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

void Backend::matmul_fused(const Stream& s, const Tensor& x, const Tensor& w,
                           const MatmulFusion& f, Tensor& scratch, Tensor& out) {
  RIDGE_CHECK(!(f.norm_weight && f.silu_mul), "matmul_fused: at most one prologue");
  const Tensor* in = &x;
  if (f.norm_weight) {
    rmsnorm(s, x, *f.norm_weight, f.eps, scratch);
    in = &scratch;
  } else if (f.silu_mul) {
    silu_mul(s, x, scratch);
    in = &scratch;
  }
  if (f.accumulate)
    matmul_add(s, *in, w, out);
  else
    matmul(s, *in, w, nullptr, out);
}

void Backend::matmul_swiglu(const Stream& s, const Tensor& x, const Tensor& w,
                            const MatmulFusion& f, Tensor& scratch, Tensor& gate_up, Tensor& out) {
  RIDGE_CHECK(!f.silu_mul && !f.accumulate,
              "matmul_swiglu: a norm prologue only (no silu_mul prologue, no accumulate)");
  matmul_fused(s, x, w, f, scratch, gate_up);
  silu_mul(s, gate_up, out);
}

}  // namespace ridge::backend
