#include "ridge/core/dtype.h"

#include <cstdint>
#include <array>

#include "ridge/core/error.h"

namespace ridge {

namespace {
constexpr std::array<DTypeInfo, 17> kInfo = {{
    {"f32", 1, 4},
    {"f16", 1, 2},
    {"bf16", 1, 2},
    {"fp8_e4m3", 1, 1},
    {"q8_0", 32, 34},
    {"q4_0", 32, 18},
    {"q4_1", 32, 20},
    {"i32", 1, 4},
    {"q5_0", 32, 22},
    {"q5_1", 32, 24},
    {"q2_k", 256, 84},
    {"q3_k", 256, 110},
    {"q4_k", 256, 144},
    {"q5_k", 256, 176},
    {"q6_k", 256, 210},
    {"iq4_nl", 32, 18},
    {"iq4_xs", 256, 136},
}};
}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfo.at(static_cast<size_t>(t)); }

size_t row_bytes(DType t, int64_t n) {
  const auto& info = dtype_info(t);
  RIDGE_CHECK(n >= 0 && n % info.block_elems == 0,
              "row of {} elements is not a multiple of the {}-element block of {}", n,
              info.block_elems, info.name);
  return size_t(n / info.block_elems) * size_t(info.block_bytes);
}

DType dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  fail("unknown dtype '{}'", name);
}

}  // namespace ridge
