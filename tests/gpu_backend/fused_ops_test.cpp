// The decode-step fusions of the CUDA backend against the CPU reference: matmul_add (the residual
// add in the GEMM epilogue: skinny, wgmma and cuBLASLt paths), matmul_fused (RMSNorm as a 1/rms
// scale of a norm-folded weight, from the sums of squares the matmul that wrote x recorded, or
// composed where there are none; SwiGLU as a prologue, composed; bf16 and f32 outputs; fused up
// to 8 tokens and composed above, and composed on a backend without the fusions),
// matmul_swiglu (SwiGLU in the gate|up GEMV's epilogue), fold_norm_weight, rope_kv_store (RoPE and
// the KV store in one kernel, padding slots skipped) and matmul_rope_kv (both in the q|k|v GEMV's
// epilogue). The CPU
// reference runs the unfused ops (Backend's default composition) in fp32. Fresh random inputs,
// outputs poisoned, normalized error bounds as the rest of the harness.
#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "harness.h"
#include "ridge/backend/cuda/cuda_backend.h"
#include "ridge/backend/factory.h"
#include "ridge/core/error.h"
#if RIDGE_TEST_GEMM_KERNELS
#include "ridge/kernels/cuda/gemm/gemm.h"
#endif

namespace ridge::backend::gpu_test {
namespace {

// A CUDA backend with every decode fusion on (the default), and one without the norm and SwiGLU
// fusions (composed).
std::unique_ptr<Backend> with_fusions(const char* list) {
  BackendOptions o;
  o.fuse = list;
  return make_backend("cuda", o);
}
Backend& fusing() {
  static std::unique_ptr<Backend> b = with_fusions("norm,silu,rope_kv");
  return *b;
}
Backend& composing() {
  static std::unique_ptr<Backend> b = with_fusions("rope_kv");
  return *b;
}
// Every fusion, and the decode GEMVs at 1-2 tokens in the row-stream GEMV (--gemv-stream).
Backend& streaming() {
  static std::unique_ptr<Backend> b = [] {
    BackendOptions o;
    o.fuse = "norm,silu,rope_kv";
    o.gemv_stream = true;
    return make_backend("cuda", o);
  }();
  return *b;
}
// Every fusion, and the decode GEMVs at one token in the warp-row GEMV (--gemv-warp).
Backend& warping() {
  static std::unique_ptr<Backend> b = [] {
    BackendOptions o;
    o.fuse = "norm,silu,rope_kv";
    o.gemv_warp = true;
    return make_backend("cuda", o);
  }();
  return *b;
}
// Runs run_case and checks that it launched the warp-row GEMV `launches` times (the kernels'
// own counter, where the test links them).
void expect_warp_launches(const char* what, int64_t launches,
                          const std::function<void()>& run_case) {
#if RIDGE_TEST_GEMM_KERNELS
  const int64_t before = ridge::kernels::skinny_warp_launches();
#endif
  run_case();
#if RIDGE_TEST_GEMM_KERNELS
  EXPECT_EQ(ridge::kernels::skinny_warp_launches() - before, launches)
      << what << ": GEMVs run in the warp-row kernel";
#else
  (void)what, (void)launches;
#endif
}
// Every fusion and the opt-in gate|up GEMM with the SwiGLU epilogue at prefill sizes.
Backend& fusing_swiglu_gemm() {
  static std::unique_ptr<Backend> b = with_fusions("norm,silu,rope_kv,swiglu_gemm");
  return *b;
}
// CudaBackend::kSwigluGemmMinTokens: --fuse swiglu_gemm runs from this many tokens.
constexpr int64_t kSwigluGemmMinTokens = 1024;
// CudaBackend::kFusedMaxTokens: the norm and SwiGLU fusions run up to this many tokens.
constexpr int64_t kFusedMaxTokens = 8;

struct WeightPair {
  std::vector<uint16_t> bits;  // bf16 [N, K] on the host (the CPU reference reads it)
  Tensor host;
  Tensor dev;
};

WeightPair random_weight(int64_t N, int64_t K, Backend& be = cuda()) {
  WeightPair w;
  w.bits = to_bf16_bits(random_bf16(size_t(N * K), 0.05f));
  w.host = Tensor(w.bits.data(), DType::bf16, {N, K});
  w.dev = be.upload_weight(w.host);
  return w;
}

// out = residual + x · wᵀ, out starting as the residual (random).
void run_matmul_add(int64_t T, int64_t N, int64_t K) {
  const WeightPair w = random_weight(N, K);
  std::vector<float> x = random_bf16(size_t(T * K)), r = random_bf16(size_t(T * N));
  std::vector<float> ref(r);
  Tensor ref_t = host_f32(ref, T, N);
  cpu().matmul_add({}, host_f32(x, T, K), w.host, ref_t);
  DeviceMatrix xd = device_bf16(T, K, x), out = device_bf16(T, N, r);
  cuda().matmul_add({}, xd.view, w.dev, out.view);
  expect_close("matmul_add", fmt::format("T={} N={} K={}", T, N, K), download_view(out), ref,
               1e-2);
  expect_untouched_outside("matmul_add", out);
}

TEST_F(GpuBackend, MatmulAdd) {
  // 1..16 tokens: the skinny kernel's residual epilogue; 33, 300: the tuned or by-shape kernel
  // (cuBLASLt with beta = 1, or the wgmma kernel's residual epilogue).
  for (auto [T, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 576, 576}, {5, 1000, 320},
                         {16, 4096, 1024}, {33, 576, 1536}, {300, 1024, 512}})
    run_matmul_add(T, N, K);
}

enum class Prologue { rmsnorm, silu_mul };

// out (+)= P(x) · wᵀ through matmul_fused on the CPU reference (the default composition, fp32)
// and on a CUDA backend: `fused` = the backend with every fusion on, where the norm's weight is
// folded into w first (fold_norm_weight) and the norm then takes ones; else the default backend
// (norm and SwiGLU composed from their own kernels).
void run_matmul_fused(Prologue p, int64_t T, int64_t N, int64_t K, bool accumulate, bool f32_out,
                      int64_t ld_extra = 0, bool fused = true) {
  Backend& be = fused ? fusing() : composing();
  WeightPair w = random_weight(N, K, be);
  const int64_t xk = p == Prologue::silu_mul ? 2 * K : K, ld_x = xk + ld_extra;
  std::vector<float> x = random_bf16(size_t(T * xk), p == Prologue::silu_mul ? 2.0f : 3.0f);
  std::vector<float> nw = random_bf16(size_t(K), 0.5f);
  for (auto& v : nw) v += 1.0f;
  std::vector<float> ones(size_t(K), 1.0f);
  const Tensor nw_host(nw.data(), DType::f32, {K});
  const Tensor nw_dev = be.upload_weight(nw_host);
  const Tensor ones_dev = be.upload_weight(Tensor(ones.data(), DType::f32, {K}));
  std::vector<float> r = random_bf16(size_t(T * N));

  MatmulFusion fc, fg;
  if (p == Prologue::rmsnorm) {
    fc.norm_weight = &nw_host;
    fc.eps = fg.eps = 1e-5f;
    fg.norm_folded = be.fold_norm_weight(w.dev, nw_dev);
    EXPECT_EQ(fg.norm_folded, fused) << "fold_norm_weight follows --fuse norm";
    fg.norm_weight = fg.norm_folded ? &ones_dev : &nw_dev;
  } else {
    fc.silu_mul = fg.silu_mul = true;
  }
  fc.accumulate = fg.accumulate = accumulate;

  std::vector<float> ref = accumulate ? r : std::vector<float>(size_t(T * N));
  std::vector<float> scratch(size_t(T * K));
  Tensor ref_t = host_f32(ref, T, N), scratch_t = host_f32(scratch, T, K);
  cpu().matmul_fused({}, host_f32(x, T, xk), w.host, fc, scratch_t, ref_t);

  DeviceMatrix xd = device_bf16(T, xk, x, ld_x);
  DeviceMatrix sd = device_bf16(T, K, {});
  DeviceMatrix out = f32_out ? device_f32(T, N) : device_bf16(T, N, accumulate ? r : std::vector<float>{});
  be.matmul_fused({}, xd.view, w.dev, fg, sd.view, out.view);
  be.synchronize({});  // fusing() runs on its own stream; the harness downloads on cuda()'s
  const std::string what =
      fmt::format("{} T={} N={} K={}{}{}{}{}", p == Prologue::rmsnorm ? "rmsnorm" : "silu_mul", T,
                  N, K, accumulate ? " accumulate" : "", f32_out ? " f32out" : "",
                  ld_extra ? fmt::format(" ld_x+{}", ld_extra) : "", fused ? "" : " composed");
  expect_close("matmul_fused", what, download_view(out), ref, f32_out ? 5e-3 : 1e-2);
  expect_untouched_outside("matmul_fused", out);
}

TEST_F(GpuBackend, MatmulFusedRmsNorm) {
  // No recorded sums of squares (norm_sumsq 0): composed (norm kernel + matmul) at every T, with
  // the folded weight (fusing()) or not (composing()).
  for (int64_t T : {1, 3, 8, 9, 16, 17, 40}) run_matmul_fused(Prologue::rmsnorm, T, 1000, 576, false, false);
  run_matmul_fused(Prologue::rmsnorm, 1, 12288, 4096, false, false);  // Llama-2-7B q|k|v
  run_matmul_fused(Prologue::rmsnorm, 2, 2048, 4104, false, false);   // K not a multiple of 256
  run_matmul_fused(Prologue::rmsnorm, 4, 3001 + 7, 576, false, true); // LM head: f32 logits
  run_matmul_fused(Prologue::rmsnorm, 1, 49152, 64, false, true);     // wide logits, short rows
  run_matmul_fused(Prologue::rmsnorm, 5, 512, 320, true, false, 8);   // accumulate, strided x
  // The default backend (norm not fused): weights not folded, the norm kernel then the matmul.
  run_matmul_fused(Prologue::rmsnorm, 1, 1000, 576, false, false, 0, false);
  run_matmul_fused(Prologue::rmsnorm, 2, 3008, 576, false, true, 0, false);
}

// A consumer weight [N, H] with a random RMSNorm weight (around 1) folded in (fold_norm_weight):
// the norm weight for the CPU reference, and the ones the fused call then takes.
struct FoldedConsumer {
  WeightPair w;
  std::vector<float> nw;
  Tensor nw_host, ones_dev;
};
FoldedConsumer folded_consumer(int64_t N, int64_t H, Backend& be) {
  FoldedConsumer c;
  c.w = random_weight(N, H, be);
  c.nw = random_bf16(size_t(H), 0.5f);
  for (auto& v : c.nw) v += 1.0f;
  c.nw_host = Tensor(c.nw.data(), DType::f32, {H});
  std::vector<float> ones(size_t(H), 1.0f);
  c.ones_dev = be.upload_weight(Tensor(ones.data(), DType::f32, {H}));
  EXPECT_TRUE(be.fold_norm_weight(c.w.dev, be.upload_weight(c.nw_host)));
  return c;
}

// The norm from recorded sums, as run_layers chains them: a residual-adding matmul (o_proj, or
// down_proj with SwiGLU in its prologue when `silu`) records the sums of squares of x's rows under
// a tag; the next matmul_fused takes 1/rms(x) from them (norm folded into its weight). Checked:
// the producer's x against the CPU reference; the consumer's output against rmsnorm(x)·wᵀ on the
// CPU from the x the GPU stored (bf16), and that it ran fused (its scratch untouched: no norm
// kernel wrote h). A consumer whose x is not what the tag recorded composes and is still right.
void run_norm_from_sums(int64_t T, int64_t H, int64_t N, int64_t Kp, bool silu,
                        Backend* on = nullptr) {
  Backend& be = on ? *on : fusing();
  const WeightPair wp = random_weight(H, Kp, be);       // producer [H, Kp]
  const FoldedConsumer fc = folded_consumer(N, H, be);  // consumer [N, H]
  const int64_t xk = silu ? 2 * Kp : Kp;
  std::vector<float> a = random_bf16(size_t(T * xk), silu ? 2.0f : 1.0f);
  std::vector<float> r = random_bf16(size_t(T * H), 3.0f);
  const std::string what = fmt::format("T={} H={} N={} Kp={}{}", T, H, N, Kp, silu ? " silu" : "");

  // Producer: x = r + P(a)·wpᵀ, recording under tag 2.
  MatmulFusion prod;
  prod.accumulate = true;
  prod.silu_mul = silu;
  prod.record_sumsq = 2;
  std::vector<float> xref(r), ps(size_t(T * Kp));
  Tensor xref_t = host_f32(xref, T, H), ps_t = host_f32(ps, T, Kp);
  cpu().matmul_fused({}, host_f32(a, T, xk), wp.host, prod, ps_t, xref_t);
  DeviceMatrix ad = device_bf16(T, xk, a), xd = device_bf16(T, H, r), pscratch = device_bf16(T, Kp, {});
  be.matmul_fused({}, ad.view, wp.dev, prod, pscratch.view, xd.view);

  // Consumer: out = rmsnorm(x; nw)·wcᵀ with the folded weight and ones, 1/rms from tag 2.
  MatmulFusion cons;
  cons.norm_weight = &fc.ones_dev;
  cons.norm_folded = true;
  cons.eps = 1e-5f;
  cons.norm_sumsq = 2;
  DeviceMatrix hd = device_bf16(T, H, {}), out = device_bf16(T, N, {});
  be.matmul_fused({}, xd.view, fc.w.dev, cons, hd.view, out.view);
  be.synchronize({});
  const std::vector<float> x_gpu = download_view(xd);
  expect_close("matmul_fused", "producer x " + what, x_gpu, xref, 1e-2);

  MatmulFusion cref;
  cref.norm_weight = &fc.nw_host;
  cref.eps = 1e-5f;
  std::vector<float> ref(size_t(T * N)), hs(size_t(T * H)), xin(x_gpu);
  Tensor ref_t = host_f32(ref, T, N), hs_t = host_f32(hs, T, H);
  cpu().matmul_fused({}, host_f32(xin, T, H), fc.w.host, cref, hs_t, ref_t);
  expect_close("matmul_fused", "norm from sums " + what, download_view(out), ref, 1e-2);
  expect_untouched_outside("matmul_fused", out);
  // Fused (scratch untouched) up to the backend's 8 tokens, composed above.
  const std::vector<uint16_t> h_bits = download_bits(hd);
  EXPECT_EQ(std::all_of(h_bits.begin(), h_bits.end(), [](uint16_t b) { return b == kPoisonBf16; }),
            T <= kFusedMaxTokens)
      << what << ": the norm from the recorded sums up to " << kFusedMaxTokens << " tokens only";

  // A consumer whose x is another buffer than the tag's (same shape): composed, still correct.
  DeviceMatrix x2 = device_bf16(T, H, x_gpu), out2 = device_bf16(T, N, {}), h2 = device_bf16(T, H, {});
  be.matmul_fused({}, x2.view, fc.w.dev, cons, h2.view, out2.view);
  be.synchronize({});
  expect_close("matmul_fused", "norm, sums of another x " + what, download_view(out2), ref, 1e-2);
}

TEST_F(GpuBackend, MatmulFusedNormFromRecordedSums) {
  // T <= 8: fused (H = 4096 has 256 partial sums a row, all in registers; 8192 has 512, half of
  // them read in the epilogue; 4104 a partial last one; 576 (SmolLM2) 36); 9 and 16: composed.
  for (int64_t T : {1, 3, 8, 9, 16}) run_norm_from_sums(T, 576, 1000, 320, false);
  run_norm_from_sums(1, 4096, 12288, 4096, false);  // Llama-2-7B o_proj then q|k|v
  run_norm_from_sums(16, 4096, 2048, 4096, false);
  run_norm_from_sums(5, 4104, 1024, 512, false);
  run_norm_from_sums(2, 8192, 1024, 512, false);  // 512 row tiles: blocks walk two, 512 sums
  run_norm_from_sums(2, 576, 3072, 1536, true);     // down_proj with SwiGLU, then gate|up
  run_norm_from_sums(13, 4096, 1024, 11008, true);
}

// The first layer's norm from the embedding's sums of squares (embedding_sumsq under tag 2, as
// LlamaModel::forward runs it): the embedded rows equal the table's rows bit for bit; the
// consumer's output matches rmsnorm(table[ids]; nw)·wᵀ on the CPU, fused (its scratch untouched:
// no norm kernel) up to 8 tokens, composed above. A later plain embedding into the same x with
// tag 0 keeps no sums, and the recorded tag is dropped by an embedding that cannot record.
void run_embedding_sums(int64_t T, int64_t V, int64_t H, int64_t N) {
  Backend& be = fusing();
  const std::string what = fmt::format("T={} V={} H={} N={}", T, V, H, N);
  std::vector<float> table = random_bf16(size_t(V * H), 2.0f);
  const Tensor table_host(table.data(), DType::f32, {V, H});
  const Tensor table_dev = be.upload_weight(table_host);
  std::uniform_int_distribution<int32_t> id(0, int32_t(V - 1));
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& i : ids) i = id(rng());
  const FoldedConsumer fc = folded_consumer(N, H, be);

