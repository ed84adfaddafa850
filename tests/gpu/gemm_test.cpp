// GEMM kernels against a CPU fp64 reference and cuBLASLt: fresh random inputs (never zeros),
// outputs poisoned with NaN beforehand, error by ‖out − ref‖ / ‖ref‖ within bf16 bounds, shapes
// that are not tile multiples, refusals of unsupported shapes, bitwise determinism. Skips where
// no GPU is present.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ridge/core/error.h"
#include "ridge/kernels/cuda/gemm/cublaslt_gemm.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/gemm/launch.h"
#include "ridge/kernels/cuda/pdl.h"

namespace {

using ridge::kernels::bf16;

bool gpu_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool is_sm90() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU present";      \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::vector<bf16> random_bf16(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) {
    float f = d(rng);
    if (f == 0.f) f = scale * 0.5f;  // never zeros
    x = __float2bfloat16(f);
  }
  return v;
}

struct Problem {
  int M, N, K;
  bool residual = false;
};

std::string name(const Problem& p) {
  return "M" + std::to_string(p.M) + "_N" + std::to_string(p.N) + "_K" + std::to_string(p.K) +
         (p.residual ? "_res" : "");
}

struct Result {
  double rel_err = 0;  // ‖out − ref‖ / ‖ref‖
  size_t non_finite = 0;
};

Result compare(const std::vector<bf16>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  Result r;
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = __bfloat162float(out[i]);
    if (!std::isfinite(o)) {
      ++r.non_finite;
      continue;
    }
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
  }
  r.rel_err = std::sqrt(num / den);
  return r;
}

// fp64 reference of Y = X·Wᵀ (+ residual) on the bf16-rounded inputs.
std::vector<double> reference(const std::vector<bf16>& X, const std::vector<bf16>& W,
                              const std::vector<bf16>* R, int M, int N, int K) {
  std::vector<double> Wd(W.size());
  for (size_t i = 0; i < W.size(); ++i) Wd[i] = __bfloat162float(W[i]);
  std::vector<double> Y(static_cast<size_t>(M) * N);
  std::vector<double> x(K);
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) x[k] = __bfloat162float(X[static_cast<size_t>(m) * K + k]);
    for (int n = 0; n < N; ++n) {
      const double* w = &Wd[static_cast<size_t>(n) * K];
      double s = 0;
      for (int k = 0; k < K; ++k) s += x[k] * w[k];
      if (R) s += __bfloat162float((*R)[static_cast<size_t>(m) * N + n]);
      Y[static_cast<size_t>(m) * N + n] = s;
    }
  }
  return Y;
}

// How many elements of two equally long bf16 vectors differ in their bits.
size_t bits_differ(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += reinterpret_cast<const uint16_t*>(a.data())[i] !=
         reinterpret_cast<const uint16_t*>(b.data())[i];
  return d;
}

// bf16 output rounding alone gives ~2^-9 per element; fp32 accumulation order adds little.
constexpr double kTolerance = 8e-3;

// Under compute-sanitizer (RIDGE_GEMM_TEST_SMALL=1) only the first few problems of each list run.
size_t problem_limit(size_t n) { return std::getenv("RIDGE_GEMM_TEST_SMALL") ? std::min<size_t>(n, 4) : n; }

enum class Kernel { kDispatch, kSkinny, kSm90 };

void run_kernel(Kernel k, const bf16* X, const bf16* W, bf16* Y, const Problem& p,
                const bf16* R, cudaStream_t s) {
  switch (k) {
    case Kernel::kDispatch: ridge::kernels::gemm_bf16(X, W, Y, p.M, p.N, p.K, s, R); break;
    case Kernel::kSkinny: ridge::kernels::gemm_bf16_skinny(X, W, Y, p.M, p.N, p.K, s, R); break;
    case Kernel::kSm90: ridge::kernels::gemm_bf16_sm90(X, W, Y, p.M, p.N, p.K, s, R); break;
  }
}

