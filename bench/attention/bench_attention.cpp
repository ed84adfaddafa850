// ridge-bench-attention: paged decode attention on Llama decode shapes, every variant first
// checked (outputs poisoned, compared with the general kernel's output) and then timed; achieved
// KV bandwidth (bytes of K and V read / time) against the copy and read-only ceilings measured in
// the same run.
//
//   ridge-bench-attention [--op attention] [--shapes llama2-7b:16x4096,...] [--block-size 16]
//                         [--json FILE] [--overlap MxNxK [--overlap-ctas 0,100,...]]
// Shapes: <model>:<batch>x<context>, model one of llama2-7b (32 KV heads, MHA, hd 128),
// llama3-8b (8 KV heads, group 4, hd 128), smollm2-360m (5 KV heads, group 3, hd 64). Every
// sequence of a shape has the same context; pages are shuffled across the pool.
// Variants: the general kernel (planned split), the decode kernel with 2/3/4-stage rings (planned
// split) and the decode kernel with the fixed split a captured decode graph would use
// (graph_attention_splits); with an fp8 (E4M3) KV cache (the bf16 pools rounded), the decode
// kernel planned and graph-split and the general kernel, checked against the general kernel on bf16
// pools holding the same values, their bandwidth counted on the fp8 bytes. Timing: a CUDA graph of L back-to-back launches rotating over enough
// KV pool sets to exceed 3 x L2, median of 9 replays, per launch (the combine included).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_attention_device.h"
#include "bench_common.h"
#include "ridge/core/error.h"
#include "ridge/kernels/cuda/attention/paged_attention.h"
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/gemm/gemm.h"

namespace {

namespace kn = ridge::kernels;
namespace dv = ridge::bench_attention;
using namespace ridge::bench;  // bench_common.h: DeviceMemory, time_launches, compare_bf16, ...
using json = nlohmann::json;

#define CK(call) RIDGE_CHECK_CUDA(call)

constexpr size_t kWorkspaceBytes = size_t(64) << 20;  // as the CUDA backend's

struct Ceilings {
  double copy_tbps = 0;         // best of the two below (bytes read + written per second)
  double memcpy_tbps = 0;       // cudaMemcpyAsync device to device
  double copy_kernel_tbps = 0;  // 16-byte copy kernel, 8 loads in flight per thread
  double read_tbps = 0;         // read-only kernel (what attention does: it only reads KV)
};

Ceilings measure_ceilings(cudaStream_t s) {
  Ceilings c;
  const size_t bytes = size_t{2} << 30;
  DeviceMemory src(bytes), dst(bytes), sink(16);
  fill_random_bf16(src.bf(), bytes / 2, 1, 1.f, s);
  // Warm-up: ~0.5 s of copies so that clocks have settled.
  for (int i = 0; i < 100; ++i) dv::copy_bytes(dst.ptr, src.ptr, bytes, s);
  CK(cudaStreamSynchronize(s));
  const double us = time_launches(
      [&](int) { CK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, s)); }, 1,
      s);
  c.memcpy_tbps = 2.0 * bytes / (us * 1e-6) / 1e12;
  const double kus = time_launches([&](int) { dv::copy_bytes(dst.ptr, src.ptr, bytes, s); }, 1, s);
  c.copy_kernel_tbps = 2.0 * bytes / (kus * 1e-6) / 1e12;
  const double rus =
      time_launches([&](int) { dv::read_bytes(src.ptr, bytes, sink.as<uint32_t>(), s); }, 1, s);
  c.read_tbps = double(bytes) / (rus * 1e-6) / 1e12;
  c.copy_tbps = std::max(c.memcpy_tbps, c.copy_kernel_tbps);
  return c;
}

struct Model {
  std::string name;
  int nkv, group, hd;
};
const Model kModels[] = {
    {"llama2-7b", 32, 1, 128}, {"llama3-8b", 8, 4, 128}, {"smollm2-360m", 5, 3, 64}};

struct Shape {
  Model model;
  int batch, ctx;
};

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = text.find(',', pos);
    if (next == std::string::npos) next = text.size();
    const std::string item = text.substr(pos, next - pos);
    pos = next + 1;
    const size_t colon = item.find(':'), x = item.find('x', colon == std::string::npos ? 0 : colon);
    RIDGE_CHECK(colon != std::string::npos && x != std::string::npos,
                "shape '{}' is not <model>:<batch>x<context>", item);
    const std::string name = item.substr(0, colon);
    const Model* m = nullptr;
    for (const Model& mm : kModels)
      if (mm.name == name) m = &mm;
    RIDGE_CHECK(m != nullptr, "unknown model '{}' (llama2-7b, llama3-8b, smollm2-360m)", name);
    out.push_back(
        {*m, std::stoi(item.substr(colon + 1, x - colon - 1)), std::stoi(item.substr(x + 1))});
  }
  return out;
}

