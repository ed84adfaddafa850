#include "ridge/backend/cpu/quant.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ridge/core/error.h"
#include "ridge/core/half.h"
#include "ridge/core/quant_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define RIDGE_X86 1
#endif

namespace ridge::backend::cpu {

namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    const float d = f16_to_f32(load_u16(src));
    const auto* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int i = 0; i < 32; ++i) dst[i] = d * float(q[i]);
  }
}

void dequant_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = f16_to_f32(load_u16(src));
    const uint8_t* q = src + 2;
    for (int i = 0; i < 16; ++i) {
      dst[i] = d * float(int(q[i] & 15) - 8);
      dst[i + 16] = d * float(int(q[i] >> 4) - 8);
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
    const float d = f16_to_f32(load_u16(src));
    const float m = f16_to_f32(load_u16(src + 2));
    const uint8_t* q = src + 4;
    for (int i = 0; i < 16; ++i) {
      dst[i] = d * float(q[i] & 15) + m;
      dst[i + 16] = d * float(q[i] >> 4) + m;
    }
  }
}

// Every block type, one element at a time from the shared layout (quant_blocks.h): the reference.
void dequant_elements(DType t, const uint8_t* src, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  const int qk = int(info.block_elems);
  for (int64_t b = 0; b < n / qk; ++b, src += info.block_bytes, dst += qk)
    for (int i = 0; i < qk; ++i) {
      const quant::Element e = quant::element(t, src, i);
      const float d = f16_to_f32(load_u16(src + e.d_at));
      float v = (d * float(e.s)) * float(e.q);
      if (e.m_at >= 0) {
        const float mm = f16_to_f32(load_u16(src + e.m_at)) * float(e.m);
        v = e.minus ? v - mm : v + mm;
      }
      dst[i] = v;
    }
}

// The same values a block at a time (the scales decoded once a block or sub-block): what the
// CPU's matmul and dot products use. Each is held bitwise equal to dequant_elements by
// BlockTypeTest and to the gguf package by test_io_parity.
void dequant_q4_k(const uint8_t* src, float* dst, int64_t n, bool five) {
  const int64_t bytes = five ? 176 : 144;
  for (int64_t b = 0; b < n / 256; ++b, src += bytes, dst += 256) {
    const float d = f16_to_f32(load_u16(src)), dmin = f16_to_f32(load_u16(src + 2));
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + (five ? 48 : 16);
    for (int sub = 0; sub < 8; ++sub) {
      int sc = 0, mn = 0;
      quant::k4_scale_min(src + 4, sub, sc, mn);
      const float ds = d * float(sc), dm = dmin * float(mn);
      const uint8_t* q = qs + 32 * (sub >> 1);
      const int shift = 4 * (sub & 1);
      float* y = dst + 32 * sub;
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 15;
        if (five) v |= ((qh[l] >> sub) & 1) << 4;
        y[l] = ds * float(v) - dm;
      }
    }
  }
}

void dequant_q5(const uint8_t* src, float* dst, int64_t n, bool with_min) {
  const int64_t bytes = with_min ? 24 : 22;
  const int off = with_min ? 4 : 2;
  for (int64_t b = 0; b < n / 32; ++b, src += bytes, dst += 32) {
    const float d = f16_to_f32(load_u16(src));
    const float m = with_min ? f16_to_f32(load_u16(src + 2)) : 0.0f;
    uint32_t qh;
    std::memcpy(&qh, src + off, 4);
    const uint8_t* qs = src + off + 4;
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = (qs[j] & 15) | int((qh >> j) & 1) << 4;
      q[j + 16] = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    }
    if (with_min)
      for (int j = 0; j < 32; ++j) dst[j] = d * float(q[j]) + m;
    else
      for (int j = 0; j < 32; ++j) dst[j] = d * float(q[j] - 16);
  }
}

void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = f16_to_f32(load_u16(src));
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(quant::iq4_value(src[2 + j] & 15));
      dst[j + 16] = d * float(quant::iq4_value(src[2 + j] >> 4));
    }
  }
}

