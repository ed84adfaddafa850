#include "ridge/core/half.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace ridge {
namespace {

// Independent reference: fp16 value of a bit pattern computed with ldexp (no bit tricks).
double f16_reference(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 31;
  const int mant = h & 1023;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Half, F16ToF32EveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double ref = f16_reference(uint16_t(h));
    const float got = f16_to_f32(uint16_t(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(double(got), ref) << h;
    }
  }
}

// Round-to-nearest-even reference: the nearest fp16 value by exhaustive search over neighbours.
TEST(Half, F32ToF16RoundsToNearestEven) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> mag(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(1.0f + (rng() % 1000000) / 1e6f, int(mag(rng))) * ((rng() & 1) ? -1.f : 1.f);
    const uint16_t h = f32_to_f16(x);
    const double got = f16_reference(h);
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(x), 65520.0f);
      continue;
    }
    // No other fp16 value of the same sign is strictly closer.
    for (int d : {-1, 1}) {
      const uint16_t n = uint16_t(h + d);
      if (((n ^ h) & 0x8000) != 0 || ((n >> 10) & 31) == 31) continue;
      const double other = f16_reference(n);
      const double e_got = std::fabs(got - x), e_other = std::fabs(other - x);
      EXPECT_TRUE(e_got < e_other || (e_got == e_other && (h & 1) == 0))
          << "x=" << x << " got " << got << " other " << other;
    }
  }
}

TEST(Half, Bf16RoundTripAndRounding) {
  std::mt19937 rng(99);
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = rng();
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(x))));
      continue;
    }
    const float y = bf16_to_f32(f32_to_bf16(x));
    if (std::isinf(y) && !std::isinf(x)) continue;  // rounded past the largest finite
    // Relative error at most half an ulp of an 8-bit mantissa.
    if (x != 0 && std::isnormal(x)) {
      EXPECT_LE(std::fabs((double(y) - x) / x), std::ldexp(1.0, -8)) << x;
    }
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
}

// FP8 E4M3 against the OCP spec computed here (sign, 4 exponent bits of bias 7, 3 mantissa bits,
// subnormals at e = 0, S.1111.111 NaN) and against a brute-force nearest search over every code.
double e4m3_spec(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(Half, Fp8E4M3DecodesEveryCodeAsTheSpec) {
  for (int c = 0; c < 256; ++c) {
    const float v = fp8e4m3_to_f32(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(double(v), e4m3_spec(c)) << c;
    if (c != 0x80) {  // every finite code round-trips
      EXPECT_EQ(f32_to_fp8e4m3(v), c) << c;
    }
  }
  EXPECT_EQ(f32_to_fp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
}

TEST(Half, Fp8E4M3RoundsToNearestEvenAndSaturates) {
  // Ties: 1 + 1/16 lies between 1 (mantissa 0) and 1.125 (1): to 1; 1 + 3/16 between 1.125 and
  // 1.25 (mantissa 2): to 1.25; 3 x 2^-10 between the subnormals 2^-9 and 2^-8: to 2^-8.
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.1875f)), 1.25f);
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(3.0f * std::ldexp(1.0f, -10))), std::ldexp(1.0f, -8));
  EXPECT_EQ(f32_to_fp8e4m3(std::ldexp(1.0f, -10)), 0);  // half the smallest subnormal: to 0
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(464.0f)), 448.0f);  // tie between 448 and (NaN) 480
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1e6f)), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(-INFINITY)), -448.0f);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(f32_to_fp8e4m3(std::nanf("")))));
  // Random values over the whole range: the nearest finite code, ties to the even mantissa.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> expo(-12.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    const float x = (rng() & 1 ? -1.0f : 1.0f) * std::exp2(expo(rng));
    const int got = f32_to_fp8e4m3(x);
    int best = -1;
    double best_err = 1e300;
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7f) == 0x7f || ((c >> 7) != (x < 0) && (c & 0x7f) != 0)) continue;
      const double err = std::fabs(e4m3_spec(c) - double(x));
      if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
    }
    if (std::fabs(x) > 448.0f) best = x < 0 ? 0xfe : 0x7e;
    EXPECT_EQ(double(fp8e4m3_to_f32(uint8_t(got))), e4m3_spec(best)) << x;
  }
}

}  // namespace
}  // namespace ridge