void check_problem(Kernel kernel, const Problem& p, uint32_t seed) {
  SCOPED_TRACE(name(p));
  std::mt19937 rng(seed);
  const size_t nx = static_cast<size_t>(p.M) * p.K, nw = static_cast<size_t>(p.N) * p.K,
               ny = static_cast<size_t>(p.M) * p.N;
  auto hX = random_bf16(nx, rng), hW = random_bf16(nw, rng), hR = random_bf16(ny, rng, 4.f);
  DeviceBuffer<bf16> X(nx), W(nw), Y(ny), Yc(ny), R(ny);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr && Yc.ptr && R.ptr);
  CUDA_OK(cudaMemcpy(X.ptr, hX.data(), nx * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(W.ptr, hW.data(), nw * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(R.ptr, hR.data(), ny * 2, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  CUDA_OK(cudaMemset(Y.ptr, 0xFF, ny * 2));  // NaN poison: unwritten outputs fail
  run_kernel(kernel, X.ptr, W.ptr, Y.ptr, p, p.residual ? R.ptr : nullptr, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<bf16> hY(ny);
  CUDA_OK(cudaMemcpy(hY.data(), Y.ptr, ny * 2, cudaMemcpyDeviceToHost));

  const auto ref = reference(hX, hW, p.residual ? &hR : nullptr, p.M, p.N, p.K);
  const Result r = compare(hY, ref);
  EXPECT_EQ(r.non_finite, 0u) << "unwritten or non-finite outputs";
  EXPECT_LT(r.rel_err, kTolerance) << "vs fp64 reference";

  // Same inputs again: bitwise identical (no races, fixed reduction order).
  CUDA_OK(cudaMemset(Yc.ptr, 0xFF, ny * 2));
  run_kernel(kernel, X.ptr, W.ptr, Yc.ptr, p, p.residual ? R.ptr : nullptr, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<bf16> hY2(ny);
  CUDA_OK(cudaMemcpy(hY2.data(), Yc.ptr, ny * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(bits_differ(hY, hY2), 0u) << "second run differs";

  // Against cuBLASLt (no residual there: compare the plain product). Not under
  // compute-sanitizer (RIDGE_GEMM_TEST_SMALL): racecheck reports cuBLAS's own kernels.
  if (!p.residual && !std::getenv("RIDGE_GEMM_TEST_SMALL")) {
    ridge::kernels::CublasLtGemm cublas;
    CUDA_OK(cudaMemset(Yc.ptr, 0xFF, ny * 2));
    cublas.run(X.ptr, W.ptr, Yc.ptr, p.M, p.N, p.K, stream);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(hY2.data(), Yc.ptr, ny * 2, cudaMemcpyDeviceToHost));
    const Result rc = compare(hY2, ref);
    EXPECT_LT(rc.rel_err, kTolerance) << "cuBLASLt itself vs fp64";
    // Ours is no further from the reference than bf16 rounding allows, cuBLAS's error included.
    EXPECT_LT(r.rel_err, rc.rel_err * 1.5 + 1e-3) << "ours " << r.rel_err << " cuBLAS " << rc.rel_err;
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(GemmSkinny, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const Problem problems[] = {
      {1, 128, 64},     {3, 264, 520},    {2, 136, 1032},  {33, 200, 2048}, {1, 4096, 4096},   {8, 256, 4096},
      {9, 520, 1000},   {13, 264, 520},   {16, 1024, 2048}, {17, 512, 1024}, {31, 200, 2048},
      {32, 1024, 4096},  {64, 1024, 4096}, {100, 264, 520}, {5, 1032, 11008},
      {7, 264, 520, true}, {48, 1024, 1024, true},
      // More row tiles than resident blocks: each block walks several (a partial last one here).
      {1, 12296, 520}, {11, 8200, 264, true}};
  uint32_t seed = 1;
  for (size_t i = 0; i < problem_limit(std::size(problems)); ++i)
    check_problem(Kernel::kSkinny, problems[i], seed++);
}

// Downloads a skinny-kernel output Y (n values, bf16 or f32 when y_f32) into `raw` and checks it
// against the fp64 reference: all written and finite, relative error within kTolerance. Returns
// the values as bf16.
std::vector<bf16> download_and_check(const void* Y, size_t n, bool f32,
                                     const std::vector<double>& ref,
                                     std::vector<unsigned char>& raw) {
  raw.resize(n * (f32 ? 4 : 2));
  std::vector<bf16> v(n);
  EXPECT_EQ(cudaMemcpy(raw.data(), Y, raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  if (f32) {
    const float* y = reinterpret_cast<const float*>(raw.data());
    for (size_t i = 0; i < n; ++i) v[i] = __float2bfloat16(y[i]);
  } else {
    std::memcpy(v.data(), raw.data(), n * 2);
  }
  const Result r = compare(v, ref);
  EXPECT_EQ(r.non_finite, 0u) << "unwritten or non-finite outputs";
  EXPECT_LT(r.rel_err, kTolerance) << "vs fp64 reference";
  return v;
}

// A problem of gemm_bf16_skinny_fused with one prologue or epilogue: fresh random inputs on the
// device, an output and sums of squares to fill, and the fp64 reference of the product with the
// prologue or epilogue applied.
enum class FusedKind { plain, residual, f32, swiglu, sumsq_out, rms_sumsq };
constexpr const char* kFusedKindNames[] = {"plain",  "residual",  "f32",
                                           "swiglu", "sumsq_out", "rms_sumsq"};
// warp_parts: the sums of squares in and out as the warp-row GEMV's sumsq_out leaves them
// (skinny_warp_sumsq_parts: one part a block, which its rms_sumsq and the MMA kernel's take),
// else one part per 16 rows.
struct FusedProblem {
  FusedKind kind;
  int M, N, K;
  bool warp_parts;
  bool swiglu = kind == FusedKind::swiglu, f32 = kind == FusedKind::f32;
  int out_n = swiglu ? N / 2 : N;
  size_t ny = size_t(M) * out_n, y_bytes = ny * (f32 ? 4 : 2);
  int parts_in = warp_parts ? ridge::kernels::skinny_warp_sumsq_parts(K)
                            : ridge::kernels::skinny_sumsq_parts(K);
  int parts_out = warp_parts ? ridge::kernels::skinny_warp_sumsq_parts(N)
                             : ridge::kernels::skinny_sumsq_parts(N);
  std::vector<bf16> hX, hW, hR;
  std::vector<float> hS;
  std::vector<double> ref;
  DeviceBuffer<bf16> X{size_t(M) * K}, W{size_t(N) * K}, R{ny};
  DeviceBuffer<unsigned char> Y{y_bytes};
  DeviceBuffer<float> S_in{size_t(parts_in) * M}, S_out{size_t(parts_out) * M};

  FusedProblem(FusedKind kind_, int M_, int N_, int K_, uint32_t seed, bool warp_parts_ = false)
      : kind(kind_), M(M_), N(N_), K(K_), warp_parts(warp_parts_) {
    std::mt19937 rng(seed);
    hX = random_bf16(size_t(M) * K, rng), hW = random_bf16(size_t(N) * K, rng);
    hR = random_bf16(ny, rng, 4.f);
    hS.resize(size_t(parts_in) * M);
    std::uniform_real_distribution<float> pos(0.05f, 2.0f);
    for (auto& v : hS) v = pos(rng);
    const auto xw = reference(hX, hW, nullptr, M, N, K);
    ref.resize(ny);
    for (int m = 0; m < M; ++m) {
      double inv_rms = 1.0;
      if (kind == FusedKind::rms_sumsq) {
        double ss = 0;
        for (int p = 0; p < parts_in; ++p) ss += hS[size_t(p) * M + m];
        inv_rms = 1.0 / std::sqrt(ss / K + 1e-5);
      }
      for (int n = 0; n < out_n; ++n) {
        double v;
        if (swiglu) {
          const double g = xw[size_t(m) * N + n], u = xw[size_t(m) * N + out_n + n];
          v = g / (1 + std::exp(-g)) * u;
        } else {
          v = xw[size_t(m) * N + n] * inv_rms;
          if (kind == FusedKind::residual) v += __bfloat162float(hR[size_t(m) * N + n]);
        }
        ref[size_t(m) * out_n + n] = v;
      }
    }
  }
  // The inputs to the device (a fatal failure if a buffer is missing).
  void upload() const {
    ASSERT_TRUE(X.ptr && W.ptr && R.ptr && Y.ptr && S_in.ptr && S_out.ptr);
    CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(R.ptr, hR.data(), ny * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(S_in.ptr, hS.data(), hS.size() * 4, cudaMemcpyHostToDevice));
  }
  // The launch arguments of the case (kernel choices left at their defaults).
  ridge::kernels::SkinnyArgs args() const {
    ridge::kernels::SkinnyArgs a;
    a.X = X.ptr, a.ld_x = K, a.W = W.ptr, a.Y = Y.ptr, a.M = M, a.N = N, a.K = K;
    a.y_f32 = f32;
    a.swiglu = swiglu;
    if (kind == FusedKind::residual) a.residual = R.ptr;
    if (kind == FusedKind::sumsq_out) a.sumsq_out = S_out.ptr;
    if (kind == FusedKind::rms_sumsq)
      a.sumsq_in = S_in.ptr, a.sumsq_parts = parts_in, a.eps = 1e-5f;
    return a;
  }
  ridge::kernels::SkinnyPrologue prologue() const {
    return kind == FusedKind::rms_sumsq ? ridge::kernels::SkinnyPrologue::rms_sumsq
                                        : ridge::kernels::SkinnyPrologue::none;
  }
  // Poison the outputs, launch `a`, and check them against the reference: `raw` gets the output
  // bytes and, for sumsq_out, `sums` the parts, each checked against the squares of the 16 stored
  // bf16 outputs of its columns, per token; warp_parts: their sum against the squares of all the
  // stored outputs (which rows a block's part holds is the grid's business), every part written.
  void run(const ridge::kernels::SkinnyArgs& a, std::vector<unsigned char>& raw,
           std::vector<float>& sums) const {
    CUDA_OK(cudaMemset(Y.ptr, 0xFF, y_bytes));
    CUDA_OK(cudaMemset(S_out.ptr, 0xFF, S_out.count * 4));
    ridge::kernels::gemm_bf16_skinny_fused(a, prologue(), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<bf16> stored = download_and_check(Y.ptr, ny, f32, ref, raw);
    sums.clear();
    if (kind != FusedKind::sumsq_out) return;
    sums.resize(S_out.count);
    CUDA_OK(cudaMemcpy(sums.data(), S_out.ptr, S_out.count * 4, cudaMemcpyDeviceToHost));
    const int rows_per_part = warp_parts ? N : ridge::kernels::skinny_sumsq_rows;
    const int checks = warp_parts ? 1 : parts_out;
    double worst = 0;
    for (int p = 0; p < checks; ++p)
      for (int m = 0; m < M; ++m) {
        double want = 0, got = 0;
        for (int n = p * rows_per_part; n < std::min(N, (p + 1) * rows_per_part); ++n) {
          const double y = __bfloat162float(stored[size_t(m) * N + n]);
          want += y * y;
        }
        if (warp_parts) {
          for (int q = 0; q < parts_out; ++q) got += sums[size_t(q) * M + m];
        } else {
          got = sums[size_t(p) * M + m];
        }
        // (A single row's square can be 0: then the part must be 0 too.)
        const double diff = std::abs(got - want);
        const double err = want > 0 ? diff / want : diff;
        if (!(err <= worst)) worst = err;  // a NaN (an unwritten part) fails
      }
    EXPECT_LT(worst, 1e-5) << "sums of squares of the stored rows";
  }
};

// The skinny kernel with every prologue and epilogue (gemm_bf16_skinny_fused), on shapes with
// partial row tiles, K tails and more row tiles than resident blocks, and split-K over clusters
// of 2, 3, 4 and 8 CTAs and the automatic choice on narrow shapes: each against the fp64
// reference, the sums of squares against those of the stored rows, and a second run bitwise equal.
// Where the row-stream GEMV applies (1-2 tokens, 2048 < K), the same again with its workspace
// (SkinnyArgs::stream), which must leave its tickets zero.
TEST(GemmSkinny, ProloguesAndEpiloguesMatchReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  using ridge::kernels::SkinnyArgs;
  using Kind = FusedKind;
  struct Case {
    Kind kind;
    int M, N, K;
    int split_k = 1;
  };
  const Case cases[] = {
      {Kind::plain, 1, 4104, 3000},
      {Kind::plain, 9, 264, 520},
      {Kind::residual, 16, 4104, 1032},
      {Kind::f32, 3, 264, 3000},
      {Kind::swiglu, 1, 4112, 3000},
      {Kind::swiglu, 13, 528, 1032},
      {Kind::sumsq_out, 8, 4104, 1032},
      {Kind::rms_sumsq, 1, 4104, 3000},
      {Kind::rms_sumsq, 16, 264, 4096},
      // Split-K: narrow N (36 or fewer row tiles), K tails, every epilogue.
      {Kind::plain, 1, 576, 1536, 4},
      {Kind::residual, 8, 264, 4096, 8},
      {Kind::sumsq_out, 5, 576, 3000, 2},
      {Kind::rms_sumsq, 16, 264, 4096, 0},
      {Kind::swiglu, 3, 1056, 3000, 4},
      {Kind::f32, 1, 576, 2048, 3},
      {Kind::rms_sumsq, 1, 576, 11008, 0},
      // 1-2 tokens past K = 2048 (the row-stream GEMV too): every epilogue, each
      // configuration of row length (2 rows a group up to K = 8192, 1 beyond),
      // unit counts that are not a multiple of the grid.
      {Kind::residual, 2, 4104, 4096, 0},
      {Kind::sumsq_out, 1, 4104, 3000, 0},
      {Kind::sumsq_out, 2, 264, 11008, 0},
      {Kind::f32, 2, 264, 6000, 0},
      {Kind::swiglu, 2, 1056, 12288, 0},
      {Kind::plain, 1, 264, 16384, 0},
      {Kind::rms_sumsq, 2, 4104, 4096, 0},
      {Kind::swiglu, 1, 22016, 4096, 0},
      {Kind::residual, 1, 4104, 6000, 0},
      // More row groups than 4 per block (the publisher's slot ring wraps) in
      // every configuration: 256 loaders × 2 rows, 512 × 2, 512 × 3 × 1 row, 512 × 4.
      {Kind::residual, 2, 16400, 4096, 0},
      {Kind::sumsq_out, 2, 4104, 11008, 0},
      {Kind::plain, 1, 4104, 16384, 0},
      {Kind::rms_sumsq, 1, 4104, 11008, 0},
      {Kind::f32, 2, 8200, 8192, 0},
      // One token, unsplit, f32.
      {Kind::f32, 1, 264, 4096, 1},
      // One token, more 16-row units than any grid has blocks, with long rows.
      {Kind::residual, 1, 16400, 6000, 0},
      {Kind::sumsq_out, 1, 16400, 11008, 0},
      {Kind::rms_sumsq, 1, 16400, 16384, 0}};
  uint32_t seed = 300;
  constexpr int kStreamRows = 32768;
  const size_t scratch_bytes = ridge::kernels::skinny_stream_scratch_bytes(kStreamRows);
  const size_t ticket_bytes = ridge::kernels::skinny_stream_ticket_bytes(kStreamRows);
  DeviceBuffer<unsigned char> stream_ws(scratch_bytes + ticket_bytes);
  ASSERT_TRUE(stream_ws.ptr);
  CUDA_OK(cudaMemset(stream_ws.ptr, 0, scratch_bytes + ticket_bytes));
  const auto ws = ridge::kernels::skinny_stream_workspace(stream_ws.ptr, kStreamRows);
  int stream_cases = 0;
  // Under compute-sanitizer: the first few cases, two split-K ones (distributed shared memory)
  // and two row-stream ones (tickets).
  const bool small = std::getenv("RIDGE_GEMM_TEST_SMALL") != nullptr;
  // Two passes over the cases: the MMA kernel, the row-stream GEMV (its workspace given).
  for (size_t run_i = 0; run_i < 2 * std::size(cases); ++run_i) {
    const size_t ci = run_i % std::size(cases);
    const bool stream = run_i >= std::size(cases);
    const Case& c = cases[ci];
    if (small && ci >= problem_limit(std::size(cases)) && ci != 9 && ci != 12 && ci != 16 &&
        ci != 23 && ci != 25)
      continue;
    SCOPED_TRACE(::testing::Message()
                 << kFusedKindNames[int(c.kind)] << " M=" << c.M << " N=" << c.N << " K=" << c.K
                 << " split_k=" << c.split_k << (stream ? " row-stream" : ""));
    const FusedProblem fp(c.kind, c.M, c.N, c.K, seed++);
    ASSERT_NO_FATAL_FAILURE(fp.upload());

    std::vector<std::vector<unsigned char>> outs;
    std::vector<std::vector<float>> sums;
    // The register path twice, then (not for the row-stream GEMV) the weight ring at depths 2
    // and 3 (SkinnyArgs::ring), and at depth 2 with one block a SM (SkinnyArgs::blocks_per_sm:
    // each block then walks more row tiles), which must leave the same bits.
    const int runs = stream ? 2 : 5;
    static constexpr const char* kRunNames[] = {"registers", "registers", "ring 2", "ring 3",
                                                "ring 2, one block a SM"};
    const int64_t ring_before = ridge::kernels::skinny_ring_launches();
    for (int run = 0; run < runs; ++run) {
      SCOPED_TRACE(::testing::Message() << "run " << run);
      SkinnyArgs a = fp.args();
      a.ring = run < 2 ? -1 : run == 4 ? 2 : run;
      a.blocks_per_sm = run == 4 ? 1 : 0;
      a.split_k = c.split_k;
      if (stream) {
        a.stream = ws;
        if (!ridge::kernels::skinny_stream_applies(a)) break;
        if (run == 0) ++stream_cases;
        // Row sums left by an earlier launch must never stand in for this one's: NaN if read.
        CUDA_OK(cudaMemset(ws.scratch, 0xFF, scratch_bytes));
      }
      outs.emplace_back();
      sums.emplace_back();
      ASSERT_NO_FATAL_FAILURE(fp.run(a, outs.back(), sums.back()));
    }
    if (outs.size() < 2) continue;  // the row-stream GEMV does not take this case
    for (size_t r = 1; r < outs.size(); ++r) {
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[r].data(), fp.y_bytes), 0)
          << "run " << r << " (" << kRunNames[r] << "): outputs differ in their bits";
      if (!sums[0].empty()) {
        EXPECT_EQ(std::memcmp(sums[0].data(), sums[r].data(), sums[0].size() * 4), 0)
            << "run " << r << ": sums of squares differ";
      }
    }
    // The ring takes every launch that is not split (split_k 1; the automatic choice may split).
    if (!stream && c.split_k == 1) {
      EXPECT_EQ(ridge::kernels::skinny_ring_launches() - ring_before, 3) << "ring launches";
    }
  }
  EXPECT_GE(stream_cases, small ? 3 : 22) << "cases the row-stream GEMV ran";
  std::vector<unsigned> tickets(kStreamRows / 16);
  CUDA_OK(cudaMemcpy(tickets.data(), ws.tickets, ticket_bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(tickets.begin(), tickets.end(), 0u), std::ptrdiff_t(tickets.size()))
      << "the row-stream GEMV left tickets that are not zero";
}

// The warp-row GEMV behind gemm_bf16_skinny_fused (SkinnyArgs::warp, one token): every prologue
// and epilogue the decode chain asks of it (plain, residual in place of nothing, f32, SwiGLU, sums
// of squares one part a block, rms_sumsq from its parts and from per-16-row parts), on items fewer
// and more than the grid's warps, K with partial phases and long rows; each against the fp64
// reference (the sums of squares against the stored rows), a second run bitwise equal, and
// counted (it must be the warp-row GEMV that ran). Two tokens are not its: the MMA kernel runs
// them, and its rms_sumsq takes the warp-row GEMV's parts.
TEST(GemmSkinny, WarpRowsFusedMatchReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  using Kind = FusedKind;
  struct Case {
    Kind kind;
    int N, K;
    // The parts an rms prologue reads: the warp-row GEMV's (one a block), or false, the MMA
    // kernel's (one per 16 rows). (Its own sums of squares out are one part a block.)
    bool warp_parts = true;
  };
  const Case cases[] = {{Kind::plain, 4104, 3000},
                        {Kind::residual, 4096, 4096},
                        {Kind::f32, 32000, 4096},
                        {Kind::swiglu, 22016, 4096},
                        {Kind::swiglu, 1040, 3000},
                        {Kind::sumsq_out, 4096, 11008},
                        {Kind::sumsq_out, 264, 14336},
                        {Kind::rms_sumsq, 12288, 4096},
                        {Kind::rms_sumsq, 4104, 4096, false},
                        {Kind::rms_sumsq, 1032, 3000},
                        {Kind::residual, 16400, 6000},
                        {Kind::plain, 8, 32768},
                        // SwiGLU rows with two and three phases a row.
                        {Kind::swiglu, 2080, 8192},
                        {Kind::swiglu, 1056, 11008}};
  uint32_t seed = 2700;
  for (size_t ci = 0; ci < problem_limit(std::size(cases)); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(::testing::Message() << kFusedKindNames[int(c.kind)] << " N=" << c.N
                                      << " K=" << c.K << " warp-row parts " << c.warp_parts);
    const FusedProblem fp(c.kind, 1, c.N, c.K, seed++, c.warp_parts);
    ASSERT_NO_FATAL_FAILURE(fp.upload());
    std::vector<std::vector<unsigned char>> outs(2);
    std::vector<std::vector<float>> sums(2);
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE(::testing::Message() << "run " << run);
      ridge::kernels::SkinnyArgs a = fp.args();
      a.warp = true;
      ASSERT_TRUE(ridge::kernels::skinny_warp_applies(a));
      // Its sums of squares out are one part a block, whatever parts its prologue reads.
      EXPECT_EQ(ridge::kernels::skinny_sumsq_out_parts(a),
                ridge::kernels::skinny_warp_sumsq_parts(c.N));
      const int64_t before = ridge::kernels::skinny_warp_launches();
      ASSERT_NO_FATAL_FAILURE(fp.run(a, outs[size_t(run)], sums[size_t(run)]));
      EXPECT_EQ(ridge::kernels::skinny_warp_launches() - before, 1) << "warp-row launches";
    }
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), fp.y_bytes), 0)
        << "second run: outputs differ in their bits";
    EXPECT_EQ(sums[0], sums[1]) << "second run: sums of squares differ";
    if (c.kind == Kind::sumsq_out) {
      // Under a 32 KB carveout the grid has one block a SM (x at K >= 11,008 is 22 KB), not two:
      // block 0 must zero the slots of the blocks it does not have (poisoned NaN before the
      // run), and the sums stay right.
      SCOPED_TRACE("one block a SM (carveout)");
      ridge::kernels::pdl::set_launch_carveout(14);
      ridge::kernels::SkinnyArgs a = fp.args();
      a.warp = true;
      std::vector<unsigned char> raw;
      std::vector<float> carved;
      fp.run(a, raw, carved);
      ridge::kernels::pdl::set_launch_carveout(-1);
      ASSERT_EQ(raw.size(), fp.y_bytes);
      EXPECT_EQ(std::memcmp(outs[0].data(), raw.data(), fp.y_bytes), 0)
          << "outputs differ in their bits from the full grid's";
    }
  }
  // The MMA kernel's rms_sumsq takes a warp-row producer's parts too, at one and two tokens.
  for (const int M : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "MMA kernel, warp-row parts in, M=" << M);
    const FusedProblem fp(Kind::rms_sumsq, M, 1032, 4096, seed++, /*warp_parts*/ true);
    ASSERT_NO_FATAL_FAILURE(fp.upload());
    std::vector<unsigned char> raw;
    std::vector<float> sums;
    const int64_t before = ridge::kernels::skinny_warp_launches();
    ASSERT_NO_FATAL_FAILURE(fp.run(fp.args(), raw, sums));
    EXPECT_EQ(ridge::kernels::skinny_warp_launches() - before, 0) << "not the warp-row GEMV";
  }
  // Where it does not apply, the MMA kernel runs and the parts stay one per 16 rows.
  ridge::kernels::SkinnyArgs two;
  two.M = 2, two.N = 4096, two.K = 4096, two.warp = true;
  EXPECT_FALSE(ridge::kernels::skinny_warp_applies(two));
  EXPECT_EQ(ridge::kernels::skinny_sumsq_out_parts(two), 256);
}

// The warp-row GEMV as the decode chain runs it: three layers of o (residual, sums of squares
// one part a block), gate|up (the norm from those parts, SwiGLU) and down (residual, sums),
// launched back to back with PDL on one stream and nothing synchronized between, each launch
// reading what the one before it wrote (K = 4,608: two phases a row). Each step's output is
// checked afterwards against fp64 from the inputs the GPU gave it, the sums of squares against
// the stored values.
TEST(GemmSkinny, WarpRowsChainedWithPdl) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  using ridge::kernels::SkinnyArgs;
  using ridge::kernels::SkinnyPrologue;
  constexpr int H = 4608, F = 2048, L = 3;
  const int parts = ridge::kernels::skinny_warp_sumsq_parts(H);  // o's and down's
  constexpr float kEps = 1e-5f;
  std::mt19937 rng(4711);
  const auto hWo = random_bf16(size_t(H) * H, rng), hWgu = random_bf16(size_t(2 * F) * H, rng),
             hWd = random_bf16(size_t(H) * F, rng);
  std::vector<std::vector<bf16>> hA(L);
  for (auto& a : hA) a = random_bf16(H, rng);
  const auto hX0 = random_bf16(H, rng, 4.f);
  DeviceBuffer<bf16> Wo(hWo.size()), Wgu(hWgu.size()), Wd(hWd.size()), A(size_t(L) * H),
      X(size_t(L + 1) * H), Xmid(size_t(L) * H), Mv(size_t(L) * F);
  DeviceBuffer<float> S1(size_t(L) * H), S2(size_t(L) * H);
  ASSERT_TRUE(Wo.ptr && Wgu.ptr && Wd.ptr && A.ptr && X.ptr && Xmid.ptr && Mv.ptr && S1.ptr &&
              S2.ptr);
  CUDA_OK(cudaMemcpy(Wo.ptr, hWo.data(), hWo.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(Wgu.ptr, hWgu.data(), hWgu.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(Wd.ptr, hWd.data(), hWd.size() * 2, cudaMemcpyHostToDevice));
  for (int l = 0; l < L; ++l)
    CUDA_OK(cudaMemcpy(A.ptr + size_t(l) * H, hA[size_t(l)].data(), H * 2, cudaMemcpyHostToDevice));
  // Poison every output (NaN bits): a step that read its input before it was written fails.
  CUDA_OK(cudaMemset(X.ptr, 0xFF, X.count * 2));
  CUDA_OK(cudaMemset(Xmid.ptr, 0xFF, Xmid.count * 2));
  CUDA_OK(cudaMemset(Mv.ptr, 0xFF, Mv.count * 2));
  CUDA_OK(cudaMemset(S1.ptr, 0xFF, S1.count * 4));
  CUDA_OK(cudaMemset(S2.ptr, 0xFF, S2.count * 4));
  CUDA_OK(cudaMemcpy(X.ptr, hX0.data(), H * 2, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaDeviceSynchronize());
  const int64_t before = ridge::kernels::skinny_warp_launches();
  for (int l = 0; l < L; ++l) {
    SkinnyArgs o;  // Xmid[l] = X[l] + A[l]·Woᵀ, sums S1[l]
    o.X = A.ptr + size_t(l) * H, o.ld_x = H, o.W = Wo.ptr, o.Y = Xmid.ptr + size_t(l) * H;
    o.residual = X.ptr + size_t(l) * H, o.sumsq_out = S1.ptr + size_t(l) * H;
    o.M = 1, o.N = H, o.K = H, o.pdl_launch = true, o.warp = true;
    ridge::kernels::gemm_bf16_skinny_fused(o, SkinnyPrologue::none, st);
    SkinnyArgs gu;  // Mv[l] = SwiGLU(rms(Xmid[l]) · Wguᵀ), 1/rms from S1[l]
    gu.X = Xmid.ptr + size_t(l) * H, gu.ld_x = H, gu.W = Wgu.ptr, gu.Y = Mv.ptr + size_t(l) * F;
    gu.sumsq_in = S1.ptr + size_t(l) * H, gu.sumsq_parts = parts, gu.eps = kEps;
    gu.swiglu = true;
    gu.M = 1, gu.N = 2 * F, gu.K = H, gu.pdl_launch = true, gu.warp = true;
    ridge::kernels::gemm_bf16_skinny_fused(gu, SkinnyPrologue::rms_sumsq, st);
    SkinnyArgs d;  // X[l + 1] = Xmid[l] + Mv[l]·Wdᵀ, sums S2[l]
    d.X = Mv.ptr + size_t(l) * F, d.ld_x = F, d.W = Wd.ptr, d.Y = X.ptr + size_t(l + 1) * H;
    d.residual = Xmid.ptr + size_t(l) * H, d.sumsq_out = S2.ptr + size_t(l) * H;
    d.M = 1, d.N = H, d.K = F, d.pdl_launch = true, d.warp = true;
    ridge::kernels::gemm_bf16_skinny_fused(d, SkinnyPrologue::none, st);
  }
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaStreamDestroy(st));
  EXPECT_EQ(ridge::kernels::skinny_warp_launches() - before, 3 * L);
  std::vector<bf16> gX(X.count), gXmid(Xmid.count), gM(Mv.count);
  std::vector<float> gS1(S1.count), gS2(S2.count);
  CUDA_OK(cudaMemcpy(gX.data(), X.ptr, gX.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gXmid.data(), Xmid.ptr, gXmid.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gM.data(), Mv.ptr, gM.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gS1.data(), S1.ptr, gS1.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gS2.data(), S2.ptr, gS2.size() * 4, cudaMemcpyDeviceToHost));
  const auto slice = [](const std::vector<bf16>& v, size_t at, size_t n) {
    return std::vector<bf16>(v.begin() + std::ptrdiff_t(at), v.begin() + std::ptrdiff_t(at + n));
  };
  // The sums of squares: the parts add up to the squares of the stored bf16 values (fp32 sums in
  // another order than fp64's), every part written.
  const auto check_sums = [&](const std::vector<bf16>& y, const float* s, const char* what) {
    double want = 0, got = 0;
    for (const bf16 v : y) want += double(__bfloat162float(v)) * __bfloat162float(v);
    for (int p = 0; p < parts; ++p) got += s[p];
    EXPECT_LT(std::abs(got - want), 1e-5 * want) << what << ": sums of squares of the stored rows";
  };
  for (int l = 0; l < L; ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    const auto x = slice(gX, size_t(l) * H, H), xmid = slice(gXmid, size_t(l) * H, H),
               m = slice(gM, size_t(l) * F, F), xnext = slice(gX, size_t(l + 1) * H, H);
    // o: from the GPU's x of this layer.
    const auto ref_o = reference(hA[size_t(l)], hWo, &x, 1, H, H);
    Result r = compare(xmid, ref_o);
    EXPECT_EQ(r.non_finite, 0u) << "o: unwritten or non-finite";
    EXPECT_LT(r.rel_err, kTolerance) << "o vs fp64";
    check_sums(xmid, gS1.data() + size_t(l) * H, "o");
    // gate|up: the norm from the parts the GPU left, SwiGLU of the bf16-rounded products.
    double ss = 0;
    for (int p = 0; p < parts; ++p) ss += gS1[size_t(l) * H + size_t(p)];
    const double inv_rms = 1.0 / std::sqrt(ss / H + kEps);
    const auto gu = reference(xmid, hWgu, nullptr, 1, 2 * F, H);
    std::vector<double> ref_m(F);
    for (int f = 0; f < F; ++f) {
      const double g = gu[size_t(f)] * inv_rms, u = gu[size_t(F + f)] * inv_rms;
      ref_m[size_t(f)] = g / (1 + std::exp(-g)) * u;
    }
    r = compare(m, ref_m);
    EXPECT_EQ(r.non_finite, 0u) << "gate|up: unwritten or non-finite";
    EXPECT_LT(r.rel_err, kTolerance) << "gate|up vs fp64";
    // down: from the GPU's m and Xmid.
    const auto ref_d = reference(m, hWd, &xmid, 1, H, F);
    r = compare(xnext, ref_d);
    EXPECT_EQ(r.non_finite, 0u) << "down: unwritten or non-finite";
    EXPECT_LT(r.rel_err, kTolerance) << "down vs fp64";
    check_sums(xnext, gS2.data() + size_t(l) * H, "down");
  }
}

// The row-stream GEMV launched back to back with PDL on one stream and one workspace, nothing
// synchronized between the launches (as the decode chain runs it): each launch's tickets must be
// back at zero before the next one counts on them. Plain with sums of squares, residual and
// SwiGLU, 1 and 2 tokens, partial last units, enough rows that every block takes more row groups
// than the publisher's ring has slots; every output against the fp64 reference, and no ticket
// left set.
TEST(GemmSkinny, RowStreamBackToBackWithPdl) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  using ridge::kernels::SkinnyArgs;
  constexpr int kRows = 32768, kLaunches = 8, K = 4096;
  const size_t scratch_bytes = ridge::kernels::skinny_stream_scratch_bytes(kRows);
  const size_t ticket_bytes = ridge::kernels::skinny_stream_ticket_bytes(kRows);
  DeviceBuffer<unsigned char> ws_buf(scratch_bytes + ticket_bytes);
  ASSERT_TRUE(ws_buf.ptr);
  CUDA_OK(cudaMemset(ws_buf.ptr, 0xFF, scratch_bytes));
  CUDA_OK(cudaMemset(ws_buf.ptr + scratch_bytes, 0, ticket_bytes));
  cudaStream_t st = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct Launch {
    int M = 0, N = 0;
    bool residual = false, swiglu = false;
    std::vector<bf16> hX, hW, hR;
    std::unique_ptr<DeviceBuffer<bf16>> X, W, R, Y;
    std::unique_ptr<DeviceBuffer<float>> S;
  };
  std::vector<Launch> ls;
  std::mt19937 rng(4242);
  for (int i = 0; i < kLaunches; ++i) {
    Launch l;
    l.M = 1 + i % 2;
    l.swiglu = i % 3 == 2;
    l.residual = i % 3 == 1;
    l.N = l.swiglu ? 16400 : 16392;
    l.hX = random_bf16(size_t(l.M) * K, rng);
    l.hW = random_bf16(size_t(l.N) * K, rng);
    const size_t ny = size_t(l.M) * (l.swiglu ? l.N / 2 : l.N);
    l.hR = random_bf16(ny, rng, 4.f);
    l.X = std::make_unique<DeviceBuffer<bf16>>(l.hX.size());
    l.W = std::make_unique<DeviceBuffer<bf16>>(l.hW.size());
    l.R = std::make_unique<DeviceBuffer<bf16>>(ny);
    l.Y = std::make_unique<DeviceBuffer<bf16>>(ny);
    l.S = std::make_unique<DeviceBuffer<float>>(size_t(ridge::kernels::skinny_sumsq_parts(l.N)) *
                                                l.M);
    ASSERT_TRUE(l.X->ptr && l.W->ptr && l.R->ptr && l.Y->ptr && l.S->ptr);
    CUDA_OK(cudaMemcpy(l.X->ptr, l.hX.data(), l.hX.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(l.W->ptr, l.hW.data(), l.hW.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(l.R->ptr, l.hR.data(), ny * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(l.Y->ptr, 0xFF, ny * 2));
    ls.push_back(std::move(l));
  }
  CUDA_OK(cudaDeviceSynchronize());
  const int64_t launches_before = ridge::kernels::skinny_stream_launches();
  for (Launch& l : ls) {
    SkinnyArgs a;
    a.X = l.X->ptr, a.ld_x = K, a.W = l.W->ptr, a.Y = l.Y->ptr, a.M = l.M, a.N = l.N, a.K = K;
    a.swiglu = l.swiglu;
    if (l.residual) a.residual = l.R->ptr;
    if (!l.swiglu) a.sumsq_out = l.S->ptr;
    a.pdl_launch = true;
    a.stream = ridge::kernels::skinny_stream_workspace(ws_buf.ptr, kRows);
    ASSERT_TRUE(ridge::kernels::skinny_stream_applies(a));
    ridge::kernels::gemm_bf16_skinny_fused(a, ridge::kernels::SkinnyPrologue::none, st);
  }
  CUDA_OK(cudaStreamSynchronize(st));
  EXPECT_EQ(ridge::kernels::skinny_stream_launches() - launches_before, kLaunches);
  for (size_t i = 0; i < ls.size(); ++i) {
    const Launch& l = ls[i];
    SCOPED_TRACE(::testing::Message() << "launch " << i << " M=" << l.M << " N=" << l.N
                                      << (l.swiglu     ? " swiglu"
                                          : l.residual ? " residual"
                                                       : ""));
    const int out_n = l.swiglu ? l.N / 2 : l.N;
    const auto xw = reference(l.hX, l.hW, nullptr, l.M, l.N, K);
    std::vector<double> ref(size_t(l.M) * out_n);
    for (int m = 0; m < l.M; ++m)
      for (int n = 0; n < out_n; ++n) {
        double v;
        if (l.swiglu) {
          const double g = xw[size_t(m) * l.N + n], u = xw[size_t(m) * l.N + out_n + n];
          v = g / (1 + std::exp(-g)) * u;
        } else {
          v = xw[size_t(m) * l.N + n];
          if (l.residual) v += __bfloat162float(l.hR[size_t(m) * l.N + n]);
        }
        ref[size_t(m) * out_n + n] = v;
      }
    std::vector<unsigned char> raw;
    const std::vector<bf16> y = download_and_check(l.Y->ptr, ref.size(), false, ref, raw);
    if (l.swiglu) continue;
    std::vector<float> sums(l.S->count);
    CUDA_OK(cudaMemcpy(sums.data(), l.S->ptr, sums.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int p = 0; p < ridge::kernels::skinny_sumsq_parts(l.N); ++p)
      for (int m = 0; m < l.M; ++m) {
        double want = 0;
        for (int n = p * 16; n < std::min(l.N, p * 16 + 16); ++n) {
          const double v = __bfloat162float(y[size_t(m) * l.N + n]);
          want += v * v;
        }
        const double err = std::abs(sums[size_t(p) * l.M + m] - want) / want;
        if (!(err <= worst)) worst = err;  // a NaN (an unwritten part) fails
      }
    EXPECT_LT(worst, 1e-5) << "sums of squares of the stored rows";
  }
  std::vector<unsigned> tickets(kRows / 16);
  CUDA_OK(
      cudaMemcpy(tickets.data(), ws_buf.ptr + scratch_bytes, ticket_bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(tickets.begin(), tickets.end(), 0u), std::ptrdiff_t(tickets.size()))
      << "tickets left set";
  CUDA_OK(cudaStreamDestroy(st));
}

// Early weights (SkinnyArgs::stage_steps): steps of each warp's first row tile copied to shared
// memory before the PDL wait must give the unstaged kernel's bits (same MMAs, same order) and
// match the fp64 reference: every step staged, fewer staged than a warp has, more asked than
// exist, K tails, several tokens, and the epilogues; the automatic split-K must not split a
// staged launch (the narrow shapes would split unstaged). Out-of-range requests are refused.
TEST(GemmSkinny, EarlyWeightsMatchUnstaged) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  using ridge::kernels::SkinnyArgs;
  using ridge::kernels::SkinnyPrologue;
  enum class Kind { plain, residual_sumsq, swiglu, f32 };
  struct Case {
    Kind kind;
    int M, N, K, stage;
  };
  const Case cases[] = {{Kind::plain, 1, 4104, 4096, 3},       {Kind::plain, 2, 4104, 4096, 6},
                        {Kind::residual_sumsq, 8, 264, 3000, 2}, {Kind::swiglu, 1, 4112, 1032, 1},
                        {Kind::f32, 3, 264, 11008, 2}};
  uint32_t seed = 900;
  for (size_t ci = 0; ci < problem_limit(std::size(cases)); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(::testing::Message() << "kind " << int(c.kind) << " M=" << c.M << " N=" << c.N
                                      << " K=" << c.K << " stage=" << c.stage);
    const int M = c.M, N = c.N, K = c.K;
    const bool swiglu = c.kind == Kind::swiglu, f32 = c.kind == Kind::f32;
    const bool res = c.kind == Kind::residual_sumsq;
    const int out_n = swiglu ? N / 2 : N;
    const size_t ny = size_t(M) * out_n, y_bytes = ny * (f32 ? 4 : 2);
    std::mt19937 rng(seed++);
    auto hX = random_bf16(size_t(M) * K, rng), hW = random_bf16(size_t(N) * K, rng);
    auto hR = random_bf16(ny, rng, 4.f);
    DeviceBuffer<bf16> X(hX.size()), W(hW.size());
    DeviceBuffer<unsigned char> Y(y_bytes);
    DeviceBuffer<float> S(size_t(ridge::kernels::skinny_sumsq_parts(N)) * M);
    ASSERT_TRUE(X.ptr && W.ptr && Y.ptr && S.ptr);
    CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));

    const auto xw = reference(hX, hW, nullptr, M, N, K);
    std::vector<double> ref(ny);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < out_n; ++n) {
        double v = xw[size_t(m) * N + n];
        if (swiglu) v = v / (1 + std::exp(-v)) * xw[size_t(m) * N + out_n + n];
        if (res) v += __bfloat162float(hR[size_t(m) * N + n]);
        ref[size_t(m) * out_n + n] = v;
      }

    std::vector<std::vector<unsigned char>> outs;
    std::vector<std::vector<float>> sums;
    for (const int stage : {0, c.stage}) {
      SCOPED_TRACE(::testing::Message() << "stage_steps " << stage);
      SkinnyArgs a;
      a.X = X.ptr, a.ld_x = K, a.W = W.ptr, a.Y = Y.ptr, a.M = M, a.N = N, a.K = K;
      a.y_f32 = f32;
      a.swiglu = swiglu;
      a.stage_steps = stage;
      a.ring = -1;  // the register path (an automatic weight ring would replace the staging)
      // The unstaged run unsplit; the staged one automatic, which must not split (bitwise equal).
      if (stage == 0) a.split_k = 1;
      // The residual in place (Y += X·Wᵀ, as the decode step's o and down projections).
      if (res) a.residual = reinterpret_cast<const bf16*>(Y.ptr), a.sumsq_out = S.ptr;
      if (res)
        CUDA_OK(cudaMemcpy(Y.ptr, hR.data(), ny * 2, cudaMemcpyHostToDevice));
      else
        CUDA_OK(cudaMemset(Y.ptr, 0xFF, y_bytes));
      CUDA_OK(cudaMemset(S.ptr, 0xFF, S.count * 4));
      ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      outs.emplace_back();
      download_and_check(Y.ptr, ny, f32, ref, outs.back());
      sums.emplace_back(S.count);
      CUDA_OK(cudaMemcpy(sums.back().data(), S.ptr, S.count * 4, cudaMemcpyDeviceToHost));
    }
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), y_bytes), 0)
        << "staged outputs differ in their bits from the unstaged ones";
    if (res) {
      EXPECT_EQ(std::memcmp(sums[0].data(), sums[1].data(), sums[0].size() * 4), 0)
          << "staged sums of squares differ";
    }
  }

  // Refused before launching: split-K out of range, past 16 tokens, or with staged steps.
  {
    DeviceBuffer<bf16> X(17 * 64), W(64 * 64), Y(17 * 64);
    ASSERT_TRUE(X.ptr && W.ptr && Y.ptr);
    SkinnyArgs a;
    a.X = X.ptr, a.ld_x = 64, a.W = W.ptr, a.Y = Y.ptr, a.M = 1, a.N = 64, a.K = 64;
    a.split_k = ridge::kernels::skinny_max_split_k + 1;
    EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
                 ridge::Error);
    a.split_k = 2, a.M = 17;
    EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
                 ridge::Error);
    a.M = 1, a.stage_steps = 1;
    EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
                 ridge::Error);
    // The weight ring: depth 2 or 3 only, and not with staged steps.
    a.split_k = 0;
    a.ring = 2;  // (stage_steps still 1)
    EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
                 ridge::Error);
    a.stage_steps = 0;
    for (int bad : {1, 4, -2}) {
      a.ring = bad;
      EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
                   ridge::Error)
          << "ring " << bad;
    }
  }
  // Refused before launching: too many steps, a prologue, more than 8 tokens.
  DeviceBuffer<bf16> X(16 * 64), W(64 * 64), Y(16 * 64);
  DeviceBuffer<float> Sin(16 * 4);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr && Sin.ptr);
  SkinnyArgs a;
  a.X = X.ptr, a.ld_x = 64, a.W = W.ptr, a.Y = Y.ptr, a.M = 1, a.N = 64, a.K = 64;
  a.stage_steps = ridge::kernels::skinny_max_stage_steps + 1;
  EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
               ridge::Error);
  a.stage_steps = 1;
  a.sumsq_in = Sin.ptr, a.sumsq_parts = ridge::kernels::skinny_sumsq_parts(64), a.eps = 1e-5f;
  EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::rms_sumsq, nullptr),
               ridge::Error);
  a.sumsq_in = nullptr, a.sumsq_parts = 0, a.M = 9;
  EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_fused(a, SkinnyPrologue::none, nullptr),
               ridge::Error);
}

