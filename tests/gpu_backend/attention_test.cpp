// Paged attention, CUDA vs CPU reference: decode-only, prefill-only, chunked prefill and mixed
// batches; GQA ratios 1/3/4/8; head dims 64/128; block sizes 16/32/64; lengths on and across page
// boundaries; shuffled block tables; q as a strided view of a qkv buffer; an engine-like decode
// step with padding rows (kv_store skips slot -1, attention over context 1 and a zero table).
// Decode batches take the decode kernel through the backend's automatic dispatch; the kernels'
// forced paths, fixed splits and graph replay are in attention_kernels_test.cpp. The
// GpuBackendLarge cases (a 32k-token decode, a 1k-token prefill, batch sweeps) are left out of
// the sanitizer runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "harness.h"
#include "ridge/backend/factory.h"
#include "ridge/core/error.h"
#ifdef RIDGE_TEST_ATTENTION_KERNELS  // a CUDA build: the backend's own accessors
#include "ridge/backend/cuda/cuda_backend.h"
#endif

namespace ridge::backend::gpu_test {
namespace {


struct Seq {
  int32_t q_len, ctx;
};

// perf_iters > 0 also times the CUDA call (host clock around perf_iters calls after a warm-up,
// so launch overhead is included) and prints the KV bytes it read per second.
// kv: bf16 pools, or fp8_e4m3 pools (E4M3 bytes of normal(0, 2) values: some in the subnormals,
// a few past 8), both backends attending over the same bytes.
void run_attention(const std::vector<Seq>& seqs, int64_t nkv, int64_t group, int64_t hd,
                   int64_t bs, int perf_iters = 0, DType kv = DType::bf16) {
  const int64_t nh = nkv * group, S = int64_t(seqs.size());
  std::vector<int32_t> cu{0}, ctx;
  int64_t max_blocks = 1, total_blocks = 3;  // a few spare blocks nobody owns
  for (const Seq& s : seqs) {
    cu.push_back(cu.back() + s.q_len);
    ctx.push_back(s.ctx);
    max_blocks = std::max<int64_t>(max_blocks, (s.ctx + bs - 1) / bs);
    total_blocks += (s.ctx + bs - 1) / bs;
  }
  const int64_t T = cu.back();
  // Shuffled pages; unused table entries hold -1 (never read).
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng());
  std::vector<int32_t> tables(size_t(S * max_blocks), -1);
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < (seqs[size_t(s)].ctx + bs - 1) / bs; ++b)
      tables[size_t(s * max_blocks + b)] = ids[next++];

  const int64_t width = nkv * hd, pool_rows = total_blocks * bs;
  const size_t pool_n = size_t(pool_rows * width), elem = kv == DType::fp8_e4m3 ? 1 : 2;
  std::vector<uint8_t> hk(pool_n * elem), hv(pool_n * elem);  // the pools' bytes
  if (kv == DType::fp8_e4m3) {
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (size_t i = 0; i < pool_n; ++i) hk[i] = f32_to_fp8e4m3(nd(rng())), hv[i] = f32_to_fp8e4m3(nd(rng()));
  } else {
    const std::vector<uint16_t> bk = to_bf16_bits(random_bf16(pool_n)), bv = to_bf16_bits(random_bf16(pool_n));
    std::memcpy(hk.data(), bk.data(), hk.size());
    std::memcpy(hv.data(), bv.data(), hv.size());
  }
  std::vector<float> q = random_bf16(size_t(T * nh * hd));

  AttentionMeta meta;
  meta.num_seqs = int32_t(S);
  meta.max_blocks_per_seq = int32_t(max_blocks);
  for (const Seq& s : seqs) {
    meta.max_q_len = std::max(meta.max_q_len, s.q_len);
    meta.max_context_len = std::max(meta.max_context_len, s.ctx);
  }
  meta.host_cu_seqlens_q = cu.data();
  meta.host_context_lens = ctx.data();
  meta.host_block_tables = tables.data();
  const float scale = 1.0f / std::sqrt(float(hd));