void dequant_iq4_xs(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 136, dst += 256) {
    const float d = f16_to_f32(load_u16(src));
    const int scales_h = src[2] | (src[3] << 8);
    for (int s = 0; s < 8; ++s) {
      const int ls = ((src[4 + (s >> 1)] >> (4 * (s & 1))) & 15) | (((scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * float(ls - 32);
      const uint8_t* qs = src + 8 + 16 * s;
      float* y = dst + 32 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(quant::iq4_value(qs[j] & 15));
        y[j + 16] = dl * float(quant::iq4_value(qs[j] >> 4));
      }
    }
  }
}

// q2_k / q3_k: the 16 groups' scales (dl) and, for q2_k, mins (ml) of the block at w.
inline __attribute__((always_inline)) void q2_q3_scales(const uint8_t* w, bool three, float dl[16],
                                                      float ml[16]) {
  if (three) {
    const float d = f16_to_f32(load_u16(w + 108));
    const uint8_t* sc = w + 96;
    for (int s = 0; s < 16; ++s) {
      const int low = (sc[s & 7] >> (4 * (s >> 3))) & 15;
      const int high = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
      dl[s] = d * float((low | (high << 4)) - 32);
      ml[s] = 0.0f;
    }
  } else {
    const float d = f16_to_f32(load_u16(w + 80)), dmin = f16_to_f32(load_u16(w + 82));
    for (int s = 0; s < 16; ++s) {
      dl[s] = d * float(w[s] & 15);
      ml[s] = dmin * float(w[s] >> 4);
    }
  }
}

// q2_k and q3_k: 16 groups of 16 elements; element 128h + 32k + l takes bits 2k of qs[32h + l]
// (q3_k: and bit 4h + k of hmask[l]).
void dequant_q2_q3_k(const uint8_t* src, float* dst, int64_t n, bool three) {
  const int64_t bytes = three ? 110 : 84;
  for (int64_t b = 0; b < n / 256; ++b, src += bytes, dst += 256) {
    const uint8_t* qs = src + (three ? 32 : 16);
    float dl[16], ml[16];
    q2_q3_scales(src, three, dl, ml);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int g = 0; g < 2; ++g) {
          const int s = 8 * h + 2 * k + g;  // the 16-element group
          const uint8_t* q = qs + 32 * h + 16 * g;
          float* y = dst + 16 * s;
          if (three) {
            const uint8_t* hm = src + 16 * g;
            for (int l = 0; l < 16; ++l) {
              const int v = ((q[l] >> (2 * k)) & 3) - (((hm[l] >> (4 * h + k)) & 1) ? 0 : 4);
              y[l] = dl[s] * float(v);
            }
          } else {
            for (int l = 0; l < 16; ++l) y[l] = dl[s] * float((q[l] >> (2 * k)) & 3) - ml[s];
          }
        }
  }
}

void dequant_q6_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 210, dst += 256) {
    const float d = f16_to_f32(load_u16(src + 208));
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    for (int h = 0; h < 2; ++h) {  // element 128h + 32j + l: ql[64h + l (+32)] nibble, qh[32h + l] bits 2j
      const uint8_t* ql = src + 64 * h;
      const uint8_t* qh = src + 128 + 32 * h;
      for (int j = 0; j < 4; ++j)
        for (int g = 0; g < 2; ++g) {
          const float ds = d * float(scales[8 * h + 2 * j + g]);
          float* y = dst + 128 * h + 32 * j + 16 * g;
          const uint8_t* lo = ql + 32 * (j & 1) + 16 * g;
          const uint8_t* hi = qh + 16 * g;
          for (int l = 0; l < 16; ++l) {
            const int v = ((lo[l] >> (4 * (j >> 1))) & 15) | (((hi[l] >> (2 * j)) & 3) << 4);
            y[l] = ds * float(v - 32);
          }
        }
    }
  }
}

#if RIDGE_X86
#define RIDGE_SIMD __attribute__((target("avx2,fma,f16c")))

// fp16 -> fp32 by the F16C instruction: the same (exact) value as f16_to_f32, which in the dot
// products' loops cost more than the arithmetic (CPU decode of the default model 50-58 -> 65-87
// tok/s on the development VM).
RIDGE_SIMD inline float f16c(uint16_t h) { return _cvtsh_ss(h); }

// How far ahead the decode dot products prefetch their weight row (q4_0, q4_1, q8_0 a line a
// block; q4_k, q5_k, q6_k every line of a 256-element block). 640 bytes first gave ~9 % more
// decode tok/s for the default model on the development VM and ~15 % for Q4_K / Q6_K models;
// 2,048 bytes (about six Q4_1 rows of hidden 576 ahead) then took the default model's 256-token
// `ridge run` to 0.74x the wall time of 640 (farm-bench, 9 alternating pairs; decode ~11.9 ->
// ~8.3 ms a token), Q6_K 0.95x, Q4_K 0.99x; 1,024 was 1.09x slower than 2,048, 4,096 level
// with it. (AVX-512 forms of the Q4_1 and Q8_0 dot products measured level with AVX2 at the same
// distance, 0.99x: the loop waits on memory, not on instructions; not kept.)
constexpr int kPrefetchBytes = 2048;

RIDGE_SIMD inline __m256 nibbles_to_f32(__m128i bytes8) {  // 8 bytes (low 64 bits) -> 8 floats
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes8));
}

