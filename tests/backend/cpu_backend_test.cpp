// CPU backend ops against plain double-precision references written here (independent of the
// backend's code paths: their own dequantization, softmax and RoPE). Fresh random inputs.
#include "ridge/backend/cpu/cpu_backend.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/random_blocks.h"
#include "ridge/backend/cpu/quant.h"
#include "ridge/core/error.h"
#include "ridge/core/half.h"

namespace ridge::backend {
namespace {

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

// Reference quantizers (GGUF block layouts, written from the format description) and their
// exact dequantized values in double.
struct Quantized {
  std::vector<uint8_t> bytes;
  std::vector<double> values;  // what the bytes stand for
};

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
double f16v(float v) { return f16_to_f32(f32_to_f16(v)); }

Quantized quantize(DType t, const std::vector<float>& x) {
  Quantized q;
  const size_t n = x.size();
  switch (t) {
    case DType::f32:
      q.bytes.resize(n * 4);
      std::memcpy(q.bytes.data(), x.data(), n * 4);
      q.values.assign(x.begin(), x.end());
      break;
    case DType::f16:
    case DType::bf16:
      q.bytes.resize(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = t == DType::f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(&q.bytes[2 * i], &h, 2);
        q.values.push_back(t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h));
      }
      break;
    case DType::fp8_e4m3:
      for (size_t i = 0; i < n; ++i) {
        q.bytes.push_back(f32_to_fp8e4m3(x[i]));
        q.values.push_back(fp8e4m3_to_f32(q.bytes.back()));
      }
      break;
    case DType::q8_0:
      for (size_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
        const float d = amax / 127.0f;
        uint8_t blk[34];
        put_f16(blk, d);
        for (int i = 0; i < 32; ++i) {
          const int v = d > 0 ? int(std::lround(x[b * 32 + i] / d)) : 0;
          blk[2 + i] = uint8_t(int8_t(std::clamp(v, -127, 127)));
          q.values.push_back(f16v(d) * int8_t(blk[2 + i]));
        }
        q.bytes.insert(q.bytes.end(), blk, blk + 34);
      }
      break;
    case DType::q4_0:
    case DType::q4_1:
      for (size_t b = 0; b < n / 32; ++b) {
        const float* xb = &x[b * 32];
        float lo = xb[0], hi = xb[0];
        for (int i = 0; i < 32; ++i) lo = std::min(lo, xb[i]), hi = std::max(hi, xb[i]);
        std::vector<uint8_t> blk;
        int nib[32];
        double d, m = 0;
        if (t == DType::q4_1) {
          const float df = (hi - lo) / 15.0f;
          blk.resize(20);
          put_f16(&blk[0], df);
          put_f16(&blk[2], lo);
          d = f16v(df), m = f16v(lo);
          for (int i = 0; i < 32; ++i)
            nib[i] = std::clamp(int(std::lround(df > 0 ? (xb[i] - lo) / df : 0)), 0, 15);
        } else {
          const float amax = std::max(std::fabs(lo), std::fabs(hi));
          const float df = amax / 8.0f;
          blk.resize(18);
          put_f16(&blk[0], df);
          d = f16v(df);
          for (int i = 0; i < 32; ++i)
            nib[i] = std::clamp(int(std::lround(df > 0 ? xb[i] / df : 0)) + 8, 0, 15);
        }
        const size_t off = t == DType::q4_1 ? 4 : 2;
        for (int i = 0; i < 16; ++i) blk[off + i] = uint8_t(nib[i] | (nib[i + 16] << 4));
        for (int i = 0; i < 32; ++i)
          q.values.push_back(t == DType::q4_1 ? d * nib[i] + m : d * (nib[i] - 8));
        q.bytes.insert(q.bytes.end(), blk.begin(), blk.end());
      }
      break;
    default:
      ADD_FAILURE() << "no reference quantizer";
  }
  return q;
}

// Relative error of `got` against `ref`, normalized by the reference's RMS (as llama.cpp's NMSE).
double nmse(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_FALSE(std::isnan(got[i])) << "NaN at " << i;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return num / std::max(den, 1e-30);
}

class DequantTest : public ::testing::TestWithParam<DType> {};

TEST_P(DequantTest, SimdMatchesReferenceValuesExactly) {
  const DType t = GetParam();
  for (int64_t n : {32, 64, 96, 4096}) {
    auto x = randn(size_t(n), 2.0f);
    Quantized q = quantize(t, x);
    std::vector<float> out(size_t(n), NAN), ref_out(size_t(n), NAN);
    cpu::dequantize_row(t, q.bytes.data(), out.data(), n);
    cpu::dequantize_row_reference(t, q.bytes.data(), ref_out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // The stored values are exact in fp32 up to the final rounding of d*q + m.
      EXPECT_NEAR(out[i], q.values[i], 1e-6 * (1 + std::fabs(q.values[i]))) << i;
      EXPECT_EQ(out[i], ref_out[i]) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, DequantTest,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3,
                                           DType::q8_0, DType::q4_0, DType::q4_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesDoubleReference) {
  const DType t = GetParam();
  CpuBackend be(3);
  // T <= 4 takes the decode path (dot products per row: an odd block count reaches the unrolled
  // loops' tails), more the prefill path.
  for (auto [T, N, K] : {std::tuple{1, 7, 64}, {2, 9, 96}, {1, 5, 160}, {5, 33, 96}, {17, 64, 256},
                         {3, 130, 576}}) {
    auto x = randn(size_t(T * K));
    auto w = randn(size_t(N * K), 0.5f);
    auto bias = randn(size_t(N));
    Quantized q = quantize(t, w);
    std::vector<float> out(size_t(T * N), NAN);
    Tensor xt(x.data(), DType::f32, {T, K}), wt(q.bytes.data(), t, {N, K});
    Tensor bt(bias.data(), DType::f32, {N}), ot(out.data(), DType::f32, {T, N});
    be.matmul({}, xt, wt, &bt, ot);
    std::vector<double> ref(size_t(T * N));
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < N; ++j) {
        double s = bias[j];
        for (int k = 0; k < K; ++k) s += double(x[i * K + k]) * q.values[size_t(j * K + k)];
        ref[size_t(i * N + j)] = s;
      }
    // fp32 sums of K products in the kernels' order: each output off by ~u·√K relative (u =
    // 2^-24, random signs), so the mean squared error stays under (4u)²·K. (A fixed 1e-12 was
    // under that at K = 576 and failed ~1 run in 15.)
    const double bound = 16.0 * std::ldexp(1.0, -48) * double(K);
    EXPECT_LT(nmse(out, ref), bound) << T << "x" << N << "x" << K;
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTest,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16, DType::q8_0,
                                           DType::q4_0, DType::q4_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every block type from random blocks (the decoder itself is held to the gguf package's values
// by tests/parity/test_io_parity.py): the row converter equals the element-wise reference
// bitwise, and matmul, on its decode path (dot products through a block buffer, T <= 4) and its
// prefill path (rows converted, then dotted), equals a double-precision product of those values.
class BlockTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(BlockTypeTest, ConverterMatchesReferenceAndMatmulMatchesDouble) {
  const DType t = GetParam();
  const int64_t qk = dtype_info(t).block_elems;
  for (int64_t n : {qk, 3 * qk, int64_t(4096)}) {
    const auto bytes = test::random_blocks(t, n, rng(), 0.002f, 0.5f);
    std::vector<float> fast(size_t(n), NAN), ref(size_t(n), NAN);
    cpu::dequantize_row(t, bytes.data(), fast.data(), n);
    cpu::dequantize_row_reference(t, bytes.data(), ref.data(), n);
    EXPECT_EQ(std::memcmp(fast.data(), ref.data(), size_t(n) * 4), 0) << n;
  }
  CpuBackend be(3);
  for (auto [T, N, K] : {std::tuple{1, 7, 256}, {3, 33, 768}, {9, 20, 512}}) {
    auto x = randn(size_t(T * K));
    const auto w = test::random_blocks(t, N * K, rng());
    std::vector<float> wv(size_t(N * K));
    for (int j = 0; j < N; ++j)
      cpu::dequantize_row_reference(t, w.data() + j * row_bytes(t, K), &wv[size_t(j * K)], K);
    std::vector<float> out(size_t(T * N), NAN);
    Tensor xt(x.data(), DType::f32, {T, K}), wt(const_cast<uint8_t*>(w.data()), t, {N, K});
    Tensor ot(out.data(), DType::f32, {T, N});
    be.matmul({}, xt, wt, nullptr, ot);
    std::vector<double> want(size_t(T * N));
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(x[i * K + k]) * wv[size_t(j * K + k)];
        want[size_t(i * N + j)] = s;
      }
    EXPECT_LT(nmse(out, want), 1e-12) << T << "x" << N << "x" << K;
  }
}

INSTANTIATE_TEST_SUITE_P(AllBlockTypes, BlockTypeTest, ::testing::ValuesIn(test::kBlockTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A decode step's tokens share one pass over each weight row (dot_row_tokens): every token's
// output must be what it gets alone, bit for bit, for 1-4 tokens and every weight type, with and
// without a bias and accumulating into out. That is what keeps a request's greedy tokens
// independent of how many others share its decode steps. Rows of 1 to 3 quant blocks of 256 and
// of 4,096 elements reach the kernels' block loops' starts, ends and prefetches.
class DecodeBatchTest : public ::testing::TestWithParam<DType> {};

TEST_P(DecodeBatchTest, EachTokenEqualsItsOwnStepBitwise) {
  const DType t = GetParam();
  CpuBackend be(2);
  std::uniform_int_distribution<int> rows(1, 40);
  for (int64_t K : {int64_t(256), int64_t(768), int64_t(4096)}) {
    const int N = rows(rng());
    std::vector<uint8_t> w;
    if (is_quantized(t)) {
      w = test::random_blocks(t, N * K, rng(), 0.002f, 0.5f);
    } else {
      w = quantize(t, randn(size_t(N * K), 0.5f)).bytes;
    }
    Tensor wt(w.data(), t, {N, K});
    auto bias = randn(size_t(N));
    Tensor bt(bias.data(), DType::f32, {N});
    for (int T = 1; T <= cpu::kMaxDotTokens; ++T) {
      for (const bool accumulate : {false, true}) {
        auto x = randn(size_t(T * K));
        const auto start = randn(size_t(T * N));
        std::vector<float> out = start;
        Tensor xt(x.data(), DType::f32, {T, K}), ot(out.data(), DType::f32, {T, N});
        if (accumulate)
          be.matmul_add({}, xt, wt, ot);
        else
          be.matmul({}, xt, wt, &bt, ot);
        for (int i = 0; i < T; ++i) {
          std::vector<float> alone(start.begin() + i * N, start.begin() + (i + 1) * N);
          Tensor x1(&x[size_t(i * K)], DType::f32, {1, K}), o1(alone.data(), DType::f32, {1, N});
          if (accumulate)
            be.matmul_add({}, x1, wt, o1);
          else
            be.matmul({}, x1, wt, &bt, o1);
          EXPECT_EQ(std::memcmp(&out[size_t(i * N)], alone.data(), size_t(N) * 4), 0)
              << "token " << i << " of " << T << ", K " << K
              << (accumulate ? ", accumulating" : "");
        }
        for (float v : out) ASSERT_FALSE(std::isnan(v));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, DecodeBatchTest,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16, DType::q8_0,
                                           DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                                           DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k,
                                           DType::q6_k, DType::iq4_nl, DType::iq4_xs),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuBackend, MatmulWritesIntoColumnSliceOnly) {
  CpuBackend be(2);
  const int T = 3, K = 32, N = 5, LD = 12;
  auto x = randn(T * K), w = randn(N * K);
  std::vector<float> out(T * LD, -7.0f);
  Tensor xt(x.data(), DType::f32, {T, K}), wt(w.data(), DType::f32, {N, K});
  Tensor ot(out.data() + 4, DType::f32, {T, N});
  ot.stride[0] = LD;
  be.matmul({}, xt, wt, nullptr, ot);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < LD; ++j) {
      if (j >= 4 && j < 4 + N) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(x[i * K + k]) * w[(j - 4) * K + k];
        EXPECT_NEAR(out[i * LD + j], s, 1e-4);
      } else {
        EXPECT_EQ(out[i * LD + j], -7.0f) << "wrote outside the slice at " << i << "," << j;
      }
    }
}

TEST(CpuBackend, MatmulRefusesMismatchedShapes) {
  CpuBackend be(1);
  std::vector<float> x(4 * 8), w(3 * 9), out(4 * 3);
  Tensor xt(x.data(), DType::f32, {4, 8}), wt(w.data(), DType::f32, {3, 9}),
      ot(out.data(), DType::f32, {4, 3});
  EXPECT_THROW(be.matmul({}, xt, wt, nullptr, ot), Error);
}

TEST(CpuBackend, MatmulAddAccumulatesIntoOut) {
  CpuBackend be(2);
  for (auto [T, N, K] : {std::tuple{1, 9, 64}, {6, 40, 96}}) {  // decode and prefill paths
    auto x = randn(size_t(T * K)), w = randn(size_t(N * K), 0.5f), r = randn(size_t(T * N));
    std::vector<float> out = r;
    Tensor xt(x.data(), DType::f32, {T, K}), wt(w.data(), DType::f32, {N, K}),
        ot(out.data(), DType::f32, {T, N});
    be.matmul_add({}, xt, wt, ot);
    std::vector<double> ref(size_t(T * N));
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < N; ++j) {
        double s = r[size_t(i * N + j)];
        for (int k = 0; k < K; ++k) s += double(x[size_t(i * K + k)]) * w[size_t(j * K + k)];
        ref[size_t(i * N + j)] = s;
      }
    EXPECT_LT(nmse(out, ref), 1e-12) << T << "x" << N << "x" << K;
  }
}

// Backend::matmul_fused's default (the composition every backend without a fused kernel runs):
// rmsnorm or silu_mul into scratch, then matmul or matmul_add.
TEST(CpuBackend, MatmulFusedComposesPrologueAndAccumulate) {
  CpuBackend be(2);
  const int T = 3, N = 24, K = 64;
  auto w = randn(size_t(N * K), 0.5f), nw = randn(K), r = randn(size_t(T * N));
  Tensor wt(w.data(), DType::f32, {N, K}), nwt(nw.data(), DType::f32, {K});
  for (bool silu : {false, true})
    for (bool acc : {false, true}) {
      const int xk = silu ? 2 * K : K;
      auto x = randn(size_t(T * xk), 2.0f);
      std::vector<float> out = acc ? r : std::vector<float>(size_t(T * N), NAN);
      std::vector<float> scratch(size_t(T * K), NAN);
      Tensor xt(x.data(), DType::f32, {T, xk}), ot(out.data(), DType::f32, {T, N}),
          st(scratch.data(), DType::f32, {T, K});
      MatmulFusion f;
      if (silu) {
        f.silu_mul = true;
      } else {
        f.norm_weight = &nwt;
        f.eps = 1e-5f;
      }
      f.accumulate = acc;
      be.matmul_fused({}, xt, wt, f, st, ot);
      std::vector<double> ref(size_t(T * N));
      for (int t = 0; t < T; ++t) {
        std::vector<double> h(K);
        double ss = 0;
        for (int k = 0; k < K; ++k) ss += double(x[size_t(t * xk + k)]) * x[size_t(t * xk + k)];
        for (int k = 0; k < K; ++k) {
          const double g = x[size_t(t * xk + k)];
          h[size_t(k)] = silu ? g / (1 + std::exp(-g)) * x[size_t(t * xk + K + k)]
                              : g / std::sqrt(ss / K + 1e-5) * nw[size_t(k)];
        }
        for (int j = 0; j < N; ++j) {
          double s = acc ? r[size_t(t * N + j)] : 0.0;
          for (int k = 0; k < K; ++k) s += h[size_t(k)] * w[size_t(j * K + k)];
          ref[size_t(t * N + j)] = s;
        }
      }
      EXPECT_LT(nmse(out, ref), 1e-11) << (silu ? "silu_mul" : "rmsnorm") << (acc ? " +=" : "");
    }
  std::vector<float> x(size_t(T * K)), out(size_t(T * N)), scratch(size_t(T * K));
  Tensor xt(x.data(), DType::f32, {T, K}), ot(out.data(), DType::f32, {T, N}),
      st(scratch.data(), DType::f32, {T, K});
  MatmulFusion both;
  both.norm_weight = &nwt;
  both.silu_mul = true;
  EXPECT_THROW(be.matmul_fused({}, xt, wt, both, st, ot), Error);
}

TEST(CpuBackend, RmsnormAndFusedAdd) {
  CpuBackend be(2);
  const int T = 4, H = 576;
  auto x = randn(T * H), r = randn(T * H), w = randn(H);
  const float eps = 1e-5f;
  std::vector<float> out(T * H, NAN), res = r;
  Tensor xt(x.data(), DType::f32, {T, H}), wt(w.data(), DType::f32, {H}),
      ot(out.data(), DType::f32, {T, H}), rt(res.data(), DType::f32, {T, H});
  be.add_rmsnorm({}, rt, xt, wt, eps, ot);
  std::vector<double> ref(T * H), ref_res(T * H);
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int i = 0; i < H; ++i) {
      ref_res[t * H + i] = double(r[t * H + i]) + x[t * H + i];
      ss += ref_res[t * H + i] * ref_res[t * H + i];
    }
    const double inv = 1.0 / std::sqrt(ss / H + eps);
    for (int i = 0; i < H; ++i) ref[t * H + i] = ref_res[t * H + i] * inv * w[i];
  }
  EXPECT_LT(nmse(out, ref), 1e-12);
  EXPECT_LT(nmse(res, ref_res), 1e-14);
}

TEST(CpuBackend, RopeRotatesHalvesLikeHf) {
  CpuBackend be(1);
  const int T = 3, hd = 64, nh = 4, nkv = 2;
  auto q = randn(T * nh * hd), k = randn(T * nkv * hd);
  auto q0 = q, k0 = k;
  std::vector<int32_t> pos = {0, 17, 4095};
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = float(std::pow(10000.0, -2.0 * i / hd));
  Tensor qt(q.data(), DType::f32, {T, nh * hd}), kt(k.data(), DType::f32, {T, nkv * hd});
  Tensor pt(pos.data(), DType::i32, {T}), ft(inv.data(), DType::f32, {hd / 2});
  be.rope({}, qt, kt, pt, ft);
  for (auto [got, orig, heads] : {std::tuple{&q, &q0, nh}, {&k, &k0, nkv}})
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd; ++i) {
          const double a = double(pos[t]) * inv[i % (hd / 2)];
          const float* x = orig->data() + (t * heads + h) * hd;
          // rotate_half(x) = cat(-x2, x1)
          const double rot = i < hd / 2 ? -x[i + hd / 2] : x[i - hd / 2];
          const double want = x[i] * std::cos(a) + rot * std::sin(a);
          EXPECT_NEAR((*got)[(t * heads + h) * hd + i], want, 2e-3) << t << "," << h << "," << i;
        }
}

TEST(CpuBackend, SiluMul) {
  CpuBackend be(1);
  const int T = 2, F = 100;
  auto gu = randn(T * 2 * F, 3.0f);
  std::vector<float> out(T * F, NAN);
  Tensor g(gu.data(), DType::f32, {T, 2 * F}), o(out.data(), DType::f32, {T, F});
  be.silu_mul({}, g, o);
  std::vector<double> ref(T * F);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < F; ++i) {
      const double x = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
      ref[t * F + i] = x / (1 + std::exp(-x)) * u;
    }
  EXPECT_LT(nmse(out, ref), 1e-12);
}

// Paged attention with random block tables and mixed prefill/decode sequences against a dense
// causal reference on the unpaged K/V.
TEST(CpuBackend, PagedAttentionMatchesDenseReference) {
  for (DType kv_dtype : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
    CpuBackend be(3);
    const int nh = 8, nkv = 2, hd = 64, block = 16, num_blocks = 64;
    const std::vector<int> q_lens = {1, 37, 5, 1};
    const std::vector<int> ctx_lens = {50, 37, 70, 16};
    const int S = int(q_lens.size());
    int T = 0;
    for (int l : q_lens) T += l;
    // Random distinct blocks for each sequence.
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    const int max_blocks = 5;
    std::vector<int32_t> tables(S * max_blocks);
    for (int i = 0; i < S * max_blocks; ++i) tables[i] = perm[i];
    const size_t width = nkv * hd;
    std::vector<float> kpool_f(num_blocks * block * width, NAN), vpool_f(kpool_f.size(), NAN);
    std::vector<uint16_t> kpool_h(kpool_f.size(), 0x7fc0), vpool_h(kpool_f.size(), 0x7fc0);
    std::vector<uint8_t> kpool_8(kpool_f.size(), 0x7f), vpool_8(kpool_f.size(), 0x7f);  // NaN
    // Dense K/V per sequence, written into the pages.
    std::vector<std::vector<float>> K(S), V(S);
    for (int s = 0; s < S; ++s) {
      K[s] = randn(ctx_lens[s] * width);
      V[s] = randn(ctx_lens[s] * width);
      for (int p = 0; p < ctx_lens[s]; ++p) {
        const size_t slot = size_t(tables[s * max_blocks + p / block]) * block + p % block;
        for (size_t i = 0; i < width; ++i) {
          if (kv_dtype == DType::f32) {
            kpool_f[slot * width + i] = K[s][p * width + i];
            vpool_f[slot * width + i] = V[s][p * width + i];
          } else if (kv_dtype == DType::bf16) {
            kpool_h[slot * width + i] = f32_to_bf16(K[s][p * width + i]);
            vpool_h[slot * width + i] = f32_to_bf16(V[s][p * width + i]);
            K[s][p * width + i] = bf16_to_f32(kpool_h[slot * width + i]);
            V[s][p * width + i] = bf16_to_f32(vpool_h[slot * width + i]);
          } else {  // the reference attends over the values the pool holds
            kpool_8[slot * width + i] = f32_to_fp8e4m3(K[s][p * width + i]);
            vpool_8[slot * width + i] = f32_to_fp8e4m3(V[s][p * width + i]);
            K[s][p * width + i] = fp8e4m3_to_f32(kpool_8[slot * width + i]);
            V[s][p * width + i] = fp8e4m3_to_f32(vpool_8[slot * width + i]);
          }
        }
      }
    }
    void* kd = kv_dtype == DType::f32    ? (void*)kpool_f.data()
               : kv_dtype == DType::bf16 ? (void*)kpool_h.data()
                                         : (void*)kpool_8.data();
    void* vd = kv_dtype == DType::f32    ? (void*)vpool_f.data()
               : kv_dtype == DType::bf16 ? (void*)vpool_h.data()
                                         : (void*)vpool_8.data();
    KvLayer kv{Tensor(kd, kv_dtype, {num_blocks, block, nkv, hd}),
               Tensor(vd, kv_dtype, {num_blocks, block, nkv, hd})};
    auto q = randn(T * nh * hd);
    std::vector<float> out(T * nh * hd, NAN);
    std::vector<int32_t> cu = {0};
    for (int l : q_lens) cu.push_back(cu.back() + l);
    AttentionMeta meta;
    meta.num_seqs = S;
    meta.max_blocks_per_seq = max_blocks;
    meta.host_cu_seqlens_q = cu.data();
    meta.host_context_lens = ctx_lens.data();
    meta.host_block_tables = tables.data();
    const float scale = 1.0f / std::sqrt(float(hd));
    Tensor qt(q.data(), DType::f32, {T, nh * hd}), ot(out.data(), DType::f32, {T, nh * hd});
    be.attention({}, qt, kv, meta, scale, ot);
    std::vector<double> ref(out.size());
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < q_lens[s]; ++i) {
        const int t = cu[s] + i, pos = ctx_lens[s] - q_lens[s] + i;
        for (int h = 0; h < nh; ++h) {
          const int kh = h / (nh / nkv);
          std::vector<double> sc(pos + 1);
          double mx = -1e300, sum = 0;
          for (int j = 0; j <= pos; ++j) {
            double d = 0;
            for (int c = 0; c < hd; ++c)
              d += double(q[(t * nh + h) * hd + c]) * K[s][j * width + kh * hd + c];
            sc[j] = d * scale;
            mx = std::max(mx, sc[j]);
          }
          for (auto& v : sc) sum += (v = std::exp(v - mx));
          for (int c = 0; c < hd; ++c) {
            double acc = 0;
            for (int j = 0; j <= pos; ++j) acc += sc[j] * V[s][j * width + kh * hd + c];
            ref[(t * nh + h) * hd + c] = acc / sum;
          }
        }
      }
    EXPECT_LT(nmse(out, ref), 1e-12) << dtype_name(kv_dtype);
  }
}

