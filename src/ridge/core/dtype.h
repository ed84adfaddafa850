// Element types. Block-quantized types use GGUF's block layouts (ggml's q8_0, q4_0, q4_1, q5_0,
// q5_1, iq4_nl with 32 elements a block; the k-quants q2_k..q6_k and iq4_xs with 256); their
// layouts and values are spelled out in ridge/core/quant_blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ridge {

// New types are appended: the numbers are stable.
enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  fp8_e4m3,
  q8_0,
  q4_0,
  q4_1,
  i32,
  q5_0,
  q5_1,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  iq4_nl,
  iq4_xs,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_quantized(DType t) { return dtype_info(t).block_elems > 1; }
// Bytes taken by a row of n elements; throws ridge::Error if n is not a multiple of the block.
size_t row_bytes(DType t, int64_t n);
// Parses "f32", "bf16", ... ; throws ridge::Error naming the string.
DType dtype_from_name(std::string_view name);

}  // namespace ridge
