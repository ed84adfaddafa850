// The rotation of one RoPE pair, shared by the kernels that rotate q and k as they are stored
// (rope_kv_store_bf16 and the skinny GEMV's rope_kv epilogue) so that they agree bit for bit.
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

namespace ridge::kernels {

// Rotate-half (HF transformers) pair (a, b) = (x[i], x[i + hd/2]) at position `pos`:
// angle = pos · inv_freq[i] in fp32, sincosf (full range reduction: positions up to 2^24 stay
// exact), then a·cos − b·sin and b·cos + a·sin, each a rounded product and one fused
// multiply-add (spelled out, so that the compiler's contraction cannot differ between kernels).
__device__ __forceinline__ void rope_rotate(float a, float b, float pos, float inv_freq, float& ra,
                                            float& rb) {
  float s, c;
  sincosf(pos * inv_freq, &s, &c);
  ra = __fmaf_rn(a, c, -__fmul_rn(b, s));
  rb = __fmaf_rn(b, c, __fmul_rn(a, s));
}

}  // namespace ridge::kernels
