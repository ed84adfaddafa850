// ridge-bench-gemm: ridge's GEMM kernels against cuBLASLt and the ceilings measured in the same
// run. Every timed kernel is first checked (outputs NaN-poisoned, compared with cuBLASLt over
// all outputs and with an fp64 dot product at sampled outputs).
//
//   ridge-bench-gemm [--op gemm] [--ladder] [--models llama2-7b,llama3-8b] [--m 1,8,...]
//                    [--json FILE]
//   ridge-bench-gemm --no-shapes --shapes MxNxK,... [--sustained S]   (sm90 variants; S seconds
//                    each back to back with NVML's energy: sustained TFLOP/s and pJ per FLOP)
// Ceilings: perf/gpu (the same code as `ridge bench ceilings`).
// Timing: warm-up, then a CUDA graph of L back-to-back launches rotating over enough input sets
// to defeat the 50 MB L2 for memory-bound shapes; median of 9 replays, per launch (the ladder),
// or, for the kernels of one shape row, medians over --rounds interleaved rounds.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "bench_device.h"
#include "decode_chain.h"
#include "gemv_layout_probe.h"
#include "ridge/backend/cuda/nvml_power.h"
#include "ridge/core/error.h"
#include "ridge/kernels/cuda/gemm/check.h"
#include "ridge/kernels/cuda/gemm/cublaslt_gemm.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/pdl.h"
#include "ridge/perf/gpu/ceilings.h"