  // CPU reference over the same bf16 pools.
  AttentionMeta cpu_meta = meta;
  cpu_meta.cu_seqlens_q = Tensor(cu.data(), DType::i32, {S + 1});
  cpu_meta.context_lens = Tensor(ctx.data(), DType::i32, {S});
  cpu_meta.block_tables = Tensor(tables.data(), DType::i32, {S, max_blocks});
  const KvLayer cpu_kv{Tensor(hk.data(), kv, {total_blocks, bs, nkv, hd}),
                       Tensor(hv.data(), kv, {total_blocks, bs, nkv, hd})};
  std::vector<float> ref(size_t(T * nh * hd));
  Tensor ref_t = host_f32(ref, T, nh * hd);
  cpu().attention({}, host_f32(q, T, nh * hd), cpu_kv, cpu_meta, scale, ref_t);

  // GPU: q is the head of a qkv row (row stride nh*hd + 2*nkv*hd), out is poisoned.
  DeviceMatrix qd = device_bf16(T, nh * hd, q, nh * hd + 2 * width, 0);
  Buffer kd = cuda().allocate(hk.size()), vd = cuda().allocate(hv.size());
  cuda().upload({}, kd.data(), hk.data(), hk.size());
  cuda().upload({}, vd.data(), hv.data(), hv.size());
  DeviceMatrix out = device_bf16(T, nh * hd, {});
  Buffer cu_b, ctx_b, tab_b;
  AttentionMeta dev_meta = meta;
  dev_meta.cu_seqlens_q = device_i32(cu_b, cu);
  dev_meta.context_lens = device_i32(ctx_b, ctx);
  dev_meta.block_tables = device_i32(tab_b, tables);
  dev_meta.block_tables.shape = {S, max_blocks};
  dev_meta.block_tables.ndim = 2;
  dev_meta.block_tables.stride = {max_blocks, 1};
  const KvLayer pools{Tensor(kd.data(), kv, {total_blocks, bs, nkv, hd}, Device::cuda),
                      Tensor(vd.data(), kv, {total_blocks, bs, nkv, hd}, Device::cuda)};
  cuda().attention({}, qd.view, pools, dev_meta, scale, out.view);
  std::string lens;
  for (size_t i = 0; i < seqs.size() && i < 6; ++i)
    lens += fmt::format("{}{}/{}", i ? "," : "", seqs[i].q_len, seqs[i].ctx);
  if (seqs.size() > 6) lens += fmt::format(",..({} seqs)", seqs.size());
  const std::string what = fmt::format("{}hd={} nkv={} g={} bs={} q/ctx={}",
                                       kv == DType::fp8_e4m3 ? "fp8 KV " : "", hd, nkv, group, bs, lens);
  expect_close("attention", what, download_view(out), ref, 1e-2);
  expect_untouched_outside("attention", out);
  if (perf_iters > 0) {
    for (int i = 0; i < 3; ++i) cuda().attention({}, qd.view, pools, dev_meta, scale, out.view);
    cuda().synchronize({});
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < perf_iters; ++i)
      cuda().attention({}, qd.view, pools, dev_meta, scale, out.view);
    cuda().synchronize({});
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        perf_iters;
    double kv_bytes = 0;  // K and V read once per sequence, causal prefill counted as the full context
    for (const Seq& sq : seqs) kv_bytes += 2.0 * double(sq.ctx) * double(width) * double(elem);
    std::printf("PERF attention %-58s %9.1f us/call  %7.1f GB/s of KV\n", what.c_str(), us,
                kv_bytes / us * 1e-3);
  }
}

TEST_F(GpuBackend, AttentionDecode) {
  for (int64_t hd : {64, 128})
    for (int64_t group : {1, 4, 8})
      for (int64_t bs : {16, 32, 64}) {
        const int64_t nkv = group == 1 ? 4 : 2;
        run_attention({{1, 1}, {1, int32_t(bs)}, {1, int32_t(bs) + 1}, {1, 100}, {1, 777}},
                      nkv, group, hd, bs);
      }
}

TEST_F(GpuBackend, AttentionPrefill) {
  for (int64_t hd : {64, 128})
    for (int64_t group : {1, 4, 8})
      for (int64_t bs : {16, 64})
        run_attention({{1, 1}, {37, 37}, {int32_t(bs) * 2 + 1, int32_t(bs) * 2 + 1}, {130, 130}},
                      2, group, hd, bs);
}

TEST_F(GpuBackend, AttentionChunkedPrefillAndMixed) {
  for (int64_t hd : {64, 128})
    for (int64_t group : {1, 4, 8})
      for (int64_t bs : {16, 32, 64})
        // a later prefill chunk, decodes, a fresh prefill, a chunk ending on a page boundary
        run_attention({{50, 300}, {1, 65}, {19, 19}, {1, 1000}, {int32_t(bs), 3 * int32_t(bs)}},
                      2, group, hd, bs);
}