RIDGE_SIMD void dequant_q4_1_avx2(const uint8_t* src, float* dst, int64_t n) {
  const __m128i mask = _mm_set1_epi8(15);
  for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
    const __m256 d = _mm256_set1_ps(f16c(load_u16(src)));
    const __m256 m = _mm256_set1_ps(f16c(load_u16(src + 2)));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 4));
    const __m128i lo = _mm_and_si128(q, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    // d * q + m as a separate multiply and add, to round like the scalar reference
    _mm256_storeu_ps(dst + 0, _mm256_add_ps(_mm256_mul_ps(d, nibbles_to_f32(lo)), m));
    _mm256_storeu_ps(dst + 8, _mm256_add_ps(_mm256_mul_ps(d, nibbles_to_f32(_mm_srli_si128(lo, 8))), m));
    _mm256_storeu_ps(dst + 16, _mm256_add_ps(_mm256_mul_ps(d, nibbles_to_f32(hi)), m));
    _mm256_storeu_ps(dst + 24, _mm256_add_ps(_mm256_mul_ps(d, nibbles_to_f32(_mm_srli_si128(hi, 8))), m));
  }
}

RIDGE_SIMD void dequant_q4_0_avx2(const uint8_t* src, float* dst, int64_t n) {
  const __m128i mask = _mm_set1_epi8(15);
  const __m256 eight = _mm256_set1_ps(8.0f);
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const __m256 d = _mm256_set1_ps(f16c(load_u16(src)));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
    const __m128i lo = _mm_and_si128(q, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    _mm256_storeu_ps(dst, _mm256_mul_ps(d, _mm256_sub_ps(nibbles_to_f32(lo), eight)));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(d, _mm256_sub_ps(nibbles_to_f32(_mm_srli_si128(lo, 8)), eight)));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(d, _mm256_sub_ps(nibbles_to_f32(hi), eight)));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(d, _mm256_sub_ps(nibbles_to_f32(_mm_srli_si128(hi, 8)), eight)));
  }
}

RIDGE_SIMD void dequant_q8_0_avx2(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    const __m256 d = _mm256_set1_ps(f16c(load_u16(src)));
    for (int i = 0; i < 32; i += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + i));
      _mm256_storeu_ps(dst + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
  }
}

RIDGE_SIMD void f16_row_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

RIDGE_SIMD void bf16_row_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

RIDGE_SIMD float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  __m256 acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

RIDGE_SIMD void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

RIDGE_SIMD inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <bool kTwo>
RIDGE_SIMD void dot_4x2_avx2(const float* w, int64_t ldw, const float* x0, const float* x1,
                             int64_t n, float out[8]) {
  const float* wr[4] = {w, w + ldw, w + 2 * ldw, w + 3 * ldw};
  __m256 a[4][2];
  for (auto& r : a) r[0] = r[1] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 v0 = _mm256_loadu_ps(x0 + k);
    const __m256 v1 = kTwo ? _mm256_loadu_ps(x1 + k) : v0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m256 wv = _mm256_loadu_ps(wr[r] + k);
      a[r][0] = _mm256_fmadd_ps(wv, v0, a[r][0]);
      if (kTwo) a[r][1] = _mm256_fmadd_ps(wv, v1, a[r][1]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < (kTwo ? 2 : 1); ++t) {
      const float* xt = t ? x1 : x0;
      float v = hsum(a[r][t]);
      for (int64_t j = k; j < n; ++j) v += wr[r][j] * xt[j];
      out[2 * r + t] = v;
    }
}

// The decode dot products below take NT tokens (1..4) against one pass over a weight row: a
// block's values are unpacked once for all of them, and each token's sums run in exactly the
// order of the one-token form, so a token's result does not depend on how many share the pass
// (dot_row_tokens). x[t] and bsum[t] are token t's row and block sums; out[t] its result.

// 32 values as fp32: unsigned bytes (nibbles, q4_k/q5_k) or signed bytes (q5, q6_k, q2/q3_k,
// iq4), in element order, 8 a vector.
RIDGE_SIMD inline void unpack_u8(__m256i q, __m256 v[4]) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  v[0] = nibbles_to_f32(lo);
  v[1] = nibbles_to_f32(_mm_srli_si128(lo, 8));
  v[2] = nibbles_to_f32(hi);
  v[3] = nibbles_to_f32(_mm_srli_si128(hi, 8));
}
RIDGE_SIMD inline void unpack_i8(__m256i q, __m256 v[4]) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}
// 32 values · 32 floats as 8-lane partial sums, one chain ...
RIDGE_SIMD inline __m256 dot32(const __m256 v[4], const float* x) {
  __m256 acc = _mm256_mul_ps(v[0], _mm256_loadu_ps(x));
  acc = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + 8), acc);
  acc = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + 16), acc);
  return _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + 24), acc);
}
// ... or the first 16 and the last 16 as separate partial sums.
RIDGE_SIMD inline void dot32_halves(const __m256 v[4], const float* x, __m256& first,
                                    __m256& second) {
  first = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + 8), _mm256_mul_ps(v[0], _mm256_loadu_ps(x)));
  second =
      _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + 24), _mm256_mul_ps(v[2], _mm256_loadu_ps(x + 16)));
}
// 16 bytes of nibbles (element j: the low nibble of byte j, element 16 + j: the high one).
RIDGE_SIMD inline __m256i nibbles32(const uint8_t* p) {
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
}

