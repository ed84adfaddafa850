// Row-wise copies and activations: embedding lookup, SwiGLU (silu_mul), gather_rows, bias add.
// Launch: 2-D grid (column chunks of 256 threads, rows); one thread per element (silu_mul: eight,
// with 16-byte accesses, when the shapes are multiples of 8 and the rows 16-byte aligned). The
// embedding's optional sums of squares: one part a column chunk (a block sum, fixed order).
// Limits: rows < 2^31 (grid.y is split into chunks of 65535 rows); columns < 2^40.
// All are launched with programmatic dependent launch (pdl.cuh): they sit on the decode chain.
#include <cstdint>
#include <algorithm>

#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/device_util.cuh"
#include "ridge/kernels/cuda/elementwise/elementwise.h"
#include "ridge/kernels/cuda/pdl.cuh"

namespace ridge::kernels {
namespace {

using detail::bf16_bits_to_f32;
using detail::f32_to_bf16_bits;
using detail::aligned16;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// Runs launch(grid, row_offset) over row chunks that fit grid.y.
template <typename Launch>
void for_row_chunks(int64_t rows, int64_t cols, Launch launch) {
  const unsigned gx = unsigned(detail::ceil_div(cols, kThreads));
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxGridY)
    launch(dim3(gx, unsigned(std::min(kMaxGridY, rows - r0))), r0);
}

// sumsq_out (or null): block b of row t leaves the sum of squares of its values at
// sumsq_out[b * T + t] (every thread takes part in the block's sum: none leaves early).
__global__ void embedding_kernel(const uint16_t* __restrict__ table, int64_t vocab, int64_t hidden,
                                 const int32_t* __restrict__ ids, uint16_t* __restrict__ out,
                                 int64_t ld_out, int64_t row0, float* __restrict__ sumsq_out,
                                 int64_t T) {
  pdl::begin();  // launched with PDL (pdl.cuh)
  const int64_t t = row0 + blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint16_t v = 0;
  if (i < hidden) {
    const int64_t id = ids[t];
    v = (id >= 0 && id < vocab) ? table[id * hidden + i] : uint16_t(0x7fc0);
    out[t * ld_out + i] = v;
  }
  if (sumsq_out) {  // uniform over the launch
    const float f = bf16_bits_to_f32(v);
    const float sum = detail::block_sum(f * f);
    if (threadIdx.x == 0) sumsq_out[int64_t(blockIdx.x) * T + t] = sum;
  }
}

__global__ void silu_mul_kernel(const uint16_t* __restrict__ gate_up, int64_t ld_gu, int64_t F,
                                uint16_t* __restrict__ out, int64_t ld_out, int64_t row0) {
  pdl::begin();
  const int64_t t = row0 + blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= F) return;
  const float g = bf16_bits_to_f32(gate_up[t * ld_gu + i]);
  const float u = bf16_bits_to_f32(gate_up[t * ld_gu + F + i]);
  out[t * ld_out + i] = f32_to_bf16_bits(g / (1.0f + expf(-g)) * u);
}

// 8 elements per thread with 16-byte loads and stores (F, both row strides multiples of 8 and
// 16-byte aligned rows): a quarter of the instructions and full-width memory transactions.
__global__ void silu_mul_vec_kernel(const uint16_t* __restrict__ gate_up, int64_t ld_gu, int64_t F,
                                    uint16_t* __restrict__ out, int64_t ld_out, int64_t row0) {
  pdl::begin();
  const int64_t t = row0 + blockIdx.y;
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= F) return;
  const uint4 g4 = *reinterpret_cast<const uint4*>(gate_up + t * ld_gu + i);
  const uint4 u4 = *reinterpret_cast<const uint4*>(gate_up + t * ld_gu + F + i);
  const uint32_t g[4] = {g4.x, g4.y, g4.z, g4.w}, u[4] = {u4.x, u4.y, u4.z, u4.w};
  uint32_t o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float g0 = __uint_as_float(g[j] << 16), g1 = __uint_as_float(g[j] & 0xffff0000u);
    const float u0 = __uint_as_float(u[j] << 16), u1 = __uint_as_float(u[j] & 0xffff0000u);
    o[j] = uint32_t(f32_to_bf16_bits(g0 / (1.0f + expf(-g0)) * u0)) |
           (uint32_t(f32_to_bf16_bits(g1 / (1.0f + expf(-g1)) * u1)) << 16);
  }
  *reinterpret_cast<uint4*>(out + t * ld_out + i) = make_uint4(o[0], o[1], o[2], o[3]);
}

