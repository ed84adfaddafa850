// Host conversions of stored weight rows to fp32, and fp32 dot products. AVX2+FMA+F16C versions
// are chosen at run time when the CPU has them; the scalar versions are the reference.
#pragma once

#include <cstdint>

#include "ridge/core/dtype.h"

namespace ridge::backend::cpu {

// dst[0..n) = row of n elements stored as `dtype` at src (n a multiple of the block size).
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);
// Scalar reference of the same (used by tests to check the SIMD path).
void dequantize_row_reference(DType dtype, const void* src, float* dst, int64_t n);
// sum a[i] * b[i], fp32 accumulation in a fixed order for a given n.
float dot(const float* a, const float* b, int64_t n);
// sum w[i] * x[i] with w a stored row of n elements (converted inside the dot product, no
// intermediate row where a fused kernel exists). block_sums: for q4_1, q5_1, q4_k and q5_k the
// sums of x over each 32 elements (n / 32 values, see block_sums()); ignored for other types.
float dot_row(DType dtype, const void* w, const float* x, const float* block_sums, int64_t n);
// out[t] = dot_row(dtype, w, x[t], block_sums[t], n) for t < nt (1..kMaxDotTokens), bit for bit,
// from one pass over the row: a quantized row's blocks are unpacked once for all the tokens, so a
// decode step of 4 sequences costs ~1.9x one, not 4x (the default model; docs/BENCHMARKS.md).
constexpr int kMaxDotTokens = 4;
void dot_row_tokens(DType dtype, const void* w, const float* const* x,
                    const float* const* block_sums, int nt, int64_t n, float* out);
// Whether dot_row needs block_sums for this type.
inline bool needs_block_sums(DType dtype) {
  return dtype == DType::q4_1 || dtype == DType::q5_1 || dtype == DType::q4_k || dtype == DType::q5_k;
}
// The prefill micro-kernel: out[2r + t] = sum_k w[r * ldw + k] * x_t[k] for the 4 fp32 weight
// rows at w and the token rows x0 and x1 (x1 null: one token, out[2r + 1] untouched). Each
// (r, t) is summed in one order whatever the other token is (8-lane partial sums over k, then the
// lanes, then the tail), so a token's result does not depend on the batch it is in.
void dot_4x2(const float* w, int64_t ldw, const float* x0, const float* x1, int64_t n,
             float out[8]);
// out[b] = sum of x[32b .. 32b+31]
void block_sums(const float* x, float* out, int64_t n);
// y[i] += alpha * x[i]
void axpy(float alpha, const float* x, float* y, int64_t n);
// Attention over f32 KV rows read in place, a page at a time (`count` rows of n floats, `stride`
// floats apart): out[i] = dot(q, row i) for i < count ...
void dot_rows(const float* q, const float* rows, int64_t stride, int64_t count, int64_t n,
              float* out);
// ... and acc[0, n) += sum over i < count of w[i] * row i (the accumulator kept in registers
// across the rows where n allows).
void axpy_rows(const float* w, const float* rows, int64_t stride, int64_t count, int64_t n,
               float* acc);
// Stores n fp32 values as dtype (f32, f16, bf16 or fp8_e4m3, saturating at +-448) at dst.
void store_row(DType dtype, const float* src, void* dst, int64_t n);
bool simd_available();

}  // namespace ridge::backend::cpu
