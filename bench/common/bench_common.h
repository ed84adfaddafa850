// Helpers shared by the benchmark programs (ridge-bench-gemm, ridge-bench-attention), built as
// the static library ridge_bench_common: an owned device buffer (DeviceMemory), the median of a
// sample, the GPU's state as nvidia-smi reports it (clocks, power, temperature, throttle reasons)
// for a run's metadata, the graph-replay timer every timed kernel goes through (time_launches),
// and the device-side random fill and comparison that check a kernel's output against a
// reference's (fill_random_bf16, compare_bf16). Each program's own kernels and helpers stay in
// its folder. CUDA errors throw ridge::Error (RIDGE_GEMM_CUDA_CHECK).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ridge::bench {

using bf16 = __nv_bfloat16;

// cudaMalloc'd bytes (at least 16), freed on destruction.
struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  bf16* bf() const { return as<bf16>(); }
};

double median(std::vector<double> v);

// The command's standard output, trailing newlines and spaces removed ("" if it cannot run).
std::string shell(const char* cmd);
// nvidia-smi's SM and memory clocks, power draw, temperature and active throttle reasons.
std::string gpu_state();

// Microseconds per launch of fn(rotation): two warm-up calls, one timed call to pick L (about
// 3 ms of launches, 2 to 64), then a CUDA graph of L back-to-back launches fn(i % rotations),
// median of `replays` replays after a warm-up replay (a plain launch loop if capture fails).
// Captured in relaxed mode (cudaStreamCaptureModeRelaxed) for both benchmarks; the attention
// benchmark's own copy used to capture thread-locally.
double time_launches(const std::function<void(int)>& fn, int rotations, cudaStream_t s,
                     int replays = 9);

// Uniform in [-scale, scale], never exactly zero, from a counter-based hash of (seed, index).
void fill_random_bf16(bf16* p, size_t n, uint64_t seed, float scale, cudaStream_t stream);

struct Diff {
  double rel = 0;                     // ‖a − b‖ / ‖b‖ over finite pairs
  unsigned long long non_finite = 0;  // elements of a that are NaN/Inf (unwritten outputs)
};
// Compares a against b on the device; synchronizes the stream.
Diff compare_bf16(const bf16* a, const bf16* b, size_t n, cudaStream_t stream);

}  // namespace ridge::bench
