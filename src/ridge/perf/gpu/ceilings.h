// perf/gpu: what `ridge bench ceilings` measures on the GPU at hand (memory bandwidth, dense GEMM
// peak, launch overheads, host copies), and a timer for ops issued on a stream (`ridge bench
// model --profile-ops`, `ridge-bench-gemm`). Built only with CUDA (target ridge_perf_gpu, which
// defines RIDGE_HAVE_PERF_GPU for its users); this header has no CUDA types, so CPU-only code can
// include it behind that macro.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ridge::perf::gpu {

struct DeviceInfo {
  std::string name;  // "NVIDIA H200"
  int sms = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0, runtime_version = 0;  // e.g. 13000
};

// Whether a CUDA device can be used (false with the reason in `why` otherwise).
bool device_present(std::string* why = nullptr);
DeviceInfo device_info();

struct CeilingOptions {
  size_t read_bytes = size_t(4) << 30;  // read-only 16-byte streaming kernel over this many bytes
  size_t copy_bytes = size_t(2) << 30;  // device-to-device copies (cudaMemcpy, 16-byte kernel)
  std::vector<int> gemm_sizes = {4096, 8192, 16384};  // square bf16 GEMMs through cuBLASLt
  double gemm_warmup_s = 0.3;           // GEMMs before any timing, so that clocks settle
  int repeats = 5;                      // timed batches per figure; the best is kept
  int launches = 20000;                 // eager launches of an empty kernel per batch
  int graph_nodes = 2000;               // empty kernels in the captured graph
  bool memory = true, gemm = true, launch = true, host = true;  // which groups to measure
};

struct GemmPoint {
  int m = 0, n = 0, k = 0;
  double seconds = 0;  // per GEMM, best batch
  double flops = 0;    // FLOP/s
};

struct Ceilings {
  DeviceInfo device;
  double memcpy_bw = 0;        // cudaMemcpyAsync device to device: bytes read + written per s
  double copy_kernel_bw = 0;   // 16-byte copy kernel: bytes read + written per s
  double read_bw = 0;          // read-only 16-byte streaming kernel: bytes read per s
  std::vector<GemmPoint> gemm;
  double gemm_bf16_flops = 0;  // best of `gemm`
  double launch_eager_s = 0;   // per launch of an empty kernel, launched back to back
  double launch_graph_s = 0;   // per empty-kernel node of a captured graph, replayed
  double launch_cublaslt_s = 0;  // per cuBLASLt call (M = N = K = 64), back to back
  double h2d_small_s = 0;      // a 4 KiB pageable host-to-device copy plus a stream sync
  double d2h_pageable_bw = 0;  // 8 MiB device to pageable host memory (copy + sync), bytes/s
  double d2h_pinned_bw = 0;    // the same into pinned memory
};

using Progress = std::function<void(const std::string&)>;
// Runs the groups asked for; throws std::runtime_error naming the CUDA call that failed.
Ceilings measure(const CeilingOptions& options, const Progress& progress = {});

// Times ops issued on a stream of its own: pass stream() to Backend ops as Stream{handle}.
class StreamTimer {
 public:
  StreamTimer();
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  void* stream() const;  // a cudaStream_t
  // Seconds from an event before issue() to one after it, the ops run eagerly: their GPU time
  // plus whatever time the GPU waits for the host to launch them.
  double eager(const std::function<void()>& issue);
  // Captures issue() into a CUDA graph, replays it `replays` times (each timed by events) and
  // returns the seconds of one replay (the median, after a warm-up replay); a negative value when
  // the ops could not be captured (then nothing was replayed).
  double graph(const std::function<void()>& issue, int replays);
  // Seconds of work queued behind a kernel that holds the GPU for `hold_s` first: issue() is
  // then fully queued before the GPU reaches it, so the figure is GPU time without host gaps.
  double queued(const std::function<void()>& issue, double hold_s = 0.02);
  void synchronize();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::perf::gpu
