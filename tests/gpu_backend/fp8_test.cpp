// fp8 weights on the CUDA backend (--quantization fp8): Backend::quantize_weight re-encodes a bf16
// matrix as E4M3 codes with one fp32 scale per row, and matmul / matmul_add / matmul_fused /
// matmul_swiglu with such a weight quantize their activations per token the same way and run
// cuBLASLt's fp8 GEMM with both scale vectors.
//
// References, computed here on the host from the same bf16 inputs:
//   - the quantization itself, bit for bit: amax / 448 per row, each value divided by it and
//     rounded by f32_to_fp8e4m3 (the CPU backend's E4M3 encoder);
//   - the products in fp64 from the host-quantized codes and scales: the GPU's result may differ
//     by one bf16 rounding of the output (at most 2^-8 of each value: 8 significant bits, round
//     to nearest; bound 4e-3 of a row's norm) plus the accumulation's own error, which scales
//     with sum_k |x_k w_k|, not with the result: where a row's dominant dot products cancel, it
//     is a larger share of the result. Hopper's fp8 MMA keeps about 14 bits of its aligned sum
//     (DeepSeek-V3 report, 3.3.2), so that error is a few 2^-13 of sum_k |x_k w_k|; the per-row
//     check allows 2^-10 of it on top of the rounding (one cuBLASLt call at K = 16 read 0.00408
//     of its row's norm against the rounding's 0.004 alone, run 46). A wrong code or scale is
//     off by several percent of sum_k |x_k w_k|;
//   - the bf16 product without quantization, to bound what E4M3's 3 mantissa bits cost: each
//     operand off by at most 2^-4 relative, ~2.55 % RMS after rounding to nearest, so a product
//     term by ~3.6 % RMS. The error of an output row is measured against the scale of that
//     rounding, sqrt(sum_n sum_k x_k^2 w_nk^2), not against the row's own norm: a row whose
//     few dominant dot products cancel by chance would otherwise read as a large relative error
//     (a 300-row case drew 0.062 against 0.06 once). The RMS of that ratio over a call's rows is
//     ~0.037 (0.048 the worst of 400 simulated draws of every shape here); truncating instead of
//     rounding would give ~0.072, a wrong scale far more: bound 0.06.
// Fresh random inputs with rows of different magnitudes (so that per-row scales matter), and
// outputs poisoned before each run.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "harness.h"
#include "ridge/backend/cuda/cuda_backend.h"
#include "ridge/backend/factory.h"
#include "ridge/core/error.h"

