// CUDA backend vs CPU reference: weight upload/conversion, embedding, rmsnorm, add_rmsnorm,
// matmul (every stored weight dtype, bias, strided column-slice outputs, f32 logits), rope,
// kv_store, silu_mul, gather_rows. Fresh random inputs (never zeros) each run; outputs poisoned
// first; normalized error bounds for bf16; any NaN fails; writes outside the output view fail.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "common/random_blocks.h"
#include "harness.h"
#include "ridge/backend/cpu/quant.h"
#include "ridge/backend/cuda/cuda_backend.h"
#include "ridge/backend/cuda/cuda_matmul.h"
#include "ridge/backend/cuda/cuda_resources.h"
#include "ridge/backend/factory.h"
#include "ridge/core/error.h"
#include "ridge/kernels/cuda/gemm/gemm.h"

namespace ridge::backend::gpu_test {
namespace {


// Stored weight bytes of `dtype` for n random values (GGUF block layouts for quantized types).
std::vector<uint8_t> random_weight(DType dtype, int64_t n) {
  std::vector<uint8_t> b(row_bytes(dtype, n));
  auto put16 = [&](size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); };
  switch (dtype) {
    case DType::f32: {
      const auto v = random_bf16(size_t(n), 0.05f);
      std::vector<float> f(v);
      for (auto& x : f) x *= 1.0f + 1e-3f;  // not bf16-representable: conversion rounds
      std::memcpy(b.data(), f.data(), b.size());
      break;
    }
    case DType::f16:
    case DType::bf16: {
      std::normal_distribution<float> d(0.0f, 0.05f);
      for (int64_t i = 0; i < n; ++i)
        put16(size_t(2 * i), dtype == DType::f16 ? f32_to_f16(d(rng())) : f32_to_bf16(d(rng())));
      break;
    }
    default:
      b = test::random_blocks(dtype, n, rng());
  }
  return b;
}

const DType kWeightTypes[] = {DType::f32, DType::f16, DType::bf16,
                              DType::q8_0, DType::q4_0, DType::q4_1};

TEST_F(GpuBackend, UploadWeightMatchesCpuDequantization) {
  std::vector<DType> types = {DType::f32, DType::f16, DType::bf16};
  types.insert(types.end(), std::begin(test::kBlockTypes), std::end(test::kBlockTypes));
  for (DType t : types) {
    const int64_t rows = 7, cols = 768;
    std::vector<uint8_t> bytes = random_weight(t, rows * cols);
    const Tensor host(bytes.data(), t, {rows, cols});
    const Tensor dev = cuda().upload_weight(host);
    ASSERT_EQ(dev.dtype, DType::bf16);
    ASSERT_EQ(dev.device, Device::cuda);
    std::vector<uint16_t> got(size_t(rows * cols));
    cuda().download({}, got.data(), dev.data, got.size() * 2);
    cuda().synchronize({});
    std::vector<float> ref(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      cpu::dequantize_row_reference(t, host.row(r), &ref[size_t(r * cols)], cols);
    size_t mismatched = 0;
    for (size_t i = 0; i < got.size(); ++i) mismatched += got[i] != f32_to_bf16(ref[i]);
    EXPECT_EQ(mismatched, 0u) << "dequantized " << dtype_name(t)
                              << " differs from the CPU value rounded to bf16";
  }
  // Vectors (norm weights, biases) become f32.
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<uint8_t> bytes = random_weight(t, 37);
    const Tensor host(bytes.data(), t, {37});
    const Tensor dev = cuda().upload_weight(host);
    ASSERT_EQ(dev.dtype, DType::f32);
    std::vector<float> got(37), ref(37);
    cuda().download({}, got.data(), dev.data, 37 * 4);
    cuda().synchronize({});
    cpu::dequantize_row_reference(t, bytes.data(), ref.data(), 37);
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), 37 * 4), 0) << dtype_name(t) << " vector";
  }
}