template <typename E>
__global__ void gather_rows_kernel(const E* __restrict__ x, int64_t ld_x, int64_t rows_x,
                                   const int32_t* __restrict__ rows, int64_t cols,
                                   E* __restrict__ out, int64_t ld_out, int64_t row0) {
  pdl::begin();  // launched with PDL (pdl.cuh)
  const int64_t r = row0 + blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= cols) return;
  const int64_t src = rows[r];
  E nan_bits;
  memset(&nan_bits, 0xff, sizeof(E));  // NaN in bf16 and f32
  out[r * ld_out + i] = (src >= 0 && src < rows_x) ? x[src * ld_x + i] : nan_bits;
}

__global__ void add_bias_kernel(void* __restrict__ out, bool out_f32, int64_t ld_out, int64_t N,
                                const void* __restrict__ bias, bool bias_f32, int64_t row0) {
  pdl::begin();
  const int64_t t = row0 + blockIdx.y;
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float b = detail::load_vector_weight(bias, bias_f32, n);
  if (out_f32) {
    static_cast<float*>(out)[t * ld_out + n] += b;
  } else {
    uint16_t* o = static_cast<uint16_t*>(out) + t * ld_out + n;
    *o = f32_to_bf16_bits(bf16_bits_to_f32(*o) + b);
  }
}

}  // namespace

int64_t embedding_sumsq_parts(int64_t hidden) {
  return detail::ceil_div(hidden, kThreads);
}

void embedding_bf16(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                    int64_t T, uint16_t* out, int64_t ld_out, cudaStream_t stream,
                    float* sumsq_out) {
  RIDGE_KERNEL_EXPECT(vocab >= 1 && hidden >= 1 && T >= 0 && ld_out >= hidden, "embedding_bf16",
                      "table [" + std::to_string(vocab) + ", " + std::to_string(hidden) +
                          "], out " + detail::shape_text(T, hidden, ld_out));
  for_row_chunks(T, hidden, [&](dim3 grid, int64_t r0) {
    RIDGE_CHECK_CUDA(pdl::launch_pdl(embedding_kernel, grid, dim3(kThreads), 0, stream, table,
                                     vocab, hidden, ids, out, ld_out, r0, sumsq_out, T));
  });
}

void silu_mul_bf16(const uint16_t* gate_up, int64_t ld_gu, int64_t T, int64_t F, uint16_t* out,
                   int64_t ld_out, cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT(T >= 0 && F >= 1 && ld_gu >= 2 * F && ld_out >= F, "silu_mul_bf16",
                      "gate_up " + detail::shape_text(T, 2 * F, ld_gu) + ", out " +
                          detail::shape_text(T, F, ld_out));
  if (F % 8 == 0 && ld_gu % 8 == 0 && ld_out % 8 == 0 && aligned16(gate_up) && aligned16(out)) {
    for_row_chunks(T, F / 8, [&](dim3 grid, int64_t r0) {
      RIDGE_CHECK_CUDA(pdl::launch_pdl(silu_mul_vec_kernel, grid, dim3(kThreads), 0, stream,
                                       gate_up, ld_gu, F, out, ld_out, r0));
    });
    return;
  }
  for_row_chunks(T, F, [&](dim3 grid, int64_t r0) {
    RIDGE_CHECK_CUDA(pdl::launch_pdl(silu_mul_kernel, grid, dim3(kThreads), 0, stream, gate_up,
                                     ld_gu, F, out, ld_out, r0));
  });
}

