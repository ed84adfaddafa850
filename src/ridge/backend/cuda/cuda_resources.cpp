#include "ridge/backend/cuda/cuda_resources.h"

#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/kernels/cuda/elementwise/check.h"

namespace ridge::backend::cuda {

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  // cudaMalloc(0) gives null; keep every allocation real so that data() is never null.
  const cudaError_t err = cudaMalloc(&data_, bytes ? bytes : 256);
  if (err != cudaSuccess) {
    data_ = nullptr;
    (void)cudaGetLastError();  // clear the (non-sticky) out-of-memory error
    fail("cudaMalloc of {} bytes failed: {} ({})", bytes, cudaGetErrorName(err),
         cudaGetErrorString(err));
  }
}

DeviceMemory::~DeviceMemory() {
  if (data_) {
    const cudaError_t err = cudaFree(data_);
    if (err != cudaSuccess) log::warn("cudaFree failed: {}", cudaGetErrorString(err));
  }
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    DeviceMemory old(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

OwnedStream::OwnedStream() {
  RIDGE_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

OwnedStream::~OwnedStream() {
  if (stream_) {
    const cudaError_t err = cudaStreamDestroy(stream_);
    if (err != cudaSuccess) log::warn("cudaStreamDestroy failed: {}", cudaGetErrorString(err));
  }
}

CublasLtHandle::CublasLtHandle() { RIDGE_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

CublasLtHandle::~CublasLtHandle() {
  if (handle_) {
    const cublasStatus_t st = cublasLtDestroy(handle_);
    if (st != CUBLAS_STATUS_SUCCESS) log::warn("cublasLtDestroy failed: status {}", int(st));
  }
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt error in {} at {}:{}: status {}", call, file, line, int(status));
}

}  // namespace ridge::backend::cuda