struct Variant {
  std::string name;
  kn::AttentionPath path;
  int stages;
  bool graph_split;
  bool fp8 = false;  // E4M3 pools (the bf16 pools rounded), checked against the general kernel
                     // on bf16 pools holding the same values
  int fill_ring = -1;   // PagedAttentionArgs::decode_fill_ring: 0 / 1, -1 its default
  int skip_empty = -1;  // PagedAttentionArgs::decode_skip_empty: 0 / 1, -1 its default
};

// One decode token per sequence over bf16 pools (the caller sets the path, splits and fp8).
kn::PagedAttentionArgs decode_args(const Model& m, int B, int bs, int64_t blocks,
                                   int64_t blocks_per_seq, const uint16_t* q, uint16_t* out,
                                   const uint16_t* k_pool, const uint16_t* v_pool,
                                   const int32_t* block_tables, const int32_t* cu_d,
                                   const int32_t* lens_d, const int32_t* host_cu,
                                   const int32_t* host_lens) {
  const int nh = m.nkv * m.group;
  kn::PagedAttentionArgs a;
  a.q = q;
  a.ld_q = nh * m.hd;
  a.out = out;
  a.ld_out = nh * m.hd;
  a.k_pool = k_pool;
  a.v_pool = v_pool;
  a.num_blocks = blocks;
  a.block_size = bs;
  a.num_kv_heads = m.nkv;
  a.num_q_heads = nh;
  a.head_dim = m.hd;
  a.cu_seqlens_q = cu_d;
  a.context_lens = lens_d;
  a.block_tables = block_tables;
  a.max_blocks_per_seq = int(blocks_per_seq);
  a.num_seqs = B;
  a.scale = 1.0f / std::sqrt(float(m.hd));
  a.host_cu_seqlens_q = host_cu;
  a.host_context_lens = host_lens;
  a.max_q_len = 1;
  return a;
}

