// RAII owners for CUDA runtime and cuBLASLt objects used by the CUDA backend. Destructors never
// throw: a failing release (e.g. after a sticky device error) is logged and dropped.
#pragma once

#include <cstddef>
#include <utility>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace ridge::backend::cuda {

// Device memory from cudaMalloc (never managed memory).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream owned by the backend.
class OwnedStream {
 public:
  OwnedStream();
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CublasLtHandle {
 public:
  CublasLtHandle();
  ~CublasLtHandle();
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// Throws ridge::Error naming the cuBLASLt call when status is not CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace ridge::backend::cuda

#define RIDGE_CUBLAS_CHECK(call) \
  ::ridge::backend::cuda::check_cublas((call), #call, __FILE__, __LINE__)