namespace ridge::backend::gpu_test {
namespace {

// Host reference of kernels::quantize_rows_fp8 over bf16-exact floats [rows, cols].
struct HostFp8 {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
HostFp8 quantize_host(const std::vector<float>& x, int64_t rows, int64_t cols) {
  HostFp8 q;
  q.codes.resize(size_t(rows * cols));
  q.scales.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    q.scales[size_t(r)] = s;
    for (int64_t c = 0; c < cols; ++c)
      q.codes[size_t(r * cols + c)] = f32_to_fp8e4m3(x[size_t(r * cols + c)] / s);
  }
  return q;
}

// Values whose rows span five decades (row r scaled by 10^u, u uniform in [-3, 2]), bf16-exact.
std::vector<float> ragged_rows(int64_t rows, int64_t cols, float scale) {
  std::vector<float> v = random_bf16(size_t(rows * cols), scale);
  std::uniform_real_distribution<float> u(-3.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float f = std::pow(10.0f, u(rng()));
    for (int64_t c = 0; c < cols; ++c) {
      float& e = v[size_t(r * cols + c)];
      e = bf16_to_f32(f32_to_bf16(e * f));
    }
  }
  return v;
}

struct Fp8Weight {
  std::vector<float> values;  // bf16-exact [N, K]
  std::vector<uint16_t> bits;
  Tensor dev;  // fp8_e4m3, row-scaled
};
Fp8Weight fp8_weight(int64_t N, int64_t K, Backend& be = cuda()) {
  Fp8Weight w;
  w.values = ragged_rows(N, K, 0.05f);
  w.bits = to_bf16_bits(w.values);
  w.dev = be.upload_weight(Tensor(w.bits.data(), DType::bf16, {N, K}));
  EXPECT_TRUE(be.quantize_weight(w.dev, DType::fp8_e4m3)) << w.dev.describe();
  return w;
}

// A CUDA backend made with one environment switch set.
std::unique_ptr<Backend> backend_with(const char* env, const char* value = "1") {
  setenv(env, value, 1);
  auto be = make_backend("cuda");
  unsetenv(env);
  return be;
}
// fp8 matmuls that scale the unscaled product in ridge's kernel (RIDGE_FP8_SCALE_KERNEL=1: the
// path taken where cuBLASLt refuses per-row scales).
Backend& scaling_kernel_backend() {
  static std::unique_ptr<Backend> b = backend_with("RIDGE_FP8_SCALE_KERNEL");
  return *b;
}
// fp8 matmuls of 1-4 tokens through kernels::gemv_fp8 (the default; RIDGE_FP8_GEMV=1 says so).
Backend& gemv_backend() {
  static std::unique_ptr<Backend> b = backend_with("RIDGE_FP8_GEMV");
  return *b;
}
// The GEMV without its fusions (RIDGE_FP8_FUSE=0): the norm and silu_mul as kernels of their own.
Backend& composed_backend() {
  static std::unique_ptr<Backend> b = backend_with("RIDGE_FP8_FUSE", "0");
  return *b;
}
// Every fp8 matmul through cuBLASLt (RIDGE_FP8_GEMV=0), 1-4 tokens included.
Backend& cublaslt_backend() {
  static std::unique_ptr<Backend> b = backend_with("RIDGE_FP8_GEMV", "0");
  return *b;
}

template <typename T>
std::vector<T> download_raw(const void* src, size_t n) {
  std::vector<T> v(n);
  cuda().download({}, v.data(), src, n * sizeof(T));
  cuda().synchronize({});
  return v;
}

// ref[t, n] = sx[t] · sw[n] · Σ_k x_code · w_code in fp64 (+ residual, + bias); with `magnitude`,
// also |sx[t] · sw[n]| · Σ_k |x_code · w_code| there (the scale of the accumulation's error).
std::vector<float> reference(const HostFp8& x, const HostFp8& w, int64_t T, int64_t N, int64_t K,
                             const std::vector<float>* residual, const std::vector<float>* bias,
                             std::vector<float>* magnitude = nullptr) {
  if (magnitude) magnitude->assign(size_t(T * N), 0.0f);
  std::vector<double> wd(w.codes.size());
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = fp8e4m3_to_f32(w.codes[i]);
  std::vector<float> out(size_t(T * N));
  std::vector<double> xd(static_cast<size_t>(K));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) xd[size_t(k)] = fp8e4m3_to_f32(x.codes[size_t(t * K + k)]);
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, abs_acc = 0;
      const double* wr = wd.data() + n * K;
      for (int64_t k = 0; k < K; ++k) {
        acc += xd[size_t(k)] * wr[k];
        abs_acc += std::fabs(xd[size_t(k)] * wr[k]);
      }
      const double scale = double(x.scales[size_t(t)]) * double(w.scales[size_t(n)]);
      if (magnitude) (*magnitude)[size_t(t * N + n)] = float(abs_acc * std::fabs(scale));
      double v = acc * scale;
      if (residual) v += (*residual)[size_t(t * N + n)];
      if (bias) v += (*bias)[size_t(n)];
      out[size_t(t * N + n)] = float(v);
    }
  }
  return out;
}

// The unquantized product in fp64 (what bf16 weights would give, before output rounding), and
// per output row the scale of its operands' rounding errors: sum_n sum_k x_tk^2 w_nk^2.
struct Bf16Product {
  std::vector<float> out;
  std::vector<double> rounding_scale2;
};
Bf16Product reference_bf16(const std::vector<float>& x, const std::vector<float>& w, int64_t T,
                           int64_t N, int64_t K) {
  Bf16Product p{std::vector<float>(size_t(T * N)), std::vector<double>(size_t(T), 0.0)};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, sq = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double xw = double(x[size_t(t * K + k)]) * double(w[size_t(n * K + k)]);
        acc += xw;
        sq += xw * xw;
      }
      p.out[size_t(t * N + n)] = float(acc);
      p.rounding_scale2[size_t(t)] += sq;
    }
  return p;
}

