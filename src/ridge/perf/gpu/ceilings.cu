// The GPU side of perf/gpu/ceilings.h: streaming and copy kernels, cuBLASLt GEMMs, empty-kernel
// launches eager and in a graph, host copies. Every figure is the best of `repeats` timed batches
// (CUDA events around the batch), after a warm-up.
#include "ridge/perf/gpu/ceilings.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "ridge/kernels/cuda/gemm/cublaslt_gemm.h"

namespace ridge::perf::gpu {
namespace {

// No fmt (nor ridge/core/error.h, which includes it) here: nvcc's host pass rejects parts of fmt
// 9's constexpr code. Errors are std::runtime_error (ridge::Error's base).
[[noreturn]] void cuda_failed(const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

[[noreturn]] void bad_input(const std::string& what) { throw std::runtime_error("ceilings: " + what); }

#define RIDGE_PG_CHECK(call)                              \
  do {                                                    \
    const cudaError_t err_ = (call);                      \
    if (err_ != cudaSuccess) cuda_failed(#call, err_);    \
  } while (0)

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(size_t(1) << 30));
  return buf;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { RIDGE_PG_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DeviceBuffer() { (void)cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { RIDGE_PG_CHECK(cudaEventCreate(&e)); }
  ~Event() { (void)cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { RIDGE_PG_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~OwnedStream() { (void)cudaStreamDestroy(s); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};

// 16-byte loads over n vectors, 4 in flight per thread; the XOR only keeps the loads alive.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never: the compiler cannot drop the loads
}

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride), c = __ldcs(src + i + 2 * stride),
                d = __ldcs(src + i + 3 * stride);
    __stcs(dst + i, a);
    __stcs(dst + i + stride, b);
    __stcs(dst + i + 2 * stride, c);
    __stcs(dst + i + 3 * stride, d);
  }
  for (; i < n; i += stride) __stcs(dst + i, __ldcs(src + i));
}

// Small bf16 values from a hash of the index (never NaN, never denormal).
__global__ void fill_kernel(__nv_bfloat16* p, size_t n, uint32_t seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t h = uint32_t(i) * 0x9e3779b1u ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    p[i] = __float2bfloat16(float(h & 0xffff) / 65536.0f - 0.5f);
  }
}

__global__ void empty_kernel() {}

// Holds the GPU for `ns` nanoseconds (global timer), so that work behind it queues up.
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

int grid_for_streaming() {
  int dev = 0, sms = 0;
  RIDGE_PG_CHECK(cudaGetDevice(&dev));
  RIDGE_PG_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms * 4;  // 4 blocks of 512 threads: 2048 threads per SM, 128 KiB of loads in flight
}

// Best (smallest) seconds of `repeats` batches of fn(), each batch timed by events on s.
template <class F>
double best_of(int repeats, cudaStream_t s, F&& fn) {
  Event a, b;
  fn();  // warm-up
  RIDGE_PG_CHECK(cudaStreamSynchronize(s));
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    RIDGE_PG_CHECK(cudaEventRecord(a.e, s));
    fn();
    RIDGE_PG_CHECK(cudaEventRecord(b.e, s));
    RIDGE_PG_CHECK(cudaEventSynchronize(b.e));
    float ms = 0;
    RIDGE_PG_CHECK(cudaEventElapsedTime(&ms, a.e, b.e));
    best = std::min(best, double(ms) * 1e-3);
  }
  return best;
}

template <class F>
double wall_per(int n, F&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
}

void measure_memory(const CeilingOptions& o, cudaStream_t s, Ceilings& c, const Progress& say) {
  const size_t read_bytes = o.read_bytes / 64 * 64, copy_bytes = o.copy_bytes / 64 * 64;
  DeviceBuffer a(std::max(read_bytes, copy_bytes)), b(copy_bytes), sink(16);
  const int grid = grid_for_streaming();
  fill_kernel<<<grid, 512, 0, s>>>(static_cast<__nv_bfloat16*>(a.p), std::max(read_bytes, copy_bytes) / 2, 1);
  RIDGE_PG_CHECK(cudaGetLastError());
  say("device copy, " + gib(copy_bytes) + " (cudaMemcpyAsync)");
  const double tm = best_of(o.repeats, s, [&] {
    RIDGE_PG_CHECK(cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice, s));
  });
  c.memcpy_bw = 2.0 * double(copy_bytes) / tm;
  say("device copy (16-byte copy kernel)");
  const double tk = best_of(o.repeats, s, [&] {
    copy_kernel<<<grid, 512, 0, s>>>(static_cast<const uint4*>(a.p), static_cast<uint4*>(b.p), copy_bytes / 16);
    RIDGE_PG_CHECK(cudaGetLastError());
  });
  c.copy_kernel_bw = 2.0 * double(copy_bytes) / tk;
  say("read-only streaming, " + gib(read_bytes) + " (16-byte loads)");
  const double tr = best_of(o.repeats, s, [&] {
    read_kernel<<<grid, 512, 0, s>>>(static_cast<const uint4*>(a.p), read_bytes / 16, static_cast<unsigned*>(sink.p));
    RIDGE_PG_CHECK(cudaGetLastError());
  });
  c.read_bw = double(read_bytes) / tr;
}

