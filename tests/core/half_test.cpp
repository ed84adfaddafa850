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

}  // namespace
}  // namespace ridge
