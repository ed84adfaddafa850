// fp16 / bf16 / fp8 (E4M3) <-> fp32 conversions on the host (round to nearest even; fp16 and bf16
// keep NaN/Inf, fp8 E4M3 saturates to +-448 and keeps NaN, as CUDA's __NV_SATFINITE).
#pragma once

#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>

namespace ridge {

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf (incl. rounding)
  if (x < 0x38800000u) {  // subnormal or zero in f16
    if (x < 0x33000000u) return uint16_t(sign);
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value / 2^-24 = m * 2^(e - 126)
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    if (rem > half_ulp || (rem == half_ulp && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = x + 0xfffu + ((x >> 13) & 1u);
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

// OCP FP8 E4M3 (the "fn" variant of CUDA's __nv_fp8_e4m3): 1 sign, 4 exponent (bias 7), 3
// mantissa bits; no infinities, S.1111.111 is NaN, largest finite 448, smallest subnormal 2^-9.
inline float fp8e4m3_to_f32(uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(float(m), -9);  // subnormal: m/8 * 2^-6
  return sign * std::ldexp(1.0f + float(m) / 8.0f, int(e) - 7);
}

// Round to nearest even; beyond 448 (and infinities) saturate to +-448; NaN stays NaN.
inline uint8_t f32_to_fp8e4m3(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);  // NaN
  if (a < 0x3c800000u) {  // below 2^-6: subnormal steps of 2^-9 (8 steps reach 2^-6 = code 8)
    const float q = std::nearbyint(std::bit_cast<float>(a) * 512.0f);  // ties to even
    return uint8_t(sign | uint8_t(q));
  }
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);  // 23 -> 3 mantissa bits, ties to even
  const int e = int(r >> 23) - 127;
  const uint32_t m = (r >> 20) & 0x7u;
  if (e > 8 || (e == 8 && m == 7)) return uint8_t(sign | 0x7eu);  // saturate to 448
  return uint8_t(sign | uint8_t(((e + 7) << 3) | int(m)));
}

}  // namespace ridge