void measure_gemm(const CeilingOptions& o, cudaStream_t s, Ceilings& c, const Progress& say) {
  kernels::CublasLtGemm lt;
  const int grid = grid_for_streaming();
  for (const int n : o.gemm_sizes) {
    if (n < 64 || n % 64 != 0) bad_input("GEMM size " + std::to_string(n) + " must be a multiple of 64");
    say("cuBLASLt bf16 GEMM " + std::to_string(n) + "^3");
    const size_t elems = size_t(n) * size_t(n);
    DeviceBuffer x(elems * 2), w(elems * 2), y(elems * 2);
    fill_kernel<<<grid, 512, 0, s>>>(static_cast<__nv_bfloat16*>(x.p), elems, 2);
    fill_kernel<<<grid, 512, 0, s>>>(static_cast<__nv_bfloat16*>(w.p), elems, 3);
    RIDGE_PG_CHECK(cudaGetLastError());
    auto run = [&] {
      lt.run(static_cast<const __nv_bfloat16*>(x.p), static_cast<const __nv_bfloat16*>(w.p),
             static_cast<__nv_bfloat16*>(y.p), n, n, n, s);
    };
    // Warm-up for a while so that clocks and power settle before anything is timed.
    const auto t0 = std::chrono::steady_clock::now();
    int warm = 0;
    while (warm < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < o.gemm_warmup_s) {
      run();
      if (++warm % 8 == 0) RIDGE_PG_CHECK(cudaStreamSynchronize(s));
    }
    const double flop = 2.0 * double(n) * double(n) * double(n);
    const int batch = std::clamp(int(0.05 / std::max(flop / 7e14, 1e-6)), 2, 50);  // ~50 ms a batch
    const double t = best_of(o.repeats, s, [&] {
      for (int i = 0; i < batch; ++i) run();
    }) / batch;
    c.gemm.push_back({n, n, n, t, flop / t});
    c.gemm_bf16_flops = std::max(c.gemm_bf16_flops, flop / t);
  }
}

void measure_launch(const CeilingOptions& o, cudaStream_t s, Ceilings& c, const Progress& say) {
  say("eager launches of an empty kernel (" + std::to_string(o.launches) + " back to back)");
  c.launch_eager_s = best_of(o.repeats, s, [&] {
    for (int i = 0; i < o.launches; ++i) empty_kernel<<<1, 32, 0, s>>>();
    RIDGE_PG_CHECK(cudaGetLastError());
  }) / o.launches;
  say("a captured graph of " + std::to_string(o.graph_nodes) + " empty kernels");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  RIDGE_PG_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < o.graph_nodes; ++i) empty_kernel<<<1, 32, 0, s>>>();
  RIDGE_PG_CHECK(cudaStreamEndCapture(s, &graph));
  RIDGE_PG_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  c.launch_graph_s = best_of(o.repeats, s, [&] { RIDGE_PG_CHECK(cudaGraphLaunch(exec, s)); }) / o.graph_nodes;
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  say("eager cuBLASLt calls (M = N = K = 64)");
  kernels::CublasLtGemm lt;
  DeviceBuffer x(64 * 64 * 2), w(64 * 64 * 2), y(64 * 64 * 2);
  RIDGE_PG_CHECK(cudaMemsetAsync(x.p, 0, 64 * 64 * 2, s));
  RIDGE_PG_CHECK(cudaMemsetAsync(w.p, 0, 64 * 64 * 2, s));
  const int calls = std::max(100, o.launches / 4);
  c.launch_cublaslt_s = best_of(o.repeats, s, [&] {
    for (int i = 0; i < calls; ++i)
      lt.run(static_cast<const __nv_bfloat16*>(x.p), static_cast<const __nv_bfloat16*>(w.p),
             static_cast<__nv_bfloat16*>(y.p), 64, 64, 64, s);
  }) / calls;
}