// One problem of a plain kernel (Y = X·Wᵀ, or Y += X·Wᵀ in place with `residual`): fresh random
// inputs from `seed`, the fp64 reference, two runs each with the output poisoned (or reset to the
// residual) first, both within bounds, the second bitwise equal to the first. `launch(X, W, Y,
// residual)` runs the kernel under test on the default stream.
template <typename Launch>
void check_twice(int M, int N, int K, bool residual, uint32_t seed, Launch&& launch) {
  const size_t ny = size_t(M) * N;
  std::mt19937 rng(seed);
  auto hX = random_bf16(size_t(M) * K, rng), hW = random_bf16(size_t(N) * K, rng);
  auto hR = random_bf16(ny, rng, 4.f);
  DeviceBuffer<bf16> X(hX.size()), W(hW.size()), Y(ny);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr);
  CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));
  const auto ref = reference(hX, hW, residual ? &hR : nullptr, M, N, K);
  std::vector<std::vector<unsigned char>> outs(2);
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(::testing::Message() << "run " << run);
    if (residual) {  // Y += X·Wᵀ in place: the residual starts in Y
      CUDA_OK(cudaMemcpy(Y.ptr, hR.data(), ny * 2, cudaMemcpyHostToDevice));
    } else {
      CUDA_OK(cudaMemset(Y.ptr, 0xFF, ny * 2));
    }
    launch(X.ptr, W.ptr, Y.ptr, residual ? Y.ptr : nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    download_and_check(Y.ptr, ny, false, ref, outs[run]);
  }
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), ny * 2), 0)
      << "second run: outputs differ in their bits";
}