// What E4M3 costs: the RMS over rows of ||got_t - ref_t|| / sqrt(rounding_scale2_t) (the header
// says why this scale) within bound; NaN fails.
void expect_quantization_cost(const std::string& what, const std::vector<float>& got,
                              const Bf16Product& ref, int64_t T, int64_t N, double bound) {
  double sum = 0;
  for (int64_t t = 0; t < T; ++t) {
    double num = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double g = got[size_t(t * N + n)], r = ref.out[size_t(t * N + n)];
      ASSERT_TRUE(std::isfinite(g)) << what << " row " << t;
      num += (g - r) * (g - r);
    }
    ASSERT_GT(ref.rounding_scale2[size_t(t)], 0.0) << what << " row " << t;
    sum += num / ref.rounding_scale2[size_t(t)];
  }
  const double rms = std::sqrt(sum / double(T));
  EXPECT_LE(rms, bound) << what;
  fmt::print("RESULT {:<70} rms {:.3e} (bound {:.0e})\n", what, rms, bound);
}

// Per output row: ||got_t - ref_t|| / ||ref_t|| within bound (rows span ten decades here, so the
// harness's one norm over the matrix would see the largest rows alone). With `magnitude` (the
// reference's |sx sw| Σ_k |x_k w_k|), ||got_t - ref_t|| within bound · ||ref_t|| +
// kFp8AccumulationError · ||magnitude_t|| (the header says why).
constexpr double kFp8AccumulationError = 1.0 / 1024;
void expect_rows_close(const std::string& what, const std::vector<float>& got,
                       const std::vector<float>& ref, int64_t T, int64_t N, double bound,
                       const std::vector<float>* magnitude = nullptr) {
  double worst = 0, worst_rel = 0;
  int64_t worst_row = -1;
  for (int64_t t = 0; t < T; ++t) {
    double num = 0, den = 0, mag = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double g = got[size_t(t * N + n)], r = ref[size_t(t * N + n)];
      ASSERT_TRUE(std::isfinite(g)) << what << " row " << t;
      num += (g - r) * (g - r);
      den += r * r;
      if (magnitude)
        mag += double((*magnitude)[size_t(t * N + n)]) * (*magnitude)[size_t(t * N + n)];
    }
    // The error as a share of what the row may be off by (1: at the bound).
    const double allowed = bound * std::sqrt(den) + kFp8AccumulationError * std::sqrt(mag);
    const double e = allowed > 0 ? std::sqrt(num) / allowed : std::sqrt(num) / bound;
    if (e > worst) {
      worst = e, worst_row = t;
      worst_rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": row " << worst_row << " off by " << worst_rel
                        << " of its norm (bound " << bound
                        << (magnitude ? " plus the accumulation's share)" : ")");
}

TEST_F(GpuBackend, QuantizeWeightFp8MatchesHost) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{16, 16}, {48, 576}, {304, 4096}, {16, 11008}}) {
    std::vector<float> v = ragged_rows(N, K, 0.05f);
    std::fill(v.begin() + K, v.begin() + 2 * K, 0.0f);  // a row of zeros: scale 1
    const std::vector<uint16_t> bits = to_bf16_bits(v);
    Tensor w =
        cuda().upload_weight(Tensor(const_cast<uint16_t*>(bits.data()), DType::bf16, {N, K}));
    ASSERT_TRUE(cuda().quantize_weight(w, DType::fp8_e4m3)) << N << "x" << K;
    ASSERT_EQ(w.dtype, DType::fp8_e4m3);
    ASSERT_NE(w.scales, nullptr);
    ASSERT_EQ(w.shape[0], N);
    ASSERT_EQ(w.shape[1], K);
    const HostFp8 ref = quantize_host(v, N, K);
    const auto codes = download_raw<uint8_t>(w.data, size_t(N * K));
    const auto scales = download_raw<float>(w.scales, size_t(N));
    int64_t code_mismatch = 0, scale_mismatch = 0;
    for (size_t i = 0; i < codes.size(); ++i) code_mismatch += codes[i] != ref.codes[i];
    for (size_t i = 0; i < scales.size(); ++i) scale_mismatch += scales[i] != ref.scales[i];
    EXPECT_EQ(code_mismatch, 0) << N << "x" << K;
    EXPECT_EQ(scale_mismatch, 0) << N << "x" << K;
    EXPECT_EQ(scales[1], 1.0f);
    // A row-scaled slice keeps its rows' scales.
    EXPECT_EQ(w.slice_rows(1, N).scales, w.scales + 1);
  }
}

