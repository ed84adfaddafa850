// One element of a GGUF block-quantized row, decoded from the block's bytes: the single
// definition of every block layout ridge reads, shared by the CPU reference
// (backend/cpu/quant.cpp) and the GPU's load-time conversion (kernels/cuda/elementwise/convert.cu).
//
// Every supported type's value has the form
//     value = (D * s) * q +- M * m       (each product and the sum rounded to fp32, no FMA)
// with D and M fp16 scales stored in the block, s, q and m small integers. This is the order in
// which ggml's reference dequantizers (and the `gguf` Python package's) round, so the decoded
// values are bitwise theirs. Layouts (ggml's block structs; QK = elements per block):
//   q8_0   32,  34 B: f16 d; i8 qs[32]                           d * q
//   q4_0   32,  18 B: f16 d; u8 qs[16]                           d * (nib - 8)
//   q4_1   32,  20 B: f16 d; f16 m; u8 qs[16]                    d * nib + m
//   q5_0   32,  22 B: f16 d; u8 qh[4]; u8 qs[16]                 d * (nib | hbit << 4) - 16)
//   q5_1   32,  24 B: f16 d; f16 m; u8 qh[4]; u8 qs[16]          d * (nib | hbit << 4) + m
//   iq4_nl 32,  18 B: f16 d; u8 qs[16]                           d * kIq4Values[nib]
//   q2_k  256,  84 B: u8 scales[16]; u8 qs[64]; f16 d; f16 dmin  (d*sc) * q2 - dmin*mn, 4-bit sc/mn
//   q3_k  256, 110 B: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d   (d*(sc-32)) * (q2 - 4*!h)
//   q4_k  256, 144 B: f16 d; f16 dmin; u8 scales[12]; u8 qs[128] (d*sc) * q4 - dmin*mn, 6-bit sc/mn
//   q5_k  256, 176 B: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]   as q4_k, q 5 bits
//   q6_k  256, 210 B: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d         (d*sc) * (q6 - 32)
//   iq4_xs 256, 136 B: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128] (d*(ls-32)) * kIq4Values[nib]
// In 32-element blocks byte j holds element j in its low nibble and element j+16 in its high one
// (the 5th bit of element j is bit j of qh, little-endian). The k-quant and iq4_xs bit positions
// are spelled out per type below.
#pragma once

#include <cstdint>

#include "ridge/core/dtype.h"

#if defined(__CUDACC__)
#define RIDGE_HOST_DEVICE __host__ __device__
#else
#define RIDGE_HOST_DEVICE
#endif

namespace ridge::quant {

// The integers of one element; D and M are the fp16 bit patterns at the block's offsets d_at and
// m_at (m_at < 0: no M term).
struct Element {
  int s = 1;  // D's multiplier
  int q = 0;  // the quantized value
  int m = 0;  // M's multiplier
  bool minus = false;  // M * m is subtracted (the k-quants' mins: -0.0 comes out as ggml's)
  int d_at = 0, m_at = -1;
};

// iq4_nl / iq4_xs: the 16 non-linear levels (ggml's kvalues_iq4nl).
RIDGE_HOST_DEVICE inline int iq4_value(int nibble) {
  constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};
  return kValues[nibble];
}