void gather_rows(const void* x, int64_t ld_x, int64_t rows_x, const int32_t* rows, int64_t R,
                 int64_t cols, int elem_bytes, void* out, int64_t ld_out, cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT((elem_bytes == 2 || elem_bytes == 4) && R >= 0 && cols >= 1 &&
                          ld_x >= cols && ld_out >= cols && rows_x >= 0,
                      "gather_rows",
                      "x " + detail::shape_text(rows_x, cols, ld_x) + ", out " +
                          detail::shape_text(R, cols, ld_out) + ", element bytes " +
                          std::to_string(elem_bytes));
  for_row_chunks(R, cols, [&](dim3 grid, int64_t r0) {
    if (elem_bytes == 2)
      RIDGE_CHECK_CUDA(pdl::launch_pdl(gather_rows_kernel<uint16_t>, grid, dim3(kThreads), 0,
                                       stream, static_cast<const uint16_t*>(x), ld_x, rows_x,
                                       rows, cols, static_cast<uint16_t*>(out), ld_out, r0));
    else
      RIDGE_CHECK_CUDA(pdl::launch_pdl(gather_rows_kernel<uint32_t>, grid, dim3(kThreads), 0,
                                       stream, static_cast<const uint32_t*>(x), ld_x, rows_x,
                                       rows, cols, static_cast<uint32_t*>(out), ld_out, r0));
  });
}

namespace {
__global__ void scale_fp8_product_kernel(const float* __restrict__ raw, int64_t ld_raw,
                                         const float* __restrict__ sx, const float* __restrict__ sw,
                                         void* out, bool out_f32, int64_t ld_out, int64_t N,
                                         bool accumulate, int64_t row0) {
  pdl::begin();  // launched with PDL (pdl.cuh)
  const int64_t t = row0 + blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  float v = raw[t * ld_raw + i] * (sx[t] * sw[i]);
  if (out_f32) {
    float* o = static_cast<float*>(out) + t * ld_out + i;
    *o = accumulate ? *o + v : v;
  } else {
    uint16_t* o = static_cast<uint16_t*>(out) + t * ld_out + i;
    if (accumulate) v += bf16_bits_to_f32(*o);
    *o = f32_to_bf16_bits(v);
  }
}
}  // namespace

void scale_fp8_product(const float* raw, int64_t ld_raw, int64_t T, int64_t N, const float* sx,
                       const float* sw, void* out, DType out_dtype, int64_t ld_out, bool accumulate,
                       cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT((out_dtype == DType::f32 || out_dtype == DType::bf16) && T >= 0 && N >= 1 &&
                          ld_out >= N && ld_raw >= N && raw && sx && sw,
                      "scale_fp8_product",
                      "out " + std::string(dtype_name(out_dtype)) +
                          detail::shape_text(T, N, ld_out) + ", raw " +
                          detail::shape_text(T, N, ld_raw));
  for_row_chunks(T, N, [&](dim3 grid, int64_t r0) {
    RIDGE_CHECK_CUDA(pdl::launch_pdl(scale_fp8_product_kernel, grid, dim3(kThreads), 0, stream, raw,
                                     ld_raw, sx, sw, out, out_dtype == DType::f32, ld_out, N,
                                     accumulate, r0));
  });
}

void add_bias(void* out, DType out_dtype, int64_t ld_out, int64_t T, int64_t N, const void* bias,
              DType bias_dtype, cudaStream_t stream) {
  RIDGE_KERNEL_EXPECT((out_dtype == DType::f32 || out_dtype == DType::bf16) &&
                          detail::is_vector_weight_dtype(bias_dtype) && T >= 0 && N >= 1 &&
                          ld_out >= N,
                      "add_bias",
                      "out " + std::string(dtype_name(out_dtype)) +
                          detail::shape_text(T, N, ld_out) + ", bias " +
                          std::string(dtype_name(bias_dtype)));
  for_row_chunks(T, N, [&](dim3 grid, int64_t r0) {
    RIDGE_CHECK_CUDA(pdl::launch_pdl(add_bias_kernel, grid, dim3(kThreads), 0, stream, out,
                                     out_dtype == DType::f32, ld_out, N, bias,
                                     bias_dtype == DType::f32, r0));
  });
}

}  // namespace ridge::kernels