// q4_1: sum_b d_b * (q_b · x_b) + m_b * sum(x_b)
template <int NT>
RIDGE_SIMD void dot_q4_1_avx2(const uint8_t* w, const float* const* x, const float* const* bsum,
                              int64_t n, float* out) {
  __m256 total[NT];
  float msum[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps(), msum[t] = 0;
  }
  for (int64_t b = 0; b < n / 32; ++b, w += 20) {
    _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
    const __m256 d = _mm256_set1_ps(f16c(load_u16(w)));
    const float m = f16c(load_u16(w + 2));
    __m256 v[4];
    unpack_u8(nibbles32(w + 4), v);
    for (int t = 0; t < NT; ++t) {
      msum[t] += m * bsum[t][b];
      total[t] = _mm256_fmadd_ps(d, dot32(v, x[t] + 32 * b), total[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]) + msum[t];
  }
}

// q4_0: sum_b d_b * ((q_b - 8) · x_b)
template <int NT>
RIDGE_SIMD void dot_q4_0_avx2(const uint8_t* w, const float* const* x, int64_t n, float* out) {
  const __m256 eight = _mm256_set1_ps(8.0f);
  __m256 total[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n / 32; ++b, w += 18) {
    _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
    const __m256 d = _mm256_set1_ps(f16c(load_u16(w)));
    __m256 v[4];
    unpack_u8(nibbles32(w + 2), v);
    for (auto& e : v) e = _mm256_sub_ps(e, eight);
    for (int t = 0; t < NT; ++t) {
      total[t] = _mm256_fmadd_ps(d, dot32(v, x[t] + 32 * b), total[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]);
  }
}

// The 32 values 0..31 of a q5_0/q5_1 block as bytes (element j in byte j): the low nibbles of
// qs, then the high ones, each with bit j of qh as its fifth bit.
RIDGE_SIMD inline __m256i q5_bytes(const uint8_t* qs, uint32_t qh) {
  const __m256i nib = nibbles32(qs);
  // byte j <- byte j / 8 of qh; all ones where bit j % 8 of it is set
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(qh)), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                     0x0101010101010101, 0));
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);  // byte k: all bits but bit k
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
  return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

// q5_0 / q5_1: sum_b d_b * (q_b · x_b) (+ m_b * sum(x_b) for q5_1), q_b = the block's values
// (- 16 for q5_0)
template <int NT>
RIDGE_SIMD void dot_q5_avx2(const uint8_t* w, const float* const* x, const float* const* bsum,
                            int64_t n, bool with_min, float* out) {
  const int64_t bytes = with_min ? 24 : 22;
  const int off = with_min ? 4 : 2;
  const __m256i bias = _mm256_set1_epi8(with_min ? 0 : 16);
  __m256 total[NT];
  float msum[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps(), msum[t] = 0;
  }
  for (int64_t b = 0; b < n / 32; ++b, w += bytes) {
    const __m256 d = _mm256_set1_ps(f16c(load_u16(w)));
    const float m = with_min ? f16c(load_u16(w + 2)) : 0.0f;
    uint32_t qh;
    std::memcpy(&qh, w + off, 4);
    __m256 v[4];
    unpack_i8(_mm256_sub_epi8(q5_bytes(w + off + 4, qh), bias), v);  // signed bytes
    for (int t = 0; t < NT; ++t) {
      if (with_min) msum[t] += m * bsum[t][b];
      total[t] = _mm256_fmadd_ps(d, dot32(v, x[t] + 32 * b), total[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]) + msum[t];
  }
}

// q4_k / q5_k: sum over 32-element sub-blocks s of (d*sc_s) * (q_s · x_s) - (dmin*mn_s) * sum(x_s).
template <int NT>
RIDGE_SIMD void dot_q4_k_avx2(const uint8_t* w, const float* const* x, const float* const* bsum,
                              int64_t n, bool five, float* out) {
  const int64_t bytes = five ? 176 : 144;
  const __m256i mask = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
  __m256 total[NT];
  float msum[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps(), msum[t] = 0;
  }
  for (int64_t b = 0; b < n / 256; ++b, w += bytes) {
    for (int line = 0; line < 3; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes + 64 * line, _MM_HINT_T0);
    const float d = f16c(load_u16(w)), dmin = f16c(load_u16(w + 2));
    const uint8_t* qs = w + (five ? 48 : 16);
    const __m256i qh = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))
                            : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, mask), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      if (five) {
        const __m128i s0 = _mm_cvtsi32_si128(2 * c), s1 = _mm_cvtsi32_si128(2 * c + 1);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s0), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s1), one), 4));
      }
      int sc0 = 0, mn0 = 0, sc1 = 0, mn1 = 0;
      quant::k4_scale_min(w + 4, 2 * c, sc0, mn0);
      quant::k4_scale_min(w + 4, 2 * c + 1, sc1, mn1);
      const __m256 d0 = _mm256_set1_ps(d * float(sc0)), d1 = _mm256_set1_ps(d * float(sc1));
      const float m0 = dmin * float(mn0), m1 = dmin * float(mn1);
      __m256 vl[4], vh[4];
      unpack_u8(lo, vl);
      unpack_u8(hi, vh);
      for (int t = 0; t < NT; ++t) {
        const float* xc = x[t] + 256 * b + 64 * c;
        const float* sc = bsum[t] + 8 * b + 2 * c;
        total[t] = _mm256_fmadd_ps(d0, dot32(vl, xc), total[t]);
        total[t] = _mm256_fmadd_ps(d1, dot32(vh, xc + 32), total[t]);
        msum[t] += m0 * sc[0] + m1 * sc[1];
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]) - msum[t];
  }
}