TEST_F(GpuBackend, Embedding) {
  for (DType t : {DType::bf16, DType::f32, DType::q8_0, DType::q4_1}) {
    const int64_t V = 1001, H = t == DType::bf16 ? 515 : 576, T = 19;
    std::vector<uint8_t> bytes = random_weight(t, V * H);
    const Tensor host(bytes.data(), t, {V, H});
    const Tensor dev = cuda().upload_weight(host);
    std::uniform_int_distribution<int32_t> id(0, int32_t(V - 1));
    std::vector<int32_t> ids(T);
    for (auto& i : ids) i = id(rng());
    ids[0] = 0;
    ids[1] = int32_t(V - 1);
    std::vector<float> ref(size_t(T * H));
    Tensor ref_t = host_f32(ref, T, H);
    cpu().embedding({}, host, Tensor(ids.data(), DType::i32, {T}), ref_t);
    Buffer ids_buf;
    const Tensor ids_d = device_i32(ids_buf, ids);
    DeviceMatrix out = device_bf16(T, H, {}, H + 5, 3);
    cuda().embedding({}, dev, ids_d, out.view);
    expect_close("embedding", fmt::format("{} V={} H={} T={}", dtype_name(t), V, H, T),
                 download_view(out), ref, t == DType::bf16 ? 0.0 : 5e-3);
    expect_untouched_outside("embedding", out);
  }
}

// aligned: 16-byte aligned rows and strides (the vectorized kernel where H % 8 == 0); else x is
// offset by one element (the scalar kernel).
void run_rmsnorm(int64_t T, int64_t H, bool fused, bool aligned) {
  std::vector<float> x = random_bf16(size_t(T * H));
  std::vector<float> res = random_bf16(size_t(T * H), 2.0f);
  std::vector<float> w = random_bf16(size_t(H), 0.3f);
  for (auto& v : w) v += 1.0f;
  const Tensor w_host(w.data(), DType::f32, {H});
  const Tensor w_dev = cuda().upload_weight(w_host);
  std::vector<float> ref(size_t(T * H)), res_ref(res);
  Tensor ref_t = host_f32(ref, T, H), res_t = host_f32(res_ref, T, H), x_t = host_f32(x, T, H);
  DeviceMatrix xd = aligned ? device_bf16(T, H, x, H + 16, 8) : device_bf16(T, H, x, H + 3, 1);
  DeviceMatrix rd = device_bf16(T, H, res, H, 0);
  DeviceMatrix out = device_bf16(T, H, {}, H + 8, 8);
  const std::string what = fmt::format("T={} H={}{}", T, H, aligned ? " aligned" : "");
  if (!fused) {
    cpu().rmsnorm({}, x_t, w_host, 1e-5f, ref_t);
    cuda().rmsnorm({}, xd.view, w_dev, 1e-5f, out.view);
    expect_close("rmsnorm", what, download_view(out), ref, 5e-3);
  } else {
    cpu().add_rmsnorm({}, res_t, x_t, w_host, 1e-5f, ref_t);
    cuda().add_rmsnorm({}, rd.view, xd.view, w_dev, 1e-5f, out.view);
    expect_close("add_rmsnorm", what + " out", download_view(out), ref, 1e-2);
    expect_close("add_rmsnorm", what + " residual", download_view(rd), res_ref, 5e-3);
    expect_untouched_outside("add_rmsnorm", rd);
  }
  expect_untouched_outside(fused ? "add_rmsnorm" : "rmsnorm", out);
}

TEST_F(GpuBackend, RmsNorm) {
  for (bool aligned : {false, true})
    for (auto [T, H] :
         {std::pair<int64_t, int64_t>{1, 576}, {7, 1000}, {64, 4096}, {3, 8192}, {33, 33}, {2, 8200}})
      run_rmsnorm(T, H, false, aligned);
}

TEST_F(GpuBackend, AddRmsNorm) {
  for (bool aligned : {false, true})
    for (auto [T, H] : {std::pair<int64_t, int64_t>{1, 576}, {7, 1000}, {64, 4096}, {33, 33},
                        {5, 2048}})
      run_rmsnorm(T, H, true, aligned);
}