  std::vector<float> rows(size_t(T * H)), ref(size_t(T * N)), hs(size_t(T * H));
  Tensor rows_t = host_f32(rows, T, H), ref_t = host_f32(ref, T, N), hs_t = host_f32(hs, T, H);
  cpu().embedding({}, table_host, Tensor(ids.data(), DType::i32, {T}), rows_t);
  MatmulFusion cref;
  cref.norm_weight = &fc.nw_host;
  cref.eps = 1e-5f;
  cpu().matmul_fused({}, rows_t, fc.w.host, cref, hs_t, ref_t);

  Buffer ids_buf;
  const Tensor ids_d = device_i32(ids_buf, ids);
  DeviceMatrix xd = device_bf16(T, H, {}), hd = device_bf16(T, H, {}), out = device_bf16(T, N, {});
  be.embedding_sumsq({}, table_dev, ids_d, xd.view, 2);
  MatmulFusion cons;
  cons.norm_weight = &fc.ones_dev;
  cons.norm_folded = true;
  cons.eps = 1e-5f;
  cons.norm_sumsq = 2;
  be.matmul_fused({}, xd.view, fc.w.dev, cons, hd.view, out.view);
  be.synchronize({});
  expect_close("embedding_sumsq", "rows " + what, download_view(xd), rows, 0.0);
  expect_close("matmul_fused", "norm from the embedding's sums " + what, download_view(out), ref,
               1e-2);
  const std::vector<uint16_t> h_bits = download_bits(hd);
  EXPECT_EQ(std::all_of(h_bits.begin(), h_bits.end(), [](uint16_t b) { return b == kPoisonBf16; }),
            T <= kFusedMaxTokens)
      << what << ": the norm from the embedding's sums up to " << kFusedMaxTokens << " tokens only";