TEST_F(GpuBackend, QuantizeWeightFp8RefusesWhatItCannotHold) {
  std::vector<float> v = random_bf16(48 * 40, 0.05f);
  const std::vector<uint16_t> bits = to_bf16_bits(v);
  // K % 16 != 0 ([48, 40]), N % 16 != 0 ([40, 48]): nothing changes.
  for (auto [N, K] : {std::pair<int64_t, int64_t>{48, 40}, {40, 48}}) {
    Tensor w =
        cuda().upload_weight(Tensor(const_cast<uint16_t*>(bits.data()), DType::bf16, {N, K}));
    const Tensor before = w;
    EXPECT_FALSE(cuda().quantize_weight(w, DType::fp8_e4m3)) << N << "x" << K;
    EXPECT_EQ(w.data, before.data);
    EXPECT_EQ(w.dtype, DType::bf16);
    EXPECT_EQ(w.scales, nullptr);
  }
  Tensor w =
      cuda().upload_weight(Tensor(const_cast<uint16_t*>(bits.data()), DType::bf16, {48, 40}));
  EXPECT_FALSE(cuda().quantize_weight(w, DType::q8_0));  // not a dtype it quantizes to
}

// The harness's convention: the CUDA op against the CPU reference backend's. Both quantize the same
// bf16 weights and bf16-exact activations by the same rule (CpuBackend::quantize_weight and its
// fp8 matmul), so they make the same codes; the results differ by accumulation order and the
// GPU's bf16 output rounding.
TEST_F(GpuBackend, MatmulFp8MatchesTheCpuBackend) {
  for (Backend* be : {&cuda(), &cublaslt_backend()}) {
    for (auto [T, N, K] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 4096, 4096}, {4, 1024, 2048}, {37, 768, 576}}) {
      const std::string what = fmt::format("T={} N={} K={}{}", T, N, K,
                                           be == &cuda() ? " (gemv where T <= 4)" : " (cuBLASLt)");
      std::vector<float> wv = ragged_rows(N, K, 0.05f);
      const std::vector<uint16_t> bits = to_bf16_bits(wv);
      Tensor wd =
          be->upload_weight(Tensor(const_cast<uint16_t*>(bits.data()), DType::bf16, {N, K}));
      Tensor wh(const_cast<uint16_t*>(bits.data()), DType::bf16, {N, K});
      ASSERT_TRUE(be->quantize_weight(wd, DType::fp8_e4m3)) << what;
      ASSERT_TRUE(cpu().quantize_weight(wh, DType::fp8_e4m3)) << what;
      // The same codes and scales, bit for bit.
      std::vector<uint8_t> codes(size_t(N * K));
      std::vector<float> scales(static_cast<size_t>(N));
      be->download({}, codes.data(), wd.data, codes.size());
      be->download({}, scales.data(), wd.scales, scales.size() * sizeof(float));
      be->synchronize({});
      EXPECT_EQ(std::memcmp(codes.data(), wh.data, codes.size()), 0) << what;
      EXPECT_EQ(std::memcmp(scales.data(), wh.scales, scales.size() * sizeof(float)), 0) << what;
      const std::vector<float> x = ragged_rows(T, K, 1.0f), r = random_bf16(size_t(T * N));
      // A plain product (its rows span the x rows' ten decades) and one with the residual.
      for (bool accumulate : {false, true}) {
        std::vector<float> ref = accumulate ? r : std::vector<float>(size_t(T * N));
        Tensor ref_t = host_f32(ref, T, N);
        std::vector<float> xh = x;
        if (accumulate)
          cpu().matmul_add({}, host_f32(xh, T, K), wh, ref_t);
        else
          cpu().matmul({}, host_f32(xh, T, K), wh, nullptr, ref_t);
        DeviceMatrix xd = device_bf16(T, K, x),
                     out = device_bf16(T, N, accumulate ? r : std::vector<float>{});
        if (accumulate)
          be->matmul_add({}, xd.view, wd, out.view);
        else
          be->matmul({}, xd.view, wd, nullptr, out.view);
        be->synchronize({});
        const std::vector<float> got = download_view(out);
        // One bf16 rounding of the output (2^-8 relative at most) over fp32 sums in another
        // order: 4e-3 per row.
        const std::string w2 = what + (accumulate ? " +residual" : "");
        expect_close("matmul fp8 vs cpu", w2, got, ref, 4e-3);
        expect_rows_close("matmul fp8 vs cpu " + w2, got, ref, T, N, 4e-3);
      }
    }
  }
}

CudaBackend& as_cuda(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  if (!c) throw Error("not a CUDA backend");
  return *c;
}