namespace {

using namespace ridge::bench;  // bench_common.h: bf16, DeviceMemory, time_launches, ...
using json = nlohmann::json;

#define CK(call) RIDGE_GEMM_CUDA_CHECK(call)

struct Ceilings {
  double copy_tbps = 0;     // best device-to-device copy, bytes read + written
  double memcpy_tbps = 0;   // cudaMemcpyAsync device to device
  double copy_kernel_tbps = 0;  // 16-byte copy kernel
  double read_tbps = 0;     // read-only 16-byte streaming kernel (bytes read)
  double cublas_tflops = 0;  // cuBLASLt bf16 8192³ on random data
};

// The ceilings of `ridge bench ceilings` (perf/gpu), the memory and GEMM groups only.
Ceilings measure_ceilings() {
  ridge::perf::gpu::CeilingOptions o;
  o.gemm_sizes = {8192};
  o.launch = false;
  o.host = false;
  const auto m = ridge::perf::gpu::measure(o);
  Ceilings c;
  c.memcpy_tbps = m.memcpy_bw / 1e12;
  c.copy_kernel_tbps = m.copy_kernel_bw / 1e12;
  c.copy_tbps = std::max(c.memcpy_tbps, c.copy_kernel_tbps);
  c.read_tbps = m.read_bw / 1e12;
  c.cublas_tflops = m.gemm_bf16_flops / 1e12;
  return c;
}

// One problem's buffers: `sets` rotations of X, W, Y plus a reference output.
struct Problem {
  int M, N, K, sets;
  std::vector<std::unique_ptr<DeviceMemory>> x, w, y;
  std::unique_ptr<DeviceMemory> ref;
  Problem(int m, int n, int k, size_t l2_bytes, int w_rows_factor, cudaStream_t s, uint64_t seed)
      : M(m), N(n), K(k) {
    const size_t wx = size_t{2} * m * k, ww = size_t{2} * n * w_rows_factor * k,
                 wy = size_t{2} * m * n;
    sets = static_cast<int>(std::clamp<size_t>((3 * l2_bytes) / (wx + ww + wy) + 1, 1, 8));
    for (int i = 0; i < sets; ++i) {
      x.push_back(std::make_unique<DeviceMemory>(wx));
      w.push_back(std::make_unique<DeviceMemory>(ww));
      y.push_back(std::make_unique<DeviceMemory>(wy));
      ridge::bench::fill_random_bf16(x.back()->bf(), wx / 2, seed + 10 * i, 1.f, s);
      ridge::bench::fill_random_bf16(w.back()->bf(), ww / 2, seed + 10 * i + 1, 1.f, s);
    }
    ref = std::make_unique<DeviceMemory>(wy);
  }
};

using Gemm = std::function<void(const bf16*, const bf16*, bf16*, int, int, int, cudaStream_t)>;

// fp64 dot products at sampled outputs: max |y − ref| over the RMS of the sampled refs.
double sampled_fp64_error(const Problem& p, const bf16* y, std::mt19937& rng) {
  std::vector<bf16> xr(p.K), wr(p.K);
  double max_err = 0, sum_ref2 = 0;
  std::vector<std::pair<double, double>> got;
  for (int s = 0; s < 16; ++s) {
    const int m = static_cast<int>(rng() % p.M), n = static_cast<int>(rng() % p.N);
    CK(cudaMemcpy(xr.data(), p.x[0]->bf() + size_t{1} * m * p.K, 2 * p.K, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(wr.data(), p.w[0]->bf() + size_t{1} * n * p.K, 2 * p.K, cudaMemcpyDeviceToHost));
    bf16 out;
    CK(cudaMemcpy(&out, y + size_t{1} * m * p.N + n, 2, cudaMemcpyDeviceToHost));
    double ref = 0;
    for (int k = 0; k < p.K; ++k)
      ref += double(__bfloat162float(xr[k])) * double(__bfloat162float(wr[k]));
    got.emplace_back(__bfloat162float(out), ref);
    sum_ref2 += ref * ref;
  }
  const double rms = std::sqrt(sum_ref2 / got.size());
  for (auto& [o, r] : got) max_err = std::max(max_err, std::isfinite(o) ? std::abs(o - r) : 1e30);
  return max_err / rms;
}

struct Measured {
  double us = 0, rel_vs_cublas = 0, sampled_err = 0;
  unsigned long long non_finite = 0;
  bool ok = false;
};

constexpr double kRelTolerance = 1e-2;  // bf16 outputs: ~4e-3 expected between two correct GEMMs

// Runs `gemm` once into a NaN-poisoned output (the reference output for cuBLASLt) and checks it:
// against the reference over all outputs and against fp64 dot products at sampled outputs.
Measured check(Problem& p, const Gemm& gemm, bool is_reference, cudaStream_t s,
               std::mt19937& rng) {
  Measured r;
  const size_t ny = size_t{1} * p.M * p.N;
  bf16* out = is_reference ? p.ref->bf() : p.y[0]->bf();
  CK(cudaMemsetAsync(out, 0xFF, 2 * ny, s));
  gemm(p.x[0]->bf(), p.w[0]->bf(), out, p.M, p.N, p.K, s);
  CK(cudaStreamSynchronize(s));
  r.sampled_err = sampled_fp64_error(p, out, rng);
  if (!is_reference) {
    const auto d = ridge::bench::compare_bf16(out, p.ref->bf(), ny, s);
    r.rel_vs_cublas = d.rel;
    r.non_finite = d.non_finite;
  }
  r.ok = r.non_finite == 0 && r.rel_vs_cublas < kRelTolerance && r.sampled_err < 2e-2;
  return r;
}

Measured check_and_time(Problem& p, const Gemm& gemm, bool is_reference, cudaStream_t s,
                        std::mt19937& rng) {
  Measured r = check(p, gemm, is_reference, s, rng);
  if (!r.ok) return r;  // never time a wrong kernel
  r.us = time_launches(
      [&](int i) { gemm(p.x[i]->bf(), p.w[i]->bf(), p.y[i]->bf(), p.M, p.N, p.K, s); }, p.sets,
      s);
  return r;
}

// Timing rounds of check_then_time (--rounds).
int g_rounds = 3;

struct Entry {
  const Gemm* fn;
  bool reference = false;  // cuBLASLt: writes the reference output the others are checked against
  bool check = true;       // false: the store-nothing diagnostic (nothing to check)
};

// Checks every kernel of a row (the reference first), then times the ones that passed in
// g_rounds rounds, each round in a rotated order, keeping each kernel's median over the rounds.
// The H200 runs large GEMMs at its power cap, where the clock drifts with what ran before: timing
// kernel after kernel, the same configuration took 272 µs second in its row and 309 µs fourth
// (run 11); interleaving makes the ratios within a row fair.
std::vector<Measured> check_then_time(Problem& p, const std::vector<Entry>& kernels,
                                      cudaStream_t s, std::mt19937& rng) {
  std::vector<Measured> out(kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k) {
    if (kernels[k].check) {
      try {
        out[k] = check(p, *kernels[k].fn, kernels[k].reference, s, rng);
      } catch (const std::exception& e) {
        // A shape the kernel refuses (its host checks, before any launch): reported, not timed.
        // A CUDA error is not a refusal: the run stops there.
        if (cudaPeekAtLastError() != cudaSuccess) throw;
        std::fprintf(stderr, "M=%d N=%d K=%d: a candidate refused the shape: %s\n", p.M, p.N, p.K,
                     e.what());
        out[k].ok = false;
      }
    } else
      out[k].ok = true;  // the store-nothing diagnostic: nothing to check
  }
  std::vector<std::vector<double>> times(kernels.size());
  const int n = static_cast<int>(kernels.size());
  for (int round = 0; round < g_rounds; ++round)
    for (int j = 0; j < n; ++j) {
      const int k = (j + round) % n;
      if (!out[k].ok) continue;  // never time a wrong kernel
      const Gemm& fn = *kernels[k].fn;
      times[k].push_back(time_launches(
          [&](int i) { fn(p.x[i]->bf(), p.w[i]->bf(), p.y[i]->bf(), p.M, p.N, p.K, s); },
          p.sets, s, 5));
    }
  for (int k = 0; k < n; ++k)
    if (out[k].ok) out[k].us = median(times[k]);
  return out;
}

json measured_json(const Measured& m, double flops, double bytes, const Ceilings& c) {
  json j = {{"ok", m.ok},
            {"rel_vs_cublas", m.rel_vs_cublas},
            {"sampled_fp64_err", m.sampled_err},
            {"non_finite", m.non_finite}};
  if (m.ok) {
    j["us"] = m.us;
    j["tflops"] = flops / (m.us * 1e-6) / 1e12;
    j["tbps"] = bytes / (m.us * 1e-6) / 1e12;
    j["pct_copy_bw"] = 100.0 * bytes / (m.us * 1e-6) / 1e12 / c.copy_tbps;
    j["pct_cublas_peak"] = 100.0 * flops / (m.us * 1e-6) / 1e12 / c.cublas_tflops;
  }
  return j;
}

struct Layer {
  std::string model, name;
  int N, K;
};

const std::vector<Layer>& all_layers() {
  static const std::vector<Layer> layers = {
      {"llama2-7b", "qkv", 12288, 4096},  {"llama2-7b", "o", 4096, 4096},
      {"llama2-7b", "gate_up", 22016, 4096}, {"llama2-7b", "down", 4096, 11008},
      {"llama3-8b", "qkv", 6144, 4096},   {"llama3-8b", "o", 4096, 4096},
      {"llama3-8b", "gate_up", 28672, 4096}, {"llama3-8b", "down", 4096, 14336},
      // Long weight streams (512 MiB, ~0.12 ms at M = 1): the kernels' steady-state bandwidth,
      // without the ramp and tail that cost the 10-50 us decode projections their last 10-20%.
      {"stream", "wide", 65536, 4096},    {"stream", "deep", 4096, 65536},
      // Narrow weights (few 16-row tiles, long K): where the skinny kernel's split-K applies
      // (SkinnyArgs::split_k; the alt column "split" is its automatic choice, split2/split4 fixed
      // clusters, at up to 16 tokens on every shape).
      {"narrow", "kv1024", 1024, 4096},   {"narrow", "n512", 512, 8192}};
  return layers;
}

json run_shapes(const std::vector<std::string>& models, const std::vector<int>& ms,
                ridge::kernels::CublasLtGemm& cublas, const Ceilings& c, size_t l2,
                cudaStream_t s) {
  json rows = json::array();
  std::mt19937 rng(1234);
  const Gemm ours = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16(X, W, Y, M, N, K, st);
  };
  const Gemm skinny = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_skinny(X, W, Y, M, N, K, st);
  };
  const Gemm sm90 = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_sm90(X, W, Y, M, N, K, st);
  };
  const Gemm ref = [&](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    cublas.run(X, W, Y, M, N, K, st);
  };
  const Gemm skinny16 = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::SkinnyArgs a;
    a.X = X, a.ld_x = K, a.W = W, a.Y = Y, a.M = M, a.N = N, a.K = K;
    ridge::kernels::detail::launch_skinny(a, ridge::kernels::SkinnyPrologue::none, st, 16);
  };
  // The skinny kernel with a split-K cluster size (0: the automatic choice), a weight ring
  // depth (SkinnyArgs::ring: 0 automatic, -1 the register path, 2 or 3).
  auto skinny_with = [](int split, int ring) -> Gemm {
    return [split, ring](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
      ridge::kernels::SkinnyArgs a;
      a.X = X, a.ld_x = K, a.W = W, a.Y = Y, a.M = M, a.N = N, a.K = K;
      a.split_k = split;
      a.ring = ring;
      ridge::kernels::gemm_bf16_skinny_fused(a, ridge::kernels::SkinnyPrologue::none, st);
    };
  };
  const Gemm split = skinny_with(0, 0), split2 = skinny_with(2, 0), split4 = skinny_with(4, 0);
  // The weight ring at depths 2 and 3 (up to 16 tokens), and the register path (the automatic
  // choice takes the ring up to 8 tokens).
  const Gemm ring2 = skinny_with(0, 2), ring3 = skinny_with(0, 3), regs = skinny_with(0, -1);
  // The row-warp kernel (17-64 tokens; activations staged once per 128-row block).
  const Gemm rows_k = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_skinny_rows(X, W, Y, M, N, K, st);
  };
  // The weight-stream kernel (1-64 tokens; TMA ring, swap-AB wgmma, stream-K).
  static ridge::kernels::bf16* stream_ws = nullptr;
  static size_t stream_ws_bytes = 0;
  if (!stream_ws) {
    stream_ws_bytes = ridge::kernels::gemm_bf16_stream_workspace_bytes();
    RIDGE_CHECK(cudaMalloc(reinterpret_cast<void**>(&stream_ws), stream_ws_bytes) == cudaSuccess &&
                    cudaMemset(stream_ws, 0, stream_ws_bytes) == cudaSuccess,
                "bench: cannot allocate the weight-stream kernel's workspace ({} bytes)",
                stream_ws_bytes);
  }
  // RIDGE_STREAM_CTAS caps its grid (a diagnostic: fewer CTAs, each a longer range).
  static const int stream_ctas = [] {
    const char* v = std::getenv("RIDGE_STREAM_CTAS");
    return v && *v ? std::max(0, std::atoi(v)) : 0;
  }();
  const Gemm tma = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_stream(X, W, Y, M, N, K, st, stream_ws, stream_ws_bytes, nullptr,
                                     stream_ctas);
  };
  // The row-stream GEMV (1-2 tokens, 2048 < K: SkinnyArgs::stream, the read-only kernel's
  // access pattern), with a workspace of its own (tickets zeroed once).
  constexpr int kRowStreamRows = 65536;
  static void* row_stream_ws = nullptr;
  if (!row_stream_ws) {
    const size_t bytes = ridge::kernels::skinny_stream_workspace_bytes(kRowStreamRows);
    RIDGE_CHECK(cudaMalloc(&row_stream_ws, bytes) == cudaSuccess &&
                    cudaMemset(row_stream_ws, 0, bytes) == cudaSuccess,
                "bench: cannot allocate the row-stream GEMV's workspace ({} bytes)", bytes);
  }
  const auto row_stream_args = [](auto X, auto W, auto Y, int M, int N, int K) {
    ridge::kernels::SkinnyArgs a;
    a.X = X, a.ld_x = K, a.W = W, a.Y = Y, a.M = M, a.N = N, a.K = K;
    a.stream = ridge::kernels::skinny_stream_workspace(row_stream_ws, kRowStreamRows);
    return a;
  };
  const Gemm row_stream = [&row_stream_args](auto X, auto W, auto Y, int M, int N, int K,
                                             cudaStream_t st) {
    ridge::kernels::gemm_bf16_skinny_fused(row_stream_args(X, W, Y, M, N, K),
                                           ridge::kernels::SkinnyPrologue::none, st);
  };
  // The window GEMV (1-32 tokens; pieces of 16 rows x a K segment read as one GPU-wide window,
  // X's segment staged once a block): a workspace for the largest shape, tickets zeroed once.
  // RIDGE_WINDOW_SEG forces its segment (16-byte chunks of a row, a power of two in [16, 128]).
  static const int window_seg = [] {
    const char* v = std::getenv("RIDGE_WINDOW_SEG");
    return v && *v ? std::max(0, std::atoi(v)) : 0;
  }();
  static void* window_ws = nullptr;
  static size_t window_ws_bytes = 0;
  {
    size_t need = 0;
    for (const auto& L : all_layers())
      for (int M : ms)
        if (M <= ridge::kernels::window_gemm_max_tokens)
          need = std::max(
              need, ridge::kernels::gemm_bf16_window_workspace_bytes(M, L.N, L.K, window_seg));
    if (need > window_ws_bytes) {
      cudaFree(window_ws);
      RIDGE_CHECK(cudaMalloc(&window_ws, need) == cudaSuccess &&
                      cudaMemset(window_ws, 0, need) == cudaSuccess,
                  "bench: cannot allocate the window GEMV's workspace ({} bytes)", need);
      window_ws_bytes = need;
    }
  }
  const Gemm window = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_window(X, W, Y, M, N, K, st, window_ws, window_ws_bytes, nullptr,
                                     window_seg);
  };
  // The same with its pieces brought in by bulk copies from a producer warp, static and dynamic
  // (kernels::WindowLoader).
  using ridge::kernels::WindowLoader;
  const Gemm window_bulk = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_window(X, W, Y, M, N, K, st, window_ws, window_ws_bytes, nullptr,
                                     window_seg, /*pdl*/ false, WindowLoader::bulk);
  };
  const Gemm window_dyn = [](auto X, auto W, auto Y, int M, int N, int K, cudaStream_t st) {
    ridge::kernels::gemm_bf16_window(X, W, Y, M, N, K, st, window_ws, window_ws_bytes, nullptr,
                                     window_seg, /*pdl*/ false, WindowLoader::bulk_dynamic);
  };
  // The warp-row GEMV (one token): whole rows a warp, in window order, and the same kernel with
  // each warp on a contiguous run of rows (the order's A/B).
  const Gemm warp_rows = [](auto X, auto W, auto Y, int, int N, int K, cudaStream_t st) {
    ridge::kernels::gemv_bf16_warp_rows(X, W, Y, N, K, st);
  };
  const Gemm warp_walk = [](auto X, auto W, auto Y, int, int N, int K, cudaStream_t st) {
    ridge::kernels::gemv_bf16_warp_rows(X, W, Y, N, K, st, nullptr, false, 0, /*walk*/ true);
  };
  std::printf("\n%-10s %-8s %5s %6s %6s | %9s %9s %6s | %8s %7s %6s %6s %6s | %s\n", "model",
              "layer", "M", "N", "K", "ours_us", "cublas_us", "x", "ours_TF", "ours_TB", "%bw",
              "%read", "%peak", "alt (us)");
  uint64_t seed = 100;
  for (const auto& L : all_layers()) {
    if (std::find(models.begin(), models.end(), L.model) == models.end()) continue;
    for (int M : ms) {
      Problem p(M, L.N, L.K, l2, 1, s, seed += 1000);
      const double flops = 2.0 * M * double(L.N) * L.K;
      const double bytes = 2.0 * (double(M) * L.K + double(L.N) * L.K + double(M) * L.N);
      // The other kernel family, where it is a candidate: guides the dispatch (and the tuner).
      std::vector<Entry> entries = {{&ref, true}, {&ours}};
      // Split-K (up to 16 tokens): the automatic choice and clusters of 2 and 4 on every shape.
      const bool try_split = M <= 16;
      size_t ring_at = 0;
      if (try_split) {
        entries.push_back({&split});
        entries.push_back({&split2});
        entries.push_back({&split4});
        if (M == 16) entries.push_back({&rows_k});
        ring_at = entries.size();
        entries.push_back({&ring2});
        entries.push_back({&ring3});
        entries.push_back({&regs});
      } else if (M > 32 && M <= 512) {
        entries.push_back({&skinny});
        if (M <= 64) entries.push_back({&rows_k});
      } else if (M >= 16 && M <= 32) {
        entries.push_back({&sm90});
        entries.push_back({&skinny16});
        entries.push_back({&rows_k});
      }
      const size_t tma_at = entries.size();
      if (M <= ridge::kernels::stream_gemm_max_tokens) entries.push_back({&tma});
      const size_t row_stream_at = entries.size();
      const bool try_row_stream = ridge::kernels::skinny_stream_applies(
          row_stream_args(nullptr, nullptr, nullptr, M, L.N, L.K));
      if (try_row_stream) entries.push_back({&row_stream});
      const size_t window_at = entries.size();
      const bool try_window = M <= ridge::kernels::window_gemm_max_tokens;
      if (try_window) {
        entries.push_back({&window});
        entries.push_back({&window_bulk});
        entries.push_back({&window_dyn});
      }
      const size_t warp_rows_at = entries.size();
      const bool try_warp_rows = M == 1 && L.K <= ridge::kernels::gemv_warp_max_k;
      if (try_warp_rows) {
        entries.push_back({&warp_rows});
        entries.push_back({&warp_walk});
      }
      const std::vector<Measured> m = check_then_time(p, entries, s, rng);
      const Measured& mr = m[0];
      const Measured& mo = m[1];
      json row = {{"model", L.model}, {"layer", L.name}, {"M", M}, {"N", L.N}, {"K", L.K},
                  {"rotations", p.sets}, {"flops", flops}, {"min_bytes", bytes},
                  {"ours_kernel", M <= 32 ? "skinny" : "sm90_ws"}, {"timing_rounds", g_rounds},
                  {"cublas", measured_json(mr, flops, bytes, c)},
                  {"ours", measured_json(mo, flops, bytes, c)}};
      std::string alt_text;
      auto alt = [&](const Measured& ma, const char* key, const char* label) {
        row[key] = measured_json(ma, flops, bytes, c);
        alt_text += (alt_text.empty() ? "" : " ") + std::string(label) +
                    (ma.ok ? " " + std::to_string(ma.us).substr(0, 7) : " FAIL");
      };
      if (try_split) {
        alt(m[2], "alt_split", "split");
        alt(m[3], "alt_split2", "split2");
        alt(m[4], "alt_split4", "split4");
        if (M == 16) alt(m[5], "alt_rows", "rows");
        alt(m[ring_at], "alt_ring2", "ring2");
        alt(m[ring_at + 1], "alt_ring3", "ring3");
        alt(m[ring_at + 2], "alt_registers", "regs");
      } else if (M > 32 && M <= 512) {
        alt(m[2], "alt_skinny", "skinny");
        if (M <= 64) alt(m[3], "alt_rows", "rows");
      } else if (M >= 16 && M <= 32) {
        alt(m[2], "alt_sm90", "sm90");
        alt(m[3], "alt_skinny16", "skinny16");
        alt(m[4], "alt_rows", "rows");
      }
      if (M <= ridge::kernels::stream_gemm_max_tokens) alt(m[tma_at], "alt_tma", "tma");
      if (try_row_stream) alt(m[row_stream_at], "alt_row_stream", "row-stream");
      if (try_window) {
        alt(m[window_at], "alt_window", "window");
        alt(m[window_at + 1], "alt_window_bulk", "window-bulk");
        alt(m[window_at + 2], "alt_window_dynamic", "window-dyn");
      }
      if (try_warp_rows) {
        alt(m[warp_rows_at], "alt_warp_rows", "warp-rows");
        alt(m[warp_rows_at + 1], "alt_warp_walk", "warp-walk");
      }
      if (mo.ok && mr.ok) row["speedup_vs_cublas"] = mr.us / mo.us;
      rows.push_back(row);
      if (mo.ok) {
        std::printf(
            "%-10s %-8s %5d %6d %6d | %9.2f %9.2f %6.2f | %8.1f %7.2f %6.1f %6.1f %6.1f | %s\n",
            L.model.c_str(), L.name.c_str(), M, L.N, L.K, mo.us, mr.us, mr.us / mo.us,
            flops / (mo.us * 1e-6) / 1e12, bytes / (mo.us * 1e-6) / 1e12,
            100.0 * bytes / (mo.us * 1e-6) / 1e12 / c.copy_tbps,
            100.0 * bytes / (mo.us * 1e-6) / 1e12 / c.read_tbps,
            100.0 * flops / (mo.us * 1e-6) / 1e12 / c.cublas_tflops, alt_text.c_str());
      } else {
        std::printf("%-10s %-8s %5d %6d %6d | CHECK FAILED rel_vs_cublas=%.3g sampled=%.3g "
                    "non_finite=%llu\n",
                    L.model.c_str(), L.name.c_str(), M, L.N, L.K, mo.rel_vs_cublas,
                    mo.sampled_err, mo.non_finite);
      }
      std::fflush(stdout);
    }
  }
  return rows;
}

