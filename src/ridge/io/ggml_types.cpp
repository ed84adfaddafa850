#include "ridge/io/ggml_types.h"

#include <array>
#include <cstdint>

namespace ridge::io {

namespace {

// Numbers and block sizes of ggml's type enum (ggml.h). Gaps (4, 5, 31..33, 36..38) are types
// ggml has removed; files using them are refused.
constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {0, "F32", 1, 4, DType::f32},
    {1, "F16", 1, 2, DType::f16},
    {2, "Q4_0", 32, 18, DType::q4_0},
    {3, "Q4_1", 32, 20, DType::q4_1},
    {6, "Q5_0", 32, 22, DType::q5_0},
    {7, "Q5_1", 32, 24, DType::q5_1},
    {8, "Q8_0", 32, 34, DType::q8_0},
    {9, "Q8_1", 32, 40, std::nullopt},
    {10, "Q2_K", 256, 84, DType::q2_k},
    {11, "Q3_K", 256, 110, DType::q3_k},
    {12, "Q4_K", 256, 144, DType::q4_k},
    {13, "Q5_K", 256, 176, DType::q5_k},
    {14, "Q6_K", 256, 210, DType::q6_k},
    {15, "Q8_K", 256, 292, std::nullopt},
    {16, "IQ2_XXS", 256, 66, std::nullopt},
    {17, "IQ2_XS", 256, 74, std::nullopt},
    {18, "IQ3_XXS", 256, 98, std::nullopt},
    {19, "IQ1_S", 256, 50, std::nullopt},
    {20, "IQ4_NL", 32, 18, DType::iq4_nl},
    {21, "IQ3_S", 256, 110, std::nullopt},
    {22, "IQ2_S", 256, 82, std::nullopt},
    {23, "IQ4_XS", 256, 136, DType::iq4_xs},
    {24, "I8", 1, 1, std::nullopt},
    {25, "I16", 1, 2, std::nullopt},
    {26, "I32", 1, 4, std::nullopt},
    {27, "I64", 1, 8, std::nullopt},
    {28, "F64", 1, 8, std::nullopt},
    {29, "IQ1_M", 256, 56, std::nullopt},
    {30, "BF16", 1, 2, DType::bf16},
    {34, "TQ1_0", 256, 54, std::nullopt},
    {35, "TQ2_0", 256, 66, std::nullopt},
    {39, "MXFP4", 32, 17, std::nullopt},
    {40, "NVFP4", 64, 36, std::nullopt},
    {41, "Q1_0", 128, 18, std::nullopt},
}};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::optional<uint32_t> ggml_type_of(DType d) {
  for (const auto& t : kTypes)
    if (t.dtype == d) return t.id;
  return std::nullopt;
}

std::string supported_ggml_types() {
  std::string s;
  for (const auto& t : kTypes) {
    if (!t.dtype) continue;
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

}  // namespace ridge::io