// The row-warp skinny kernel (gemm_bf16_skinny_rows): 17-64 tokens and more (several token
// tiles), partial 128-row blocks, K tails (K not a multiple of 128), the residual in place, no
// split, the automatic split and clusters of 3 and 8 CTAs: each against the fp64 reference
// (outputs poisoned first), a second run bitwise equal; bad split counts are refused.
TEST(GemmSkinnyRows, MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  struct Case {
    int M, N, K, split;
    bool residual;
  };
  const Case cases[] = {{32, 4104, 1032, 1, false}, {17, 264, 3000, 0, true},
                        {24, 1032, 4096, 3, false}, {32, 520, 11008, 8, true},
                        {33, 4104, 1032, 0, false}, {64, 264, 2056, 1, true},
                        {70, 1032, 1032, 0, false}, {1, 136, 520, 2, false}};
  uint32_t seed = 1300;
  for (size_t ci = 0; ci < problem_limit(std::size(cases)); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(::testing::Message() << "M=" << c.M << " N=" << c.N << " K=" << c.K
                                      << " split=" << c.split << " residual=" << c.residual);
    check_twice(c.M, c.N, c.K, c.residual, seed++,
                [&](const bf16* X, const bf16* W, bf16* Y, const bf16* R) {
                  ridge::kernels::gemm_bf16_skinny_rows(X, W, Y, c.M, c.N, c.K, nullptr, R,
                                                        c.split);
                });
  }
  DeviceBuffer<bf16> X(64), W(64 * 8), Y(64);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr);
  EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_rows(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr,
                                                     nullptr, ridge::kernels::skinny_max_split_k + 1),
               ridge::Error);
  EXPECT_THROW(ridge::kernels::gemm_bf16_skinny_rows(X.ptr, W.ptr, Y.ptr, 1, 8, 60, nullptr),
               ridge::Error);
}