json run_ladder(int size, ridge::kernels::CublasLtGemm& cublas, const Ceilings& c, size_t l2,
                cudaStream_t s) {
  using namespace ridge::kernels;
  json steps = json::array();
  std::mt19937 rng(99);
  const int M = size, N = size, K = size;
  Problem p(M, N, K, l2, 1, s, 77);
  const double flops = 2.0 * M * double(N) * K;
  const double bytes = 2.0 * (double(M) * K + double(N) * K + double(M) * N);
  const Gemm ref = [&](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
    cublas.run(X, W, Y, m, n, k, st);
  };
  const Measured mr = check_and_time(p, ref, true, s, rng);
  struct Step {
    std::string id, idea;
    Gemm fn;
  };
  // Steps 3-4 store the epilogue from registers (as they were built); 6c is the production choice.
  Sm90GemmOptions nonpersistent;
  nonpersistent.persistent = false;
  nonpersistent.group_m = 1;
  nonpersistent.tma_store = false;
  Sm90GemmOptions row_order;
  row_order.group_m = 1;
  row_order.tma_store = false;
  Sm90GemmOptions grouped;
  grouped.tma_store = false;
  std::vector<Step> ladder = {
      {"1", "shared-memory tiled, CUDA cores", ridge::bench::ladder_smem_tiled},
      {"2", "TMA + wgmma, one warpgroup, one stage", ridge::bench::ladder_tma_wgmma},
      {"3", "warp-specialized: TMA producer + 2 wgmma consumers, 4-stage mbarrier ring, setmaxnreg",
       [=](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
         gemm_bf16_sm90(X, W, Y, m, n, k, st, nullptr, nonpersistent);
       }},
      {"4a", "persistent (grid = #SMs), row-order tiles",
       [=](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
         gemm_bf16_sm90(X, W, Y, m, n, k, st, nullptr, row_order);
       }},
      {"4", "persistent, grouped raster (GROUP_M = 8)",
       [=](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
         gemm_bf16_sm90(X, W, Y, m, n, k, st, nullptr, grouped);
       }},
      {"5", "2-CTA clusters, W tile multicast (TMA-store epilogue, 4 stages)",
       [=](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
         Sm90GemmOptions o;
         o.cluster_m = 2;
         gemm_bf16_sm90(X, W, Y, m, n, k, st, nullptr, o);
       }},
      {"6c", "epilogue staged in shared memory, TMA stores drained under the next tile (default)",
       [=](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
         gemm_bf16_sm90(X, W, Y, m, n, k, st, nullptr, {});
       }}};
  std::printf("\nladder at M=N=K=%d (cuBLASLt %.2f us, %.1f TFLOP/s)\n", size, mr.us,
              flops / (mr.us * 1e-6) / 1e12);
  std::printf("%-4s %-90s %10s %8s %8s %9s\n", "step", "idea", "us", "TFLOP/s", "%cuBLAS",
              "rel_err");
  for (const auto& st : ladder) {
    const Measured m = check_and_time(p, st.fn, false, s, rng);
    json j = measured_json(m, flops, bytes, c);
    j["step"] = st.id;
    j["idea"] = st.idea;
    if (m.ok) j["pct_of_cublas"] = 100.0 * mr.us / m.us;
    steps.push_back(j);
    if (m.ok)
      std::printf("%-4s %-90s %10.1f %8.1f %8.1f %9.2e\n", st.id.c_str(), st.idea.c_str(), m.us,
                  flops / (m.us * 1e-6) / 1e12, 100.0 * mr.us / m.us, m.rel_vs_cublas);
    else
      std::printf("%-4s %-90s CHECK FAILED rel=%.3g sampled=%.3g non_finite=%llu\n",
                  st.id.c_str(), st.idea.c_str(), m.rel_vs_cublas, m.sampled_err, m.non_finite);
    std::fflush(stdout);
  }
  // Step 6: fused epilogues, timed against the plain GEMM of the same shape.
  {
    DeviceMemory resid(size_t{2} * M * N);
    ridge::bench::fill_random_bf16(resid.bf(), size_t{1} * M * N, 5, 1.f, s);
    const double us = time_launches(
        [&](int i) {
          gemm_bf16_sm90(p.x[i]->bf(), p.w[i]->bf(), p.y[i]->bf(), M, N, K, s, resid.bf());
        },
        p.sets, s);
    steps.push_back({{"step", "6a"}, {"idea", "residual add fused in the epilogue"}, {"us", us},
                     {"tflops", flops / (us * 1e-6) / 1e12},
                     {"pct_of_cublas", 100.0 * mr.us / us}});
    std::printf("%-4s %-90s %10.1f %8.1f %8.1f %9s\n", "6a", "residual add fused in the epilogue",
                us, flops / (us * 1e-6) / 1e12, 100.0 * mr.us / us, "-");
  }
  {
    // Llama-2-7B gate_up at M tokens: plain GEMM to [M, 2F] vs fused SwiGLU to [M, F].
    const int F = 11008, Kd = 4096, Mt = size;
    Problem q(Mt, F, Kd, l2, 2, s, 555);
    DeviceMemory wide(size_t{2} * Mt * 2 * F);
    const double f2 = 2.0 * Mt * 2.0 * F * Kd;
    const double us_plain = time_launches(
        [&](int i) { gemm_bf16_sm90(q.x[i]->bf(), q.w[i]->bf(), wide.bf(), Mt, 2 * F, Kd, s); },
        q.sets, s);
    const double us_fused = time_launches(
        [&](int i) { gemm_bf16_swiglu(q.x[i]->bf(), q.w[i]->bf(), q.y[i]->bf(), Mt, F, Kd, s); },
        q.sets, s);
    steps.push_back({{"step", "6b"},
                     {"idea", "SwiGLU fused on the gate_up output (M x 22016 x 4096 -> M x 11008)"},
                     {"us", us_fused}, {"us_unfused_gemm_only", us_plain},
                     {"tflops", f2 / (us_fused * 1e-6) / 1e12}});
    std::printf("%-4s %-90s %10.1f %8.1f %8s %9s (plain gate_up GEMM %.1f us)\n", "6b",
                "SwiGLU fused on gate_up (M x 2*11008 x 4096)", us_fused,
                f2 / (us_fused * 1e-6) / 1e12, "-", "-", us_plain);
  }
  json out = {{"size", size}, {"cublas_us", mr.us},
              {"cublas_tflops", flops / (mr.us * 1e-6) / 1e12}, {"steps", steps}};
  return out;
}