  // Tag 2 again into a strided x (which the sums cannot describe): the record is dropped, and
  // the consumer composes (norm kernel) and is still right.
  DeviceMatrix xs = device_bf16(T, H, {}, H + 8), hs2 = device_bf16(T, H, {}),
               out2 = device_bf16(T, N, {});
  be.embedding_sumsq({}, table_dev, ids_d, xs.view, 2);
  be.matmul_fused({}, xs.view, fc.w.dev, cons, hs2.view, out2.view);
  be.synchronize({});
  expect_close("matmul_fused", "strided x, composed " + what, download_view(out2), ref, 1e-2);
  const std::vector<uint16_t> h2_bits = download_bits(hs2);
  EXPECT_FALSE(
      std::all_of(h2_bits.begin(), h2_bits.end(), [](uint16_t b) { return b == kPoisonBf16; }))
      << what << ": a strided x has no recorded sums, so the norm kernel runs";
}

TEST_F(GpuBackend, MatmulFusedNormFromEmbeddingSums) {
  // H = 4096: 16 parts a row (one a 256-column block); 576 (SmolLM2): 3, the last partial.
  for (int64_t T : {1, 3, 8, 9}) run_embedding_sums(T, 1000, 576, 1000);
  run_embedding_sums(1, 3000, 4096, 12288);  // Llama-2-7B's q|k|v after the embedding
  run_embedding_sums(2, 500, 4104, 1024);    // a partial last block of 8 columns
}

// The LM head (f32 logits) at one token in the kernel the tuner chose for its shape: the warp-row
// GEMV, the MMA GEMV, or cuBLASLt, each against the CPU reference (run_matmul_fused).
TEST_F(GpuBackend, LmHeadF32ByTunedChoice) {
  auto* be = dynamic_cast<CudaBackend*>(&fusing());
  ASSERT_NE(be, nullptr);
  using GK = CudaBackend::GemmKernel;
  constexpr int64_t N = 49152, K = 576;  // SmolLM2's vocab and hidden size
  struct ForgetChoice {
    CudaBackend* be;
    ~ForgetChoice() {
      for (int64_t T : {1, 4}) be->set_gemm_choice(T, N, K, std::nullopt);
    }
  } forget{be};
  for (const GK k : {GK::warp_rows, GK::skinny, GK::cublas}) {
    SCOPED_TRACE(CudaBackend::gemm_name(k));
    be->set_gemm_choice(1, N, K, k);
    be->set_gemm_choice(4, N, K, k == GK::warp_rows ? GK::skinny : k);
    expect_warp_launches("one token", k == GK::warp_rows ? 1 : 0,
                         [&] { run_matmul_fused(Prologue::rmsnorm, 1, N, K, false, true); });
    // The warp-row GEMV is for one token: at four the MMA GEMV (skinny) or cuBLASLt.
    expect_warp_launches("four tokens", 0,
                         [&] { run_matmul_fused(Prologue::rmsnorm, 4, N, K, false, true); });
  }
}

