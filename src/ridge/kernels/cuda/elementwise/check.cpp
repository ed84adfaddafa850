#include "ridge/kernels/cuda/elementwise/check.h"

#include "ridge/core/error.h"

namespace ridge::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  fail("CUDA error in {} at {}:{}: {} ({})", call, file, line, cudaGetErrorName(err),
       cudaGetErrorString(err));
}

void throw_precondition(const char* kernel, const std::string& what) {
  fail("CUDA kernel {}: {}", kernel, what);
}

}  // namespace ridge::cuda