// out (a column slice [col0, col0 + N) of a [T, ld] buffer, or f32 logits) = x · wᵀ (+ bias).
void run_matmul(int64_t T, int64_t N, int64_t K, DType wt, bool bias, bool f32_out,
                int64_t ld_extra, int64_t col0) {
  std::vector<float> x = random_bf16(size_t(T * K));
  std::vector<uint8_t> wbytes = random_weight(wt, N * K);
  const Tensor w_host(wbytes.data(), wt, {N, K});
  const Tensor w_dev = cuda().upload_weight(w_host);
  std::vector<float> b = random_bf16(size_t(N), 0.5f);
  const Tensor b_host(b.data(), DType::f32, {N});
  const Tensor b_dev = cuda().upload_weight(b_host);
  std::vector<float> ref(size_t(T * N));
  Tensor ref_t = host_f32(ref, T, N), x_t = host_f32(x, T, K);
  cpu().matmul({}, x_t, w_host, bias ? &b_host : nullptr, ref_t);
  DeviceMatrix xd = device_bf16(T, K, x);
  DeviceMatrix out = f32_out ? device_f32(T, N, N + ld_extra, col0)
                             : device_bf16(T, N, {}, N + ld_extra, col0);
  cuda().matmul({}, xd.view, w_dev, bias ? &b_dev : nullptr, out.view);
  const std::string what = fmt::format("{} T={} N={} K={}{}{}{}", dtype_name(wt), T, N, K,
                                       bias ? " bias" : "", f32_out ? " f32out" : "",
                                       ld_extra ? fmt::format(" ld+{}@{}", ld_extra, col0) : "");
  expect_close("matmul", what, download_view(out), ref, f32_out ? 5e-3 : 1e-2);
  expect_untouched_outside("matmul", out);
}

TEST_F(GpuBackend, MatmulWeightTypes) {
  for (DType t : kWeightTypes) run_matmul(5, 96, 160, t, false, false, 0, 0);
  for (DType t : test::kBlockTypes) run_matmul(3, 40, 512, t, false, false, 0, 0);
}

TEST_F(GpuBackend, MatmulShapes) {
  run_matmul(1, 576, 576, DType::q4_1, false, false, 128, 0);       // decode q of a qkv buffer
  run_matmul(1, 64, 576, DType::q8_0, true, false, 640, 576);       // k slice with a bias
  run_matmul(7, 1536, 576, DType::bf16, false, false, 1536, 1536);  // up half of gate_up
  run_matmul(33, 1000, 320, DType::f16, true, false, 0, 0);
  run_matmul(3, 1001, 64, DType::bf16, false, true, 0, 0);          // odd vocab logits, f32
  run_matmul(130, 384, 256, DType::f32, true, false, 7, 3);         // odd stride and offset
  run_matmul(17, 49152, 64, DType::bf16, false, true, 0, 0);        // wide logits
}

