// Error reporting usable from .cu files: nvcc cannot compile fmt's compile-time format checks,
// so the throwing side lives in check.cpp (built by the host compiler).
#pragma once

#include <cuda_runtime_api.h>

namespace ridge::kernels::detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace ridge::kernels::detail

// Checks a CUDA runtime call; on failure throws ridge::Error naming the call and the error.
#define RIDGE_GEMM_CUDA_CHECK(call)                                                   \
  do {                                                                                \
    const cudaError_t ridge_gemm_err_ = (call);                                       \
    if (ridge_gemm_err_ != cudaSuccess)                                               \
      ::ridge::kernels::detail::throw_cuda_error(ridge_gemm_err_, #call, __FILE__, __LINE__); \
  } while (0)