// --sustained S: after a --shapes row is checked and timed, each kernel that stores runs back to
// back for S seconds and NVML's energy counter is read around the last 60 % of that: the rate it
// sustains under the card's power cap and its joules per FLOP, which is what a serving run's
// steps get (docs/PERF.md, "The power cap"); the burst timings above run at full clocks.
double g_sustained_s = 0;
std::unique_ptr<ridge::backend::cuda::NvmlPower> g_nvml;

struct Sustained {
  bool ok = false;
  double tflops = 0, watts = 0, pj_per_flop = 0, mhz = 0;
  bool capped = false;
};

Sustained run_sustained(Problem& p, const Gemm& fn, cudaStream_t s, double flops, double burst_us) {
  Sustained r;
  if (!g_nvml || g_sustained_s <= 0) return r;
  using Clock = std::chrono::steady_clock;
  const int per_sync = std::clamp(static_cast<int>(20000.0 / std::max(burst_us, 1.0)), 1, 4096);
  int set = 0;
  auto batch = [&] {
    for (int i = 0; i < per_sync; ++i, set = (set + 1) % p.sets)
      fn(p.x[set]->bf(), p.w[set]->bf(), p.y[set]->bf(), p.M, p.N, p.K, s);
    CK(cudaStreamSynchronize(s));
  };
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  while (elapsed() < 0.4 * g_sustained_s) batch();
  const auto e0 = g_nvml->read();
  const double ta = elapsed();
  int64_t calls = 0;
  while (elapsed() < g_sustained_s) batch(), calls += per_sync;
  const double tb = elapsed();
  const auto e1 = g_nvml->read();
  if (!e0 || !e1 || !e0->energy_j || !e1->energy_j || tb <= ta) return r;
  const double joules = *e1->energy_j - *e0->energy_j;
  r.ok = true;
  r.tflops = double(calls) * flops / (tb - ta) / 1e12;
  r.watts = joules / (tb - ta);
  r.pj_per_flop = joules / (double(calls) * flops) * 1e12;
  r.mhz = e1->sm_clock_mhz;
  r.capped = e1->power_capped;
  return r;
}