// Every GEMM kernel the tuner can choose, forced through matmul() and matmul_add() (the residual
// epilogue) as if the tuner had picked it, against the CPU reference with outputs poisoned first:
// the backend's dispatch and workspaces for each (the weight-stream kernel's per-stream partials
// and tickets among them), on decode shapes and odd ones. The weight-stream and window kernels also
// run captured in a CUDA graph, replayed twice (their tickets must come back to zero between
// replays). (The window GEMV takes up to 32 tokens; the warp-row GEMV one, and a choice of it
// at more runs the skinny kernel.)
TEST_F(GpuBackend, MatmulEveryTunerKernel) {
  auto* be = dynamic_cast<CudaBackend*>(&cuda());
  ASSERT_NE(be, nullptr);
  using GK = CudaBackend::GemmKernel;
  struct Shape {
    int64_t T, N, K;
  };
  for (const Shape& sh : {Shape{1, 4104, 1032}, Shape{13, 1000, 3000}, Shape{40, 520, 1016},
                          Shape{64, 4096, 1024}}) {
    const auto [T, N, K] = sh;
    std::vector<float> x = random_bf16(size_t(T * K)), w = random_bf16(size_t(N * K), 0.1f);
    std::vector<float> r = random_bf16(size_t(T * N), 2.0f);
    std::vector<float> ref(size_t(T * N)), ref_add(r);
    Tensor ref_t = host_f32(ref, T, N), x_t = host_f32(x, T, K), w_t = host_f32(w, N, K);
    cpu().matmul({}, x_t, w_t, nullptr, ref_t);
    for (size_t i = 0; i < ref.size(); ++i) ref_add[i] += ref[i];
    const Tensor w_dev = cuda().upload_weight(w_t);  // bf16-exact values: converted unchanged
    DeviceMatrix xd = device_bf16(T, K, x);
    for (GK k : {GK::skinny, GK::skinny_rows, GK::sm90, GK::stream, GK::window, GK::cublas,
                 GK::cublas_2, GK::warp_rows}) {
      if (k == GK::window && T > ridge::kernels::window_gemm_max_tokens) continue;
      be->set_gemm_choice(T, N, K, k);
      const std::string what =
          fmt::format("{} T={} N={} K={}", CudaBackend::gemm_name(k), T, N, K);
      {  // the choice as benchmarks report it (T's token bucket: T = 1, 13 -> 16, 40 -> 64, 64)
        const auto choices = be->matmul_choices();
        const int64_t bucket = T == 1 ? 1 : T <= 16 ? 16 : 64;
        EXPECT_EQ(std::count_if(choices.begin(), choices.end(),
                                [&](const ridge::backend::MatmulChoice& c) {
                                  return c.tokens == bucket && c.n == N && c.k == K &&
                                         c.kernel == CudaBackend::gemm_name(k);
                                }),
                  1)
            << what << ": matmul_choices()";
      }
      DeviceMatrix out = device_bf16(T, N, {});  // poisoned
      cuda().matmul({}, xd.view, w_dev, nullptr, out.view);
      expect_close("matmul", what, download_view(out), ref, 1e-2);
      DeviceMatrix acc = device_bf16(T, N, r);
      cuda().matmul_add({}, xd.view, w_dev, acc.view);
      expect_close("matmul_add", what, download_view(acc), ref_add, 1e-2);
      if (k == GK::stream || k == GK::window) {
        DeviceMatrix g = device_bf16(T, N, {});
        const Stream st{};
        auto graph = cuda().capture(st, [&](const Stream& s) {
          cuda().matmul(s, xd.view, w_dev, nullptr, g.view);
        });
        ASSERT_NE(graph, nullptr);
        for (int replay = 0; replay < 2; ++replay) {
          graph->replay(st);
          cuda().synchronize(st);
          expect_close("matmul (graph)", fmt::format("{} replay {}", what, replay),
                       download_view(g), ref, 1e-2);
        }
      }
    }
    be->set_gemm_choice(T, N, K, std::nullopt);
  }
}

// Every algorithm cuBLASLt's heuristic offers for an operand set (the tuner's candidates under
// RIDGE_CUBLAS_ALGOS) against the CPU reference, outputs poisoned before each: decode, a chunk of
// odd size, a strided column slice.
TEST_F(GpuBackend, MatmulCublasAlgorithms) {
  using ridge::backend::cuda::LtMatmul;
  ridge::backend::cuda::CublasLtHandle handle;
  LtMatmul lt(handle.get());
  constexpr size_t kWorkspace = size_t(32) << 20;
  Buffer ws = cuda().allocate(kWorkspace);
  struct Shape {
    int64_t T, N, K, ld_extra;
  };
  for (const Shape& sh : {Shape{1, 4096, 4096, 0}, Shape{19, 1000, 576, 0}, Shape{300, 384, 1024, 0},
                          Shape{8, 512, 256, 512}}) {
    const auto [T, N, K, extra] = sh;
    std::vector<float> x = random_bf16(size_t(T * K)), w = random_bf16(size_t(N * K), 0.1f);
    std::vector<float> ref(size_t(T * N));
    Tensor ref_t = host_f32(ref, T, N), x_t = host_f32(x, T, K), w_t = host_f32(w, N, K);
    cpu().matmul({}, x_t, w_t, nullptr, ref_t);
    DeviceMatrix xd = device_bf16(T, K, x), wd = device_bf16(N, K, w);
    const auto* xp = static_cast<const uint16_t*>(xd.view.data);
    const auto* wp = static_cast<const uint16_t*>(wd.view.data);
    DeviceMatrix probe = device_bf16(T, N, {}, N + extra, 0);
    const int n = lt.algorithms(xp, K, wp, T, N, K, probe.view.data, DType::bf16, N + extra,
                                kWorkspace);
    EXPECT_GE(n, 1);
    EXPECT_LE(n, LtMatmul::kMaxAlgos);
    for (int a = 0; a < n; ++a) {
      DeviceMatrix out = device_bf16(T, N, {}, N + extra, 0);  // poisoned
      lt.run(xp, K, wp, T, N, K, out.view.data, DType::bf16, N + extra, ws.data(), kWorkspace,
             nullptr, false, a);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string what = fmt::format("T={} N={} K={} ld+{} algorithm {} of {}", T, N, K,
                                           extra, a + 1, n);
      expect_close("matmul (cuBLASLt)", what, download_view(out), ref, 1e-2);
      expect_untouched_outside("matmul (cuBLASLt)", out);
    }
  }
}

