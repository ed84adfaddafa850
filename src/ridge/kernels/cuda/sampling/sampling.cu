#include "ridge/kernels/cuda/sampling/sampling.h"

#include <cstdint>
#include <mutex>
#include <string>

#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/sampling/sample_row.cuh"

namespace ridge::kernels {

namespace {

constexpr int kSampleThreads = 512;

template <int kT>
__global__ void __launch_bounds__(kT, 1) sample_kernel(const SampleArgs a) {
  extern __shared__ float4 sample_dynamic[];
  __shared__ sampling_detail::Shared sh;
  sampling_detail::sample_row<kT>(
      a, int(blockIdx.x), a.staged ? reinterpret_cast<float*>(sample_dynamic) : nullptr, sh);
}

int64_t padded(int64_t vocab) {
  return (vocab + 3) / 4 * 4;
}

// Dynamic shared memory the kernel may use on the current device (queried once per device; the
// kernel's limit is raised to it at the same time).
size_t dynamic_limit() {
  static std::mutex mu;
  static size_t limits[64] = {};
  static bool known[64] = {};
  int dev = 0;
  RIDGE_CHECK_CUDA(cudaGetDevice(&dev));
  std::lock_guard lock(mu);
  if (dev < 0 || dev >= 64) return 0;
  if (!known[dev]) {
    int optin = 0;
    RIDGE_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes attr{};
    RIDGE_CHECK_CUDA(cudaFuncGetAttributes(&attr, sample_kernel<kSampleThreads>));
    const int64_t room = int64_t(optin) - int64_t(attr.sharedSizeBytes) - 1024;
    limits[dev] = room > 0 ? size_t(room) : 0;
    if (limits[dev] > 0)
      RIDGE_CHECK_CUDA(cudaFuncSetAttribute(sample_kernel<kSampleThreads>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(limits[dev])));
    known[dev] = true;
  }
  return limits[dev];
}

}  // namespace

bool sample_stages_row(int64_t vocab) {
  return vocab > 0 && size_t(padded(vocab)) * sizeof(float) <= dynamic_limit();
}

size_t sample_workspace_bytes(int64_t rows, int64_t vocab, bool any_adjusted) {
  if (!any_adjusted || rows <= 0 || sample_stages_row(vocab)) return 0;
  return size_t(rows) * size_t(padded(vocab)) * sizeof(float);
}

void sample(SampleArgs a, cudaStream_t stream) {
  const char* k = "sample";
  RIDGE_KERNEL_EXPECT(a.rows >= 0 && a.vocab >= 1 && a.vocab <= kSampleMaxVocab, k,
                      "vocab " + std::to_string(a.vocab) + " outside [1, " +
                          std::to_string(kSampleMaxVocab) + "] or negative rows");
  if (a.rows == 0) return;
  RIDGE_KERNEL_EXPECT(a.rows <= 0x7fffffff, k, "too many rows");
  RIDGE_KERNEL_EXPECT(a.logits && a.ld >= a.vocab && a.params && a.tokens && a.logprobs, k,
                      "null logits/params/outputs or a row stride below the vocabulary");
  RIDGE_KERNEL_EXPECT(a.top_n >= 0 && a.top_n <= kSampleMaxTopLogprobs &&
                          (a.top_n == 0 || (a.top_ids && a.top_logprobs)),
                      k,
                      "top_n " + std::to_string(a.top_n) + " outside [0, 20] or null top outputs");
  a.staged = sample_stages_row(a.vocab);
  a.ws_ld = padded(a.vocab);
  const size_t dynamic = a.staged ? size_t(a.ws_ld) * sizeof(float) : 0;
  sample_kernel<kSampleThreads><<<unsigned(a.rows), kSampleThreads, dynamic, stream>>>(a);
  RIDGE_CHECK_LAUNCH("sample");
}

}  // namespace ridge::kernels