TEST_F(GpuBackend, AttentionManyDecodes) {
  std::vector<Seq> seqs;
  std::uniform_int_distribution<int32_t> len(1, 2000);
  for (int i = 0; i < 70; ++i) seqs.push_back({1, len(rng())});
  run_attention(seqs, 8, 4, 128, 16);
  run_attention(seqs, 2, 8, 64, 32);
}

// Mixed batches as the scheduler makes them (decodes first, then prefill chunks): with enough
// decodes to fill the GPU they go to the decode kernel and the chunks to the general one, two
// launches over disjoint sequences. In the second case the decode part fills 4 x SMs unsplit
// while the lone chunk splits its 3000 positions: the combine covers only the later sequences'
// rows (from cu_seqlens_q[0]), not the decodes' rows written before it.
#ifdef RIDGE_TEST_ATTENTION_KERNELS
TEST_F(GpuBackend, AttentionMixedDecodesFirstTwoLaunches) {
  auto* be = dynamic_cast<CudaBackend*>(&cuda());
  ASSERT_NE(be, nullptr);
  std::uniform_int_distribution<int32_t> len(1, 2000);
  {
    std::vector<Seq> seqs;
    for (int i = 0; i < 70; ++i) seqs.push_back({1, len(rng())});
    for (const Seq& p : {Seq{40, 40}, Seq{200, 900}, Seq{17, 1500}}) seqs.push_back(p);
    run_attention(seqs, 4, 1, 128, 16);
    EXPECT_EQ(be->last_attention_parts(), 2);
    run_attention(seqs, 2, 8, 64, 32);
    EXPECT_EQ(be->last_attention_parts(), 2);
    run_attention(seqs, 4, 1, 128, 24);  // not a power of two: the general kernel takes all
    EXPECT_EQ(be->last_attention_parts(), 1);
  }
  {
    std::vector<Seq> seqs;
    for (int i = 0; i < 70; ++i) seqs.push_back({1, len(rng())});
    seqs.push_back({16, 3000});
    run_attention(seqs, 8, 4, 128, 16);
    EXPECT_EQ(be->last_attention_parts(), 2);
    EXPECT_GT(be->last_attention_splits(), 1);
  }
  {
    // Too few decodes to fill the GPU alone: one general launch.
    std::vector<Seq> seqs = {{1, 300}, {1, 77}, {64, 64}};
    run_attention(seqs, 4, 1, 128, 16);
    EXPECT_EQ(be->last_attention_parts(), 1);
  }
}
#endif

// fp8 (E4M3) KV pools (both kernels convert each landed tile exactly to f16 and run f16 MMAs):
// against the CPU backend attending over the same bytes.
TEST_F(GpuBackend, AttentionFp8Kv) {
  for (int64_t hd : {64, 128})
    for (int64_t group : {1, 4, 8})
      for (int64_t bs : {16, 32}) {
        const int64_t nkv = group == 1 ? 4 : 2;
        // Decodes (the decode kernel; q_len x group = 16 rows in one tile for group 8, q_len 2),
        // with a context past 1024 (the deep ring at head dim 128) and without (the short one).
        const int32_t q2 = group == 8 ? 2 : 1;
        run_attention({{1, 1}, {1, int32_t(bs)}, {1, int32_t(bs) + 1}, {q2, 100}, {1, 777},
                       {1, 2000}},
                      nkv, group, hd, bs, 0, DType::fp8_e4m3);
        run_attention({{1, 3}, {1, int32_t(bs) - 1}, {q2, 64}, {1, 65}, {1, 1000}}, nkv, group,
                      hd, bs, 0, DType::fp8_e4m3);
        // Prefill chunks and a mixed batch (the general kernel).
        run_attention({{50, 300}, {1, 65}, {19, 19}, {1, 1000}, {int32_t(bs), 3 * int32_t(bs)}},
                      nkv, group, hd, bs, 0, DType::fp8_e4m3);
      }
  // A block size that is not a power of two (the general kernel for every batch), and a mixed
  // batch whose 70 leading decodes fill the SMs (two launches: decode kernel, general kernel).
  run_attention({{1, 40}, {37, 37}, {1, 300}}, 2, 4, 128, 24, 0, DType::fp8_e4m3);
  std::vector<Seq> mixed;
  std::uniform_int_distribution<int32_t> len(1, 1500);
  for (int i = 0; i < 70; ++i) mixed.push_back({1, len(rng())});
  mixed.push_back({40, 40});
  mixed.push_back({17, 900});
  run_attention(mixed, 4, 1, 128, 16, 0, DType::fp8_e4m3);
}