json run_shape(const Shape& sh, int bs, const Ceilings& c, size_t l2, int sms, cudaStream_t s,
               std::mt19937& rng) {
  const Model& m = sh.model;
  const int nh = m.nkv * m.group, B = sh.batch, ctx = sh.ctx;
  const int64_t blocks_per_seq = (ctx + bs - 1) / bs, blocks = B * blocks_per_seq + 1;
  const size_t pool_elems = size_t(blocks) * bs * m.nkv * m.hd;
  const double kv_bytes = 2.0 * double(B) * ctx * m.nkv * m.hd * 2.0;
  const int sets =
      int(std::clamp<double>(std::ceil(3.0 * double(l2) / (2.0 * pool_elems * 2)), 1, 4));
  std::vector<std::unique_ptr<DeviceMemory>> kp, vp, kp8, vp8, tabs;
  // Set 0's pools rounded to E4M3, as bf16 (exact): the fp8 variants' reference.
  DeviceMemory kq(pool_elems * 2), vq(pool_elems * 2);
  for (int i = 0; i < sets; ++i) {
    kp.push_back(std::make_unique<DeviceMemory>(pool_elems * 2));
    vp.push_back(std::make_unique<DeviceMemory>(pool_elems * 2));
    fill_random_bf16(kp.back()->bf(), pool_elems, 100 + 2 * i, 1.f, s);
    fill_random_bf16(vp.back()->bf(), pool_elems, 101 + 2 * i, 1.f, s);
    kp8.push_back(std::make_unique<DeviceMemory>(pool_elems));
    vp8.push_back(std::make_unique<DeviceMemory>(pool_elems));
    DeviceMemory scratch(pool_elems * 2);
    dv::to_fp8(kp.back()->as<uint16_t>(), kp8.back()->as<uint8_t>(),
               i == 0 ? kq.as<uint16_t>() : scratch.as<uint16_t>(), pool_elems, s);
    dv::to_fp8(vp.back()->as<uint16_t>(), vp8.back()->as<uint8_t>(),
               i == 0 ? vq.as<uint16_t>() : scratch.as<uint16_t>(), pool_elems, s);
    CK(cudaStreamSynchronize(s));
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> table(size_t(B * blocks_per_seq));
    std::copy_n(ids.begin(), table.size(), table.begin());
    tabs.push_back(std::make_unique<DeviceMemory>(table.size() * 4));
    CK(cudaMemcpyAsync(tabs.back()->ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice,
                       s));
    CK(cudaStreamSynchronize(s));
  }
  std::vector<int32_t> cu(size_t(B + 1)), lens(size_t(B), ctx);
  std::iota(cu.begin(), cu.end(), 0);
  DeviceMemory cu_d(cu.size() * 4), lens_d(lens.size() * 4), q(size_t(B) * nh * m.hd * 2),
      out(size_t(B) * nh * m.hd * 2), ref(size_t(B) * nh * m.hd * 2),
      ref8(size_t(B) * nh * m.hd * 2), ws(kWorkspaceBytes);
  CK(cudaMemcpyAsync(cu_d.ptr, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(lens_d.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice, s));
  fill_random_bf16(q.bf(), size_t(B) * nh * m.hd, 7, 1.f, s);
  CK(cudaStreamSynchronize(s));

  auto args_for = [&](const Variant& v, int set, uint16_t* dst) {
    kn::PagedAttentionArgs a = decode_args(
        m, B, bs, blocks, blocks_per_seq, q.as<uint16_t>(), dst,
        v.fp8 ? reinterpret_cast<const uint16_t*>(kp8[size_t(set)]->ptr)
              : kp[size_t(set)]->as<uint16_t>(),
        v.fp8 ? reinterpret_cast<const uint16_t*>(vp8[size_t(set)]->ptr)
              : vp[size_t(set)]->as<uint16_t>(),
        tabs[size_t(set)]->as<int32_t>(), cu_d.as<int32_t>(), lens_d.as<int32_t>(), cu.data(),
        lens.data());
    a.kv_fp8 = v.fp8;
    a.path = v.path;
    a.decode_stages = v.stages;
    if (v.fill_ring >= 0) a.decode_fill_ring = v.fill_ring == 1;
    if (v.skip_empty >= 0) a.decode_skip_empty = v.skip_empty == 1;
    if (v.graph_split) {
      a.fixed_splits =
          kn::graph_attention_splits(B, 1, m.nkv, m.group, m.hd, ctx, sms, kWorkspaceBytes);
      a.host_cu_seqlens_q = nullptr;
      a.host_context_lens = nullptr;
    }
    return a;
  };
  const std::vector<Variant> variants = {
      {"general (before)", kn::AttentionPath::general, 0, false},
      // "no fill": the prologue that leaves the ring's last stage to tile 0's iteration; "no
      // skip": warps compute their tiles past the range too.
      {"decode s2", kn::AttentionPath::decode, 2, false},
      {"decode s2, no fill", kn::AttentionPath::decode, 2, false, false, 0},
      {"decode s2, no skip", kn::AttentionPath::decode, 2, false, false, -1, 0},
      {"decode s3", kn::AttentionPath::decode, 3, false},
      {"decode s3, no fill", kn::AttentionPath::decode, 3, false, false, 0},
      {"decode s4", kn::AttentionPath::decode, 4, false},
      {"decode default, graph split", kn::AttentionPath::decode, 0, true},
      {"decode graph split, no fill", kn::AttentionPath::decode, 0, true, false, 0},
      {"decode graph split, no skip", kn::AttentionPath::decode, 0, true, false, -1, 0},
      {"auto (the backend's pick)", kn::AttentionPath::automatic, 0, false},
      {"fp8 KV decode", kn::AttentionPath::decode, 0, false, true},
      {"fp8 KV decode, no fill", kn::AttentionPath::decode, 0, false, true, 0},
      {"fp8 KV decode, no skip", kn::AttentionPath::decode, 0, false, true, -1, 0},
      {"fp8 KV decode, short ring", kn::AttentionPath::decode, 2, false, true},
      {"fp8 KV decode, deep ring", kn::AttentionPath::decode, 3, false, true},
      {"fp8 KV decode, graph split", kn::AttentionPath::decode, 0, true, true},
      {"fp8 KV general", kn::AttentionPath::general, 0, false, true}};
  {  // the fp8 variants' reference: the general kernel on the rounded values in bf16 pools
    Variant gv = variants[0];
    kn::PagedAttentionArgs r = args_for(gv, 0, ref8.as<uint16_t>());
    r.k_pool = kq.as<uint16_t>();
    r.v_pool = vq.as<uint16_t>();
    kn::paged_attention_bf16(r, kn::plan_paged_attention(r, kn::kAttentionBlocksPerSm * sms, kWorkspaceBytes), ws.ptr, s);
    CK(cudaStreamSynchronize(s));
  }
  const int target = kn::kAttentionBlocksPerSm * sms;  // as the CUDA backend
  json rows = json::array();
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const Variant& v = variants[vi];
    const DeviceMemory& dst = vi == 0 ? ref : out;
    const kn::PagedAttentionArgs a0 = args_for(v, 0, dst.as<uint16_t>());
    const kn::PagedAttentionPlan plan = kn::plan_paged_attention(a0, target, kWorkspaceBytes);
    CK(cudaMemsetAsync(dst.ptr, 0xff, size_t(B) * nh * m.hd * 2, s));  // poison
    kn::paged_attention_bf16(a0, plan, ws.ptr, s);
    CK(cudaStreamSynchronize(s));
    const Diff d = compare_bf16(dst.bf(), (v.fp8 ? ref8 : ref).bf(), size_t(B) * nh * m.hd, s);
    const double bytes = v.fp8 ? kv_bytes / 2 : kv_bytes;  // E4M3: one byte per element
    const bool ok = d.non_finite == 0 && d.rel < 1e-2;
    json row = {{"model", m.name},
                {"batch", B},
                {"context", ctx},
                {"block_size", bs},
                {"nkv", m.nkv},
                {"group", m.group},
                {"head_dim", m.hd},
                {"variant", v.name},
                {"kernel", plan.decode ? "decode" : "general"},
                {"stages", plan.decode ? plan.decode_stages : 0},
                {"splits", plan.num_splits},
                {"fixed_splits", a0.fixed_splits},
                {"kv_bytes", bytes},
                {"kv_dtype", v.fp8 ? "fp8_e4m3" : "bf16"},
                {"rel_vs_general", d.rel},
                {"non_finite", d.non_finite},
                {"ok", ok}};
    if (!ok) {
      std::printf("%-13s %3dx%-6d %-28s FAILED CHECK (rel %.2e, %llu non-finite)\n", m.name.c_str(),
                  B, ctx, v.name.c_str(), d.rel, d.non_finite);
      rows.push_back(row);
      continue;
    }
    // Timed into `out` (variant 0 too): the other sets' pools give other outputs, and `ref` must
    // stay set 0's for the variants after it.
    std::vector<kn::PagedAttentionArgs> per_set;
    for (int i = 0; i < sets; ++i) per_set.push_back(args_for(v, i, out.as<uint16_t>()));
    const double us = time_launches(
        [&](int r) { kn::paged_attention_bf16(per_set[size_t(r)], plan, ws.ptr, s); }, sets, s);
    const double tbps = bytes / (us * 1e-6) / 1e12;
    row["us"] = us;
    row["kv_tbps"] = tbps;
    row["pct_of_copy"] = 100.0 * tbps / c.copy_tbps;
    row["pct_of_read"] = 100.0 * tbps / c.read_tbps;
    std::printf(
        "%-13s %3dx%-6d %-28s %-7s s%d splits %3d %9.1f us %6.2f TB/s %5.1f %% copy "
        "%5.1f %% read  (rel %.1e)\n",
        m.name.c_str(), B, ctx, v.name.c_str(), plan.decode ? "decode" : "general",
        plan.decode ? plan.decode_stages : 0, plan.num_splits, us, tbps, 100.0 * tbps / c.copy_tbps,
        100.0 * tbps / c.read_tbps, d.rel);
    rows.push_back(row);
  }
  return rows;
}