void measure_host(const CeilingOptions& o, cudaStream_t s, Ceilings& c, const Progress& say) {
  say("host copies: 4 KiB host->device (pageable) + sync, 8 MiB device->host");
  std::vector<char> small(4096, 1);
  DeviceBuffer d_small(4096);
  const size_t big = size_t(8) << 20;
  DeviceBuffer d_big(big);
  RIDGE_PG_CHECK(cudaMemsetAsync(d_big.p, 0, big, s));
  std::vector<char> pageable(big);
  void* pinned = nullptr;
  RIDGE_PG_CHECK(cudaMallocHost(&pinned, big));
  double best_small = 1e30, best_pageable = 1e30, best_pinned = 1e30;
  for (int r = 0; r < std::max(2, o.repeats); ++r) {
    best_small = std::min(best_small, wall_per(200, [&] {
      RIDGE_PG_CHECK(cudaMemcpyAsync(d_small.p, small.data(), small.size(), cudaMemcpyHostToDevice, s));
      RIDGE_PG_CHECK(cudaStreamSynchronize(s));
    }));
    best_pageable = std::min(best_pageable, wall_per(10, [&] {
      RIDGE_PG_CHECK(cudaMemcpyAsync(pageable.data(), d_big.p, big, cudaMemcpyDeviceToHost, s));
      RIDGE_PG_CHECK(cudaStreamSynchronize(s));
    }));
    best_pinned = std::min(best_pinned, wall_per(10, [&] {
      RIDGE_PG_CHECK(cudaMemcpyAsync(pinned, d_big.p, big, cudaMemcpyDeviceToHost, s));
      RIDGE_PG_CHECK(cudaStreamSynchronize(s));
    }));
  }
  (void)cudaFreeHost(pinned);
  c.h2d_small_s = best_small;
  c.d2h_pageable_bw = double(big) / best_pageable;
  c.d2h_pinned_bw = double(big) / best_pinned;
}

}  // namespace

bool device_present(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string("CUDA reports ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  DeviceInfo d;
  int dev = 0;
  RIDGE_PG_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  RIDGE_PG_CHECK(cudaGetDeviceProperties(&p, dev));
  d.name = p.name;
  d.sms = p.multiProcessorCount;
  d.l2_bytes = p.l2CacheSize;
  d.memory_bytes = int64_t(p.totalGlobalMem);
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  RIDGE_PG_CHECK(cudaDriverGetVersion(&d.driver_version));
  RIDGE_PG_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  return d;
}

Ceilings measure(const CeilingOptions& o, const Progress& progress) {
  std::string why;
  if (!device_present(&why)) bad_input("no usable CUDA device: " + why);
  if (o.repeats < 1 || o.launches < 1 || o.graph_nodes < 1)
    bad_input("repeats, launches and graph nodes must be >= 1");
  const Progress say = progress ? progress : [](const std::string&) {};
  Ceilings c;
  c.device = device_info();
  OwnedStream s;
  if (o.gemm) measure_gemm(o, s.s, c, say);  // first: its warm-up also settles the clocks
  if (o.memory) measure_memory(o, s.s, c, say);
  if (o.launch) measure_launch(o, s.s, c, say);
  if (o.host) measure_host(o, s.s, c, say);
  RIDGE_PG_CHECK(cudaStreamSynchronize(s.s));
  return c;
}

struct StreamTimer::Impl {
  OwnedStream stream;
  Event a, b;
};

StreamTimer::StreamTimer() : impl_(std::make_unique<Impl>()) {}
StreamTimer::~StreamTimer() = default;

void* StreamTimer::stream() const { return impl_->stream.s; }

void StreamTimer::synchronize() { RIDGE_PG_CHECK(cudaStreamSynchronize(impl_->stream.s)); }

double StreamTimer::eager(const std::function<void()>& issue) {
  cudaStream_t s = impl_->stream.s;
  RIDGE_PG_CHECK(cudaEventRecord(impl_->a.e, s));
  issue();
  RIDGE_PG_CHECK(cudaEventRecord(impl_->b.e, s));
  RIDGE_PG_CHECK(cudaEventSynchronize(impl_->b.e));
  float ms = 0;
  RIDGE_PG_CHECK(cudaEventElapsedTime(&ms, impl_->a.e, impl_->b.e));
  return double(ms) * 1e-3;
}

double StreamTimer::queued(const std::function<void()>& issue, double hold_s) {
  cudaStream_t s = impl_->stream.s;
  hold_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(hold_s * 1e9));
  RIDGE_PG_CHECK(cudaGetLastError());
  return eager(issue);
}

double StreamTimer::graph(const std::function<void()>& issue, int replays) {
  cudaStream_t s = impl_->stream.s;
  RIDGE_PG_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  try {
    issue();
  } catch (...) {
    (void)cudaStreamEndCapture(s, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return -1;
  }
  cudaGraphExec_t exec = nullptr;
  const bool ok = cudaStreamEndCapture(s, &graph) == cudaSuccess && graph &&
                  cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph) (void)cudaGraphDestroy(graph);
  if (!ok) {
    (void)cudaGetLastError();
    return -1;
  }
  std::vector<double> t;
  for (int r = 0; r <= std::max(1, replays); ++r) {
    const double sec = eager([&] { RIDGE_PG_CHECK(cudaGraphLaunch(exec, s)); });
    if (r > 0) t.push_back(sec);  // replay 0 uploads the graph
  }
  (void)cudaGraphExecDestroy(exec);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace ridge::perf::gpu