void run_fp8_matmul(int64_t T, int64_t N, int64_t K, bool accumulate, bool with_bias,
                    Backend& be = cuda(), int64_t ld_x = 0) {
  const std::string what = fmt::format("T={} N={} K={}{}{}{}", T, N, K,
                                       accumulate ? " +residual" : "", with_bias ? " +bias" : "",
                                       &be == &cuda()                     ? ""
                                       : &be == &scaling_kernel_backend() ? " (scale kernel)"
                                       : &be == &cublaslt_backend()       ? " (cuBLASLt)"
                                                                          : " (gemv)");
  const Fp8Weight w = fp8_weight(N, K, be);
  const std::vector<float> x = ragged_rows(T, K, 1.0f);
  const HostFp8 xq = quantize_host(x, T, K), wq = quantize_host(w.values, N, K);
  const std::vector<float> residual = random_bf16(size_t(T * N));
  std::vector<float> bias = random_bf16(size_t(N), 0.5f);
  DeviceMatrix xd = device_bf16(T, K, x, ld_x);
  DeviceMatrix out = device_bf16(T, N, accumulate ? residual : std::vector<float>{});
  const CudaBackend::Fp8Paths before = as_cuda(be).fp8_paths();
  std::vector<float> got, ref, magnitude;
  if (accumulate) {
    be.matmul_add({}, xd.view, w.dev, out.view);
    ref = reference(xq, wq, T, N, K, &residual, nullptr, &magnitude);
  } else {
    Buffer keep;
    Tensor b;
    if (with_bias) {
      keep = be.allocate(size_t(N) * sizeof(float));
      be.upload({}, keep.data(), bias.data(), size_t(N) * sizeof(float));
      b = Tensor(keep.data(), DType::f32, {N}, Device::cuda);
    }
    be.matmul({}, xd.view, w.dev, with_bias ? &b : nullptr, out.view);
    ref = reference(xq, wq, T, N, K, nullptr, with_bias ? &bias : nullptr, &magnitude);
  }
  be.synchronize({});  // (download_view reads on the default backend's stream)
  const CudaBackend::Fp8Paths after = as_cuda(be).fp8_paths();
  EXPECT_EQ(after.total(), before.total() + 1) << what;
  if (&be == &scaling_kernel_backend()) {
    EXPECT_EQ(after.scale_kernel, before.scale_kernel + 1) << what;
  } else if (&be == &cublaslt_backend()) {
    EXPECT_EQ(after.gemv, before.gemv) << what;
  } else {
    // 1-4 tokens through the GEMV (the default), more through cuBLASLt (or its fallback).
    EXPECT_EQ(after.gemv, before.gemv + (T <= 4 ? 1 : 0)) << what;
  }
  got = download_view(out);
  expect_close("matmul fp8", what, got, ref, 4e-3);
  expect_rows_close("matmul fp8 " + what, got, ref, T, N, 4e-3, &magnitude);
  expect_untouched_outside("matmul fp8", out);
  if (!accumulate && !with_bias) {
    // What E4M3 costs against bf16 weights and activations.
    expect_quantization_cost("matmul fp8 vs bf16 " + what, got,
                             reference_bf16(x, w.values, T, N, K), T, N, 0.06);
  }
}