TEST_F(GpuBackend, Rope) {
  // hd % 16 == 0 with aligned rows: the 8-pairs-per-thread kernel; hd 36: the per-pair kernel.
  for (auto [nh, nkv, hd] : {std::tuple<int64_t, int64_t, int64_t>{9, 3, 64}, {32, 8, 128},
                             {4, 4, 128}, {15, 5, 64}, {3, 1, 36}}) {
    const int64_t T = 37, Q = nh * hd, KV = nkv * hd, ld = Q + 2 * KV;
    std::vector<float> q = random_bf16(size_t(T * Q)), k = random_bf16(size_t(T * KV));
    std::vector<int32_t> pos(T);
    std::uniform_int_distribution<int32_t> p(0, 40000);
    for (auto& v : pos) v = p(rng());
    pos[0] = 0;
    std::vector<float> inv(size_t(hd / 2));
    for (int64_t i = 0; i < hd / 2; ++i)
      inv[size_t(i)] = 1.0f / std::pow(hd == 128 ? 500000.0f : 10000.0f, float(2 * i) / float(hd));
    std::vector<float> qr(q), kr(k);
    Tensor qt = host_f32(qr, T, Q), kt = host_f32(kr, T, KV);
    cpu().rope({}, qt, kt, Tensor(pos.data(), DType::i32, {T}),
               Tensor(inv.data(), DType::f32, {hd / 2}));
    DeviceMatrix qd = device_bf16(T, Q, q, ld, 0), kd = device_bf16(T, KV, k, ld, Q);
    Buffer pos_buf, inv_buf = cuda().allocate(inv.size() * 4);
    cuda().upload({}, inv_buf.data(), inv.data(), inv.size() * 4);
    const Tensor pos_d = device_i32(pos_buf, pos);
    const Tensor inv_d(inv_buf.data(), DType::f32, {hd / 2}, Device::cuda);
    cuda().rope({}, qd.view, kd.view, pos_d, inv_d);
    const std::string what = fmt::format("T={} nh={} nkv={} hd={}", T, nh, nkv, hd);
    expect_close("rope", what + " q", download_view(qd), qr, 5e-3);
    expect_close("rope", what + " k", download_view(kd), kr, 5e-3);
  }
}