// out = silu_mul(P(x)·wᵀ) through matmul_swiglu, w = [gate; up]: on fusing() the skinny kernel's
// SwiGLU epilogue up to 8 tokens (its gate_up scratch untouched), composed above and on
// composing(); with `swiglu_gemm` on fusing_swiglu_gemm(), the sm90 GEMM's SwiGLU epilogue from
// 1024 tokens (the scratch untouched too). With the norm from recorded sums where `norm`.
// Against the CPU's composition (fp32).
void run_swiglu(int64_t T, int64_t F, int64_t K, bool norm, bool fused_backend,
                bool swiglu_gemm = false, Backend* on = nullptr) {
  Backend& be = on              ? *on
                : swiglu_gemm   ? fusing_swiglu_gemm()
                : fused_backend ? fusing()
                                : composing();
  WeightPair w = random_weight(2 * F, K, be);
  std::vector<float> x = random_bf16(size_t(T * K), 2.0f);
  const std::string what = fmt::format("T={} F={} K={}{}{}{}", T, F, K, norm ? " norm" : "",
                                       fused_backend ? "" : " composed",
                                       swiglu_gemm ? " swiglu_gemm" : "");
  DeviceMatrix xd = device_bf16(T, K, x);
  MatmulFusion fg, fc;
  std::vector<float> ones(size_t(K), 1.0f);
  const Tensor ones_host(ones.data(), DType::f32, {K});
  const Tensor ones_dev = be.upload_weight(ones_host);
  std::vector<float> xin = x;
  if (norm) {
    // x written by a recording matmul (x = r + a·wpᵀ), the norm's weight ones (folded: a no-op).
    const WeightPair wp = random_weight(K, K, be);
    std::vector<float> a = random_bf16(size_t(T * K));
    DeviceMatrix ad = device_bf16(T, K, a), sc = device_bf16(T, K, {});
    MatmulFusion prod;
    prod.accumulate = true;
    prod.record_sumsq = 1;
    be.matmul_fused({}, ad.view, wp.dev, prod, sc.view, xd.view);
    be.synchronize({});
    xin = download_view(xd);
    fg.norm_weight = &ones_dev;
    fg.norm_folded = be.fold_norm_weight(w.dev, ones_dev);
    fg.eps = fc.eps = 1e-5f;
    fg.norm_sumsq = 1;
    fc.norm_weight = &ones_host;
  }
  std::vector<float> ref(size_t(T * F)), gu(size_t(T * 2 * F)), sc(size_t(T * K));
  Tensor ref_t = host_f32(ref, T, F), gu_t = host_f32(gu, T, 2 * F), sc_t = host_f32(sc, T, K);
  cpu().matmul_swiglu({}, host_f32(xin, T, K), w.host, fc, sc_t, gu_t, ref_t);
  DeviceMatrix hd = device_bf16(T, K, {}), gud = device_bf16(T, 2 * F, {}), out = device_bf16(T, F, {});
  be.matmul_swiglu({}, xd.view, w.dev, fg, hd.view, gud.view, out.view);
  be.synchronize({});
  expect_close("matmul_swiglu", what, download_view(out), ref, 1e-2);
  expect_untouched_outside("matmul_swiglu", out);
  const std::vector<uint16_t> bits = download_bits(gud);
  const bool untouched =
      std::all_of(bits.begin(), bits.end(), [](uint16_t b) { return b == kPoisonBf16; });
  const bool fused_here = (fused_backend && T <= kFusedMaxTokens) ||
                          (swiglu_gemm && T >= kSwigluGemmMinTokens);
  EXPECT_EQ(untouched, fused_here) << what << ": gate_up scratch "
                                   << (untouched ? "untouched" : "written");
}

TEST_F(GpuBackend, MatmulSwigluEpilogue) {
  for (int64_t T : {1, 5, 8, 9, 16, 17, 33}) run_swiglu(T, 1536, 576, false, true);
  run_swiglu(1, 11008, 4096, false, true);  // Llama-2-7B gate|up
  run_swiglu(8, 11008, 4096, true, true);   // ... with the norm from recorded sums
  run_swiglu(3, 1544, 576, true, true);     // an odd number of 8-row tiles
  run_swiglu(4, 1536, 576, false, false);   // composed (--fuse rope_kv)
  // --fuse swiglu_gemm: composed below 1024 tokens, the sm90 epilogue from 1024 (an uneven last
  // tile row and column; 256- and 128-wide tiles by the wave model), with and without the norm
  run_swiglu(1023, 1536, 576, false, true, true);
  run_swiglu(1100, 1536, 576, false, true, true);
  run_swiglu(1100, 1536, 576, true, true, true);
  run_swiglu(2048, 2560, 256, false, true, true);
  MatmulFusion bad;
  bad.accumulate = true;
  DeviceMatrix x = device_bf16(2, 64, random_bf16(128)), s = device_bf16(2, 64, {});
  DeviceMatrix gu = device_bf16(2, 128, {}), o = device_bf16(2, 64, {});
  const WeightPair w = random_weight(128, 64);
  EXPECT_THROW(cuda().matmul_swiglu({}, x.view, w.dev, bad, s.view, gu.view, o.view), Error);
  DeviceMatrix o2 = device_bf16(2, 63, {});
  EXPECT_THROW(cuda().matmul_swiglu({}, x.view, w.dev, MatmulFusion{}, s.view, gu.view, o2.view),
               Error);
}

TEST_F(GpuBackend, MatmulFusedSiluMul) {
  // x = [gate | up]: the down projection, accumulated into the residual stream.
  for (int64_t T : {1, 7, 16, 24}) run_matmul_fused(Prologue::silu_mul, T, 576, 1536, true, false);
  run_matmul_fused(Prologue::silu_mul, 1, 4096, 11008, true, false);  // Llama-2-7B down
  run_matmul_fused(Prologue::silu_mul, 3, 256, 1000, false, false);   // no accumulate
  run_matmul_fused(Prologue::silu_mul, 4, 576, 1536, true, false, 0, false);  // composed
}

TEST_F(GpuBackend, MatmulFusedRefusals) {
  const WeightPair w = random_weight(64, 64);
  DeviceMatrix x = device_bf16(2, 64, random_bf16(128)), s = device_bf16(2, 64, {});
  DeviceMatrix out = device_bf16(2, 64, {});
  std::vector<float> nw(64, 1.0f);
  const Tensor nw_dev = cuda().upload_weight(Tensor(nw.data(), DType::f32, {64}));
  MatmulFusion both;
  both.norm_weight = &nw_dev;
  both.silu_mul = true;
  EXPECT_THROW(cuda().matmul_fused({}, x.view, w.dev, both, s.view, out.view), Error);
  MatmulFusion silu;
  silu.silu_mul = true;  // x must then be [T, 2K]
  EXPECT_THROW(cuda().matmul_fused({}, x.view, w.dev, silu, s.view, out.view), Error);
  DeviceMatrix f = device_f32(2, 64);
  EXPECT_THROW(cuda().matmul_add({}, x.view, w.dev, f.view), Error);  // accumulate into f32
  MatmulFusion tag;
  tag.record_sumsq = MatmulFusion::kSumsqTags + 1;  // no such tag
  EXPECT_THROW(cuda().matmul_fused({}, x.view, w.dev, tag, s.view, out.view), Error);
}

