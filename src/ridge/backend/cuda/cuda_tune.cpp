// GEMM choice per (weight shape, token bucket): times cuBLASLt and ridge's kernels on random data
// at each token bucket the engine will run and keeps the fastest (docs/KERNELS.md, "Autotuner").
//
// Timing: weights rotate over enough copies to exceed twice the L2 (a decode GEMV must stream
// from HBM, as in the engine, not from a warm L2); a candidate is timed over 20 back-to-back
// launches with CUDA events, three samples after a warm-up (their median), in each of two rounds
// that take the candidates in rotated order, and the mean of its two rounds kept (the clock
// drifts at the power cap). A candidate that throws (a shape it refuses) is skipped.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "ridge/backend/cuda/cuda_backend.h"
#include "ridge/core/error.h"
#include "ridge/core/half.h"
#include "ridge/core/log.h"
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/pdl.h"
#include "ridge/tune/autotuner.h"
#include "ridge/tune/build_cache.h"

namespace ridge::backend {

namespace {

// Fills n bf16 values on the device with N(0, scale²) noise, tiling a host block.
void fill_random(void* dst, size_t n, float scale, std::mt19937& rng, cudaStream_t stream) {
  constexpr size_t kBlock = size_t(1) << 20;
  std::vector<uint16_t> host(std::min(n, kBlock));
  std::normal_distribution<float> d(0.0f, scale);
  for (auto& v : host) v = f32_to_bf16(d(rng));
  for (size_t off = 0; off < n; off += host.size()) {
    const size_t cnt = std::min(host.size(), n - off);
    RIDGE_CHECK_CUDA(cudaMemcpyAsync(static_cast<uint16_t*>(dst) + off, host.data(), cnt * 2,
                                     cudaMemcpyHostToDevice, stream));
  }
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));  // `host` must outlive the copies
}

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    RIDGE_CHECK_CUDA(cudaEventCreate(&start));
    RIDGE_CHECK_CUDA(cudaEventCreate(&stop));
  }
  ~Events() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
  }
};

}  // namespace

// The kernel a tuner candidate or cached winner names (cuBLASLt's first algorithm for a name
// this build does not know).
CudaBackend::GemmKernel CudaBackend::kernel_named(const std::string& name) {
  for (GemmKernel k :
       {GemmKernel::cublas, GemmKernel::skinny, GemmKernel::sm90, GemmKernel::cublas_2,
        GemmKernel::cublas_3, GemmKernel::cublas_4, GemmKernel::skinny_rows, GemmKernel::stream,
        GemmKernel::window, GemmKernel::warp_rows})
    if (name == gemm_name(k)) return k;
  return GemmKernel::cublas;
}

namespace {
const char* const kGemmKernelVersion = "gemm-7";  // bump when a GEMM kernel's speed changes
// gemm-7: the warp-row GEMV is a candidate at one token (its choice also picks the kernel of the
// fused one-token GEMVs).
// gemm-6: the weight-stream kernel (TMA ring, swap-AB wgmma, stream-K) is a candidate at 1-64
// tokens.
// gemm-5: the row-warp skinny kernel is a candidate at 16-64 tokens, the skinny kernel splits K
// on narrow shapes by default.
// gemm-4: the sm90 kernel splits thin last waves into 128-wide tiles (gate|up at M = 2048 ~5%
// faster), so its choices against cuBLASLt are measured again.
// gemm-3: the sm90 kernel's epilogue goes through shared memory and TMA stores (10-30% faster at
// M >= 512), so its choices against cuBLASLt are measured again.
// gemm-2: the skinny kernel's 17-64-token configurations changed and candidates are timed with
// PDL off; choices cached under gemm-1 no longer match the key, so the tuner measures again.
}  // namespace