// Enough blocks without splitting: the single-split path writes out directly.
TEST_F(GpuBackend, AttentionManyPrefills) {
  std::vector<Seq> seqs;
  std::uniform_int_distribution<int32_t> len(1, 40);
  for (int i = 0; i < 100; ++i) {
    const int32_t q = len(rng());
    seqs.push_back({q, q + (i % 3) * len(rng())});
  }
  for (int64_t hd : {64, 128}) run_attention(seqs, 4, 4, hd, 16);
}

// SmolLM2's grouping (9 query heads over 3 KV heads, hd 64).
TEST_F(GpuBackend, AttentionDecodeGroupThree) {
  for (int64_t bs : {16, 32, 64})
    run_attention({{1, 1}, {1, int32_t(bs) - 1}, {1, int32_t(bs)}, {1, 2 * int32_t(bs) + 1},
                   {1, 900}, {3, 50}},
                  3, 3, 64, bs);
}

// One engine decode step of a batch bucket: 6 sequences and 2 padding rows (context 1, q_len 1,
// block table of zeros, KV slot -1). kv_store writes the 6 new K/V rows and skips the padding
// ones; the pools must equal the CPU's bit for bit, then attention reads them.
TEST_F(GpuBackend, AttentionDecodeStepWithPaddingRows) {
  for (int64_t hd : {64, 128}) {
    const int64_t nkv = 2, group = 4, nh = nkv * group, bs = 16, width = nkv * hd;
    const std::vector<int32_t> lens = {5, 16, 17, 40, 100, 1, 1, 1};  // after the store
    const std::vector<bool> padding = {false, false, false, false, false, false, true, true};
    const int64_t S = int64_t(lens.size()), max_blocks = 8, blocks = 24, T = S;
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng());
    std::vector<int32_t> tables(size_t(S * max_blocks), -1), cu(size_t(S + 1), 0),
        slots(size_t(S), 0);
    size_t next = 0;
    for (int64_t s = 0; s < S; ++s) {
      cu[size_t(s + 1)] = int32_t(s + 1);
      if (padding[size_t(s)]) {
        std::fill_n(tables.begin() + s * max_blocks, max_blocks, 0);
        slots[size_t(s)] = -1;
        continue;
      }
      for (int64_t b = 0; b < (lens[size_t(s)] + bs - 1) / bs; ++b)
        tables[size_t(s * max_blocks + b)] = ids[next++];
      const int32_t pos = lens[size_t(s)] - 1;
      slots[size_t(s)] = tables[size_t(s * max_blocks + pos / bs)] * int32_t(bs) + pos % int32_t(bs);
    }
    const int64_t pool_rows = blocks * bs;
    std::vector<float> pk = random_bf16(size_t(pool_rows * width)), pv = random_bf16(size_t(pool_rows * width));
    std::vector<float> k = random_bf16(size_t(T * width)), v = random_bf16(size_t(T * width));
    std::vector<float> q = random_bf16(size_t(T * nh * hd));
    const float scale = 1.0f / std::sqrt(float(hd));
    AttentionMeta meta;
    meta.num_seqs = int32_t(S);
    meta.max_q_len = 1;
    meta.max_context_len = 100;
    meta.max_blocks_per_seq = int32_t(max_blocks);
    meta.host_cu_seqlens_q = cu.data();
    meta.host_context_lens = lens.data();
    meta.host_block_tables = tables.data();

    // CPU: store, then attend.
    std::vector<uint16_t> hk = to_bf16_bits(pk), hv = to_bf16_bits(pv);
    KvLayer cpu_kv{Tensor(hk.data(), DType::bf16, {blocks, bs, nkv, hd}),
                   Tensor(hv.data(), DType::bf16, {blocks, bs, nkv, hd})};
    cpu().kv_store({}, host_f32(k, T, width), host_f32(v, T, width),
                   Tensor(slots.data(), DType::i32, {T}), cpu_kv);
    AttentionMeta cpu_meta = meta;
    std::vector<int32_t> lens_copy = lens;
    cpu_meta.cu_seqlens_q = Tensor(cu.data(), DType::i32, {S + 1});
    cpu_meta.context_lens = Tensor(lens_copy.data(), DType::i32, {S});
    cpu_meta.block_tables = Tensor(tables.data(), DType::i32, {S, max_blocks});
    std::vector<float> ref(size_t(T * nh * hd));
    Tensor ref_t = host_f32(ref, T, nh * hd);
    cpu().attention({}, host_f32(q, T, nh * hd), cpu_kv, cpu_meta, scale, ref_t);

    // GPU: the same step.
    DeviceMatrix kd = device_bf16(pool_rows, width, pk), vd = device_bf16(pool_rows, width, pv);
    DeviceMatrix knew = device_bf16(T, width, k), vnew = device_bf16(T, width, v);
    DeviceMatrix qd = device_bf16(T, nh * hd, q), out = device_bf16(T, nh * hd, {});
    KvLayer kv{Tensor(kd.view.data, DType::bf16, {blocks, bs, nkv, hd}, Device::cuda),
               Tensor(vd.view.data, DType::bf16, {blocks, bs, nkv, hd}, Device::cuda)};
    Buffer slot_b, cu_b, ctx_b, tab_b;
    cuda().kv_store({}, knew.view, vnew.view, device_i32(slot_b, slots), kv);
    AttentionMeta dev_meta = meta;
    dev_meta.cu_seqlens_q = device_i32(cu_b, cu);
    dev_meta.context_lens = device_i32(ctx_b, lens);
    dev_meta.block_tables = device_i32(tab_b, tables);
    dev_meta.block_tables.shape = {S, max_blocks};
    dev_meta.block_tables.ndim = 2;
    dev_meta.block_tables.stride = {max_blocks, 1};
    cuda().attention({}, qd.view, kv, dev_meta, scale, out.view);
    std::vector<float> rk(hk.size()), rv(hv.size());
    for (size_t i = 0; i < hk.size(); ++i) rk[i] = bf16_to_f32(hk[i]), rv[i] = bf16_to_f32(hv[i]);
    const std::string what = fmt::format("hd={} nkv={} g={} bs={} 6 decodes + 2 padding", hd, nkv,
                                         group, bs);
    expect_close("kv_store", what + " K pool (slot -1 skipped)", download_view(kd), rk, 0.0);
    expect_close("kv_store", what + " V pool (slot -1 skipped)", download_view(vd), rv, 0.0);
    expect_close("attention", what, download_view(out), ref, 1e-2);
    expect_untouched_outside("attention", out);
  }
}

