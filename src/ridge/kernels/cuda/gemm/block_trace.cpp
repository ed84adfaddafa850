#include "ridge/kernels/cuda/gemm/block_trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ridge/kernels/cuda/gemm/check.h"

namespace ridge::kernels::detail {

bool block_trace_requested(const char* env) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != 0 && !(v[0] == '0' && v[1] == 0);
}

unsigned long long* block_trace(const char* env, int blocks, cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  RIDGE_GEMM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  static std::mutex mutex;
  static std::map<std::string, std::pair<unsigned long long*, int>> buffers;  // (buffer, blocks)
  std::lock_guard lock(mutex);
  auto& [buf, size] = buffers[env];
  if (size < blocks) {
    if (buf) RIDGE_GEMM_CUDA_CHECK(cudaFree(buf));
    const size_t bytes = size_t(blocks) * kBlockStamps * sizeof(unsigned long long);
    RIDGE_GEMM_CUDA_CHECK(cudaMalloc(&buf, bytes));
    RIDGE_GEMM_CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, stream));  // before the traced launch
    size = blocks;
  }
  return buf;
}

void print_block_trace(const char* what, const unsigned long long* trace, int blocks,
                       const char* const (&names)[kBlockStamps], int M, int N, int K,
                       cudaStream_t stream) {
  std::vector<unsigned long long> h(size_t(blocks) * kBlockStamps);
  RIDGE_GEMM_CUDA_CHECK(cudaStreamSynchronize(stream));
  RIDGE_GEMM_CUDA_CHECK(
      cudaMemcpy(h.data(), trace, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
  unsigned long long t0 = h[0];
  for (int b = 0; b < blocks; ++b) t0 = std::min(t0, h[size_t(b) * kBlockStamps]);
  std::string line;
  for (int k = 0; k < kBlockStamps; ++k) {
    std::vector<double> v(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) {
      const unsigned long long t = h[size_t(b) * kBlockStamps + k];
      v[size_t(b)] = t >= t0 ? double(t - t0) * 1e-3 : -1.0;  // −1: not stamped this launch
    }
    std::sort(v.begin(), v.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.2f/%.2f/%.2f", names[k], v.front(), v[v.size() / 2],
                  v.back());
    line += buf;
  }
  std::fprintf(stderr, "%s trace M=%d N=%d K=%d blocks=%d (us min/median/max):%s\n", what, M, N, K,
               blocks, line.c_str());
}

}  // namespace ridge::kernels::detail
