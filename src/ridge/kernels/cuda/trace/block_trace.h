#pragma once
// Per-block %globaltimer stamps of diagnostic launches (RIDGE_STREAM_TRACE for the stream-K GEMM,
// RIDGE_WINDOW_TRACE for the window GEMV, RIDGE_ATTN_TRACE for the decode attention kernel): a
// kernel given a trace buffer writes four stamps a block (what each means is the kernel's), and
// the host prints one launch's summary on stderr. Launches inside a graph capture are not traced
// (the summary synchronizes the stream). Its own library (ridge_kernels_trace), so that every
// kernel folder can use it.
#include <cuda_runtime.h>

namespace ridge::kernels::detail {

constexpr int kBlockStamps = 4;

// Whether the environment variable `env` asks for traces (set and not "0"); callers keep the
// answer in a static, so that an untraced launch costs no lookup.
bool block_trace_requested(const char* env);
// The trace buffer for a launch of `blocks` blocks of `per_block` entries each, or nullptr while
// `stream` is capturing. One buffer an environment variable, grown as needed and zeroed on
// `stream` before each launch (a block that returns early leaves zeros).
unsigned long long* block_trace(const char* env, int blocks, cudaStream_t stream,
                                int per_block = kBlockStamps);

// "<what> trace M= N= K= blocks= (us min/median/max): <name> a/b/c …" on stderr.
void print_block_trace(const char* what, const unsigned long long* trace, int blocks,
                       const char* const (&names)[kBlockStamps], int M, int N, int K,
                       cudaStream_t stream);

// Phases of a launch whose blocks stamp kPhaseEntries entries: four stamps (entry, the start and
// the end of the block's streaming phase, exit) and the SM it ran on. Prints on stderr, in µs, the
// launch's span, each phase's duration p10 / p50 / p90 over the blocks, and over each SM's time
// from its first block's entry to its last block's exit: the blocks resident on average, and the
// share of that time in which no resident block was streaming (every one starting or finishing).
constexpr int kPhaseEntries = kBlockStamps + 1;
struct PhaseSummary {
  int blocks = 0;              // blocks that stamped (entry and exit)
  double span_us = 0;          // first entry to last exit
  double phase_us[3][3] = {};  // [entry→stream, streaming, stream end→exit][p10, p50, p90]
  double resident = 0;         // blocks resident on an SM, time-averaged
  double idle_share = 0;       // share of the SMs' time with no block streaming
};
// The summary of `blocks` blocks' entries (host copies, kPhaseEntries each); pure, for tests.
PhaseSummary summarize_phases(const unsigned long long* h, int blocks);
// Copies the launch's trace back (synchronizing `stream`) and prints its summary:
// "<what> trace blocks= span= <names> p10/p50/p90 resident= idle=".
void print_block_phases(const char* what, const unsigned long long* trace, int blocks,
                        const char* const (&phases)[3], cudaStream_t stream);

}  // namespace ridge::kernels::detail

#ifdef __CUDACC__
namespace ridge::kernels {
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
}  // namespace ridge::kernels
#endif