namespace {
// RIDGE_CUBLAS_ALGOS=1..4: how many of cuBLASLt's heuristic algorithms per shape and token bucket
// the tuner times (default 4, the autotuner's "cuBLASLt's top heuristics"; 1: its first only).
// Measured on the H200 (run 14, Llama-2-7B): decode bs16 4.704 ms against 4.828 in one call,
// 4.827 with them in a later one (the tuner's picks among near-equal candidates vary from run
// to run); bs1 and bs64 within 0.3 %. The first start's tuning 3.1 -> 5.9 s (504 candidates
// instead of 32 for 48 shape buckets); later starts hit the cache. The choices of each setting
// are cached apart (the build cache key's kernel version).
int cublas_candidates() {
  static const int n = [] {
    const char* v = std::getenv("RIDGE_CUBLAS_ALGOS");
    return v && *v ? std::clamp(std::atoi(v), 1, 4) : 4;
  }();
  return n;
}

// RIDGE_GEMM_WINDOW=1 (or =bulk, =dynamic: its bulk-copy loaders): the window GEMV
// (kernels::gemm_bf16_window) is a candidate at 1-32 tokens. Off by default: it lost to the MMA
// skinny kernel on every shape in run 28 (docs/KERNELS.md); its choices are cached apart (the
// kernel version's "+win", "+winbulk", "+windyn").
bool window_candidates() {
  static const bool on = [] {
    const char* v = std::getenv("RIDGE_GEMM_WINDOW");
    return v && *v && std::string_view(v) != "0";
  }();
  return on;
}

}  // namespace

// RIDGE_GEMV_WARP=0: the warp-row GEMV (kernels::gemv_bf16_warp_rows) is not a candidate at one
// token (A/B runs against the MMA kernel; cached apart, "+nowarp"). By default it is: on the H100
// its chain of decode GEMVs reads level with the MMA kernel's, and on the H200 its read order is
// the one that reaches 95 % of read-only where the MMA kernel's per-block units read at 66-75 %
// (docs/KERNELS.md, runs 36-38). Timed alone, like every candidate.
bool CudaBackend::warp_rows_candidate() {
  static const bool on = [] {
    const char* v = std::getenv("RIDGE_GEMV_WARP");
    return !(v && std::string_view(v) == "0");
  }();
  return on;
}

kernels::WindowLoader CudaBackend::window_loader() {
  static const kernels::WindowLoader loader = [] {
    const char* v = std::getenv("RIDGE_GEMM_WINDOW");
    const std::string_view s = v ? v : "";
    return s == "bulk"      ? kernels::WindowLoader::bulk
           : s == "dynamic" ? kernels::WindowLoader::bulk_dynamic
                            : kernels::WindowLoader::cp_async;
  }();
  return loader;
}

namespace {
bool window_applies(int64_t n, int64_t k) {
  return n % 8 == 0 && k % 8 == 0 && n <= kernels::window_gemm_max_n;
}
}  // namespace

tune::DeviceKey CudaBackend::device_key() const {
  cudaDeviceProp prop{};
  RIDGE_CHECK_CUDA(cudaGetDeviceProperties(&prop, device_));
  tune::DeviceKey k;
  k.gpu_name = prop.name;
  k.sm_count = prop.multiProcessorCount;
  RIDGE_CHECK_CUDA(cudaDriverGetVersion(&k.driver_version));
  RIDGE_CHECK_CUDA(cudaRuntimeGetVersion(&k.cuda_runtime_version));
  k.kernel_version = kGemmKernelVersion;
  if (cublas_candidates() > 1) k.kernel_version += fmt::format("+lt{}", cublas_candidates());
  if (window_candidates()) {
    const kernels::WindowLoader loader = window_loader();
    k.kernel_version += loader == kernels::WindowLoader::bulk           ? "+winbulk"
                        : loader == kernels::WindowLoader::bulk_dynamic ? "+windyn"
                                                                        : "+win";
  }
  if (!warp_rows_candidate()) k.kernel_version += "+nowarp";
  return k;
}

