// Error checking shared by ridge's CUDA kernels and the CUDA backend. Every CUDA runtime call is
// wrapped in RIDGE_CHECK_CUDA(call): a failure throws ridge::Error naming the call, its file and
// line, and the CUDA error. Kernel wrappers check their preconditions on the host with
// RIDGE_KERNEL_EXPECT(cond, kernel, what) before launching and check the launch itself with
// RIDGE_CHECK_LAUNCH(kernel).
//
// This header is included by .cu files, so it stays free of fmt (nvcc and fmt's consteval format
// strings do not mix well); the throwing functions live in check.cpp.
#pragma once

#include <string>

#include <cuda_runtime.h>

namespace ridge::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_precondition(const char* kernel, const std::string& what);

inline void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, call, file, line);
}

}  // namespace ridge::cuda

#define RIDGE_CHECK_CUDA(call) ::ridge::cuda::check((call), #call, __FILE__, __LINE__)
#define RIDGE_CHECK_LAUNCH(kernel) \
  ::ridge::cuda::check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
#define RIDGE_KERNEL_EXPECT(cond, kernel, what)                       \
  do {                                                                \
    if (!(cond)) ::ridge::cuda::throw_precondition((kernel), (what)); \
  } while (0)