// Overlap (--overlap MxNxK): can decode attention (memory-bound) and a GEMM (compute-bound) run
// at once? The shape's attention (planned as the backend plans it) on one stream, the sm90 GEMM
// with its persistent grid capped at each of `ctas` CTAs (0: one per SM) on another: La
// attention launches and Lg GEMM launches alone, then both streams started together; the
// overlap gain is (alone + alone) / together. Plain launch loops timed with events.
json run_overlap(const Shape& sh, int bs, const std::string& gemm_shape,
                 const std::vector<int>& ctas, int sms, cudaStream_t s) {
  const Model& m = sh.model;
  const int nh = m.nkv * m.group, B = sh.batch, ctx = sh.ctx;
  int GM = 0, GN = 0, GK = 0;
  RIDGE_CHECK(std::sscanf(gemm_shape.c_str(), "%dx%dx%d", &GM, &GN, &GK) == 3,
              "--overlap '{}' is not MxNxK", gemm_shape);
  const int64_t blocks_per_seq = (ctx + bs - 1) / bs, blocks = B * blocks_per_seq + 1;
  const size_t pool_elems = size_t(blocks) * bs * m.nkv * m.hd;
  DeviceMemory kp(pool_elems * 2), vp(pool_elems * 2), tab(size_t(B * blocks_per_seq) * 4),
      cu_d(size_t(B + 1) * 4), lens_d(size_t(B) * 4), q(size_t(B) * nh * m.hd * 2),
      out(size_t(B) * nh * m.hd * 2), ws(kWorkspaceBytes);
  fill_random_bf16(kp.bf(), pool_elems, 300, 1.f, s);
  fill_random_bf16(vp.bf(), pool_elems, 301, 1.f, s);
  fill_random_bf16(q.bf(), size_t(B) * nh * m.hd, 302, 1.f, s);
  std::vector<int32_t> table(size_t(B * blocks_per_seq)), cu(size_t(B + 1)), lens(size_t(B), ctx);
  std::iota(table.begin(), table.end(), 0);
  std::iota(cu.begin(), cu.end(), 0);
  CK(cudaMemcpyAsync(tab.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(cu_d.ptr, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(lens_d.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice, s));
  DeviceMemory gx(size_t(GM) * GK * 2), gw(size_t(GN) * GK * 2), gy(size_t(GM) * GN * 2);
  fill_random_bf16(gx.bf(), size_t(GM) * GK, 303, 1.f, s);
  fill_random_bf16(gw.bf(), size_t(GN) * GK, 304, 0.05f, s);
  CK(cudaStreamSynchronize(s));
  const kn::PagedAttentionArgs a =
      decode_args(m, B, bs, blocks, blocks_per_seq, q.as<uint16_t>(), out.as<uint16_t>(),
                  kp.as<uint16_t>(), vp.as<uint16_t>(), tab.as<int32_t>(), cu_d.as<int32_t>(),
                  lens_d.as<int32_t>(), cu.data(), lens.data());
  const kn::PagedAttentionPlan plan = kn::plan_paged_attention(a, kn::kAttentionBlocksPerSm * sms, kWorkspaceBytes);

  cudaStream_t sg;
  CK(cudaStreamCreateWithFlags(&sg, cudaStreamNonBlocking));
  cudaEvent_t start, g_done, end;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&g_done));
  CK(cudaEventCreate(&end));
  auto attention = [&] { kn::paged_attention_bf16(a, plan, ws.ptr, s); };
  auto gemm = [&](int max_ctas) {
    kn::Sm90GemmOptions o;
    o.max_ctas = max_ctas;
    kn::gemm_bf16_sm90(gx.as<kn::bf16>(), gw.as<kn::bf16>(), gy.as<kn::bf16>(), GM, GN, GK, sg,
                       nullptr, o);
  };
  // Median of 5 of: La attention launches on s and Lg GEMM launches on sg, started together.
  auto together = [&](int La, int Lg, int max_ctas) {
    std::vector<double> t;
    for (int r = 0; r < 6; ++r) {
      CK(cudaEventRecord(start, s));
      CK(cudaStreamWaitEvent(sg, start, 0));
      for (int i = 0; i < La; ++i) attention();
      for (int i = 0; i < Lg; ++i) gemm(max_ctas);
      CK(cudaEventRecord(g_done, sg));
      CK(cudaStreamWaitEvent(s, g_done, 0));
      CK(cudaEventRecord(end, s));
      CK(cudaEventSynchronize(end));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, start, end));
      if (r > 0) t.push_back(1000.0 * ms);
    }
    return median(t);
  };
  const int La = 10;
  const double t_a1 = together(1, 0, 0);
  const double t_g1 = together(0, 1, 0);
  const int Lg = std::clamp(int(std::lround(La * t_a1 / std::max(t_g1, 1.0))), 1, 400);
  std::printf("\noverlap: %s %dx%d attention (%s, %d splits) %d launches, GEMM %dx%dx%d (sm90) %d "
              "launches\n",
              m.name.c_str(), B, ctx, plan.decode ? "decode" : "general", plan.num_splits, La, GM,
              GN, GK, Lg);
  const double t_a = together(La, 0, 0);
  json rows = json::array();
  for (int c : ctas) {
    const double t_g = together(0, Lg, c), t_ab = together(La, Lg, c);
    std::printf("  GEMM CTAs %4s: attention alone %9.1f us, GEMM alone %9.1f us, together "
                "%9.1f us: %.3fx of the sum's speed, %.3f of the longer one\n",
                c == 0 ? "all" : std::to_string(c).c_str(), t_a, t_g, t_ab, (t_a + t_g) / t_ab,
                t_ab / std::max(t_a, t_g));
    rows.push_back({{"model", m.name}, {"batch", B}, {"context", ctx}, {"gemm", gemm_shape},
                    {"gemm_ctas", c}, {"attention_launches", La}, {"gemm_launches", Lg},
                    {"attention_alone_us", t_a}, {"gemm_alone_us", t_g}, {"together_us", t_ab},
                    {"ok", true}});
  }
  cudaEventDestroy(start);
  cudaEventDestroy(g_done);
  cudaEventDestroy(end);
  CK(cudaStreamDestroy(sg));
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ridge paged decode attention benchmark: KV bandwidth vs the copy ceiling"};
  std::string op = "attention",
              shapes =
                  "llama2-7b:16x4096,llama2-7b:1x32768,llama2-7b:64x512,llama3-8b:16x4096,"
                  "llama3-8b:1x32768,llama3-8b:64x512,llama3-8b:64x4096,smollm2-360m:16x4096",
              json_path;
  int block_size = 16;
  app.add_option("--op", op, "operation (attention)");
  app.add_option("--shapes", shapes, "comma-separated <model>:<batch>x<context>");
  app.add_option("--block-size", block_size, "KV block size (positions per page)");
  app.add_option("--json", json_path, "write results as JSON here");
  std::string overlap;
  std::vector<int> overlap_ctas = {0, 116, 100, 88, 66};
  app.add_option("--overlap", overlap,
                 "MxNxK: instead of the variants, each shape's attention run at once with this "
                 "sm90 GEMM on a second stream (can they overlap?)");
  app.add_option("--overlap-ctas", overlap_ctas,
                 "the GEMM's persistent grid sizes to try with --overlap (0: one CTA per SM)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    RIDGE_CHECK(op == "attention", "--op {}: this binary runs attention", op);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "no CUDA GPU present\n");
      return 2;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    kn::init_paged_attention();
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    json out;
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::string cmd;
    for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
    const char* rev = std::getenv("RIDGE_GIT_REV");
    out["meta"] = {{"command", cmd},
                   {"git_revision", rev ? rev : "unknown"},
                   {"date", date},
                   {"gpu", prop.name},
                   {"sms", prop.multiProcessorCount},
                   {"l2_bytes", prop.l2CacheSize},
                   {"driver", shell("nvidia-smi --query-gpu=driver_version --format=csv,noheader")},
                   {"gpu_state_before", gpu_state()}};
    std::printf("%s, %d SMs, L2 %d MB; state: %s\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, gpu_state().c_str());
    const Ceilings c = measure_ceilings(s);
    out["ceilings"] = {{"copy_tbps", c.copy_tbps},
                       {"memcpy_tbps", c.memcpy_tbps},
                       {"copy_kernel_tbps", c.copy_kernel_tbps},
                       {"read_tbps", c.read_tbps}};
    std::printf(
        "ceilings: copy %.2f TB/s (read+write; cudaMemcpy %.2f, copy kernel %.2f), "
        "read-only %.2f TB/s\n",
        c.copy_tbps, c.memcpy_tbps, c.copy_kernel_tbps, c.read_tbps);
    std::mt19937 rng(12345);
    json rows = json::array();
    for (const Shape& sh : parse_shapes(shapes))
      for (auto& r : overlap.empty()
                         ? run_shape(sh, block_size, c, size_t(prop.l2CacheSize),
                                     prop.multiProcessorCount, s, rng)
                         : run_overlap(sh, block_size, overlap, overlap_ctas,
                                       prop.multiProcessorCount, s))
        rows.push_back(r);
    out["results"] = rows;
    out["meta"]["gpu_state_after"] = gpu_state();
    std::printf("state after: %s\n", gpu_state().c_str());
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      RIDGE_CHECK(f != nullptr, "cannot write {}", json_path);
      std::fputs(out.dump(1).c_str(), f);
      std::fclose(f);
    }
    CK(cudaStreamDestroy(s));
    bool all_ok = true;
    for (const auto& r : rows) all_ok = all_ok && r["ok"].get<bool>();
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