// Custom shapes (--shapes MxNxK,...): cuBLASLt, the sm90 kernel's production choice and its
// variants (tile width, raster, and a diagnostic that stores nothing: the main loop's time
// alone). Every variant that stores is checked before it is timed.
// once: one launch of each (no check, no timing), for a profiler (ncu) to measure.
json run_variants(const std::vector<std::array<int, 3>>& shapes,
                  ridge::kernels::CublasLtGemm& cublas, const Ceilings& c, size_t l2,
                  cudaStream_t s, bool once) {
  using namespace ridge::kernels;
  json rows = json::array();
  std::mt19937 rng(4321);
  uint64_t seed = 9000;
  struct Variant {
    std::string name;
    Sm90GemmOptions o;
  };
  std::vector<Variant> variants;
  variants.push_back({"sm90", {}});
  for (int bn : {128, 256}) {
    Sm90GemmOptions o;
    o.block_n = bn;
    variants.push_back({"bn" + std::to_string(bn), o});
  }
  {
    Sm90GemmOptions o;
    o.tma_store = false;  // 256-wide tiles, 4 stages
    variants.push_back({"reg256", o});
  }
  {
    Sm90GemmOptions o;
    o.block_n = 256;
    o.stages = 4;
    variants.push_back({"bn256s4", o});
  }
  {
    Sm90GemmOptions o;
    o.cluster_m = 2;  // 256-wide tiles, 4 stages
    variants.push_back({"cl2", o});
  }
  {
    Sm90GemmOptions o;
    o.wave_split = false;  // the default splits where it picks 256-wide tiles and the last wave is thin
    variants.push_back({"nosplit", o});
  }
  for (int g : {1, 16}) {
    Sm90GemmOptions o;
    o.group_m = g;
    variants.push_back({"group" + std::to_string(g), o});
  }
  {
    Sm90GemmOptions o;
    o.store = false;
    variants.push_back({"nostore", o});
  }
  std::printf("\n%5s %6s %6s | %9s %7s |", "M", "N", "K", "cublas_us", "TF");
  for (const auto& v : variants) std::printf(" %9s", v.name.c_str());
  std::printf("   (us; TF of the best store variant)\n");
  for (const auto& sh : shapes) {
    const int M = sh[0], N = sh[1], K = sh[2];
    Problem p(M, N, K, l2, 1, s, seed += 1000);
    const double flops = 2.0 * M * double(N) * K;
    const double bytes = 2.0 * (double(M) * K + double(N) * K + double(M) * N);
    const Gemm ref = [&](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
      cublas.run(X, W, Y, m, n, k, st);
    };
    if (once) {
      std::printf("%dx%dx%d: one launch each of cuBLASLt and the sm90 variants\n", M, N, K);
      ref(p.x[0]->bf(), p.w[0]->bf(), p.y[0]->bf(), M, N, K, s);
      for (const auto& v : variants)
        gemm_bf16_sm90(p.x[0]->bf(), p.w[0]->bf(), p.y[0]->bf(), M, N, K, s, nullptr, v.o);
      CK(cudaStreamSynchronize(s));
      continue;
    }
    std::vector<Gemm> fns;
    fns.reserve(variants.size());
    for (const auto& v : variants) {
      const Sm90GemmOptions o = v.o;
      fns.push_back([o](auto X, auto W, auto Y, int m, int n, int k, cudaStream_t st) {
        gemm_bf16_sm90(X, W, Y, m, n, k, st, nullptr, o);
      });
    }
    std::vector<Entry> entries = {{&ref, true}};
    for (size_t i = 0; i < variants.size(); ++i) entries.push_back({&fns[i], false, variants[i].o.store});
    const std::vector<Measured> m = check_then_time(p, entries, s, rng);
    const Measured& mr = m[0];
    json row = {{"M", M}, {"N", N}, {"K", K}, {"flops", flops}, {"timing_rounds", g_rounds},
                {"cublas", measured_json(mr, flops, bytes, c)}};
    std::printf("%5d %6d %6d | %9.2f %7.1f |", M, N, K, mr.us, flops / (mr.us * 1e-6) / 1e12);
    double best = 1e30;
    for (size_t i = 0; i < variants.size(); ++i) {
      const Measured& mv = m[i + 1];
      row[variants[i].name] = measured_json(mv, flops, bytes, c);
      if (mv.ok && variants[i].o.store) best = std::min(best, mv.us);
      if (mv.ok)
        std::printf(" %9.2f", mv.us);
      else
        std::printf(" %9s", "FAIL");
    }
    std::printf("   %.1f TF, %.2fx cuBLAS\n", flops / (best * 1e-6) / 1e12, mr.us / best);
    std::fflush(stdout);
    if (g_nvml && g_sustained_s > 0) {
      std::printf("      sustained %.1f s each: kernel TFLOP/s W pJ/FLOP (SM MHz at the end, capped)\n",
                  g_sustained_s);
      for (size_t k = 0; k < entries.size(); ++k) {
        const bool store = k == 0 || variants[k - 1].o.store;
        if (!m[k].ok || !store) continue;
        const std::string name = k == 0 ? std::string("cublas") : variants[k - 1].name;
        const Sustained su = run_sustained(p, *entries[k].fn, s, flops, m[k].us);
        if (!su.ok) continue;
        std::printf("      %-9s %7.1f %5.0f %6.3f (%4.0f MHz%s)\n", name.c_str(), su.tflops, su.watts,
                    su.pj_per_flop, su.mhz, su.capped ? ", capped" : "");
        std::fflush(stdout);
        row[name]["sustained"] = {{"seconds", g_sustained_s}, {"tflops", su.tflops}, {"watts", su.watts},
                                  {"pj_per_flop", su.pj_per_flop}, {"sm_mhz", su.mhz},
                                  {"power_capped", su.capped}};
      }
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = s.find(',', pos);
    v.push_back(std::stoi(s.substr(pos, next - pos)));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ridge GEMM benchmark: ladder and Llama projection shapes vs cuBLASLt"};
  std::string op = "gemm", models = "llama2-7b,llama3-8b",
              m_list = "1,8,16,32,64,128,512,2048,8192",
              json_path;
  std::string custom_shapes, gemv_probe;
  int chain_layers = 0;
  double chain_gap_us = 9.0, chain_gap_pre_us = 3.0;
  bool ladder = false, no_shapes = false, once = false;
  int ladder_size = 8192;
  app.add_option("--op", op, "operation (gemm)");
  app.add_option("--models", models,
                 "comma-separated: llama2-7b, llama3-8b, stream (two 512 MiB weight streams), "
                 "narrow (few row tiles, long K: the skinny kernel's split-K)");
  app.add_option("--m", m_list, "comma-separated token counts M");
  app.add_flag("--ladder", ladder, "run the kernel ladder at M=N=K=--ladder-size");
  app.add_option("--ladder-size", ladder_size, "ladder problem size");
  app.add_flag("--no-shapes", no_shapes, "skip the projection shape table");
  app.add_option("--json", json_path, "write results as JSON here");
  app.add_option("--shapes", custom_shapes,
                 "comma-separated MxNxK: time cuBLASLt and the sm90 kernel's variants on these");
  app.add_option("--gemv-probe", gemv_probe,
                 "comma-separated NxK: the M = 1 GEMV over row-major and tile-packed weights "
                 "(gemv_layout_probe.cu), and the skinny kernel");
  app.add_option("--decode-chain", chain_layers,
                 "LAYERS: a Llama-2-7B-shaped batch-1 decode made of the fused skinny GEMVs alone "
                 "(decode_chain.cu), one CUDA graph per PDL variant, against the bandwidth")
      ->check(CLI::Range(0, 64));
  app.add_option("--chain-gap-us", chain_gap_us,
                 "with --decode-chain: a latency-bound stand-in for RoPE + attention before o, "
                 "this long (0: none)")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option(
         "--chain-gap-pre-us", chain_gap_pre_us,
         "with --decode-chain: in the rows that say so, this much of the gap before its PDL "
         "wait (decode attention's loads that need nothing of q|k|v)")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--rounds", g_rounds,
                 "timing rounds per row (shapes and --shapes): each round times every kernel of "
                 "the row in a rotated order; the median over rounds is kept")
      ->check(CLI::Range(1, 20));
  app.add_option("--sustained", g_sustained_s,
                 "with --shapes: also run each kernel back to back for this many seconds and read "
                 "its sustained TFLOP/s, watts and pJ per FLOP from NVML (the power cap's view)")
      ->check(CLI::Range(0.0, 60.0));
  app.add_flag("--once", once,
               "with --shapes: no ceilings, no checks, no timing; one launch of each kernel (for "
               "a profiler)");
  CLI11_PARSE(app, argc, argv);
  try {
    RIDGE_CHECK(op == "gemm", "--op {}: only gemm is implemented", op);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "no CUDA GPU present\n");
      return 2;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Every kernel timed alone: with programmatic dependent launch, back-to-back launches of the
    // skinny kernel overlap (its first weight loads run during the previous launch's tail),
    // cuBLASLt's do not. The overlap the engine gets is measured by ridge bench model.
    const ridge::kernels::pdl::ScopedDisable no_pdl;
    ridge::kernels::CublasLtGemm cublas;
    json out;
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::string cmd;
    for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
    const char* rev = std::getenv("RIDGE_GIT_REV");
    out["meta"] = {{"command", cmd}, {"git_revision", rev ? rev : "unknown"}, {"date", date},
                   {"gpu", prop.name}, {"sms", prop.multiProcessorCount},
                   {"l2_bytes", prop.l2CacheSize},
                   {"driver", shell("nvidia-smi --query-gpu=driver_version --format=csv,noheader")},
                   {"gpu_state_before", gpu_state()}};
    std::printf("%s, %d SMs, L2 %d MB; state: %s\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, gpu_state().c_str());
    if (g_sustained_s > 0) {
      char bus[32] = {};
      std::string why = "no PCI bus id";
      if (cudaDeviceGetPCIBusId(bus, int(sizeof bus), 0) == cudaSuccess)
        g_nvml = ridge::backend::cuda::NvmlPower::open(bus, &why);
      if (!g_nvml) std::fprintf(stderr, "--sustained: no NVML readings (%s)\n", why.c_str());
    }
    const Ceilings c = once ? Ceilings{} : measure_ceilings();
    out["ceilings"] = {{"copy_tbps", c.copy_tbps}, {"memcpy_tbps", c.memcpy_tbps},
                       {"copy_kernel_tbps", c.copy_kernel_tbps}, {"read_tbps", c.read_tbps},
                       {"cublas_bf16_8192_tflops", c.cublas_tflops}};
    std::printf("ceilings: copy %.2f TB/s (read+write; cudaMemcpy %.2f, copy kernel %.2f), "
                "read-only %.2f TB/s, cuBLASLt bf16 8192^3 %.1f TFLOP/s\n",
                c.copy_tbps, c.memcpy_tbps, c.copy_kernel_tbps, c.read_tbps, c.cublas_tflops);
    if (ladder) out["ladder"] = run_ladder(ladder_size, cublas, c, prop.l2CacheSize, s);
    if (!custom_shapes.empty()) {
      std::vector<std::array<int, 3>> shapes;
      for (size_t pos = 0; pos < custom_shapes.size();) {
        size_t next = custom_shapes.find(',', pos);
        if (next == std::string::npos) next = custom_shapes.size();
        const std::string one = custom_shapes.substr(pos, next - pos);
        std::array<int, 3> sh{};
        RIDGE_CHECK(std::sscanf(one.c_str(), "%dx%dx%d", &sh[0], &sh[1], &sh[2]) == 3 &&
                        sh[0] > 0 && sh[1] > 0 && sh[2] > 0,
                    "--shapes: '{}' is not MxNxK with positive sizes", one);
        shapes.push_back(sh);
        pos = next + 1;
      }
      out["variants"] = run_variants(shapes, cublas, c, prop.l2CacheSize, s, once);
    }
    if (!gemv_probe.empty()) {
      json rows = json::array();
      std::printf("\nGEMV layout probe, M = 1 (medians of %d rotated rounds of 20 launches)\n"
                  "%6s %6s | %10s %7s %6s | %10s %7s %6s | %10s | %s\n",
                  std::max(g_rounds, 5), "N", "K", "row_us", "TB/s", "%read", "packed_us", "TB/s",
                  "%read", "skinny_us", "check");
      for (size_t pos = 0; pos < gemv_probe.size();) {
        size_t next = gemv_probe.find(',', pos);
        if (next == std::string::npos) next = gemv_probe.size();
        const std::string one = gemv_probe.substr(pos, next - pos);
        int N = 0, K = 0;
        RIDGE_CHECK(std::sscanf(one.c_str(), "%dx%d", &N, &K) == 2 && N > 0 && K > 0,
                    "--gemv-probe: '{}' is not NxK", one);
        const auto r = ridge::bench::gemv_layout_probe(N, K, std::max(g_rounds, 5), s);
        const double row_tb = r.weight_bytes / (r.row_major_us * 1e-6) / 1e12;
        const double packed_tb = r.weight_bytes / (r.packed_us * 1e-6) / 1e12;
        std::printf("%6d %6d | %10.2f %7.2f %6.1f | %10.2f %7.2f %6.1f | %10.2f | %s (layouts "
                    "bitwise %s, vs skinny %.2g)\n",
                    N, K, r.row_major_us, row_tb, 100 * row_tb / c.read_tbps, r.packed_us,
                    packed_tb, 100 * packed_tb / c.read_tbps, r.skinny_us, r.ok ? "ok" : "FAILED",
                    r.bitwise_equal ? "equal" : "DIFFER", r.rel_vs_skinny);
        rows.push_back({{"N", N}, {"K", K}, {"weight_bytes", r.weight_bytes},
                        {"row_major_us", r.row_major_us}, {"packed_us", r.packed_us},
                        {"skinny_us", r.skinny_us}, {"bitwise_equal", r.bitwise_equal},
                        {"rel_vs_skinny", r.rel_vs_skinny}, {"ok", r.ok}});
        pos = next + 1;
      }
      out["gemv_probe"] = rows;
    }
    if (chain_layers > 0) {
      const auto rows = ridge::bench::decode_chain(chain_layers, 4096, 11008, chain_gap_us,
                                                   chain_gap_pre_us, std::max(g_rounds, 9), s);
      std::printf("\nDecode GEMV chain, M = 1, %d Llama-2-7B layers (medians of %d graph "
                  "replays; %% of the read-only and copy ceilings above)\n"
                  "%-12s | %10s | %7s %6s %6s | %10s | %s\n",
                  chain_layers, std::max(g_rounds, 9), "variant", "us", "TB/s", "%read", "%copy",
                  "vs plain", "what");
      double plain_us = 0;
      json jrows = json::array();
      for (const auto& r : rows) {
        if (r.name == "plain") plain_us = r.us;
        const double tb = r.weight_bytes > 0 ? r.weight_bytes / (r.us * 1e-6) / 1e12 : 0;
        char vs[32] = "";
        if (plain_us > 0 && r.name != "plain" && r.weight_bytes > 0)  // (not the gaps alone)
          std::snprintf(vs, sizeof vs, "%+.1f us", r.us - plain_us);
        std::printf("%-12s | %10.1f | %7.2f %6.1f %6.1f | %10s | %s\n", r.name.c_str(), r.us, tb,
                    100 * tb / c.read_tbps, 100 * tb / c.copy_tbps, vs, r.what.c_str());
        jrows.push_back({{"name", r.name}, {"what", r.what}, {"us", r.us},
                         {"weight_bytes", r.weight_bytes}, {"tbps", tb}});
      }
      out["decode_chain"] = {{"layers", chain_layers},
                             {"gap_us", chain_gap_us},
                             {"gap_pre_us", chain_gap_pre_us},
                             {"rows", jrows}};
    }
    if (!no_shapes) {
      std::vector<std::string> model_list;
      for (size_t pos = 0; pos <= models.size();) {
        size_t next = models.find(',', pos);
        if (next == std::string::npos) next = models.size();
        model_list.push_back(models.substr(pos, next - pos));
        pos = next + 1;
      }
      out["shapes"] = run_shapes(model_list, parse_ints(m_list), cublas, c, prop.l2CacheSize, s);
    }
    out["meta"]["gpu_state_after"] = gpu_state();
    std::printf("state after: %s\n", gpu_state().c_str());
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      RIDGE_CHECK(f != nullptr, "cannot write {}", json_path);
      std::fputs(out.dump(1).c_str(), f);
      std::fclose(f);
    }
    CK(cudaStreamDestroy(s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
