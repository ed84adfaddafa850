// Random bytes in a GGUF block layout (ridge/core/quant_blocks.h): every quant, sub-scale and high
// bit random, the fp16 scale fields finite (both signs, magnitudes in [lo, hi)). What the values
// mean is the decoder's business; tests/parity/test_io_parity.py holds that decoder bitwise equal
// to the `gguf` Python package on blocks made the same way.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ridge/core/dtype.h"
#include "ridge/core/half.h"
#include "ridge/core/quant_blocks.h"

namespace ridge::test {

inline std::vector<uint8_t> random_blocks(DType t, int64_t n, std::mt19937& rng, float lo = 0.002f,
                                          float hi = 0.03f) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<uint8_t> b(row_bytes(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(lo, hi);
  for (auto& x : b) x = uint8_t(byte(rng));
  // The scale fields' offsets as the decoder reads them (element 0 of a block names both).
  const std::vector<uint8_t> zeros(size_t(info.block_bytes), 0);
  const quant::Element e = quant::element(t, zeros.data(), 0);
  for (int64_t blk = 0; blk < n / info.block_elems; ++blk)
    for (int at : {e.d_at, e.m_at}) {
      if (at < 0) continue;
      const uint16_t h = f32_to_f16(byte(rng) & 1 ? mag(rng) : -mag(rng));
      std::memcpy(&b[size_t(blk * info.block_bytes + at)], &h, 2);
    }
  return b;
}

// The block-quantized types ridge reads.
inline constexpr DType kBlockTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1,  DType::q5_0,
                                        DType::q5_1, DType::q2_k, DType::q3_k,  DType::q4_k,
                                        DType::q5_k, DType::q6_k, DType::iq4_nl, DType::iq4_xs};

}  // namespace ridge::test
