// Overflow-checked size arithmetic for the readers. Every count, length and offset read from a
// model file goes through these before it is used to index or to allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace ridge::io::detail {

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds x up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<uint64_t> align_up(uint64_t x, uint64_t align) {
  auto r = checked_add(x, align - 1);
  if (!r) return std::nullopt;
  return *r & ~(align - 1);
}

inline bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace ridge::io::detail