// The warp-row GEMV (gemv_bf16_warp_rows, one token): rows fewer and more than the grid's warps
// (one to ~20 rows a warp), K with partial phases (3,000; 11,008) and at its limit (32,768 values
// of x staged), the residual in place, both orders (window and walk), one and two blocks a SM;
// each against the fp64 reference (outputs poisoned first), a second run bitwise equal; K past the
// limit or not a multiple of 8 refused.
TEST(GemvWarpRows, MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  struct Case {
    int N, K;
    bool residual, walk;
    int blocks_per_sm;
  };
  const Case cases[] = {
      {4104, 4096, false, false, 0},  {264, 3000, true, false, 0},  {4096, 11008, true, false, 0},
      {12288, 4096, false, false, 1}, {520, 14336, false, true, 0}, {40000, 1032, true, true, 2},
      {8, 8, false, false, 0},        {16, 32768, true, false, 0},  {6152, 2056, false, true, 1}};
  uint32_t seed = 2600;
  for (size_t ci = 0; ci < problem_limit(std::size(cases)); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " K=" << c.K << " residual=" << c.residual
                                      << " walk=" << c.walk << " bps=" << c.blocks_per_sm);
    check_twice(1, c.N, c.K, c.residual, seed++,
                [&](const bf16* X, const bf16* W, bf16* Y, const bf16* R) {
                  ridge::kernels::gemv_bf16_warp_rows(X, W, Y, c.N, c.K, nullptr, R, false,
                                                      c.blocks_per_sm, c.walk);
                });
  }
  DeviceBuffer<bf16> X(40000), W(40000), Y(8);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr);
  EXPECT_THROW(ridge::kernels::gemv_bf16_warp_rows(X.ptr, W.ptr, Y.ptr, 8, 32776, nullptr),
               ridge::Error);
  EXPECT_THROW(ridge::kernels::gemv_bf16_warp_rows(X.ptr, W.ptr, Y.ptr, 8, 60, nullptr),
               ridge::Error);
}

