#include "ridge/kernels/cuda/trace/block_trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ridge/core/error.h"

namespace ridge::kernels::detail {
namespace {

void check(cudaError_t err, const char* what) {
  RIDGE_CHECK(err == cudaSuccess, "block trace: {} failed: {}", what, cudaGetErrorString(err));
}

// The launch's entries back on the host (synchronizing `stream`).
std::vector<unsigned long long> download(const unsigned long long* trace, size_t n,
                                         cudaStream_t stream) {
  std::vector<unsigned long long> h(n);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaMemcpy(h.data(), trace, n * sizeof(h[0]), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}

}  // namespace

bool block_trace_requested(const char* env) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != 0 && !(v[0] == '0' && v[1] == 0);
}

unsigned long long* block_trace(const char* env, int blocks, cudaStream_t stream, int per_block) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  static std::mutex mutex;
  static std::map<std::string, std::pair<unsigned long long*, size_t>> buffers;  // (buffer, size)
  std::lock_guard lock(mutex);
  auto& [buf, size] = buffers[env];
  const size_t n = size_t(blocks) * size_t(per_block);
  if (size < n) {
    if (buf) check(cudaFree(buf), "cudaFree");
    buf = nullptr, size = 0;
    check(cudaMalloc(&buf, n * sizeof(unsigned long long)), "cudaMalloc");
    size = n;
  }
  check(cudaMemsetAsync(buf, 0, n * sizeof(unsigned long long), stream), "cudaMemsetAsync");
  return buf;
}

void print_block_trace(const char* what, const unsigned long long* trace, int blocks,
                       const char* const (&names)[kBlockStamps], int M, int N, int K,
                       cudaStream_t stream) {
  const std::vector<unsigned long long> h = download(trace, size_t(blocks) * kBlockStamps, stream);
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

PhaseSummary summarize_phases(const unsigned long long* h, int blocks) {
  PhaseSummary out;
  struct Event {
    unsigned long long t;
    int resident, streaming;  // changes at t
  };
  std::map<unsigned long long, std::vector<Event>> sms;  // by SM id
  std::vector<double> phase[3];
  unsigned long long first = ~0ull, last = 0;
  for (int b = 0; b < blocks; ++b) {
    const unsigned long long* e = h + size_t(b) * kPhaseEntries;
    const unsigned long long entry = e[0], begin = e[1], end = e[2], exit = e[3];
    if (entry == 0 || exit < entry) continue;  // not stamped (an early return)
    ++out.blocks;
    first = std::min(first, entry), last = std::max(last, exit);
    auto& ev = sms[e[4]];
    ev.push_back({entry, 1, 0});
    ev.push_back({exit, -1, 0});
    if (entry <= begin && begin <= end && end <= exit) {  // it streamed (it had tiles)
      ev.push_back({begin, 0, 1});
      ev.push_back({end, 0, -1});
      phase[0].push_back(double(begin - entry) * 1e-3);
      phase[1].push_back(double(end - begin) * 1e-3);
      phase[2].push_back(double(exit - end) * 1e-3);
    }
  }
  if (out.blocks == 0) return out;
  out.span_us = double(last - first) * 1e-3;
  for (int k = 0; k < 3; ++k) {
    auto& v = phase[k];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    out.phase_us[k][0] = v[n / 10], out.phase_us[k][1] = v[n / 2],
    out.phase_us[k][2] = v[n * 9 / 10];
  }
  // Each SM's time from its first entry to its last exit, swept in time order: the blocks
  // resident and streaming between consecutive stamps.
  double total = 0, resident_time = 0, idle = 0;
  for (auto& [sm, ev] : sms) {
    std::sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
    int resident = 0, streaming = 0;
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      resident += ev[i].resident, streaming += ev[i].streaming;
      const double dt = double(ev[i + 1].t - ev[i].t);
      resident_time += resident * dt;
      if (streaming == 0) idle += dt;
    }
    total += double(ev.back().t - ev.front().t);
  }
  if (total > 0) out.resident = resident_time / total, out.idle_share = idle / total;
  return out;
}

void print_block_phases(const char* what, const unsigned long long* trace, int blocks,
                        const char* const (&phases)[3], cudaStream_t stream) {
  const std::vector<unsigned long long> h = download(trace, size_t(blocks) * kPhaseEntries, stream);
  const PhaseSummary p = summarize_phases(h.data(), blocks);
  std::string line;
  for (int k = 0; k < 3; ++k) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.2f/%.2f/%.2f", phases[k], p.phase_us[k][0],
                  p.phase_us[k][1], p.phase_us[k][2]);
    line += buf;
  }
  std::fprintf(stderr,
               "%s trace blocks=%d/%d span=%.1fus (us p10/p50/p90):%s resident=%.2f "
               "idle=%.1f%%\n",
               what, p.blocks, blocks, p.span_us, line.c_str(), p.resident, 100.0 * p.idle_share);
}

}  // namespace ridge::kernels::detail