void CudaBackend::tune_gemms(std::span<const MatmulShape> shapes, int64_t max_tokens) {
  if (!tuner_) {
    tune::CacheConfig cfg;
    cfg.root = options_.cache_root.empty() ? tune::default_cache_root()
                                           : std::filesystem::path(options_.cache_root);
    cache_ = std::make_unique<tune::BuildCache>(cfg, device_key());
    // Two rounds in rotated order: now that ridge's sm90 kernel and cuBLASLt are within a few
    // percent of each other, the clock's drift between one candidate and the next (run 11: up to
    // 13% between two timings of one GEMM a few kernels apart at the power cap) would decide.
    tuner_ = std::make_unique<tune::Autotuner>(cache_.get(), 2);
  }
  cudaStream_t stream = stream_->get();
  int l2_bytes = 0;
  RIDGE_CHECK_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device_));
  std::mt19937 rng(1234);
  const int64_t top_bucket =
      token_bucket(std::clamp<int64_t>(max_tokens, 1, kMaxTunedTokens));
  // The largest token bucket each shape is tuned at: an f32 output (the LM head) runs ridge's
  // kernels only as the fused GEMV (run_fused, up to kFusedMaxTokens), cuBLASLt past it, so there
  // is no choice to make past that. (Timed with a bf16 output, whose bytes differ from the f32
  // one's by under 1 % of the weight's at those token counts.)
  const auto shape_top = [&](const MatmulShape& sh) {
    return sh.f32_out ? std::min(top_bucket, token_bucket(kFusedMaxTokens)) : top_bucket;
  };
  int64_t x_elems = 0, out_elems = 0;  // the measurement's x and output, for every shape
  for (const MatmulShape& sh : shapes) {
    x_elems = std::max(x_elems, shape_top(sh) * sh.k);
    out_elems = std::max(out_elems, shape_top(sh) * sh.n);
  }
  // The window GEMV's workspace for every shape and token bucket it may run (whether measured now
  // or a cached winner), reserved before any graph is captured.
  if (window_candidates()) {
    size_t window_bytes = 0;
    for (const MatmulShape& sh : shapes)
      if (window_applies(sh.n, sh.k))
        for (int64_t T = 1; T <= std::min<int64_t>(shape_top(sh), kernels::window_gemm_max_tokens);
             T *= 2)
          window_bytes = std::max(window_bytes, kernels::gemm_bf16_window_workspace_bytes(
                                                    int(T), int(sh.n), int(sh.k)));
    if (window_bytes > 0) reserve_window_gemm(window_bytes);
  }
  // Device buffers only when something is measured (a second start hits the cache throughout).
  cuda::DeviceMemory x, out;
  Events ev;
  const tune::TunerStats before = tuner_->stats();
  for (const MatmulShape& sh : shapes) {
    if (sh.n % 8 != 0 || sh.k % 8 != 0) continue;  // ridge's kernels do not apply: cuBLASLt
    const size_t w_elems = size_t(sh.n * sh.k);
    const int rotations =
        int(std::clamp<size_t>((2 * size_t(l2_bytes)) / (w_elems * 2) + 1, 1, 8));
    std::vector<cuda::DeviceMemory> w;  // filled at the first miss of this shape
    for (int64_t T = 1; T <= shape_top(sh); T *= 2) {
      const GemmKey key{T, sh.n, sh.k};
      {
        std::lock_guard lock(gemm_mutex_);
        if (gemm_choice_.count(key)) continue;
      }
      std::vector<tune::Candidate> candidates{{gemm_name(GemmKernel::cublas), "cuBLASLt heuristic #1"}};
      if (T <= 64) candidates.push_back({gemm_name(GemmKernel::skinny), "mma.sync weight stream"});
      if (T >= 16 && T <= 64)
        candidates.push_back({gemm_name(GemmKernel::skinny_rows), "mma.sync, shared activations"});
      if (T >= 16) candidates.push_back({gemm_name(GemmKernel::sm90), "TMA + wgmma, persistent"});
      if (T <= kernels::stream_gemm_max_tokens)
        candidates.push_back({gemm_name(GemmKernel::stream), "TMA weight stream, stream-K"});
      if (window_candidates() && T <= kernels::window_gemm_max_tokens && window_applies(sh.n, sh.k))
        candidates.push_back({gemm_name(GemmKernel::window), "mma.sync, one window of pieces"});
      if (T == 1 && warp_rows_candidate() && sh.k <= kernels::gemv_warp_max_k)
        candidates.push_back({gemm_name(GemmKernel::warp_rows), "whole rows a warp"});
      if (cublas_candidates() > 1) {
        // cuBLASLt's further algorithms for the operands the measurement uses (fresh, so
        // 256-byte aligned; the heuristic may offer fewer than asked). A host-side query: a
        // start that hits the cache allocates nothing.
        Workspace& ws = workspace_for(stream);
        const int offered =
            std::min(cublas_candidates(), matmul_->algorithms_aligned(sh.k, T, sh.n, sh.k,
                                                                      DType::bf16, sh.n,
                                                                      ws.cublas.size()));
        const GemmKernel more[] = {GemmKernel::cublas_2, GemmKernel::cublas_3,
                                   GemmKernel::cublas_4};
        for (int i = 1; i < offered; ++i)
          candidates.push_back({gemm_name(more[i - 1]), fmt::format("cuBLASLt heuristic #{}", i + 1)});
      }
      auto measure = [&](const tune::Candidate& c) -> double {
        if (!x.data()) {
          x = cuda::DeviceMemory(size_t(x_elems) * 2);
          out = cuda::DeviceMemory(size_t(out_elems) * 2);
          fill_random(x.data(), size_t(x_elems), 1.0f, rng, stream);
        }
        if (w.empty())
          for (int r = 0; r < rotations; ++r) {
            w.emplace_back(w_elems * 2);
            fill_random(w.back().data(), w_elems, 0.02f, rng, stream);
          }
        const GemmKernel kernel = kernel_named(c.name);
        const Tensor xt(x.data(), DType::bf16, {T, sh.k}, Device::cuda);
        Tensor ot(out.data(), DType::bf16, {T, sh.n}, Device::cuda);
        constexpr int kReps = 20;
        // Each candidate alone: with PDL the skinny kernel's back-to-back launches would overlap
        // (its first weight loads run during the previous launch), which cuBLASLt's do not.
        const kernels::pdl::ScopedDisable no_pdl;
        const tune::TimingStats st = tune::time_samples([&] {
          RIDGE_CHECK_CUDA(cudaEventRecord(ev.start, stream));
          for (int i = 0; i < kReps; ++i) {
            const Tensor wt(w[size_t(i % rotations)].data(), DType::bf16, {sh.n, sh.k},
                            Device::cuda);
            run_gemm(kernel, xt, wt, ot, stream);
          }
          RIDGE_CHECK_CUDA(cudaEventRecord(ev.stop, stream));
          RIDGE_CHECK_CUDA(cudaEventSynchronize(ev.stop));
          float ms = 0;
          RIDGE_CHECK_CUDA(cudaEventElapsedTime(&ms, ev.start, ev.stop));
          return 1e-3 * double(ms) / kReps;
        }, {1, 3, 0.05});  // per round (two rounds): about the samples one round took before
        return st.median;
      };
      const tune::TuneResult r = tuner_->pick(
          "gemm", tune::gemm_problem_key(T, sh.n, sh.k, "bf16.bf16"), candidates, measure);
      (void)cudaGetLastError();
      const GemmKernel best = r.ok() ? kernel_named(r.winner) : GemmKernel::cublas;
      std::lock_guard lock(gemm_mutex_);
      gemm_choice_[key] = best;
      if (r.measured) {
        std::string times;
        for (const tune::Timing& t : r.timings)
          times += fmt::format(" {} {:.1f} us", t.name, t.seconds * 1e6);
        log::debug("gemm tuning N={} K={} T={}:{} -> {}", sh.n, sh.k, T, times, r.winner);
      }
    }
  }
  const tune::TunerStats after = tuner_->stats();
  log::info("gemm tuning: {} hits, {} misses ({} candidates measured); {}",
            after.hits - before.hits, after.misses - before.misses,
            after.measurements - before.measurements, cache_->summary());
}

