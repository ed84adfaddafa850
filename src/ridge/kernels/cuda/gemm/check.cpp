#include "ridge/kernels/cuda/gemm/check.h"

#include "ridge/core/error.h"

namespace ridge::kernels::detail {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  fail("CUDA error {} ({}: {}) at {}:{} in {}", static_cast<int>(err), cudaGetErrorName(err),
       cudaGetErrorString(err), file, line, expr);
}

}  // namespace ridge::kernels::detail