// q6_k: element 128h + 32j + l is nibble j / 2 of ql[64h + 32(j % 2) + l] with bits 2j of
// qh[32h + l] above it, minus 32; every 16 elements have their own int8 scale.
template <int NT>
RIDGE_SIMD void dot_q6_k_avx2(const uint8_t* w, const float* const* x, int64_t n, float* out) {
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  __m256 total[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n / 256; ++b, w += 210) {
    for (int line = 0; line < 4; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes + 64 * line, _MM_HINT_T0);
    const float d = f16c(load_u16(w + 208));
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * h));
      for (int j = 0; j < 4; ++j) {
        const __m256i ql =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * h + 32 * (j & 1)));
        const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (j >> 1))), low4);
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), low2);
        __m256 v[4];
        unpack_i8(_mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), bias), v);
        const int s = 8 * h + 2 * j;
        const __m256 d0 = _mm256_set1_ps(d * float(scales[s]));
        const __m256 d1 = _mm256_set1_ps(d * float(scales[s + 1]));
        for (int t = 0; t < NT; ++t) {
          __m256 first, second;
          dot32_halves(v, x[t] + 256 * b + 128 * h + 32 * j, first, second);
          total[t] = _mm256_fmadd_ps(d0, first, total[t]);
          total[t] = _mm256_fmadd_ps(d1, second, total[t]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]);
  }
}

// q2_k / q3_k: element 128h + 32k + l is bits 2k of qs[32h + l] (q3_k: minus 4 unless bit 4h + k
// of hmask[l] is set); 16 groups of 16 with a scale each (q2_k: and a min, through the group's
// sum of x).
template <int NT>
RIDGE_SIMD void dot_q2_q3_k_avx2(const uint8_t* w, const float* const* x, int64_t n, bool three,
                                 float* out) {
  const int64_t bytes = three ? 110 : 84;
  const __m256i two_bits = _mm256_set1_epi8(3), one_bit = _mm256_set1_epi8(1);
  const __m256i four = _mm256_set1_epi8(4);
  __m256 total[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n / 256; ++b, w += bytes) {
    float dl[16], ml[16];
    q2_q3_scales(w, three, dl, ml);
    const uint8_t* qs = w + (three ? 32 : 16);
    const __m256i hmask = three ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))
                                : _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
      for (int k = 0; k < 4; ++k) {
        __m256i q = _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * k)), two_bits);
        if (three) {
          const __m256i hb =
              _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(4 * h + k)), one_bit);
          q = _mm256_sub_epi8(_mm256_add_epi8(q, _mm256_slli_epi16(hb, 2)), four);
        }
        __m256 v[4];
        unpack_i8(q, v);
        const int s = 8 * h + 2 * k;
        const __m256 d0 = _mm256_set1_ps(dl[s]), d1 = _mm256_set1_ps(dl[s + 1]);
        const __m256 m0 = _mm256_set1_ps(ml[s]), m1 = _mm256_set1_ps(ml[s + 1]);
        for (int t = 0; t < NT; ++t) {
          const float* xk = x[t] + 256 * b + 128 * h + 32 * k;
          __m256 first, second;
          dot32_halves(v, xk, first, second);
          total[t] = _mm256_fmadd_ps(d0, first, total[t]);
          total[t] = _mm256_fmadd_ps(d1, second, total[t]);
          if (!three) {
            const __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(xk), _mm256_loadu_ps(xk + 8));
            const __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(xk + 16), _mm256_loadu_ps(xk + 24));
            total[t] = _mm256_fnmadd_ps(m0, x0, total[t]);
            total[t] = _mm256_fnmadd_ps(m1, x1, total[t]);
          }
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]);
  }
}

