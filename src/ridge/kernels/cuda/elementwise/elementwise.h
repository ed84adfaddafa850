// Host-callable CUDA kernels for the elementwise and row-wise ops of the Llama forward, and the
// weight conversions done at load. Conventions shared by every function here:
//   - All pointers are device pointers; bf16 tensors are passed as uint16_t* (raw bf16 bits).
//   - Matrices are row-major; `ld_*` is a row stride in elements (>= the row width), so column
//     slices of a wider buffer (the model's q/k/v and gate/up views) are accepted.
//   - "vector weights" (RMSNorm weights, biases) may be f32 or bf16 (`w_dtype`).
//   - Arithmetic is fp32; results are rounded to bf16 once (round to nearest even).
//   - Everything is enqueued on `stream`: nothing allocates, nothing synchronizes.
//   - Preconditions (dtypes, shapes, strides) are checked on the host and throw ridge::Error.
//     Indices that only the device sees (token ids, slots, gathered rows) cannot throw: an id or
//     row outside its range writes a NaN row, a slot outside the pool (e.g. -1 for padding) is
//     skipped. The model validates them on the host before they get here.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "ridge/core/dtype.h"

namespace ridge::kernels {

// out[t, :] = table[ids[t], :]; table bf16 [vocab, hidden] (contiguous), out bf16 [T, hidden]. An
// id outside [0, vocab) gives a row of NaN. sumsq_out (or null): [embedding_sumsq_parts(hidden),
// T] partial sums of each row's squares (of the stored bf16 values), as the skinny GEMV's rms_sumsq
// prologue reads them (gemm.h), so that the first layer's RMSNorm needs no kernel of its own.
void embedding_bf16(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                    int64_t T, uint16_t* out, int64_t ld_out, cudaStream_t stream,
                    float* sumsq_out = nullptr);
// The parts embedding_bf16 writes per row to sumsq_out: one per 256 columns.
int64_t embedding_sumsq_parts(int64_t hidden);

// out = w * (x / sqrt(mean(x^2) + eps)) per row; x, out bf16 [T, H]; w [H] f32 or bf16.
void rmsnorm_bf16(const uint16_t* x, int64_t ld_x, const void* w, DType w_dtype, int64_t T,
                  int64_t H, float eps, uint16_t* out, int64_t ld_out, cudaStream_t stream);

// residual = bf16(residual + x); out = rmsnorm(residual) (the rounded residual, as a bf16 model
// stores it). residual, x, out bf16 [T, H].
void add_rmsnorm_bf16(uint16_t* residual, int64_t ld_r, const uint16_t* x, int64_t ld_x,
                      const void* w, DType w_dtype, int64_t T, int64_t H, float eps,
                      uint16_t* out, int64_t ld_out, cudaStream_t stream);

// Rotary embedding in place, rotate-half pairing (i, i + hd/2) as HF transformers:
// angle = float(positions[t]) * inv_freq[i] (fp32 product), full-precision sincosf.
// q bf16 [T, nq * hd], k bf16 [T, nk * hd].
void rope_bf16(uint16_t* q, int64_t ld_q, int64_t nq, uint16_t* k, int64_t ld_k, int64_t nk,
               int64_t head_dim, const int32_t* positions, const float* inv_freq, int64_t T,
               cudaStream_t stream);

// k_pool[slots[t], :] = k[t, :], v_pool likewise; k, v bf16 [T, width]; pools [num_slots, width]
// (a [num_blocks, block_size, nkv, hd] pool seen as rows of width nkv * hd) of bf16, or with
// fp8_pools of E4M3 bytes: each value rounded to nearest even, saturating at +-448 (CUDA's
// __NV_SATFINITE; the CPU backend's f32_to_fp8e4m3 bit for bit).
// Rows whose slot is negative (-1: a padding row) or >= num_slots are skipped (nothing stored).
void kv_store_bf16(const uint16_t* k, int64_t ld_k, const uint16_t* v, int64_t ld_v,
                   const int32_t* slots, int64_t T, int64_t width, void* k_pool, void* v_pool,
                   int64_t num_slots, bool fp8_pools, cudaStream_t stream);

// rope_bf16 then kv_store_bf16 (v's pool rows are nk * head_dim wide) in one launch, with the
// same results. Returns false, launching nothing, when the shapes do not allow the vectorized
// kernel (head_dim % 16, 16-byte aligned rows, T <= 65535): the caller runs the two ops.
bool rope_kv_store_bf16(uint16_t* q, int64_t ld_q, int64_t nq, uint16_t* k, int64_t ld_k,
                        int64_t nk, const uint16_t* v, int64_t ld_v, int64_t head_dim,
                        const int32_t* positions, const float* inv_freq, const int32_t* slots,
                        int64_t T, void* k_pool, void* v_pool, int64_t num_slots, bool fp8_pools,
                        cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, F + i]; gate_up bf16 [T, 2F], out bf16 [T, F].
void silu_mul_bf16(const uint16_t* gate_up, int64_t ld_gu, int64_t T, int64_t F, uint16_t* out,
                   int64_t ld_out, cudaStream_t stream);

// out[r, :] = x[rows[r], :] for an element size of 2 or 4 bytes; x [rows_x, cols].
void gather_rows(const void* x, int64_t ld_x, int64_t rows_x, const int32_t* rows, int64_t R,
                 int64_t cols, int elem_bytes, void* out, int64_t ld_out, cudaStream_t stream);

// out[t, n] += bias[n]; out [T, N] bf16 or f32 (out_dtype); bias f32 or bf16.
void add_bias(void* out, DType out_dtype, int64_t ld_out, int64_t T, int64_t N, const void* bias,
              DType bias_dtype, cudaStream_t stream);

// Weight conversion at load: n contiguous elements of src (f32, f16 or bf16) -> dst (bf16 or
// f32). GGUF block-quantized rows (every type of ridge/core/quant_blocks.h; n a multiple of the
// block) -> bf16 with the same fp32 arithmetic as the CPU reference ((D * s) * q +- M * m, no fused
// multiply-add), so a weight dequantized here equals the CPU's dequantized value rounded to bf16.
void convert_weight(const void* src, DType src_dtype, int64_t n, void* dst, DType dst_dtype,
                    cudaStream_t stream);

// Per-row E4M3 quantization (fp8 weights at load, and each fp8 matmul's activations per token):
// for each row r of x (bf16 [rows, cols], row stride ld_x), amax = max |x[r, :]|,
// scales[r] = amax / 448 (1 for a row of zeros), q[r, c] = e4m3(x[r, c] / scales[r]) (IEEE
// division, rounded to nearest even, saturating at +-448: the host's f32_to_fp8e4m3 of the same
// quotient). q is [rows, cols] contiguous. x and q 16-byte aligned, cols % 16 == 0 and ld_x % 8
// == 0 (the fp8 matmul's own condition), rows < 2^31.
void quantize_rows_fp8(const uint16_t* x, int64_t ld_x, int64_t rows, int64_t cols, uint8_t* q,
                       float* scales, cudaStream_t stream);

// The scales of an unscaled fp8 product, where the GEMM cannot apply per-row ones:
// out[t, n] (+)= raw[t, n] · (sx[t] · sw[n]) in fp32, out bf16 (rounded once) or f32; raw f32
// [T, N] with row stride ld_raw.
void scale_fp8_product(const float* raw, int64_t ld_raw, int64_t T, int64_t N, const float* sx,
                       const float* sw, void* out, DType out_dtype, int64_t ld_out, bool accumulate,
                       cudaStream_t stream);

}  // namespace ridge::kernels