// The weight-stream kernel (gemm_bf16_stream): every token bucket (8/16/32/64 wgmma columns,
// M below each), partial 128-row tiles, K tails (K not a multiple of 64), the residual in place,
// and grids from one CTA per SM down to a few and up to one iteration per CTA, so that a tile is
// whole in one CTA, shared by two or three, or by nine. Each against the fp64 reference (outputs
// poisoned first), a second run bitwise equal (the partials are added in CTA order). One
// workspace, zeroed once, serves every case: the kernel must leave its tickets at zero. Bad
// token counts and workspaces are refused.
TEST(GemmStream, MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  struct Case {
    int M, N, K, max_ctas;
    bool residual;
  };
  const Case cases[] = {{1, 4104, 1032, 0, false},  {8, 12288, 4096, 0, false},
                        {13, 1032, 11008, 0, true}, {16, 264, 3000, 5, true},
                        {32, 520, 1000, 3, false},  {33, 4104, 1032, 0, true},
                        {64, 4096, 4096, 0, false}, {64, 136, 520, 64, false},
                        {3, 8, 64, 0, true},        {24, 22016, 520, 7, false}};
  const size_t ws_bytes = ridge::kernels::gemm_bf16_stream_workspace_bytes();
  DeviceBuffer<unsigned char> ws(ws_bytes);
  ASSERT_TRUE(ws.ptr);
  CUDA_OK(cudaMemset(ws.ptr, 0, ws_bytes));
  uint32_t seed = 1700;
  for (size_t ci = 0; ci < problem_limit(std::size(cases)); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(::testing::Message() << "M=" << c.M << " N=" << c.N << " K=" << c.K
                                      << " max_ctas=" << c.max_ctas << " residual=" << c.residual);
    check_twice(c.M, c.N, c.K, c.residual, seed++,
                [&](const bf16* X, const bf16* W, bf16* Y, const bf16* R) {
                  ridge::kernels::gemm_bf16_stream(X, W, Y, c.M, c.N, c.K, nullptr, ws.ptr,
                                                   ws_bytes, R, c.max_ctas);
                });
  }
  DeviceBuffer<bf16> X(65 * 64), W(64 * 8), Y(65 * 8);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr);
  EXPECT_THROW(ridge::kernels::gemm_bf16_stream(X.ptr, W.ptr, Y.ptr, 65, 8, 64, nullptr, ws.ptr,
                                                ws_bytes),
               ridge::Error);
  EXPECT_THROW(ridge::kernels::gemm_bf16_stream(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr, ws.ptr,
                                                ws_bytes - 4),
               ridge::Error);
  EXPECT_THROW(ridge::kernels::gemm_bf16_stream(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr, nullptr,
                                                ws_bytes),
               ridge::Error);
}

constexpr ridge::kernels::WindowLoader kWindowLoaders[] = {
    ridge::kernels::WindowLoader::cp_async, ridge::kernels::WindowLoader::bulk,
    ridge::kernels::WindowLoader::bulk_dynamic};