// iq4_nl / iq4_xs: the 16 levels looked up per nibble with a byte shuffle; every 32 elements
// (one iq4_nl block, one iq4_xs sub-block) share a scale. 16 bytes of nibbles -> 32 levels.
const std::array<int8_t, 16> kIq4Levels = [] {
  std::array<int8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[size_t(i)] = int8_t(quant::iq4_value(i));
  return t;
}();

RIDGE_SIMD inline __m256i iq4_levels(const uint8_t* qs) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels.data()));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), mask)),
                          _mm_shuffle_epi8(table, _mm_and_si128(q, mask)));
}

// One scaled 32-element group of an iq4 row into each token's total.
template <int NT>
RIDGE_SIMD inline void iq4_group(const uint8_t* qs, __m256 scale, const float* const* x, int64_t at,
                                 __m256 total[NT]) {
  __m256 v[4];
  unpack_i8(iq4_levels(qs), v);
  for (int t = 0; t < NT; ++t) {
    __m256 first, second;
    dot32_halves(v, x[t] + at, first, second);
    total[t] = _mm256_fmadd_ps(scale, _mm256_add_ps(first, second), total[t]);
  }
}

template <int NT>
RIDGE_SIMD void dot_iq4_avx2(const uint8_t* w, const float* const* x, int64_t n, bool xs,
                             float* out) {
  __m256 total[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
  }
  if (!xs) {
    for (int64_t b = 0; b < n / 32; ++b, w += 18)
      iq4_group<NT>(w + 2, _mm256_set1_ps(f16c(load_u16(w))), x, 32 * b, total);
  } else {
    for (int64_t b = 0; b < n / 256; ++b, w += 136) {
      const float d = f16c(load_u16(w));
      const int scales_h = w[2] | (w[3] << 8);
      for (int s = 0; s < 8; ++s) {
        const int ls =
            ((w[4 + (s >> 1)] >> (4 * (s & 1))) & 15) | (((scales_h >> (2 * s)) & 3) << 4);
        iq4_group<NT>(w + 8 + 16 * s, _mm256_set1_ps(d * float(ls - 32)), x, 256 * b + 32 * s,
                      total);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]);
  }
}

// q8_0: sum_b d_b * (q_b · x_b)
template <int NT>
RIDGE_SIMD void dot_q8_0_avx2(const uint8_t* w, const float* const* x, int64_t n, float* out) {
  __m256 total[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < n / 32; ++b, w += 34) {
    _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
    const __m256 d = _mm256_set1_ps(f16c(load_u16(w)));
    __m256 v[4];
    for (int i = 0; i < 4; ++i)
      v[i] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 2 + 8 * i))));
    for (int t = 0; t < NT; ++t) {
      const float* xb = x[t] + 32 * b;
      __m256 acc = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) acc = _mm256_fmadd_ps(v[i], _mm256_loadu_ps(xb + 8 * i), acc);
      total[t] = _mm256_fmadd_ps(d, acc, total[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    out[t] = hsum(total[t]);
  }
}

// The quantized decode dot products of NT tokens; false where the type has no fused kernel.
template <int NT>
RIDGE_SIMD bool dot_tokens_avx2(DType dtype, const uint8_t* q, const float* const* x,
                                const float* const* bsum, int64_t n, float* out) {
  switch (dtype) {
    case DType::q4_1:
      dot_q4_1_avx2<NT>(q, x, bsum, n, out);
      return true;
    case DType::q4_0:
      dot_q4_0_avx2<NT>(q, x, n, out);
      return true;
    case DType::q8_0:
      dot_q8_0_avx2<NT>(q, x, n, out);
      return true;
    case DType::q5_0:
    case DType::q5_1:
      dot_q5_avx2<NT>(q, x, bsum, n, dtype == DType::q5_1, out);
      return true;
    case DType::q4_k:
    case DType::q5_k:
      dot_q4_k_avx2<NT>(q, x, bsum, n, dtype == DType::q5_k, out);
      return true;
    case DType::q6_k:
      dot_q6_k_avx2<NT>(q, x, n, out);
      return true;
    case DType::iq4_nl:
    case DType::iq4_xs:
      dot_iq4_avx2<NT>(q, x, n, dtype == DType::iq4_xs, out);
      return true;
    case DType::q2_k:
    case DType::q3_k:
      dot_q2_q3_k_avx2<NT>(q, x, n, dtype == DType::q3_k, out);
      return true;
    default:
      return false;
  }
}

RIDGE_SIMD float dot_half_avx2(const uint16_t* w, const float* x, int64_t n, bool bf16) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  auto load = [bf16](const uint16_t* p) __attribute__((target("avx2,fma,f16c"))) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                : _mm256_cvtph_ps(h);
  };
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), a0);
  float r = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) r += (bf16 ? bf16_to_f32(w[i]) : f16_to_f32(w[i])) * x[i];
  return r;
}