TEST_F(GpuBackend, MatmulFp8Weights) {
  // 1-8 tokens (decode), odd counts, a prefill chunk; N not a multiple of the tile; K from 16.
  for (auto [T, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 576, 576},
                         {3, 1008, 320},
                         {8, 1536, 576},
                         {17, 256, 16},
                         {64, 1024, 2048},
                         {300, 768, 1024}}) {
    run_fp8_matmul(T, N, K, false, false);
    run_fp8_matmul(T, N, K, true, false);
    run_fp8_matmul(T, N, K, false, false, scaling_kernel_backend());
    run_fp8_matmul(T, N, K, true, false, scaling_kernel_backend());
    run_fp8_matmul(T, N, K, false, false, gemv_backend());
    run_fp8_matmul(T, N, K, true, false, gemv_backend());
    run_fp8_matmul(T, N, K, false, false, cublaslt_backend());
    run_fp8_matmul(T, N, K, true, false, cublaslt_backend());
  }
  // The GEMV at token counts it takes, on Llama-2-7B's o (with the residual add) and down shapes
  // (the second with its bf16 input strided: the quantize kernel's stride; the GEMV reads the
  // contiguous codes).
  for (int64_t T : {int64_t(1), int64_t(2), int64_t(4)}) {
    run_fp8_matmul(T, 4096, 4096, true, false, gemv_backend());
    run_fp8_matmul(T, 4096, 11008, false, false, gemv_backend(), 11024);
  }
  run_fp8_matmul(5, 640, 576, false, true);
  // Activations with a row stride past K (a column slice of a wider buffer).
  run_fp8_matmul(6, 512, 320, true, false, cuda(), 336);
  // Which path the default backend took (cuBLASLt's per-row scales, or its refusal: the
  // scaling kernel) is the finding of the run that records this.
  const CudaBackend::Fp8Paths p = as_cuda(cuda()).fp8_paths();
  RecordProperty("fp8_per_row_calls", std::to_string(p.per_row));
  RecordProperty("fp8_scale_kernel_calls", std::to_string(p.scale_kernel));
  fmt::print(
      "fp8 matmuls on the default backend: {} with cuBLASLt's per-row scales, {} scaled by "
      "ridge's kernel\n",
      p.per_row, p.scale_kernel);
  // Past the product buffer's rows (64 MiB of fp32: 1,489 rows of 11,264): chunked.
  run_fp8_matmul(1600, 11264, 64, true, false, scaling_kernel_backend());
}

// The fused entry points the model calls, with an fp8 weight (never norm-folded): at 1-4 tokens the
// GEMV with its norm prologue and gate/up pairing, else the norm kernel, the product and silu_mul.
TEST_F(GpuBackend, MatmulFusedAndSwigluWithFp8Weights) {
  for (int64_t T : {int64_t(1), int64_t(6), int64_t(40)}) {
    const int64_t K = 576, F = 768;
    const Fp8Weight w = fp8_weight(2 * F, K);
    const std::vector<float> x = random_bf16(size_t(T * K));
    std::vector<float> norm = random_bf16(size_t(K), 0.5f);
    for (float& e : norm) e += 1.0f;
    Buffer norm_keep = cuda().allocate(size_t(K) * sizeof(float));
    cuda().upload({}, norm_keep.data(), norm.data(), size_t(K) * sizeof(float));
    const Tensor norm_dev(norm_keep.data(), DType::f32, {K}, Device::cuda);
    // The norm as the CUDA backend's rmsnorm computes it (that op is checked against the CPU in
    // ops_test), then quantized on the host.
    DeviceMatrix xd = device_bf16(T, K, x), scratch = device_bf16(T, K, {}),
                 gu = device_bf16(T, 2 * F, {}), out = device_bf16(T, F, {}),
                 normed = device_bf16(T, K, {});
    cuda().rmsnorm({}, xd.view, norm_dev, 1e-5f, normed.view);
    const std::vector<float> h = download_view(normed);
    const HostFp8 hq = quantize_host(h, T, K), wq = quantize_host(w.values, 2 * F, K);
    const std::vector<float> gate_up = reference(hq, wq, T, 2 * F, K, nullptr, nullptr);
    std::vector<float> ref(size_t(T * F));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < F; ++j) {
        // SiLU·mul of the bf16-rounded product, as silu_mul reads it.
        const float g = bf16_to_f32(f32_to_bf16(gate_up[size_t(t * 2 * F + j)]));
        const float u = bf16_to_f32(f32_to_bf16(gate_up[size_t(t * 2 * F + F + j)]));
        ref[size_t(t * F + j)] = g / (1.0f + std::exp(-g)) * u;
      }
    MatmulFusion f;
    f.norm_weight = &norm_dev;
    f.eps = 1e-5f;
    cuda().matmul_swiglu({}, xd.view, w.dev, f, scratch.view, gu.view, out.view);
    cuda().synchronize({});
    expect_close("matmul_swiglu fp8", fmt::format("T={}", T), download_view(out), ref, 4e-3);
  }
}