// The window GEMV (gemm_bf16_window): 1-32 tokens in every token-tile count (8, 16, 32), the
// automatic segment and every forced one (16-128 chunks), K tails (a last segment and a last
// column group partly past K), one segment (K short), partial units (N not a multiple of 16),
// more units than resident blocks, the residual in place. Each against the fp64 reference
// (outputs poisoned first), a second run bitwise equal (the segments are summed in order). One
// workspace, zeroed once, serves every case, shapes large and small in turn: every launch must
// leave its tickets at zero, and a shape's partial sums must not be read as another's tickets.
// Every loader (cp.async by every thread; bulk copies by a producer warp, in the static order or
// taking units from the workspace's counters): each case runs with each, and the counters must be
// zero afterwards too. Bad token counts, widths, segments and workspaces are refused.
TEST(GemmWindow, MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  struct Case {
    int M, N, K, seg;
    bool residual;
  };
  const Case cases[] = {
      {1, 4104, 4096, 0, false},  {8, 12288, 4096, 0, true},  {3, 1032, 11008, 0, false},
      {16, 4096, 4096, 0, false}, {13, 264, 1000, 16, true},  {32, 4104, 4096, 0, false},
      {17, 520, 11008, 0, true},  {2, 8, 64, 0, false},       {5, 22016, 520, 32, false},
      {24, 1032, 3000, 64, true}, {1, 136, 8192, 128, false}, {9, 4096, 1032, 128, false},
      {32, 200, 2056, 16, true}};
  size_t ws_bytes = 0;
  for (const Case& c : cases)
    ws_bytes =
        std::max(ws_bytes, ridge::kernels::gemm_bf16_window_workspace_bytes(c.M, c.N, c.K, c.seg));
  DeviceBuffer<unsigned char> ws(ws_bytes);
  ASSERT_TRUE(ws.ptr);
  CUDA_OK(cudaMemset(ws.ptr, 0, ws_bytes));
  // The tickets sit at the start of the workspace for every shape.
  const size_t max_tickets = ridge::kernels::window_gemm_ticket_bytes / sizeof(unsigned);
  uint32_t seed = 2100;
  for (size_t ci = 0; ci < problem_limit(std::size(cases)); ++ci) {
    const Case& c = cases[ci];
    for (auto loader : kWindowLoaders) {
      const auto plan = ridge::kernels::window_gemm_plan(c.M, c.K, c.seg, loader);
      SCOPED_TRACE(::testing::Message() << "M=" << c.M << " N=" << c.N << " K=" << c.K
                                        << " seg=" << plan.seg << " ksegs=" << plan.ksegs
                                        << " residual=" << c.residual << " loader=" << int(loader));
      check_twice(c.M, c.N, c.K, c.residual, seed++,
                  [&](const bf16* X, const bf16* W, bf16* Y, const bf16* R) {
                    ridge::kernels::gemm_bf16_window(X, W, Y, c.M, c.N, c.K, nullptr, ws.ptr,
                                                     ws_bytes, R, c.seg, /*pdl*/ ci % 2 == 1,
                                                     loader);
                  });
    }
  }
  // Every launch leaves the whole workspace zero: tickets, counters and partial sums (the
  // hand-off reads a partial until it is not zero).
  std::vector<unsigned char> left(ws_bytes);
  CUDA_OK(cudaMemcpy(left.data(), ws.ptr, ws_bytes, cudaMemcpyDeviceToHost));
  const size_t nonzero = ws_bytes - size_t(std::count(left.begin(), left.end(), 0));
  EXPECT_EQ(nonzero, 0u) << "the window GEMV left bytes of its workspace that are not zero, "
                         << "the first at "
                         << (std::find_if(left.begin(), left.end(), [](auto b) { return b != 0; }) -
                             left.begin())
                         << " (tickets and counters end at " << max_tickets * 4 << ")";
  DeviceBuffer<bf16> X(33 * 64), W(64 * 8), Y(33 * 8);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr);
  namespace kn = ridge::kernels;
  EXPECT_THROW(kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 33, 8, 64, nullptr, ws.ptr, ws_bytes),
               ridge::Error);
  EXPECT_THROW(kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 1, kn::window_gemm_max_n + 8, 64, nullptr,
                                    ws.ptr, ws_bytes),
               ridge::Error);
  EXPECT_THROW(
      kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr, ws.ptr, ws_bytes, nullptr, 24),
      ridge::Error);
  EXPECT_THROW(
      kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr, ws.ptr, ws_bytes, nullptr, 256),
      ridge::Error);
  // 17-32 tokens: a ring of 2 KB segments does not fit in shared memory
  EXPECT_THROW(
      kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 17, 8, 64, nullptr, ws.ptr, ws_bytes, nullptr, 128),
      ridge::Error);
  EXPECT_THROW(kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr, ws.ptr,
                                    kn::gemm_bf16_window_workspace_bytes(1, 8, 64) - 4),
               ridge::Error);
  EXPECT_THROW(kn::gemm_bf16_window(X.ptr, W.ptr, Y.ptr, 1, 8, 64, nullptr, nullptr, ws_bytes),
               ridge::Error);
}

// The window GEMV launched 8 times back to back with PDL on one workspace, no synchronization
// between them: each launch's blocks may start while the previous one's still publish and reduce,
// so a ticket or partial reset late, or a partial read early, would show. Every output within
// bounds of the fp64 reference and bitwise equal to the first; both loaders, which sum in the same
// order, so the bulk loader's outputs equal the cp.async loader's bit for bit.
TEST(GemmWindow, BackToBackWithPdl) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  const int M = 8, N = 12296, K = 4096, kLaunches = 8;
  std::mt19937 rng(2200);
  auto hX = random_bf16(size_t(M) * K, rng), hW = random_bf16(size_t(N) * K, rng);
  DeviceBuffer<bf16> X(hX.size()), W(hW.size()), Y(size_t(kLaunches) * M * N);
  const size_t ws_bytes = ridge::kernels::gemm_bf16_window_workspace_bytes(M, N, K);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  ASSERT_TRUE(X.ptr && W.ptr && Y.ptr && ws.ptr);
  CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(ws.ptr, 0, ws_bytes));
  const auto ref = reference(hX, hW, nullptr, M, N, K);
  std::vector<unsigned char> first;  // the cp.async loader's first output
  for (auto loader : kWindowLoaders) {
    const bool bulk = loader != ridge::kernels::WindowLoader::cp_async;
    SCOPED_TRACE(::testing::Message() << "loader=" << int(loader));
    CUDA_OK(cudaMemset(Y.ptr, 0xFF, Y.count * 2));
    for (int l = 0; l < kLaunches; ++l)
      ridge::kernels::gemm_bf16_window(X.ptr, W.ptr, Y.ptr + size_t(l) * M * N, M, N, K, nullptr,
                                       ws.ptr, ws_bytes, nullptr, 0, /*pdl*/ true, loader);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<std::vector<unsigned char>> outs(kLaunches);
    for (int l = 0; l < kLaunches; ++l) {
      SCOPED_TRACE(::testing::Message() << "launch " << l);
      download_and_check(Y.ptr + size_t(l) * M * N, size_t(M) * N, false, ref, outs[size_t(l)]);
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[size_t(l)].data(), outs[0].size()), 0)
          << "differs in its bits from the first launch";
    }
    if (!bulk)
      first = outs[0];
    else
      EXPECT_TRUE(first == outs[0])
          << "the bulk loader's output differs from the cp.async loader's";
  }
  std::vector<unsigned char> left(ws_bytes);
  CUDA_OK(cudaMemcpy(left.data(), ws.ptr, ws_bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(size_t(std::count(left.begin(), left.end(), 0)), ws_bytes)
      << "tickets, counters or partial sums not zero after the launches";
}

TEST(GemmSm90, MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  const Problem problems[] = {
      {128, 256, 64},    {1, 256, 64},      {65, 264, 136},   {300, 264, 72, true},
      {200, 520, 1000},
      {256, 512, 4096},  {129, 1032, 520},  {384, 768, 2048}, {1000, 776, 520},
      {512, 1024, 1024, true}};
  uint32_t seed = 100;
  for (size_t i = 0; i < problem_limit(std::size(problems)); ++i)
    check_problem(Kernel::kSm90, problems[i], seed++);
}

// Every configuration of the sm90 kernel (tile width, ring depth, register or TMA-store epilogue,
// persistent or not, raster, grid size) on one uneven problem: each against the reference, and
// the two epilogues of one tile width bitwise equal (same main loop, same roundings).
TEST(GemmSm90, TileShapesSchedulesAndEpiloguesAgree) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  const int M = 1100, N = 1544, K = 1024;  // 9 × 7 tiles (an odd count of tile rows for the
                                           // clusters of two), partial last row and column
  std::mt19937 rng(7);
  auto hX = random_bf16(static_cast<size_t>(M) * K, rng);
  auto hW = random_bf16(static_cast<size_t>(N) * K, rng);
  DeviceBuffer<bf16> X(hX.size()), W(hW.size()), Y(static_cast<size_t>(M) * N);
  CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));
  const auto ref = reference(hX, hW, nullptr, M, N, K);
  struct Config {
    const char* name;
    int block_n, stages;
    bool tma_store, persistent;
    int group_m, max_ctas, cluster_m;
    bool wave_split = false;
  };
  const Config configs[] = {
      {"256 reg, one CTA per tile, row order", 256, 4, false, false, 1, 0, 1},
      {"256 tma 4 stages, 5 CTAs, grouped", 256, 4, true, true, 3, 5, 1},
      {"256 tma 3 stages, 7 CTAs", 256, 3, true, true, 8, 7, 1},
      {"128 tma, one CTA per tile", 128, 6, true, false, 1, 0, 1},
      {"256 tma, clusters of 2, 3 clusters", 256, 4, true, true, 3, 6, 2},
      {"256 tma, clusters of 2, all SMs", 256, 0, true, true, 8, 0, 2},
      {"128 tma, 5 CTAs, grouped", 128, 6, true, true, 3, 5, 1},
      // 63 tiles on 31 CTAs: 6 columns in two full waves, the 8 columns left as 128-wide tiles
      // in a second launch (a Y column offset with the full row stride)
      {"256 tma, wave split, 31 CTAs", 256, 0, true, true, 8, 31, 1, true}};
  std::vector<std::vector<bf16>> out;
  for (const auto& c : configs) {
    SCOPED_TRACE(c.name);
    ridge::kernels::Sm90GemmOptions o;
    o.block_n = c.block_n;
    o.stages = c.stages;
    o.tma_store = c.tma_store;
    o.persistent = c.persistent;
    o.group_m = c.group_m;
    o.max_ctas = c.max_ctas;
    o.cluster_m = c.cluster_m;
    o.wave_split = c.wave_split;
    CUDA_OK(cudaMemset(Y.ptr, 0xFF, Y.count * 2));
    ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, M, N, K, nullptr, nullptr, o);
    CUDA_OK(cudaDeviceSynchronize());
    out.emplace_back(Y.count);
    CUDA_OK(cudaMemcpy(out.back().data(), Y.ptr, Y.count * 2, cudaMemcpyDeviceToHost));
    const Result r = compare(out.back(), ref);
    EXPECT_EQ(r.non_finite, 0u);
    EXPECT_LT(r.rel_err, kTolerance);
  }
  EXPECT_EQ(bits_differ(out[0], out[1]), 0u) << "BN 256: TMA-store epilogue vs register stores";
  EXPECT_EQ(bits_differ(out[0], out[2]), 0u) << "BN 256: 3 vs 4 stages";
  EXPECT_EQ(bits_differ(out[0], out[4]), 0u) << "BN 256: clusters of 2 vs 1";
  EXPECT_EQ(bits_differ(out[0], out[5]), 0u) << "BN 256: clusters of 2 on every SM vs 1";
  EXPECT_EQ(bits_differ(out[3], out[6]), 0u) << "BN 128: persistent vs one CTA per tile";
  // The wave split: its first 1536 columns are the 256-wide launch's, the last 8 the 128-wide's.
  size_t split_diff = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const std::vector<bf16>& same = n < 1536 ? out[0] : out[3];
      const size_t i = static_cast<size_t>(m) * N + n;
      split_diff += reinterpret_cast<const uint16_t*>(out[7].data())[i] !=
                    reinterpret_cast<const uint16_t*>(same.data())[i];
    }
  EXPECT_EQ(split_diff, 0u) << "wave split vs one launch of each tile width";
}