void CudaBackend::set_gemm_choice(int64_t T, int64_t N, int64_t K,
                                  std::optional<GemmKernel> kernel) {
  if (kernel == GemmKernel::window && T <= kernels::window_gemm_max_tokens &&
      window_applies(N, K))  // its workspace, as tune_gemms reserves it for a shape it measures
    reserve_window_gemm(kernels::gemm_bf16_window_workspace_bytes(
        int(std::min<int64_t>(token_bucket(T), kernels::window_gemm_max_tokens)), int(N), int(K)));
  std::lock_guard lock(gemm_mutex_);
  const GemmKey key{token_bucket(T), N, K};
  if (kernel)
    gemm_choice_[key] = *kernel;
  else
    gemm_choice_.erase(key);
}

std::vector<MatmulChoice> CudaBackend::matmul_choices() const {
  std::vector<MatmulChoice> v;
  {
    std::lock_guard lock(gemm_mutex_);
    for (const auto& [key, kernel] : gemm_choice_)
      v.push_back({key.t_bucket, key.n, key.k, gemm_name(kernel)});
  }
  std::sort(v.begin(), v.end(), [](const MatmulChoice& a, const MatmulChoice& b) {
    return std::tie(a.n, a.k, a.tokens) < std::tie(b.n, b.k, b.tokens);
  });
  return v;
}

}  // namespace ridge::backend