// Inputs of a RoPE + KV store step: T random positions below 40,000, T distinct random slots of
// slots_n, and Llama's inverse frequencies (theta 10,000) for head dim hd.
struct RopeInputs {
  std::vector<int32_t> pos, slots;
  std::vector<float> inv;
};
RopeInputs rope_inputs(int64_t T, int64_t hd, int64_t slots_n) {
  RopeInputs r{std::vector<int32_t>(size_t(T)), std::vector<int32_t>(size_t(slots_n)),
               std::vector<float>(size_t(hd / 2))};
  std::uniform_int_distribution<int32_t> pd(0, 40000);
  for (auto& p : r.pos) p = pd(rng());
  std::iota(r.slots.begin(), r.slots.end(), 0);
  std::shuffle(r.slots.begin(), r.slots.end(), rng());
  r.slots.resize(size_t(T));
  for (int64_t i = 0; i < hd / 2; ++i)
    r.inv[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / float(hd));
  return r;
}

TEST_F(GpuBackend, RopeKvStore) {
  for (auto [nh, nkv, hd, bs] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{32, 32, 128, 16},
                                 {32, 8, 128, 32}, {9, 3, 64, 16}, {3, 1, 36, 16}}) {
    const int64_t T = 21, Q = nh * hd, KV = nkv * hd, ld = Q + 2 * KV;
    const int64_t blocks = 5, slots_n = blocks * bs;
    std::vector<float> q = random_bf16(size_t(T * Q)), k = random_bf16(size_t(T * KV));
    std::vector<float> v = random_bf16(size_t(T * KV));
    std::vector<float> pool_k = random_bf16(size_t(slots_n * KV)), pool_v = random_bf16(size_t(slots_n * KV));
    auto [pos, slots, inv] = rope_inputs(T, hd, slots_n);
    slots[3] = -1;  // padding rows: rotated, never stored
    slots[T - 1] = -1;

    std::vector<float> qr(q), kr(k);
    std::vector<uint16_t> hk = to_bf16_bits(pool_k), hv = to_bf16_bits(pool_v);
    KvLayer cpu_kv{Tensor(hk.data(), DType::bf16, {blocks, bs, nkv, hd}),
                   Tensor(hv.data(), DType::bf16, {blocks, bs, nkv, hd})};
    Tensor qt = host_f32(qr, T, Q), kt = host_f32(kr, T, KV);
    cpu().rope_kv_store({}, qt, kt, host_f32(v, T, KV), Tensor(pos.data(), DType::i32, {T}),
                        Tensor(inv.data(), DType::f32, {hd / 2}),
                        Tensor(slots.data(), DType::i32, {T}), cpu_kv);

    DeviceMatrix qd = device_bf16(T, Q, q, ld, 0), kd = device_bf16(T, KV, k, ld, Q);
    DeviceMatrix vd = device_bf16(T, KV, v, ld, Q + KV);
    DeviceMatrix pk = device_bf16(slots_n, KV, pool_k), pv = device_bf16(slots_n, KV, pool_v);
    KvLayer kv{Tensor(pk.view.data, DType::bf16, {blocks, bs, nkv, hd}, Device::cuda),
               Tensor(pv.view.data, DType::bf16, {blocks, bs, nkv, hd}, Device::cuda)};
    Buffer pos_buf, slot_buf, inv_buf = cuda().allocate(inv.size() * 4);
    cuda().upload({}, inv_buf.data(), inv.data(), inv.size() * 4);
    const Tensor inv_d(inv_buf.data(), DType::f32, {hd / 2}, Device::cuda);
    cuda().rope_kv_store({}, qd.view, kd.view, vd.view, device_i32(pos_buf, pos), inv_d,
                         device_i32(slot_buf, slots), kv);

    std::vector<float> rk(hk.size()), rv(hv.size());
    for (size_t i = 0; i < hk.size(); ++i) rk[i] = bf16_to_f32(hk[i]), rv[i] = bf16_to_f32(hv[i]);
    const std::string what = fmt::format("nh={} nkv={} hd={} bs={}", nh, nkv, hd, bs);
    expect_close("rope_kv_store", what + " q", download_view(qd), qr, 5e-3);
    expect_close("rope_kv_store", what + " k", download_view(kd), kr, 5e-3);
    expect_close("rope_kv_store", what + " K pool", download_view(pk), rk, 5e-3);
    expect_close("rope_kv_store", what + " V pool", download_view(pv), rv, 0.0);
  }
}

// rope_kv_store into E4M3 pools in one kernel: q, k and both pools equal, bit for bit, to RoPE then
// kv_store as two kernels (whose parts are checked against the CPU: RopeKvStore above for the
// rotation, KvStoreFp8MatchesCpuBitForBit below for the rounding).
TEST_F(GpuBackend, RopeKvStoreFp8FusedEqualsComposed) {
  for (auto [nh, nkv, hd, bs] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{32, 32, 128, 16},
                                 {32, 8, 128, 32}, {9, 3, 64, 16}}) {
    const int64_t T = 21, Q = nh * hd, KV = nkv * hd, ld = Q + 2 * KV, blocks = 5;
    const int64_t slots_n = blocks * bs;
    std::vector<float> q = random_bf16(size_t(T * Q)), k = random_bf16(size_t(T * KV), 4.0f);
    std::vector<float> v = random_bf16(size_t(T * KV), 4.0f);
    auto [pos, slots, inv] = rope_inputs(T, hd, slots_n);
    slots[2] = -1;
    std::vector<uint8_t> pool(size_t(slots_n * KV));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : pool) b = uint8_t(byte(rng()));
    Buffer pos_buf, slot_buf, inv_buf = cuda().allocate(inv.size() * 4);
    cuda().upload({}, inv_buf.data(), inv.data(), inv.size() * 4);
    const Tensor inv_d(inv_buf.data(), DType::f32, {hd / 2}, Device::cuda);
    const Tensor pos_d = device_i32(pos_buf, pos), slot_d = device_i32(slot_buf, slots);

    struct Run {
      DeviceMatrix q, k, v;
      Buffer pk, pv;
      KvLayer kv;
    };
    auto make = [&]() {
      Run r{device_bf16(T, Q, q, ld, 0), device_bf16(T, KV, k, ld, Q), device_bf16(T, KV, v, ld, Q + KV),
            cuda().allocate(pool.size()), cuda().allocate(pool.size()), {}};
      cuda().upload({}, r.pk.data(), pool.data(), pool.size());
      cuda().upload({}, r.pv.data(), pool.data(), pool.size());
      r.kv = KvLayer{Tensor(r.pk.data(), DType::fp8_e4m3, {blocks, bs, nkv, hd}, Device::cuda),
                     Tensor(r.pv.data(), DType::fp8_e4m3, {blocks, bs, nkv, hd}, Device::cuda)};
      return r;
    };
    Run fused = make(), composed = make();
    cuda().rope_kv_store({}, fused.q.view, fused.k.view, fused.v.view, pos_d, inv_d, slot_d, fused.kv);
    cuda().rope({}, composed.q.view, composed.k.view, pos_d, inv_d);
    cuda().kv_store({}, composed.k.view, composed.v.view, slot_d, composed.kv);
    auto bytes = [&](const Buffer& b) {
      std::vector<uint8_t> h(pool.size());
      cuda().download({}, h.data(), b.data(), h.size());
      cuda().synchronize({});
      return h;
    };
    const std::string what = fmt::format("nh={} nkv={} hd={} bs={}", nh, nkv, hd, bs);
    EXPECT_EQ(bytes(fused.pk), bytes(composed.pk)) << what << " K pool";
    EXPECT_EQ(bytes(fused.pv), bytes(composed.pv)) << what << " V pool";
    EXPECT_NE(bytes(fused.pk), pool) << what << " (the K pool was written)";
    expect_close("rope_kv_store fp8", what + " q", download_view(fused.q), download_view(composed.q), 0.0);
    expect_close("rope_kv_store fp8", what + " k", download_view(fused.k), download_view(composed.k), 0.0);
  }
}

