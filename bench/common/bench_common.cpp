// The host helpers of bench_common.h: device buffers, medians, nvidia-smi queries and the
// graph-replay timer.
#include "bench_common.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>

#include "ridge/kernels/cuda/gemm/check.h"

namespace ridge::bench {

#define CK(call) RIDGE_GEMM_CUDA_CHECK(call)

DeviceMemory::DeviceMemory(size_t bytes) {
  CK(cudaMalloc(&ptr, std::max<size_t>(bytes, 16)));
}

DeviceMemory::~DeviceMemory() {
  cudaFree(ptr);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string shell(const char* cmd) {
  std::string out;
  if (FILE* f = popen(cmd, "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string gpu_state() {
  return shell(
      "nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_"
      "reasons.active --format=csv,noheader 2>/dev/null");
}

double time_launches(const std::function<void(int)>& fn, int rotations, cudaStream_t s,
                     int replays) {
  for (int i = 0; i < 2; ++i) fn(i % rotations);
  CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, s));
  fn(0);
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float est_ms = 0;
  CK(cudaEventElapsedTime(&est_ms, a, b));
  const int L = std::clamp(static_cast<int>(3.0 / std::max(est_ms, 1e-3f)), 2, 64);
  std::vector<double> times;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool graphed = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess;
  if (graphed) {
    for (int i = 0; i < L; ++i) fn(i % rotations);
    graphed = cudaStreamEndCapture(s, &graph) == cudaSuccess &&
              cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  }
  if (!graphed) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "note: graph capture failed, timing a plain launch loop\n");
  }
  for (int r = 0; r <= replays; ++r) {
    CK(cudaEventRecord(a, s));
    if (graphed)
      CK(cudaGraphLaunch(exec, s));
    else
      for (int i = 0; i < L; ++i) fn(i % rotations);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) times.push_back(1000.0 * ms / L);  // replay 0 is a warm-up
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(times);
}

}  // namespace ridge::bench