// Four rows' dot products with q at once (q loaded once per 8 columns for four FMAs); n % 8 == 0.
RIDGE_SIMD void dot_rows_avx2(const float* q, const float* rows, int64_t stride, int64_t count,
                              int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const float* r = rows + i * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k += 8) {
      const __m256 qk = _mm256_loadu_ps(q + k);
      a0 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + k), a0);
      a1 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + stride + k), a1);
      a2 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 2 * stride + k), a2);
      a3 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 3 * stride + k), a3);
    }
    // The four 8-lane sums at once: pairwise adds leave lane j of rows 0..3 in one vector.
    const __m256 s01 = _mm256_hadd_ps(a0, a1), s23 = _mm256_hadd_ps(a2, a3);
    const __m256 s = _mm256_hadd_ps(s01, s23);  // per 128-bit half: r0 r1 r2 r3 partial sums
    _mm_storeu_ps(out + i, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
  }
  for (; i < count; ++i) {
    const float* r = rows + i * stride;
    __m256 a = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + k), _mm256_loadu_ps(r + k), a);
    out[i] = hsum(a);
  }
}

// acc += sum_i w[i] row_i, 64 columns at a time in eight registers across all rows; n % 8 == 0.
RIDGE_SIMD void axpy_rows_avx2(const float* w, const float* rows, int64_t stride, int64_t count,
                               int64_t n, float* acc) {
  int64_t k0 = 0;
  for (; k0 + 64 <= n; k0 += 64) {
    __m256 a[8];
    for (int v = 0; v < 8; ++v) a[v] = _mm256_loadu_ps(acc + k0 + 8 * v);
    for (int64_t i = 0; i < count; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* r = rows + i * stride + k0;
      for (int v = 0; v < 8; ++v) a[v] = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 8 * v), a[v]);
    }
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(acc + k0 + 8 * v, a[v]);
  }
  for (; k0 < n; k0 += 8) {
    __m256 a = _mm256_loadu_ps(acc + k0);
    for (int64_t i = 0; i < count; ++i)
      a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(rows + i * stride + k0), a);
    _mm256_storeu_ps(acc + k0, a);
  }
}

const bool g_simd = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}();
#else
const bool g_simd = false;
#endif

}  // namespace

bool simd_available() { return g_simd; }

void dequantize_row_reference(DType dtype, const void* src_, float* dst, int64_t n) {
  const auto* src = static_cast<const uint8_t*>(src_);
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return;
    case DType::fp8_e4m3:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8e4m3_to_f32(src[i]);
      return;
    case DType::q8_0:
      return dequant_q8_0(src, dst, n);
    case DType::q4_0:
      return dequant_q4_0(src, dst, n);
    case DType::q4_1:
      return dequant_q4_1(src, dst, n);
    case DType::q5_0:
    case DType::q5_1:
    case DType::q2_k:
    case DType::q3_k:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
    case DType::iq4_nl:
    case DType::iq4_xs:
      return dequant_elements(dtype, src, dst, n);
    default:
      fail("dequantize_row: unsupported dtype {}", dtype_name(dtype));
  }
}

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  if (dtype == DType::fp8_e4m3) {  // a table of the 256 codes (the reference decodes each)
    static const auto table = [] {
      std::array<float, 256> t{};
      for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8e4m3_to_f32(uint8_t(c));
      return t;
    }();
    const auto* s = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i]];
    return;
  }
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (dtype) {
    case DType::q5_0:
    case DType::q5_1:
      return dequant_q5(bytes, dst, n, dtype == DType::q5_1);
    case DType::iq4_nl:
      return dequant_iq4_nl(bytes, dst, n);
    case DType::iq4_xs:
      return dequant_iq4_xs(bytes, dst, n);
    case DType::q2_k:
    case DType::q3_k:
      return dequant_q2_q3_k(bytes, dst, n, dtype == DType::q3_k);
    case DType::q4_k:
    case DType::q5_k:
      return dequant_q4_k(bytes, dst, n, dtype == DType::q5_k);
    case DType::q6_k:
      return dequant_q6_k(bytes, dst, n);
    default:
      break;
  }
#if RIDGE_X86
  if (g_simd) {
    const auto* s = static_cast<const uint8_t*>(src);
    switch (dtype) {
      case DType::q4_1:
        return dequant_q4_1_avx2(s, dst, n);
      case DType::q4_0:
        return dequant_q4_0_avx2(s, dst, n);
      case DType::q8_0:
        return dequant_q8_0_avx2(s, dst, n);
      case DType::f16:
        return f16_row_avx2(static_cast<const uint16_t*>(src), dst, n);
      case DType::bf16:
        return bf16_row_avx2(static_cast<const uint16_t*>(src), dst, n);
      default:
        break;
    }
  }
