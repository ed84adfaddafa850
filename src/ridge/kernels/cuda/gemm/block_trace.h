#pragma once
// Per-block %globaltimer stamps of diagnostic launches (RIDGE_STREAM_TRACE for the stream-K GEMM,
// RIDGE_WINDOW_TRACE for the window GEMV): a kernel given a trace buffer writes four stamps a
// block (what each means is the kernel's), and the host prints one launch's summary on stderr,
// min / median / max over the blocks in µs after the first block's entry. Launches inside a
// graph capture are not traced (the summary synchronizes the stream).
#include <cuda_runtime.h>

namespace ridge::kernels::detail {

constexpr int kBlockStamps = 4;

// Whether the environment variable `env` asks for traces (set and not "0"); callers keep the
// answer in a static, so that an untraced launch costs no lookup.
bool block_trace_requested(const char* env);
// The trace buffer for a launch of `blocks` blocks, or nullptr while `stream` is capturing. One
// zeroed buffer an environment variable, grown as needed.
unsigned long long* block_trace(const char* env, int blocks, cudaStream_t stream);

// "<what> trace M= N= K= blocks= (us min/median/max): <name> a/b/c …" on stderr.
void print_block_trace(const char* what, const unsigned long long* trace, int blocks,
                       const char* const (&names)[kBlockStamps], int M, int N, int K,
                       cudaStream_t stream);

}  // namespace ridge::kernels::detail

#ifdef __CUDACC__
namespace ridge::kernels {
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}  // namespace ridge::kernels
#endif