// The wave split with a residual: the second launch adds the residual at a column offset with
// the full row stride (the same split as above: 63 tiles on 31 CTAs).
TEST(GemmSm90, WaveSplitWithResidual) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  const int M = 1100, N = 1544, K = 264;
  std::mt19937 rng(21);
  auto hX = random_bf16(static_cast<size_t>(M) * K, rng);
  auto hW = random_bf16(static_cast<size_t>(N) * K, rng);
  auto hR = random_bf16(static_cast<size_t>(M) * N, rng, 4.f);
  DeviceBuffer<bf16> X(hX.size()), W(hW.size()), R(hR.size()), Y(hR.size());
  CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(R.ptr, hR.data(), hR.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(Y.ptr, 0xFF, Y.count * 2));
  ridge::kernels::Sm90GemmOptions o;
  o.block_n = 256;  // (the wave model would pick 128 for this shape on 132 SMs)
  o.max_ctas = 31;
  o.wave_split = true;
  ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, M, N, K, nullptr, R.ptr, o);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<bf16> hY(Y.count);
  CUDA_OK(cudaMemcpy(hY.data(), Y.ptr, Y.count * 2, cudaMemcpyDeviceToHost));
  const Result r = compare(hY, reference(hX, hW, &hR, M, N, K));
  EXPECT_EQ(r.non_finite, 0u);
  EXPECT_LT(r.rel_err, kTolerance);
}

// The wave split's decision (host only; runs without a GPU). Waves of 256-wide tiles cost 1,
// 128-wide ones 0.55; a split must save a quarter of a wave.
TEST(GemmSm90, WaveSplitDecision) {
  using ridge::kernels::detail::sm90_wave_split_columns;
  // Llama-2 gate|up at M = 2048: 16 × 86 tiles = 10.4 waves on 132 SMs. 82 columns fill 10 waves
  // (1,312 tiles), the last 4 columns as 128 narrow tiles take one wave of 0.55: 10.55 < 11.
  EXPECT_EQ(sm90_wave_split_columns(16, 86, 132), 82);
  // q|k|v at M = 2048: 768 tiles = 5.8 waves, the last one 82% full: no split.
  EXPECT_EQ(sm90_wave_split_columns(16, 48, 132), 0);
  // gate|up at M = 8192: 5,504 tiles = 41.7 waves: split, 41 + 2 × 0.55 = 42.1 waves, no gain.
  EXPECT_EQ(sm90_wave_split_columns(64, 86, 132), 0);
  // One wave or less: nothing to split.
  EXPECT_EQ(sm90_wave_split_columns(2, 16, 132), 0);
  // The GPU test's case: 9 × 7 tiles on 31 CTAs (3 waves, the last of one tile): 6 columns.
  EXPECT_EQ(sm90_wave_split_columns(9, 7, 31), 6);
}

TEST(GemmSm90, RefusesUnknownConfigurations) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  DeviceBuffer<bf16> X(4096), W(4096), Y(4096);
  ridge::kernels::Sm90GemmOptions o;
  o.block_n = 128;
  o.stages = 3;  // 3 stages exist only for BN 256
  EXPECT_THROW(ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, 8, 64, 64, nullptr, nullptr, o),
               ridge::Error);
  o.stages = 0;
  o.tma_store = false;  // register stores run 256-wide tiles only
  EXPECT_THROW(ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, 8, 64, 64, nullptr, nullptr, o),
               ridge::Error);
  o.block_n = 256;
  o.stages = 3;  // and 4 stages
  EXPECT_THROW(ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, 8, 64, 64, nullptr, nullptr, o),
               ridge::Error);
  o.block_n = 128;
  o.stages = 0;
  o.tma_store = true;
  o.cluster_m = 2;  // clusters run 256-wide tiles only
  EXPECT_THROW(ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, 8, 64, 64, nullptr, nullptr, o),
               ridge::Error);
  o.block_n = 256;
  o.cluster_m = 4;
  EXPECT_THROW(ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, 8, 64, 64, nullptr, nullptr, o),
               ridge::Error);
  o.cluster_m = 1;
  o.block_n = 192;
  EXPECT_THROW(ridge::kernels::gemm_bf16_sm90(X.ptr, W.ptr, Y.ptr, 8, 64, 64, nullptr, nullptr, o),
               ridge::Error);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing was launched
}

TEST(Gemm, DispatchMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  const Problem problems[] = {{5, 264, 520}, {32, 520, 1000}, {40, 264, 520}, {130, 1032, 520}};
  uint32_t seed = 300;
  for (const auto& p : problems) check_problem(Kernel::kDispatch, p, seed++);
}

// M = 130, F = 384 runs 128-wide tiles; M = 1000, F = 2048 (128 tiles of 256) 256-wide ones.
TEST(GemmSwiGLU, MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!is_sm90()) GTEST_SKIP() << "not an sm_90 GPU";
  for (const auto [M, F, K] : {std::array<int, 3>{130, 384, 520}, std::array<int, 3>{1000, 2048, 264}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " F=" << F << " K=" << K);
    std::mt19937 rng(11 + M);
    auto hX = random_bf16(static_cast<size_t>(M) * K, rng);
    auto hW = random_bf16(static_cast<size_t>(2 * F) * K, rng);
    DeviceBuffer<bf16> X(hX.size()), W(hW.size()), Y(static_cast<size_t>(M) * F);
    CUDA_OK(cudaMemcpy(X.ptr, hX.data(), hX.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(W.ptr, hW.data(), hW.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(Y.ptr, 0xFF, Y.count * 2));
    ridge::kernels::gemm_bf16_swiglu(X.ptr, W.ptr, Y.ptr, M, F, K, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<bf16> hY(Y.count);
    CUDA_OK(cudaMemcpy(hY.data(), Y.ptr, Y.count * 2, cudaMemcpyDeviceToHost));
    const auto gu = reference(hX, hW, nullptr, M, 2 * F, K);
    std::vector<double> ref(static_cast<size_t>(M) * F);
    for (int m = 0; m < M; ++m)
      for (int f = 0; f < F; ++f) {
        const double g = gu[static_cast<size_t>(m) * 2 * F + f];
        const double u = gu[static_cast<size_t>(m) * 2 * F + F + f];
        ref[static_cast<size_t>(m) * F + f] = g / (1 + std::exp(-g)) * u;
      }
    const Result r = compare(hY, ref);
    EXPECT_EQ(r.non_finite, 0u);
    EXPECT_LT(r.rel_err, kTolerance);
    if (std::getenv("RIDGE_GEMM_TEST_SMALL")) break;
  }
}

TEST(Gemm, RefusesUnsupportedShapes) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer<bf16> X(4096), W(4096), Y(4096);
  using ridge::kernels::gemm_bf16;
  EXPECT_THROW(gemm_bf16(X.ptr, W.ptr, Y.ptr, 4, 16, 12, nullptr), ridge::Error);  // K % 8
  EXPECT_THROW(gemm_bf16(X.ptr, W.ptr, Y.ptr, 4, 12, 16, nullptr), ridge::Error);  // N % 8
  EXPECT_THROW(gemm_bf16(X.ptr, W.ptr, Y.ptr, 0, 16, 16, nullptr), ridge::Error);
  EXPECT_THROW(gemm_bf16(X.ptr + 1, W.ptr, Y.ptr, 4, 16, 16, nullptr), ridge::Error);
  EXPECT_THROW(gemm_bf16(nullptr, W.ptr, Y.ptr, 4, 16, 16, nullptr), ridge::Error);
  EXPECT_THROW(ridge::kernels::gemm_bf16_swiglu(X.ptr, W.ptr, Y.ptr, 4, 24, 16, nullptr),
               ridge::Error);  // F % 128
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing was launched
}

}  // namespace