// The GEMV's norm prologue and SwiGLU pairing (the model's decode calls at 1-4 tokens) against the
// composed kernels (rmsnorm, the GEMV, silu_mul) on the same weights: bit for bit, with the norm
// weight in f32 and in bf16, K not a multiple of the norm's 1,024-value sweep, and the residual add
// of the o and down products (the GEMV quantizing its input itself, no prologue).
TEST_F(GpuBackend, Fp8GemvFusionsEqualComposedKernels) {
  Backend& fused = cuda();
  Backend& plain = composed_backend();
  const auto calls = [](Backend& be) { return as_cuda(be).fp8_paths().gemv; };
  for (auto [T, K, F] : {std::tuple<int64_t, int64_t, int64_t>{1, 576, 768},
                         {2, 4096, 1376},
                         {3, 1040, 320},
                         {4, 2048, 512}}) {
    // The same bf16 weights quantized by each backend (the same codes:
    // QuantizeWeightFp8MatchesHost).
    const std::vector<uint16_t> gu_bits = to_bf16_bits(ragged_rows(2 * F, K, 0.05f)),
                                qkv_bits = to_bf16_bits(ragged_rows(3 * F, K, 0.05f)),
                                down_bits = to_bf16_bits(ragged_rows(K, F, 0.05f));
    const auto weight = [](Backend& be, const std::vector<uint16_t>& bits, int64_t n, int64_t k) {
      Tensor w = be.upload_weight(Tensor(const_cast<uint16_t*>(bits.data()), DType::bf16, {n, k}));
      EXPECT_TRUE(be.quantize_weight(w, DType::fp8_e4m3));
      return w;
    };
    std::vector<float> norm = random_bf16(size_t(K), 0.5f);
    for (float& e : norm) e = bf16_to_f32(f32_to_bf16(e + 1.0f));
    const std::vector<uint16_t> norm_bits = to_bf16_bits(norm);
    Buffer norm_f32 = cuda().allocate(size_t(K) * 4), norm_bf16 = cuda().allocate(size_t(K) * 2);
    cuda().upload({}, norm_f32.data(), norm.data(), size_t(K) * 4);
    cuda().upload({}, norm_bf16.data(), norm_bits.data(), size_t(K) * 2);
    const Tensor norms[2] = {Tensor(norm_f32.data(), DType::f32, {K}, Device::cuda),
                             Tensor(norm_bf16.data(), DType::bf16, {K}, Device::cuda)};
    const std::vector<float> x = ragged_rows(T, K, 1.0f), mlp_in = random_bf16(size_t(T * F)),
                             residual = random_bf16(size_t(T * K));
    std::vector<uint16_t> results[2][5];
    Backend* bes[2] = {&fused, &plain};
    for (int b = 0; b < 2; ++b) {
      Backend& be = *bes[b];
      const Tensor wgu = weight(be, gu_bits, 2 * F, K), wqkv = weight(be, qkv_bits, 3 * F, K),
                   wdown = weight(be, down_bits, K, F);
      const int64_t before = calls(be);
      DeviceMatrix xd = device_bf16(T, K, x), scratch = device_bf16(T, K, {});
      for (int n = 0; n < 2; ++n) {
        MatmulFusion f;
        f.norm_weight = &norms[n];
        f.eps = 1e-5f;
        DeviceMatrix gu = device_bf16(T, 2 * F, {}), mlp = device_bf16(T, F, {}),
                     qkv = device_bf16(T, 3 * F, {});
        be.matmul_swiglu({}, xd.view, wgu, f, scratch.view, gu.view, mlp.view);
        be.matmul_fused({}, xd.view, wqkv, f, scratch.view, qkv.view);
        be.synchronize({});
        results[b][2 * n] = download_bits(mlp);
        results[b][2 * n + 1] = download_bits(qkv);
      }
      // x += mlp · w_downᵀ, as the down and o products run.
      MatmulFusion add;
      add.accumulate = true;
      DeviceMatrix mlp = device_bf16(T, F, mlp_in), out = device_bf16(T, K, residual),
                   unused = device_bf16(T, F, {});
      be.matmul_fused({}, mlp.view, wdown, add, unused.view, out.view);
      be.synchronize({});
      results[b][4] = download_bits(out);
      EXPECT_EQ(calls(be) - before, 5) << "every product through the GEMV, T=" << T;
    }
    const char* names[5] = {"swiglu, f32 norm", "qkv, f32 norm", "swiglu, bf16 norm",
                            "qkv, bf16 norm", "down + residual"};
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(results[0][i].size(), results[1][i].size());
      size_t differ = 0;
      for (size_t j = 0; j < results[0][i].size(); ++j)
        differ += results[0][i][j] != results[1][i][j];
      EXPECT_EQ(differ, 0u) << names[i] << ": T=" << T << " K=" << K << " F=" << F;
    }
  }
}

}  // namespace
}  // namespace ridge::backend::gpu_test