// q4_k / q5_k: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
RIDGE_HOST_DEVICE inline void k4_scale_min(const uint8_t* sc, int j, int& scale, int& min) {
  if (j < 4) {
    scale = sc[j] & 63;
    min = sc[j + 4] & 63;
  } else {
    scale = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// Element i (0 <= i < the type's block size) of the block at b. Types outside the table above
// give Element{} (the callers only pass block-quantized types they support).
RIDGE_HOST_DEVICE inline Element element(DType t, const uint8_t* b, int i) {
  Element e;
  const int lo = i & 15, hi = i >> 4;  // for the 32-element types
  switch (t) {
    case DType::q8_0:
      e.q = static_cast<int8_t>(b[2 + i]);
      break;
    case DType::q4_0:
      e.q = ((b[2 + lo] >> (4 * hi)) & 15) - 8;
      break;
    case DType::q4_1:
      e.q = (b[4 + lo] >> (4 * hi)) & 15;
      e.m = 1, e.m_at = 2;
      break;
    case DType::iq4_nl:
      e.q = iq4_value((b[2 + lo] >> (4 * hi)) & 15);
      break;
    case DType::q5_0:
    case DType::q5_1: {
      const int o = t == DType::q5_1 ? 2 : 0;
      const int h = (b[2 + o + (i >> 3)] >> (i & 7)) & 1;
      const int q = ((b[6 + o + lo] >> (4 * hi)) & 15) | (h << 4);
      if (t == DType::q5_0) {
        e.q = q - 16;
      } else {
        e.q = q;
        e.m = 1, e.m_at = 2;
      }
      break;
    }
    case DType::q2_k: {  // element 128h + 32k + l: bits 2k of qs[32h + l]; scale byte i / 16
      const int sc = b[i >> 4];
      e.q = (b[16 + 32 * (i >> 7) + (i & 31)] >> (2 * ((i >> 5) & 3))) & 3;
      e.s = sc & 15;
      e.m = sc >> 4, e.minus = true;
      e.d_at = 80, e.m_at = 82;
      break;
    }
    case DType::q3_k: {  // low 2 bits as q2_k; bit i / 32 of hmask[i % 32] set means no -4
      const int l2 = (b[32 + 32 * (i >> 7) + (i & 31)] >> (2 * ((i >> 5) & 3))) & 3;
      const int h = (b[i & 31] >> (i >> 5)) & 1;
      e.q = l2 - (h ? 0 : 4);
      const int s = i >> 4;  // 16 scales of 6 bits: 4 low bits in bytes 0-7, 2 high in 8-11
      const uint8_t* sc = b + 96;
      const int low = (sc[s & 7] >> (4 * (s >> 3))) & 15;
      const int high = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
      e.s = (low | (high << 4)) - 32;
      e.d_at = 108;
      break;
    }
    case DType::q4_k:
    case DType::q5_k: {  // 64-element chunk c = i / 64: low nibbles then high nibbles of 32 bytes
      const int sub = i >> 5, l = i & 31;
      int scale = 0, min = 0;
      k4_scale_min(b + 4, sub, scale, min);
      const uint8_t* qs = b + (t == DType::q5_k ? 48 : 16);
      int q = (qs[32 * (sub >> 1) + l] >> (4 * (sub & 1))) & 15;
      if (t == DType::q5_k) q |= ((b[16 + l] >> sub) & 1) << 4;  // bit sub of qh[l]
      e.q = q;
      e.s = scale;
      e.m = min, e.minus = true;
      e.m_at = 2;
      break;
    }
    case DType::q6_k: {  // element 128h + r: ql[64h + r % 64] nibble r / 64, qh[32h + r % 32] bits 2(r / 32)
      const int h = i >> 7, r = i & 127;
      const int low = (b[64 * h + (r & 63)] >> (4 * (r >> 6))) & 15;
      const int high = (b[128 + 32 * h + (r & 31)] >> (2 * (r >> 5))) & 3;
      e.q = (low | (high << 4)) - 32;
      e.s = static_cast<int8_t>(b[192 + (i >> 4)]);
      e.d_at = 208;
      break;
    }
    case DType::iq4_xs: {  // sub-block s = i / 32 of 16 bytes: low nibbles, then high nibbles
      const int s = i >> 5, l = i & 31;
      const int scales_h = b[2] | (b[3] << 8);
      const int ls = ((b[4 + (s >> 1)] >> (4 * (s & 1))) & 15) | (((scales_h >> (2 * s)) & 3) << 4);
      e.s = ls - 32;
      e.q = iq4_value((b[8 + 16 * s + (l & 15)] >> (4 * (l >> 4))) & 15);
      break;
    }
    default:
      break;
  }
  return e;
}

}  // namespace ridge::quant