TEST_F(GpuBackend, KvStore) {
  for (auto [bs, nkv, hd] : {std::tuple<int64_t, int64_t, int64_t>{16, 2, 64}, {32, 8, 128},
                             {64, 1, 128}}) {
    const int64_t blocks = 9, slots_n = blocks * bs, width = nkv * hd, T = 2 * bs + 5;
    const int64_t ld = 32 * hd + 2 * width;
    std::vector<float> pool_k = random_bf16(size_t(slots_n * width));
    std::vector<float> pool_v = random_bf16(size_t(slots_n * width));
    std::vector<float> k = random_bf16(size_t(T * width)), v = random_bf16(size_t(T * width));
    std::vector<int32_t> slots(static_cast<size_t>(slots_n));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng());
    slots.resize(size_t(T));
    // CPU: pools stored as bf16 host tensors.
    std::vector<uint16_t> hk = to_bf16_bits(pool_k), hv = to_bf16_bits(pool_v);
    KvLayer cpu_kv{Tensor(hk.data(), DType::bf16, {blocks, bs, nkv, hd}),
                   Tensor(hv.data(), DType::bf16, {blocks, bs, nkv, hd})};
    cpu().kv_store({}, host_f32(k, T, width), host_f32(v, T, width),
                   Tensor(slots.data(), DType::i32, {T}), cpu_kv);
    DeviceMatrix pk = device_bf16(slots_n, width, pool_k), pv = device_bf16(slots_n, width, pool_v);
    DeviceMatrix kd = device_bf16(T, width, k, ld, 32 * hd), vd = device_bf16(T, width, v, ld, 32 * hd + width);
    KvLayer kv{Tensor(pk.view.data, DType::bf16, {blocks, bs, nkv, hd}, Device::cuda),
               Tensor(pv.view.data, DType::bf16, {blocks, bs, nkv, hd}, Device::cuda)};
    Buffer slot_buf;
    cuda().kv_store({}, kd.view, vd.view, device_i32(slot_buf, slots), kv);
    std::vector<float> rk(hk.size()), rv(hv.size());
    for (size_t i = 0; i < hk.size(); ++i) rk[i] = bf16_to_f32(hk[i]), rv[i] = bf16_to_f32(hv[i]);
    const std::string what = fmt::format("bs={} nkv={} hd={} T={}", bs, nkv, hd, T);
    expect_close("kv_store", what + " K pool", download_view(pk), rk, 0.0);
    expect_close("kv_store", what + " V pool", download_view(pv), rv, 0.0);
  }
}

TEST_F(GpuBackend, SiluMul) {
  for (auto [T, F] : {std::pair<int64_t, int64_t>{1, 1536}, {9, 1000}, {64, 14336}, {5, 7}}) {
    std::vector<float> gu = random_bf16(size_t(T * 2 * F), 2.0f);
    std::vector<float> ref(size_t(T * F));
    Tensor ref_t = host_f32(ref, T, F);
    cpu().silu_mul({}, host_f32(gu, T, 2 * F), ref_t);
    // Offset output rows (the scalar kernel) and 16-byte aligned ones (the vectorized kernel
    // where F % 8 == 0).
    for (bool aligned : {false, true}) {
      DeviceMatrix gd = device_bf16(T, 2 * F, gu);
      DeviceMatrix out = aligned ? device_bf16(T, F, {}, F + 8, 8) : device_bf16(T, F, {}, F + 1, 1);
      cuda().silu_mul({}, gd.view, out.view);
      expect_close("silu_mul", fmt::format("T={} F={}{}", T, F, aligned ? " aligned" : ""),
                   download_view(out), ref, 5e-3);
      expect_untouched_outside("silu_mul", out);
    }
  }
}

TEST_F(GpuBackend, GatherRows) {
  for (auto [T, H, R] : {std::tuple<int64_t, int64_t, int64_t>{17, 576, 3}, {1, 33, 1},
                         {300, 4096, 64}}) {
    std::vector<float> x = random_bf16(size_t(T * H));
    std::vector<int32_t> rows(static_cast<size_t>(R));
    std::uniform_int_distribution<int32_t> r(0, int32_t(T - 1));
    for (auto& v : rows) v = r(rng());
    rows.back() = int32_t(T - 1);
    std::vector<float> ref(size_t(R * H));
    Tensor ref_t = host_f32(ref, R, H);
    cpu().gather_rows({}, host_f32(x, T, H), Tensor(rows.data(), DType::i32, {R}), ref_t);
    DeviceMatrix xd = device_bf16(T, H, x), out = device_bf16(R, H, {}, H + 2, 2);
    Buffer rows_buf;
    cuda().gather_rows({}, xd.view, device_i32(rows_buf, rows), out.view);
    expect_close("gather_rows", fmt::format("T={} H={} R={}", T, H, R), download_view(out), ref,
                 0.0);
    expect_untouched_outside("gather_rows", out);
  }
}

TEST_F(GpuBackend, RejectsWrongDtypes) {
  std::vector<float> x(16, 1.0f);
  Tensor host = host_f32(x, 4, 4);
  DeviceMatrix out = device_bf16(4, 4, {});
  EXPECT_THROW(cuda().silu_mul({}, host, out.view), Error);
  DeviceMatrix f = device_f32(4, 8);
  EXPECT_THROW(cuda().silu_mul({}, f.view, out.view), Error);
}

}  // namespace
}  // namespace ridge::backend::gpu_test