// q|k|v = rmsnorm(x)·wᵀ, then RoPE and the KV store, as run_layers runs a decode step: through
// matmul_rope_kv (the skinny GEMV's rope_kv epilogue, up to 8 tokens) against matmul_fused +
// rope_kv_store on the same backend, and against the CPU's composition (fp32, bf16 pools). The
// norm from recorded sums (`sums`: a residual-adding matmul recorded x's sums of squares, as
// o_proj and down_proj do; then both paths run the same skinny GEMV reduction and rope.cuh's
// rotation, so qkv and the pools must be equal bit for bit) or composed (the first layer: the
// norm kernel, then the epilogue's kernel against the tuned one, compared with the CPU only).
// Pools start random; padding rows (slot -1) store nothing.
void run_matmul_rope_kv(int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t H, bool sums,
                        bool fp8, Backend* on = nullptr) {
  Backend& be = on ? *on : fusing();
  const int64_t Q = nh * hd, KV = nkv * hd, N = Q + 2 * KV, bs = 16, blocks = 3;
  const int64_t slots_n = blocks * bs;
  const std::string what = fmt::format("T={} nh={} nkv={} hd={} H={}{}{}", T, nh, nkv, hd, H,
                                       sums ? " sums" : " composed", fp8 ? " fp8" : "");
  WeightPair w = random_weight(N, H, be);
  std::vector<float> nw = random_bf16(size_t(H), 0.5f);
  for (auto& v : nw) v += 1.0f;
  const Tensor nw_host(nw.data(), DType::f32, {H});
  std::vector<float> ones(size_t(H), 1.0f);
  const Tensor ones_dev = be.upload_weight(Tensor(ones.data(), DType::f32, {H}));
  ASSERT_TRUE(be.fold_norm_weight(w.dev, be.upload_weight(nw_host)));

  // x: a producer's output with its sums recorded under tag 2, or plain random.
  std::vector<float> r = random_bf16(size_t(T * H), 3.0f);
  DeviceMatrix xd = device_bf16(T, H, r);
  if (sums) {
    const int64_t Kp = 256;
    const WeightPair wp = random_weight(H, Kp, be);
    std::vector<float> a = random_bf16(size_t(T * Kp));
    MatmulFusion prod;
    prod.accumulate = true;
    prod.record_sumsq = 2;
    DeviceMatrix ad = device_bf16(T, Kp, a), ps = device_bf16(T, Kp, {});
    be.matmul_fused({}, ad.view, wp.dev, prod, ps.view, xd.view);
  }
  MatmulFusion cons;
  cons.norm_weight = &ones_dev;
  cons.norm_folded = true;
  cons.eps = 1e-5f;
  cons.norm_sumsq = sums ? 2 : 0;

  auto [pos, slots, inv] = rope_inputs(T, hd, slots_n);
  if (T > 1) slots[1] = -1;
  Buffer pos_buf, slot_buf, inv_buf = be.allocate(inv.size() * 4);
  be.upload({}, inv_buf.data(), inv.data(), inv.size() * 4);
  const Tensor inv_d(inv_buf.data(), DType::f32, {hd / 2}, Device::cuda);
  const Tensor pos_d = device_i32(pos_buf, pos), slot_d = device_i32(slot_buf, slots);
  const size_t pool_bytes = size_t(slots_n * KV) * (fp8 ? 1 : 2);
  std::vector<uint8_t> pool0(pool_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : pool0) b = uint8_t(byte(rng()));
  if (!fp8)  // bf16 pools: random values rather than random bits (no NaN)
    for (size_t i = 0; i < pool0.size(); i += 2) pool0[i + 1] = uint8_t(0x3c + (pool0[i + 1] & 3));
  const DType pdt = fp8 ? DType::fp8_e4m3 : DType::bf16;
  struct Run {
    DeviceMatrix qkv, h;
    Buffer pk, pv;
    KvLayer kv;
  };
  auto make = [&] {
    Run run{device_bf16(T, N, {}), device_bf16(T, H, {}), be.allocate(pool_bytes),
            be.allocate(pool_bytes), {}};
    be.upload({}, run.pk.data(), pool0.data(), pool_bytes);
    be.upload({}, run.pv.data(), pool0.data(), pool_bytes);
    run.kv = KvLayer{Tensor(run.pk.data(), pdt, {blocks, bs, nkv, hd}, Device::cuda),
                     Tensor(run.pv.data(), pdt, {blocks, bs, nkv, hd}, Device::cuda)};
    return run;
  };
  auto bytes = [&](const Buffer& b) {
    std::vector<uint8_t> out(pool_bytes);
    be.download({}, out.data(), b.data(), pool_bytes);
    be.synchronize({});
    return out;
  };
  Run one = make(), two = make();
  const bool fused = be.matmul_rope_kv({}, xd.view, w.dev, cons, one.h.view, one.qkv.view, pos_d,
                                       inv_d, slot_d, one.kv);
  EXPECT_EQ(fused, T <= kFusedMaxTokens && hd % 16 == 0) << what;
  if (!fused) return;
  be.matmul_fused({}, xd.view, w.dev, cons, two.h.view, two.qkv.view);
  Tensor q2 = two.qkv.view, k2 = two.qkv.view, v2 = two.qkv.view;
  q2.shape[1] = Q;
  k2.shape[1] = KV, k2.data = static_cast<uint16_t*>(k2.data) + Q;
  v2.shape[1] = KV, v2.data = static_cast<uint16_t*>(v2.data) + Q + KV;
  be.rope_kv_store({}, q2, k2, v2, pos_d, inv_d, slot_d, two.kv);
  be.synchronize({});
  const std::vector<uint8_t> pk1 = bytes(one.pk), pv1 = bytes(one.pv);
  EXPECT_NE(pk1, pool0) << what << ": the K pool was written";
  EXPECT_NE(pv1, pool0) << what << ": the V pool was written";
  if (sums) {
    EXPECT_EQ(download_bits(one.qkv), download_bits(two.qkv)) << what << ": q|k|v";
    EXPECT_EQ(pk1, bytes(two.pk)) << what << ": K pool";
    EXPECT_EQ(pv1, bytes(two.pv)) << what << ": V pool";
  }
  expect_untouched_outside("matmul_rope_kv", one.qkv);
  if (fp8) return;

  // The CPU's composition from the x the GPU holds: rmsnorm(x; nw)·wᵀ (the unfolded weight), then
  // rope_kv_store into a copy of the starting pools.
  std::vector<float> xin = download_view(xd), ref(size_t(T * N)), hs(size_t(T * H));
  MatmulFusion cref;
  cref.norm_weight = &nw_host;
  cref.eps = 1e-5f;
  Tensor ref_t = host_f32(ref, T, N), hs_t = host_f32(hs, T, H);
  cpu().matmul_fused({}, host_f32(xin, T, H), w.host, cref, hs_t, ref_t);
  std::vector<uint16_t> hk(pool_bytes / 2), hv(pool_bytes / 2);
  std::memcpy(hk.data(), pool0.data(), pool_bytes);
  std::memcpy(hv.data(), pool0.data(), pool_bytes);
  KvLayer cpu_kv{Tensor(hk.data(), DType::bf16, {blocks, bs, nkv, hd}),
                 Tensor(hv.data(), DType::bf16, {blocks, bs, nkv, hd})};
  Tensor qr = ref_t, kr = ref_t, vr = ref_t;
  qr.shape[1] = Q;
  kr.shape[1] = KV, kr.data = ref.data() + Q;
  vr.shape[1] = KV, vr.data = ref.data() + Q + KV;
  cpu().rope_kv_store({}, qr, kr, vr, Tensor(pos.data(), DType::i32, {T}),
                      Tensor(inv.data(), DType::f32, {hd / 2}), Tensor(slots.data(), DType::i32, {T}),
                      cpu_kv);
  auto as_f32 = [](const std::vector<uint16_t>& bits) {
    std::vector<float> f(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_f32(bits[i]);
    return f;
  };
  auto pool_f32 = [&](const std::vector<uint8_t>& b) {
    std::vector<uint16_t> bits(b.size() / 2);
    std::memcpy(bits.data(), b.data(), b.size());
    return as_f32(bits);
  };
  expect_close("matmul_rope_kv", what + " q|k|v", download_view(one.qkv), ref, 1e-2);
  expect_close("matmul_rope_kv", what + " K pool", pool_f32(pk1), as_f32(hk), 1e-2);
  expect_close("matmul_rope_kv", what + " V pool", pool_f32(pv1), as_f32(hv), 1e-2);
}

TEST_F(GpuBackend, MatmulRopeKvEpilogue) {
  for (bool sums : {true, false}) {
    for (int64_t T : {1, 3, 8}) run_matmul_rope_kv(T, 32, 32, 128, 4096, sums, false);  // Llama-2-7B
    run_matmul_rope_kv(2, 32, 8, 128, 1024, sums, false);                               // GQA 4:1
    run_matmul_rope_kv(5, 9, 3, 64, 576, sums, false);                                 // SmolLM2
    run_matmul_rope_kv(1, 32, 8, 128, 1024, sums, true);                               // fp8 pools
    run_matmul_rope_kv(7, 9, 3, 64, 576, sums, true);
  }
  // Not fused (the caller makes the two calls): past 8 tokens, a head dim that is not a multiple
  // of 16.
  run_matmul_rope_kv(9, 9, 3, 64, 576, true, false);
  run_matmul_rope_kv(2, 3, 1, 40, 256, true, false);
}

// The row-stream GEMV (--gemv-stream: kernels::SkinnyArgs::stream) behind the same fused calls,
// at 1-2 tokens with K past 2048, where it replaces the MMA skinny kernel: the norm from recorded
// sums (and the producer's residual and sums of squares, down_proj with SiLU·mul before it),
// SwiGLU, RoPE + the KV store into bf16 and E4M3 pools; each against the CPU's composition, as
// above for the MMA kernel.
TEST_F(GpuBackend, GemvStreamFusions) {
  Backend& be = streaming();
  // Each case runs its K > 2048 GEMVs in the row-stream kernel: one at least (the rope_kv cases
  // have one, q|k|v; the norm cases three: producer, consumer, and the consumer of another x).
  auto in_stream = [&](const char* what, auto&& run_case) {
#if RIDGE_TEST_GEMM_KERNELS
    const int64_t before = ridge::kernels::skinny_stream_launches();
#endif
    run_case();
#if RIDGE_TEST_GEMM_KERNELS
    EXPECT_GE(ridge::kernels::skinny_stream_launches() - before, 1)
        << what << ": no GEMV ran in the row-stream kernel";
#else
    (void)what;
#endif
  };
  // Llama-2-7B o_proj then q|k|v; down_proj then gate|up; partial units and K tails.
  in_stream("norm 1x4096", [&] { run_norm_from_sums(1, 4096, 12288, 4096, false, &be); });
  in_stream("norm 2x11008 silu", [&] { run_norm_from_sums(2, 4096, 22016, 11008, true, &be); });
  in_stream("norm 1x3000", [&] { run_norm_from_sums(1, 4104, 1032, 3000, false, &be); });
  in_stream("swiglu 1", [&] { run_swiglu(1, 11008, 4096, false, true, false, &be); });
  in_stream("swiglu 2 norm", [&] { run_swiglu(2, 11008, 4096, true, true, false, &be); });
  for (bool sums : {true, false}) {
    in_stream("rope_kv MHA", [&] { run_matmul_rope_kv(1, 32, 32, 128, 4096, sums, false, &be); });
    in_stream("rope_kv GQA", [&] { run_matmul_rope_kv(2, 32, 8, 128, 4096, sums, false, &be); });
    in_stream("rope_kv fp8", [&] { run_matmul_rope_kv(1, 32, 8, 128, 4096, sums, true, &be); });
  }
}

// The warp-row GEMV (--gemv-warp: kernels::SkinnyArgs::warp) behind the same fused calls at one
// token: the norm from the sums of squares a warp-row producer recorded (one part a row: its
// residual and sums of squares, down_proj with SiLU·mul before it), SwiGLU with and without the
// norm, RoPE + the KV store into bf16 and E4M3 pools (MHA, GQA, head dim 64); each against the
// CPU's composition, as above for the MMA kernel, and counted: the norm cases run the producer
// and the consumer in it, the others their fused GEMV.
TEST_F(GpuBackend, GemvWarpFusions) {
  Backend& be = warping();
  // Exact counts: the norm cases' producer and fused consumer (their composed consumer of
  // another x runs the tuned matmul); SwiGLU, and its recording producer with the norm; the
  // rope_kv call, and with sums its recording producer and the fused matmul it is compared with.
  expect_warp_launches("norm 1x4096", 2,
                       [&] { run_norm_from_sums(1, 4096, 12288, 4096, false, &be); });
  expect_warp_launches("norm 1x11008 silu", 2,
                       [&] { run_norm_from_sums(1, 4096, 22016, 11008, true, &be); });
  expect_warp_launches("norm 1x3000", 2,
                       [&] { run_norm_from_sums(1, 4104, 1032, 3000, false, &be); });
  expect_warp_launches("norm 1x576", 2, [&] { run_norm_from_sums(1, 576, 1000, 320, false, &be); });
  expect_warp_launches("swiglu 1", 1, [&] { run_swiglu(1, 11008, 4096, false, true, false, &be); });
  expect_warp_launches("swiglu 1 norm", 2,
                       [&] { run_swiglu(1, 11008, 4096, true, true, false, &be); });
  expect_warp_launches("swiglu 1 K=8192", 1,
                       [&] { run_swiglu(1, 2048, 8192, false, true, false, &be); });
  for (bool sums : {true, false}) {
    const int64_t n = sums ? 3 : 1;
    expect_warp_launches("rope_kv MHA", n,
                         [&] { run_matmul_rope_kv(1, 32, 32, 128, 4096, sums, false, &be); });
    expect_warp_launches("rope_kv GQA", n,
                         [&] { run_matmul_rope_kv(1, 32, 8, 128, 4096, sums, false, &be); });
    expect_warp_launches("rope_kv fp8", n,
                         [&] { run_matmul_rope_kv(1, 32, 8, 128, 4096, sums, true, &be); });
    expect_warp_launches("rope_kv hd64", n,
                         [&] { run_matmul_rope_kv(1, 9, 3, 64, 576, sums, false, &be); });
    // Two phases a row (K = 8,192).
    expect_warp_launches("rope_kv GQA K=8192", n,
                         [&] { run_matmul_rope_kv(1, 32, 8, 128, 8192, sums, false, &be); });
  }
}

// The warp-row GEMV chosen by the tuner shape by shape (CudaBackend::set_gemm_choice at one
// token, as a tuned or cached choice sets it) on the default backend: the fused GEMVs of a
// shape chosen so run in it and the others in the MMA kernel, so a producer of one kind feeds a
// consumer of the other (the sums of squares one part a block, or one per 16 rows). Each mix
// against the CPU's composition (run_norm_from_sums: producer, fused consumer, and the composed
// consumer of another x, which runs the consumer shape's choice in matmul()), counted.
TEST_F(GpuBackend, GemvWarpByTunedChoice) {
  auto* be = dynamic_cast<CudaBackend*>(&fusing());
  ASSERT_NE(be, nullptr);
  using GK = CudaBackend::GemmKernel;
  constexpr int64_t H = 4096, N = 12288, Kp = 4096;
  // The shared backend forgets both choices however the test ends (a failed assertion returns
  // early), so that later tests run the tuned kernels.
  struct ForgetChoices {
    CudaBackend* be;
    ~ForgetChoices() {
      be->set_gemm_choice(1, H, Kp, std::nullopt);
      be->set_gemm_choice(1, N, H, std::nullopt);
    }
  } forget{be};
  for (const bool warp_producer : {true, false})
    for (const bool warp_consumer : {true, false}) {
      SCOPED_TRACE(fmt::format("producer {}, consumer {}", warp_producer ? "warp-row" : "MMA",
                               warp_consumer ? "warp-row" : "MMA"));
      be->set_gemm_choice(1, H, Kp, warp_producer ? std::optional(GK::warp_rows) : std::nullopt);
      be->set_gemm_choice(1, N, H, warp_consumer ? std::optional(GK::warp_rows) : std::nullopt);
      expect_warp_launches("one token", int64_t(warp_producer) + 2 * int64_t(warp_consumer),
                           [&] { run_norm_from_sums(1, H, N, Kp, false, be); });
      // The choice is for one token only.
      expect_warp_launches("two tokens", 0, [&] { run_norm_from_sums(2, H, N, Kp, false, be); });
    }
}

// kv_store into E4M3 pools: the CUDA kernel's bytes equal the CPU backend's (both round the same
// fp32 values, the bf16 inputs, to nearest even and saturate at +-448), padding rows (slot -1)
// and slots nobody writes keep their bytes.
TEST_F(GpuBackend, KvStoreFp8MatchesCpuBitForBit) {
  for (auto [nkv, hd, bs] : {std::tuple<int64_t, int64_t, int64_t>{32, 128, 16}, {8, 128, 32}, {3, 64, 16}}) {
    const int64_t T = 37, width = nkv * hd, blocks = 6, slots_n = blocks * bs;
    std::vector<float> k = random_bf16(size_t(T * width)), v = random_bf16(size_t(T * width));
    std::uniform_int_distribution<size_t> at(0, k.size() - 1);
    for (int i = 0; i < 20; ++i) {  // beyond the E4M3 range, and in its subnormals
      k[at(rng())] = bf16_to_f32(f32_to_bf16(700.0f * (i % 2 ? 1 : -1)));
      v[at(rng())] = bf16_to_f32(f32_to_bf16(1.5e-3f * (i % 2 ? 1 : -1)));
    }
    std::vector<int32_t> slots(static_cast<size_t>(slots_n));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng());
    slots.resize(size_t(T));
    slots[5] = -1;
    std::vector<uint8_t> pool_k(size_t(slots_n * width)), pool_v(pool_k.size());
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : pool_k) b = uint8_t(byte(rng()));
    for (auto& b : pool_v) b = uint8_t(byte(rng()));

    std::vector<uint8_t> ck(pool_k), cv(pool_v);
    KvLayer cpu_kv{Tensor(ck.data(), DType::fp8_e4m3, {blocks, bs, nkv, hd}),
                   Tensor(cv.data(), DType::fp8_e4m3, {blocks, bs, nkv, hd})};
    cpu().kv_store({}, host_f32(k, T, width), host_f32(v, T, width),
                   Tensor(slots.data(), DType::i32, {T}), cpu_kv);

    DeviceMatrix kd = device_bf16(T, width, k), vd = device_bf16(T, width, v);
    Buffer dk = cuda().allocate(pool_k.size()), dv = cuda().allocate(pool_v.size()), slot_buf;
    cuda().upload({}, dk.data(), pool_k.data(), pool_k.size());
    cuda().upload({}, dv.data(), pool_v.data(), pool_v.size());
    KvLayer kv{Tensor(dk.data(), DType::fp8_e4m3, {blocks, bs, nkv, hd}, Device::cuda),
               Tensor(dv.data(), DType::fp8_e4m3, {blocks, bs, nkv, hd}, Device::cuda)};
    cuda().kv_store({}, kd.view, vd.view, device_i32(slot_buf, slots), kv);
    std::vector<uint8_t> gk(pool_k.size()), gv(pool_v.size());
    cuda().download({}, gk.data(), dk.data(), gk.size());
    cuda().download({}, gv.data(), dv.data(), gv.size());
    cuda().synchronize({});
    size_t diff_k = 0, diff_v = 0, written = 0;
    for (size_t i = 0; i < gk.size(); ++i) {
      diff_k += gk[i] != ck[i];
      diff_v += gv[i] != cv[i];
      written += ck[i] != pool_k[i];
    }
    const std::string what = fmt::format("nkv={} hd={} bs={}", nkv, hd, bs);
    EXPECT_EQ(diff_k, 0u) << what;
    EXPECT_EQ(diff_v, 0u) << what;
    EXPECT_GT(written, size_t(T - 2) * size_t(width) / 2) << what;  // the store did write
  }
}

}  // namespace
}  // namespace ridge::backend::gpu_test