TEST_F(GpuBackend, AttentionGroupSixteen) { run_attention({{3, 40}, {1, 200}}, 1, 16, 128, 16); }

TEST_F(GpuBackendLarge, AttentionLongDecode32k) {
  run_attention({{1, 32768}}, 8, 4, 128, 16, 50);  // Llama-3-8B shape: split across blocks
  run_attention({{1, 32000}, {1, 5}}, 4, 8, 64, 64, 50);
}

TEST_F(GpuBackendLarge, AttentionDecodeBatchPerf) {
  std::vector<Seq> seqs(64, Seq{1, 4096});
  run_attention(seqs, 8, 4, 128, 16, 20);  // 64 decodes of 4k context, Llama-3-8B heads
}

// Decode batches of 1..64 sequences at contexts up to 4096 (GQA 4 and MHA), through the backend.
TEST_F(GpuBackendLarge, AttentionDecodeBatchSizes) {
  for (int batch : {1, 3, 16, 64}) {
    std::uniform_int_distribution<int32_t> len(1, batch == 64 ? 2048 : 4096);
    std::vector<Seq> seqs;
    for (int i = 0; i < batch; ++i) seqs.push_back({1, len(rng())});
    run_attention(seqs, 8, 4, 128, 16);
    run_attention(seqs, 8, 1, 128, 32);
  }
}

TEST_F(GpuBackendLarge, AttentionLongPrefill) {
  run_attention({{1024, 1024}}, 8, 4, 128, 16, 20);
  run_attention({{512, 4096}, {1, 3000}, {1, 1}}, 8, 4, 128, 32);
}

}  // namespace
}  // namespace ridge::backend::gpu_test
