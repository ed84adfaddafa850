// Element types. Block-quantized types (q8_0, q4_0, q4_1) use GGUF's block layouts:
//   q8_0: 32 elements per 34-byte block  {f16 d; int8 qs[32]}            x = d * q
//   q4_0: 32 elements per 18-byte block  {f16 d; uint8 qs[16]}           x = d * (nibble - 8)
//   q4_1: 32 elements per 20-byte block  {f16 d; f16 m; uint8 qs[16]}    x = d * nibble + m
// In q4 blocks, byte j holds element j in its low nibble and element j+16 in its high nibble.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ridge {

enum class DType : uint8_t { f32, f16, bf16, fp8_e4m3, q8_0, q4_0, q4_1, i32 };

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