TEST(CpuBackend, KvStoreWritesSlotsAndRejectsOutOfRange) {
  CpuBackend be(1);
  const int nkv = 2, hd = 8, block = 16, blocks = 3;
  std::vector<float> kp(blocks * block * nkv * hd, 0.5f), vp(kp.size(), 0.5f);
  KvLayer kv{Tensor(kp.data(), DType::f32, {blocks, block, nkv, hd}),
             Tensor(vp.data(), DType::f32, {blocks, block, nkv, hd})};
  auto k = randn(2 * nkv * hd), v = randn(2 * nkv * hd);
  std::vector<int32_t> slots = {47, 3};
  Tensor kt(k.data(), DType::f32, {2, nkv * hd}), vt(v.data(), DType::f32, {2, nkv * hd}),
      st(slots.data(), DType::i32, {2});
  be.kv_store({}, kt, vt, st, kv);
  for (int i = 0; i < nkv * hd; ++i) {
    EXPECT_EQ(kp[47 * nkv * hd + i], k[i]);
    EXPECT_EQ(vp[3 * nkv * hd + i], v[nkv * hd + i]);
  }
  slots[0] = 48;
  EXPECT_THROW(be.kv_store({}, kt, vt, st, kv), Error);
}

// An fp8 (E4M3) pool: each value stored rounded to nearest even, saturated at +-448; the other
// slots untouched.
TEST(CpuBackend, KvStoreFp8RoundsEveryValue) {
  CpuBackend be(1);
  const int nkv = 2, hd = 8, block = 16, blocks = 3;
  std::vector<uint8_t> kp(blocks * block * nkv * hd, 0x7f), vp(kp.size(), 0x7f);
  KvLayer kv{Tensor(kp.data(), DType::fp8_e4m3, {blocks, block, nkv, hd}),
             Tensor(vp.data(), DType::fp8_e4m3, {blocks, block, nkv, hd})};
  auto k = randn(2 * nkv * hd), v = randn(2 * nkv * hd);
  k[0] = 1000.0f, v[1] = -3e-4f;  // saturates; a subnormal
  std::vector<int32_t> slots = {20, 5};
  Tensor kt(k.data(), DType::f32, {2, nkv * hd}), vt(v.data(), DType::f32, {2, nkv * hd}),
      st(slots.data(), DType::i32, {2});
  be.kv_store({}, kt, vt, st, kv);
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < nkv * hd; ++i) {
      EXPECT_EQ(kp[slots[t] * nkv * hd + i], f32_to_fp8e4m3(k[t * nkv * hd + i]));
      EXPECT_EQ(vp[slots[t] * nkv * hd + i], f32_to_fp8e4m3(v[t * nkv * hd + i]));
    }
  EXPECT_EQ(fp8e4m3_to_f32(kp[20 * nkv * hd]), 448.0f);
  int untouched = 0;
  for (uint8_t b : kp) untouched += b == 0x7f;
  EXPECT_EQ(untouched, int(kp.size()) - 2 * nkv * hd);
}

}  // namespace
}  // namespace ridge::backend
