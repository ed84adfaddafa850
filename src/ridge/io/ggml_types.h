// ggml tensor types as GGUF numbers them, with their block layouts, and which of them ridge can
// compute with (mapped to a ridge::DType). Sizes of the types ridge does not support are known
// too, so that the GGUF reader can validate the layout of every tensor in a file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ridge/core/dtype.h"

namespace ridge::io {

struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;  // as ggml spells it: "Q4_K", "BF16"
  int64_t block_elems;    // elements per block (1 for plain types)
  int64_t block_bytes;    // bytes per block
  std::optional<DType> dtype;  // the ridge dtype, when ridge supports the type
};

// nullptr when `id` is not a ggml type this reader knows.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// The ggml type number of a ridge dtype; nullopt for dtypes GGUF cannot hold (fp8, i32).
std::optional<uint32_t> ggml_type_of(DType t);
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1": for error messages.
std::string supported_ggml_types();

}  // namespace ridge::io