#endif
  dequantize_row_reference(dtype, src, dst, n);
}

float dot(const float* a, const float* b, int64_t n) {
#if RIDGE_X86
  if (g_simd) return dot_avx2(a, b, n);
#endif
  double r = 0;
  for (int64_t i = 0; i < n; ++i) r += double(a[i]) * b[i];
  return float(r);
}

void dot_4x2(const float* w, int64_t ldw, const float* x0, const float* x1, int64_t n,
             float out[8]) {
#if RIDGE_X86
  if (g_simd) {
    if (x1)
      dot_4x2_avx2<true>(w, ldw, x0, x1, n, out);
    else
      dot_4x2_avx2<false>(w, ldw, x0, nullptr, n, out);
    return;
  }
#endif
  for (int r = 0; r < 4; ++r) {
    out[2 * r] = dot(w + r * ldw, x0, n);
    if (x1) out[2 * r + 1] = dot(w + r * ldw, x1, n);
  }
}

void block_sums(const float* x, float* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    float s = 0;
    for (int i = 0; i < 32; ++i) s += x[b * 32 + i];
    out[b] = s;
  }
}

float dot_row(DType dtype, const void* w, const float* x, const float* bsum, int64_t n) {
#if RIDGE_X86
  if (g_simd) {
    const auto* q = static_cast<const uint8_t*>(w);
    switch (dtype) {
      case DType::f32:
        return dot_avx2(static_cast<const float*>(w), x, n);
      case DType::f16:
        return dot_half_avx2(static_cast<const uint16_t*>(w), x, n, false);
      case DType::bf16:
        return dot_half_avx2(static_cast<const uint16_t*>(w), x, n, true);
      default: {
        float r;
        if (dot_tokens_avx2<1>(dtype, q, &x, &bsum, n, &r)) return r;
        break;
      }
    }
  }
#endif
  if (is_quantized(dtype)) {
    // The row converted into a per-thread buffer (no allocation after the first), then one dot
    // product.
    thread_local std::vector<float> row;
    if (row.size() < size_t(n)) row.resize(size_t(n));
    dequantize_row(dtype, w, row.data(), n);
    return dot(row.data(), x, n);
  }
  // Reference: convert the row, then an fp32 dot product.
  std::vector<float> row(static_cast<size_t>(n));
  dequantize_row_reference(dtype, w, row.data(), n);
  return dot(row.data(), x, n);
}

void dot_row_tokens(DType dtype, const void* w, const float* const* x, const float* const* bsum,
                    int nt, int64_t n, float* out) {
  RIDGE_CHECK(nt >= 1 && nt <= kMaxDotTokens, "dot_row_tokens: {} tokens (1..{})", nt,
              kMaxDotTokens);
#if RIDGE_X86
  if (g_simd) {
    const auto* q = static_cast<const uint8_t*>(w);
    bool done = false;
    switch (nt) {
      case 1:
        done = dot_tokens_avx2<1>(dtype, q, x, bsum, n, out);
        break;
      case 2:
        done = dot_tokens_avx2<2>(dtype, q, x, bsum, n, out);
        break;
      case 3:
        done = dot_tokens_avx2<3>(dtype, q, x, bsum, n, out);
        break;
      default:
        done = dot_tokens_avx2<4>(dtype, q, x, bsum, n, out);
        break;
    }
    if (done) return;
  }
#endif
  // f32 / f16 / bf16 (and no SIMD): the row stays in L1 between the tokens.
  for (int t = 0; t < nt; ++t) out[t] = dot_row(dtype, w, x[t], bsum ? bsum[t] : nullptr, n);
}

void dot_rows(const float* q, const float* rows, int64_t stride, int64_t count, int64_t n,
              float* out) {
#if RIDGE_X86
  if (g_simd && n % 8 == 0) return dot_rows_avx2(q, rows, stride, count, n, out);
#endif
  for (int64_t i = 0; i < count; ++i) out[i] = dot(q, rows + i * stride, n);
}

void axpy_rows(const float* w, const float* rows, int64_t stride, int64_t count, int64_t n,
               float* acc) {
#if RIDGE_X86
  if (g_simd && n % 8 == 0) return axpy_rows_avx2(w, rows, stride, count, n, acc);
#endif
  for (int64_t i = 0; i < count; ++i) axpy(w[i], rows + i * stride, acc, n);
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
#if RIDGE_X86
  if (g_simd) return axpy_avx2(alpha, x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void store_row(DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::fp8_e4m3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp8e4m3(src[i]);
      return;
    }
    default:
      fail("store_row: unsupported dtype {}", dtype_name(dtype));
  }
}

}  // namespace ridge::backend::cpu
