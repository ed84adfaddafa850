// Paged attention kernels called directly (kernels/cuda/attention, not through the backend):
// the decode kernel and the general kernel forced on the same batches; KV splits planned from
// the host mirrors and fixed (graph mode, no host mirrors given), including far more splits than
// a context needs (empty splits that the combine must skip); the decode kernel's 2/3/4-stage
// rings; padding sequences as the engine adds them to fill a batch bucket (context 1, q_len 1, a
// block table of zeros); q_len * group up to 16 in one decode tile; and graph mode itself: a
// fixed-split launch captured once as a CUDA graph, then replayed for other context lengths,
// block tables and queries. Before every run the output and the split workspace are poisoned
// (NaN); every output is compared with the CPU backend (any NaN fails) and nothing outside the
// output view may change. GpuBackendLarge cases (sweeps, 32k contexts, batch 64) are left out of
// the sanitizer runs.
#include "harness.h"

#ifdef RIDGE_TEST_ATTENTION_KERNELS

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "ridge/kernels/cuda/attention/paged_attention.h"

namespace ridge::backend::gpu_test {
namespace {

namespace kn = ridge::kernels;

constexpr size_t kWorkspaceBytes = size_t(64) << 20;  // as the CUDA backend's

struct DSeq {
  int32_t q_len = 1, ctx = 1;
  bool padding = false;  // the engine's filler: context 1, q_len 1, block table of zeros
};
DSeq pad() {
  return {1, 1, true};
}

// KV pools of one shape (random bf16 in every block, block 0 included: padding reads it).
struct Pools {
  int64_t nkv = 0, group = 0, hd = 0, bs = 0, blocks = 0, max_blocks = 0;
  std::vector<float> k, v;
  std::vector<uint16_t> kb, vb;
  int64_t nh() const { return nkv * group; }
  int64_t width() const { return nkv * hd; }
};

Pools make_pools(int64_t nkv, int64_t group, int64_t hd, int64_t bs, int64_t blocks,
                 int64_t max_blocks) {
  Pools p{nkv, group, hd, bs, blocks, max_blocks, {}, {}, {}, {}};
  p.k = random_bf16(size_t(blocks * bs * nkv * hd));
  p.v = random_bf16(size_t(blocks * bs * nkv * hd));
  p.kb = to_bf16_bits(p.k);
  p.vb = to_bf16_bits(p.v);
  return p;
}

// One batch over the pools: cu_seqlens, contexts, shuffled block tables (entries past a context
// hold -1, never used; padding rows are all 0), queries, and the CPU reference output.
struct Batch {
  std::vector<DSeq> seqs;
  int64_t S = 0, T = 0;
  int32_t max_q_len = 0;
  std::vector<int32_t> cu{0}, ctx, tables;
  std::vector<float> q, ref;
  std::string label;
};

Batch make_batch(const Pools& p, const std::vector<DSeq>& seqs) {
  Batch b;
  b.seqs = seqs;
  b.S = int64_t(seqs.size());
  std::vector<int32_t> ids(size_t(p.blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng());
  b.tables.assign(size_t(b.S * p.max_blocks), -1);
  size_t next = 0;
  for (int64_t s = 0; s < b.S; ++s) {
    const DSeq& d = seqs[size_t(s)];
    b.cu.push_back(b.cu.back() + d.q_len);
    b.ctx.push_back(d.ctx);
    b.max_q_len = std::max(b.max_q_len, d.q_len);
    const int64_t need = (d.ctx + p.bs - 1) / p.bs;
    if (d.padding) {
      std::fill_n(b.tables.begin() + s * p.max_blocks, p.max_blocks, 0);
      continue;
    }
    if (need > p.max_blocks || next + size_t(need) > ids.size()) {
      ADD_FAILURE() << "test batch needs more blocks than the pools have";
      return b;
    }
    for (int64_t i = 0; i < need; ++i) b.tables[size_t(s * p.max_blocks + i)] = ids[next++];
  }
  b.T = b.cu.back();
  b.q = random_bf16(size_t(b.T * p.nh() * p.hd));
  // CPU reference.
  AttentionMeta meta;
  meta.num_seqs = int32_t(b.S);
  meta.max_q_len = b.max_q_len;
  meta.max_blocks_per_seq = int32_t(p.max_blocks);
  meta.host_cu_seqlens_q = b.cu.data();
  meta.host_context_lens = b.ctx.data();
  meta.host_block_tables = b.tables.data();
  meta.cu_seqlens_q = Tensor(b.cu.data(), DType::i32, {b.S + 1});
  meta.context_lens = Tensor(b.ctx.data(), DType::i32, {b.S});
  meta.block_tables = Tensor(b.tables.data(), DType::i32, {b.S, p.max_blocks});
  // The CPU backend only reads the pools (Tensor views are not const).
  uint16_t* kb = const_cast<uint16_t*>(p.kb.data());
  uint16_t* vb = const_cast<uint16_t*>(p.vb.data());
  const KvLayer kv{Tensor(kb, DType::bf16, {p.blocks, p.bs, p.nkv, p.hd}),
                   Tensor(vb, DType::bf16, {p.blocks, p.bs, p.nkv, p.hd})};
  b.ref.assign(size_t(b.T * p.nh() * p.hd), 0.0f);
  Tensor ref_t = host_f32(b.ref, b.T, p.nh() * p.hd);
  cpu().attention({}, host_f32(b.q, b.T, p.nh() * p.hd), kv, meta, 1.0f / std::sqrt(float(p.hd)),
                  ref_t);
  std::string lens;
  int pads = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].padding) {
      ++pads;
      continue;
    }
    if (i < 6) lens += fmt::format("{}{}/{}", lens.empty() ? "" : ",", seqs[i].q_len, seqs[i].ctx);
  }
  if (seqs.size() > 6) lens += fmt::format(",..({} seqs)", seqs.size());
  if (pads) lens += fmt::format(" +{} pad", pads);
  b.label = fmt::format("hd={} nkv={} g={} bs={} q/ctx={}", p.hd, p.nkv, p.group, p.bs, lens);
  return b;
}

// Device buffers of one (pools, batch shape): reused across batches of the same S and T, so
// that a captured graph sees new data at the same addresses.
struct Dev {
  DeviceMatrix q, out, k, v;
  Buffer cu, ctx, tab, ws;
  int64_t S = 0, T = 0;
};

void upload_bf16(DeviceMatrix& m, const std::vector<float>& values) {
  std::vector<uint16_t> poison(size_t(m.total_elems), kPoisonBf16);
  cuda().upload({}, m.buffer.data(), poison.data(), poison.size() * 2);
  const int64_t rows = m.view.shape[0], cols = m.view.shape[1];
  if (!values.empty()) {
    const std::vector<uint16_t> bits = to_bf16_bits(values);
    for (int64_t r = 0; r < rows; ++r)
      cuda().upload({}, m.view.row(r), bits.data() + r * cols, size_t(cols) * 2);
  }
  cuda().synchronize({});
}

Dev make_dev(const Pools& p, int64_t S, int64_t T) {
  Dev d;
  d.S = S;
  d.T = T;
  const int64_t nh = p.nh(), width = p.width(), pool_rows = p.blocks * p.bs;
  d.q = device_bf16(T, nh * p.hd, {}, nh * p.hd + 2 * width, 0);  // q as the head of a qkv row
  d.out = device_bf16(T, nh * p.hd, {});
  d.k = device_bf16(pool_rows, width, p.k);
  d.v = device_bf16(pool_rows, width, p.v);
  d.cu = cuda().allocate(size_t(S + 1) * 4);
  d.ctx = cuda().allocate(size_t(std::max<int64_t>(S, 1)) * 4);
  d.tab = cuda().allocate(size_t(std::max<int64_t>(S * p.max_blocks, 1)) * 4);
  d.ws = cuda().allocate(kWorkspaceBytes);
  return d;
}

// New data for the same buffers: queries, metadata, and a poisoned output.
void load(Dev& d, const Batch& b) {
  ASSERT_EQ(b.S, d.S);
  ASSERT_EQ(b.T, d.T);
  upload_bf16(d.q, b.q);
  upload_bf16(d.out, {});
  cuda().upload({}, d.cu.data(), b.cu.data(), b.cu.size() * 4);
  cuda().upload({}, d.ctx.data(), b.ctx.data(), b.ctx.size() * 4);
  cuda().upload({}, d.tab.data(), b.tables.data(), b.tables.size() * 4);
  cuda().synchronize({});
}

struct Variant {
  kn::AttentionPath path = kn::AttentionPath::automatic;
  int fixed_splits = 0;  // > 0: graph mode (host mirrors not given)
  int stages = 0;
  bool one_wave = false;  // target 1 block: no planned split
  int block_rows = 0;     // the general kernel's rows per block (0: automatic, 64, 128)
  int min_split = 0;      // PagedAttentionArgs::min_split_positions
  bool counters = false;  // split counters given: the decode kernel merges its splits itself
  bool fill_ring = true;  // PagedAttentionArgs::decode_fill_ring (false: the older prologue)
  bool skip_empty = true;  // PagedAttentionArgs::decode_skip_empty (false: every warp computes)
  bool cluster = true;     // PagedAttentionArgs::cluster_merge (false: merges through memory)
  std::string name() const {
    std::string s = path == kn::AttentionPath::general  ? "general"
                    : path == kn::AttentionPath::decode ? "decode"
                                                        : "auto";
    if (stages) s += fmt::format("/s{}", stages);
    if (block_rows) s += fmt::format("/rows{}", block_rows);
    s += fixed_splits ? fmt::format(" fixed={}", fixed_splits)
                      : (one_wave ? " planned(1 block)" : " planned");
    if (min_split) s += fmt::format(" min_split={}", min_split);
    if (counters) s += " in-kernel merge";
    if (!fill_ring) s += " no-fill";
    if (!skip_empty) s += " no-skip";
    if (!cluster) s += " no-cluster";
    return s;
  }
};

int sm_count() {
  static const int n = [] {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) v = 132;
    return v;
  }();
  return n;
}

kn::PagedAttentionArgs args_for(const Pools& p, Dev& d, const Batch& b, const Variant& v) {
  kn::PagedAttentionArgs a;
  a.q = static_cast<const uint16_t*>(d.q.view.data);
  a.ld_q = d.q.view.stride[0];
  a.out = static_cast<uint16_t*>(d.out.view.data);
  a.ld_out = d.out.view.stride[0];
  a.k_pool = static_cast<const uint16_t*>(d.k.view.data);
  a.v_pool = static_cast<const uint16_t*>(d.v.view.data);
  a.num_blocks = p.blocks;
  a.block_size = int(p.bs);
  a.num_kv_heads = int(p.nkv);
  a.num_q_heads = int(p.nh());
  a.head_dim = int(p.hd);
  a.cu_seqlens_q = static_cast<const int32_t*>(d.cu.data());
  a.context_lens = static_cast<const int32_t*>(d.ctx.data());
  a.block_tables = static_cast<const int32_t*>(d.tab.data());
  a.max_blocks_per_seq = int(p.max_blocks);
  a.num_seqs = int(d.S);
  a.scale = 1.0f / std::sqrt(float(p.hd));
  a.path = v.path;
  a.decode_stages = v.stages;
  a.decode_fill_ring = v.fill_ring;
  a.decode_skip_empty = v.skip_empty;
  a.cluster_merge = v.cluster;
  a.general_block_rows = v.block_rows;
  a.fixed_splits = v.fixed_splits;
  a.min_split_positions = v.min_split;
  a.max_q_len = b.max_q_len;
  if (!v.fixed_splits) {  // graph mode gets no host data at all
    a.host_cu_seqlens_q = b.cu.data();
    a.host_context_lens = b.ctx.data();
  }
  return a;
}

void check(const std::string& what, Dev& d, const Batch& b) {
  expect_close("attention", what, download_view(d.out), b.ref, 1e-2);
  expect_untouched_outside("attention", d.out);
}

// Plans and runs one variant on a fresh stream, workspace poisoned; returns the plan.
kn::PagedAttentionPlan run_variant(const Pools& p, Dev& d, const Batch& b, const Variant& v) {
  kn::PagedAttentionArgs a = args_for(p, d, b, v);
  const kn::PagedAttentionPlan plan =
      kn::plan_paged_attention(a, v.one_wave ? 1 : 4 * sm_count(), kWorkspaceBytes);
  cudaStream_t st = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(d.ws.data(), 0xff, std::max<size_t>(plan.workspace_bytes, 16), st),
            cudaSuccess);  // NaN partials: a split that is not written poisons the output
  const size_t n_counters = size_t(d.S) * size_t(p.nkv);
  int* counters = nullptr;
  if (v.counters) {
    EXPECT_EQ(cudaMalloc(&counters, n_counters * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(counters, 0, n_counters * sizeof(int), st), cudaSuccess);
    a.split_counters = counters;
    a.split_counters_len = int64_t(n_counters);
  }
  kn::paged_attention_bf16(a, plan, d.ws.data(), st);
  EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  if (counters) {  // the contract: every call leaves them zero for the next one
    std::vector<int> left(n_counters, -1);
    EXPECT_EQ(cudaMemcpy(left.data(), counters, n_counters * sizeof(int), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(std::count(left.begin(), left.end(), 0), int64_t(n_counters))
        << b.label << ": split tickets left non-zero";
    EXPECT_EQ(cudaFree(counters), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
  return plan;
}

// Every applicable variant on one batch (the output is poisoned again before each).
void run_all_variants(const Pools& p, const Batch& b, bool sweep_stages) {
  Dev d = make_dev(p, b.S, b.T);
  const int64_t max_rows = int64_t(b.max_q_len) * p.group;
  // The decode kernel: at most 16 rows a sequence, a power-of-two block size of at least 8.
  const bool decode_ok = max_rows <= 16 && (p.bs & (p.bs - 1)) == 0 && p.bs >= 8;
  std::vector<Variant> vs = {{kn::AttentionPath::automatic, 0, 0, false},
                             {kn::AttentionPath::general, 0, 0, false},
                             {kn::AttentionPath::general, 0, 0, true},
                             {kn::AttentionPath::general, 1, 0, false},
                             {kn::AttentionPath::general, 7, 0, false},
                             // Both row-block sizes of the general kernel on every batch (auto
                             // takes 128 only above 64 rows): 32 rows per warp, partly filled
                             // warps and row tiles, splits.
                             {kn::AttentionPath::general, 0, 0, false, 64},
                             {kn::AttentionPath::general, 0, 0, false, 128},
                             {kn::AttentionPath::general, 0, 0, true, 128},
                             {kn::AttentionPath::general, 7, 0, false, 128}};
  if (decode_ok) {
    const int graph =
        kn::graph_attention_splits(int(b.S), b.max_q_len, int(p.nkv), int(p.group), int(p.hd),
                                   int(p.max_blocks * p.bs), sm_count(), kWorkspaceBytes);
    vs.push_back({kn::AttentionPath::decode, 0, 0, false});
    vs.push_back({kn::AttentionPath::decode, 0, 0, true});
    vs.push_back({kn::AttentionPath::decode, 1, 0, false});
    vs.push_back({kn::AttentionPath::decode, 3, 0, false});
    vs.push_back({kn::AttentionPath::decode, graph, 0, false});
    // The in-kernel merge (what the CUDA backend runs), and splits of at least 256 or 1024
    // positions: contexts that fit split 0 are written by it alone, the others merged.
    vs.push_back({kn::AttentionPath::decode, graph, 0, false, 0, 0, true});
    vs.push_back({kn::AttentionPath::decode, graph, 0, false, 0, 256, true});
    vs.push_back({kn::AttentionPath::decode, graph, 0, false, 0, 1024, true});
    vs.push_back({kn::AttentionPath::decode, 0, 0, false, 0, 256, true});
    // The prologue that leaves the ring's last stage for tile 0's iteration (RIDGE_ATTN_FILL_RING
    // =0): unsplit, planned splits, graph splits with the in-kernel merge.
    vs.push_back({kn::AttentionPath::decode, 0, 0, false, 0, 0, false, false});
    vs.push_back({kn::AttentionPath::decode, 0, 0, true, 0, 0, false, false});
    vs.push_back({kn::AttentionPath::decode, graph, 0, false, 0, 256, true, false});
    // Every warp computing every tile (the skip off): unsplit, planned splits, graph splits with
    // the in-kernel merge.
    vs.push_back({kn::AttentionPath::decode, 0, 0, false, 0, 0, false, true, false});
    vs.push_back({kn::AttentionPath::decode, 0, 0, true, 0, 0, false, true, false});
    vs.push_back({kn::AttentionPath::decode, graph, 0, false, 0, 256, true, true, false});
    vs.push_back({kn::AttentionPath::general, 7, 0, false, 0, 128, false});
    // Splits of one cluster merged through the workspace instead (RIDGE_ATTN_CLUSTER=0): the
    // combine kernel, and the in-kernel merge with its tickets.
    vs.push_back({kn::AttentionPath::decode, 3, 0, false, 0, 0, false, true, true, false});
    vs.push_back({kn::AttentionPath::decode, 5, 0, false, 0, 0, true, true, true, false});
    vs.push_back({kn::AttentionPath::decode, 0, 0, false, 0, 0, true, true, true, false});
    // Mostly empty splits, where 64 of them fit the workspace (a larger request is refused: the
    // refusal itself is checked in AttentionKernelRefusals).
    if (kn::paged_attention_split_bytes(b.S * int64_t(b.max_q_len), int(p.nkv * p.group),
                                        int(p.hd)) * 64 <= kWorkspaceBytes)
      vs.push_back({kn::AttentionPath::decode, 64, 0, false});
    if (sweep_stages)
      for (int s : {2, 3, 4}) {
        vs.push_back({kn::AttentionPath::decode, 0, s, false});
        vs.push_back({kn::AttentionPath::decode, 5, s, false});
        vs.push_back({kn::AttentionPath::decode, 0, s, false, 0, 0, false, false});
        vs.push_back({kn::AttentionPath::decode, 5, s, false, 0, 0, false, false});
        vs.push_back({kn::AttentionPath::decode, 5, s, false, 0, 0, false, true, false});
        vs.push_back({kn::AttentionPath::decode, 5, s, false, 0, 0, true, true, true, false});
      }
  }
  for (const Variant& v : vs) {
    load(d, b);
    const kn::PagedAttentionPlan plan = run_variant(p, d, b, v);
    if (v.path == kn::AttentionPath::automatic) {
      EXPECT_EQ(plan.decode, decode_ok) << b.label;
    }
    if (v.fixed_splits) {
      EXPECT_EQ(plan.num_splits, v.fixed_splits) << b.label;
    }
    if (v.block_rows) {
      EXPECT_EQ(plan.block_rows, v.block_rows) << b.label;
    }
    check(fmt::format("{} [{}, splits {}]", b.label, v.name(), plan.num_splits), d, b);
  }
}

std::vector<DSeq> decodes(std::initializer_list<int32_t> ctxs, int padding = 0) {
  std::vector<DSeq> s;
  for (int32_t c : ctxs) s.push_back({1, c, false});
  for (int i = 0; i < padding; ++i) s.push_back(pad());
  return s;
}

int64_t blocks_for(const std::vector<DSeq>& seqs, int64_t bs) {
  int64_t n = 4;  // a few spare blocks nobody owns
  for (const DSeq& s : seqs) n += (s.ctx + bs - 1) / bs;
  return n;
}
int64_t max_blocks_for(const std::vector<DSeq>& seqs, int64_t bs) {
  int64_t mx = 1;
  for (const DSeq& s : seqs) mx = std::max<int64_t>(mx, (s.ctx + bs - 1) / bs);
  return mx + 1;  // one spare entry per table row (holds -1)
}

void run_case(const std::vector<DSeq>& seqs, int64_t nkv, int64_t group, int64_t hd, int64_t bs,
              bool sweep_stages) {
  const Pools p = make_pools(nkv, group, hd, bs, blocks_for(seqs, bs), max_blocks_for(seqs, bs));
  run_all_variants(p, make_batch(p, seqs), sweep_stages);
}

// Small batches through every variant: page boundaries, GQA 1/3/4/8, hd 64/128, block sizes
// 16/32/64, padding rows, q_len * group up to 16 (speculative-style chunks in one decode tile).
TEST_F(GpuBackend, AttentionKernelDecodeVariants) {
  run_case(decodes({1, 15, 16, 17, 64, 65, 300}, 1), 2, 4, 128, 16, true);  // Llama-3 group
  run_case(decodes({1, 31, 32, 33, 129}, 2), 3, 3, 64, 32, true);           // SmolLM2 group
  run_case(decodes({1, 63, 64, 65, 1000}), 4, 1, 128, 64, false);           // MHA
  run_case(decodes({2, 200, 129}, 1), 2, 8, 64, 16, false);
  run_case({{2, 2}, {1, 50}, {2, 300}, pad()}, 2, 8, 64, 16, false);  // 16 rows: 2 tokens x 8
  run_case({{16, 16}, {5, 100}, {1, 40}}, 1, 1, 128, 32, false);      // 16 tokens, MHA
  run_case({{5, 70}, {3, 5}, {1, 1}}, 2, 3, 128, 16, false);          // 15 rows
  run_case({{3, 40}, {1, 200}}, 1, 16, 128, 16, false);               // group 16: general only
  run_case({{17, 40}, {1, 9}}, 2, 1, 64, 16, false);                  // 17 rows: general only
  // The least block size of the decode kernel (8: a thread's 8 rows of a tile fill one page),
  // at both head dims, across many pages; 4 goes to the general kernel (automatic).
  run_case(decodes({1, 7, 8, 9, 64, 65, 250}, 1), 2, 4, 128, 8, false);
  run_case(decodes({3, 8, 100, 300}), 2, 1, 64, 8, false);
  run_case(decodes({1, 5, 70}), 2, 4, 128, 4, false);
}

// Prefill chunks and mixed batches (the general kernel; auto takes 128-row blocks here): rows
// across the 64- and 128-row block edges, chunks after a cached prefix, decodes beside them,
// GQA 1/4/8, hd 64/128, a block size that is not a power of two.
TEST_F(GpuBackend, AttentionKernelPrefillVariants) {
  run_case({{200, 200}, {129, 300}, {1, 77}, pad()}, 2, 1, 128, 16, false);  // MHA
  run_case({{65, 65}, {33, 90}, {1, 5}}, 2, 4, 128, 32, false);              // 132 / 260 rows
  run_case({{300, 300}, {16, 400}}, 1, 8, 64, 64, false);                    // 2400 rows
  run_case({{127, 127}, {128, 140}, {97, 97}}, 3, 1, 64, 24, false);         // block size 24
}

// Fixed splits with no host data, captured once as a CUDA graph and replayed for other contexts
// (longer, across pages, up to the table's capacity; all short with most splits empty; padding
// rows in different places), block tables and queries.
void graph_case(int64_t nkv, int64_t group, int64_t hd, int64_t bs, kn::AttentionPath path,
                int fixed_splits_or_0_for_graph_helper) {
  constexpr int64_t S = 8;
  const int64_t max_blocks = (2100 + bs - 1) / bs, cap = max_blocks * bs;
  const Pools p = make_pools(nkv, group, hd, bs, S * max_blocks + 4, max_blocks);
  const int splits = fixed_splits_or_0_for_graph_helper
                         ? fixed_splits_or_0_for_graph_helper
                         : kn::graph_attention_splits(int(S), 1, int(nkv), int(group), int(hd),
                                                      int(cap), sm_count(), kWorkspaceBytes);
  std::uniform_int_distribution<int32_t> len(1, int32_t(cap));
  std::vector<std::vector<DSeq>> steps = {
      decodes({5, 17, 100, 1000, 2048, 33}, 2),
      decodes({int32_t(cap), 1, int32_t(bs), int32_t(bs) + 1, 500, 1500, 7, 300}),
      decodes({1, 2, 3}, 5),
      {pad(),
       {1, len(rng())},
       pad(),
       {1, len(rng())},
       {1, len(rng())},
       pad(),
       {1, len(rng())},
       {1, len(rng())}},
  };
  Dev d = make_dev(p, S, S);
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  const Variant v{path, splits, 0, false};
  cudaGraphExec_t exec = nullptr;
  size_t ws_bytes = 16;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Batch b = make_batch(p, steps[i]);
    load(d, b);
    if (i == 0) {  // capture with the first step's data; nothing runs yet
      const kn::PagedAttentionArgs a = args_for(p, d, b, v);
      const kn::PagedAttentionPlan plan =
          kn::plan_paged_attention(a, 4 * sm_count(), kWorkspaceBytes);
      EXPECT_EQ(plan.num_splits, splits);
      EXPECT_EQ(plan.decode, path != kn::AttentionPath::general);
      ws_bytes = std::max<size_t>(plan.workspace_bytes, 16);
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      kn::paged_attention_bf16(a, plan, d.ws.data(), st);
      ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      cudaGraphDestroy(graph);
    }
    ASSERT_EQ(cudaMemsetAsync(d.ws.data(), 0xff, ws_bytes, st), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    check(fmt::format("{} [graph replay {} {}, splits {}]", b.label, i,
                      path == kn::AttentionPath::general ? "general" : "decode", splits),
          d, b);
  }
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(st);
}

TEST_F(GpuBackend, AttentionKernelGraphReplay) {
  graph_case(4, 1, 128, 16, kn::AttentionPath::automatic, 0);  // the helper's split count
  graph_case(3, 3, 64, 32, kn::AttentionPath::automatic, 0);
  graph_case(2, 8, 128, 64, kn::AttentionPath::automatic, 1);  // one split: no combine
  graph_case(2, 4, 64, 16, kn::AttentionPath::automatic, 48);  // mostly empty splits
  graph_case(2, 4, 128, 16, kn::AttentionPath::general, 5);    // the general kernel, fixed
}

// One launch of every decode kernel instance (hd 64/128 x 2/3/4 stages) with a split (empty
// splits included), the decode kernel in graph mode with its cluster merge (empty splits waiting
// at its barriers) or its in-kernel merge through memory, contexts inside split 0 (the other
// splits return at once), the general kernel in fixed-split mode, and the combine: small enough
// for compute-sanitizer racecheck (scripts/device/gpu-backend-check runs this one there).
TEST_F(GpuBackend, AttentionKernelSanitizerSubset) {
  for (int64_t hd : {64, 128}) {
    const std::vector<DSeq> seqs = {{1, 130}, {2, 70}, pad()};
    const Pools p = make_pools(2, 4, hd, 16, blocks_for(seqs, 16), max_blocks_for(seqs, 16));
    const Batch b = make_batch(p, seqs);
    Dev d = make_dev(p, b.S, b.T);
    for (const Variant& v :
         {Variant{kn::AttentionPath::decode, 6, 2, false},
          Variant{kn::AttentionPath::decode, 0, 3, false},
          Variant{kn::AttentionPath::decode, 0, 4, true},
          Variant{kn::AttentionPath::decode, 6, 0, false, 0, 256, true},
          Variant{kn::AttentionPath::decode, 0, 2, false, 0, 0, false, false},
          Variant{kn::AttentionPath::decode, 6, 3, false, 0, 256, true, false},
          Variant{kn::AttentionPath::decode, 0, 2, false, 0, 0, false, true, false},
          Variant{kn::AttentionPath::decode, 6, 0, false, 0, 256, true, true, false},
          Variant{kn::AttentionPath::decode, 6, 4, false},
          // The merge through memory instead of the cluster: tickets, then the combine kernel.
          Variant{kn::AttentionPath::decode, 6, 0, false, 0, 0, true, true, true, false},
          Variant{kn::AttentionPath::decode, 6, 2, false, 0, 0, false, true, true, false},
          Variant{kn::AttentionPath::general, 4, 0, false},
          Variant{kn::AttentionPath::general, 4, 0, false, 128},
          Variant{kn::AttentionPath::general, 0, 0, false, 128}}) {
      load(d, b);
      const kn::PagedAttentionPlan plan = run_variant(p, d, b, v);
      check(fmt::format("{} [{}, splits {}]", b.label, v.name(), plan.num_splits), d, b);
    }
  }
}

// A warp that skips the tiles past its range (PagedAttentionArgs::decode_skip_empty) changes no
// bit of the output: contexts whose last tile leaves 1-3 warps empty or all four busy, two rows
// a sequence, padding, every ring depth, unsplit and split.
TEST_F(GpuBackend, AttentionKernelSkipEmptyIsExact) {
  for (int64_t hd : {64, 128}) {
    const std::vector<DSeq> seqs = {{1, 1}, {1, 17}, {1, 65}, {1, 130}, {1, 200}, {2, 47}, pad()};
    const Pools p = make_pools(2, 4, hd, 16, blocks_for(seqs, 16), max_blocks_for(seqs, 16));
    const Batch b = make_batch(p, seqs);
    Dev d = make_dev(p, b.S, b.T);
    for (int stages : {2, 3, 4})
      for (int splits : {0, 3}) {
        std::vector<float> out[2];
        for (int skip = 0; skip < 2; ++skip) {
          load(d, b);
          Variant v{kn::AttentionPath::decode, splits, stages, false};
          v.skip_empty = skip == 1;
          run_variant(p, d, b, v);
          out[skip] = download_view(d.out);
        }
        ASSERT_EQ(out[0].size(), out[1].size());
        EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0)
            << "hd " << hd << ", " << stages << " stages, " << splits << " fixed splits";
      }
  }
}

TEST_F(GpuBackend, AttentionKernelRefusals) {
  const Pools p = make_pools(2, 4, 64, 16, 8, 4);
  const Batch b = make_batch(p, decodes({5, 20}));
  Dev d = make_dev(p, b.S, b.T);
  Variant v{kn::AttentionPath::automatic, 0, 0, false};
  kn::PagedAttentionArgs a = args_for(p, d, b, v);
  a.host_cu_seqlens_q = nullptr;  // planned mode needs the mirrors
  EXPECT_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes), std::exception);
  a = args_for(p, d, b, {kn::AttentionPath::decode, 4, 0, false});
  a.max_q_len = 0;  // fixed mode needs max_q_len
  EXPECT_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes), std::exception);
  a.max_q_len = 5;  // 5 * 4 rows do not fit the decode tile
  EXPECT_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes), std::exception);
  {  // a block size under 8 is refused by the decode kernel and taken by the general one
    const Pools p4 = make_pools(2, 4, 64, 4, 16, 8);
    const Batch b4 = make_batch(p4, decodes({5, 20}));
    Dev d4 = make_dev(p4, b4.S, b4.T);
    kn::PagedAttentionArgs a4 = args_for(p4, d4, b4, {kn::AttentionPath::decode, 0, 0, false});
    EXPECT_THROW(kn::plan_paged_attention(a4, 100, kWorkspaceBytes), std::exception);
    a4 = args_for(p4, d4, b4, {kn::AttentionPath::automatic, 0, 0, false});
    EXPECT_FALSE(kn::plan_paged_attention(a4, 100, kWorkspaceBytes).decode);
  }
  a = args_for(p, d, b, {kn::AttentionPath::decode, 257, 0, false});
  EXPECT_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes), std::exception);
  a = args_for(p, d, b, {kn::AttentionPath::decode, 200, 0, false});
  EXPECT_THROW(kn::plan_paged_attention(a, 100, 1024), std::exception);  // workspace too small
  a = args_for(p, d, b, {kn::AttentionPath::decode, 0, 5, false});
  EXPECT_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes), std::exception);  // stages
  a = args_for(p, d, b, {kn::AttentionPath::decode, 2, 0, false});
  a.host_cu_seqlens_q = b.cu.data();  // fixed mode validates mirrors when given
  a.host_context_lens = b.ctx.data();
  a.max_q_len = 1;
  EXPECT_NO_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes));
  const std::vector<int32_t> long_cu = {0, 2, 3};
  a.host_cu_seqlens_q = long_cu.data();  // q_len 2 > max_q_len 1
  EXPECT_THROW(kn::plan_paged_attention(a, 100, kWorkspaceBytes), std::exception);
  // The helper: a bucket that fills the GPU gets 1 split; a small one several, capped.
  EXPECT_EQ(kn::graph_attention_splits(256, 1, 32, 1, 128, 4096, 132, kWorkspaceBytes), 1);
  EXPECT_EQ(kn::graph_attention_splits(16, 1, 32, 1, 128, 4096, 132, kWorkspaceBytes), 1);
  // 512 blocks for a target of 528: 2 splits would be two waves of one-tile blocks; one wave.
  EXPECT_EQ(kn::graph_attention_splits(16, 1, 32, 1, 128, 4096, 132, kWorkspaceBytes, 4), 1);
  EXPECT_EQ(kn::graph_attention_splits(2, 1, 32, 1, 128, 4096, 132, kWorkspaceBytes), 4);
  EXPECT_EQ(kn::graph_attention_splits(1, 1, 8, 4, 128, 32768, 132, kWorkspaceBytes), 33);
  EXPECT_EQ(kn::graph_attention_splits(1, 1, 8, 4, 128, 32768, 132, kWorkspaceBytes, 4), 66);
  EXPECT_EQ(kn::graph_attention_splits(1, 1, 8, 4, 128, 100, 132, kWorkspaceBytes), 2);
  // 9 splits (32 blocks for a target of 264) come down to one cluster's 8.
  EXPECT_EQ(kn::graph_attention_splits(1, 1, 32, 1, 128, 4096, 132, kWorkspaceBytes), 8);
  EXPECT_EQ(kn::graph_attention_splits(1, 1, 1, 1, 128, 1 << 20, 132, kWorkspaceBytes), 256);
}

// The split plan alone (host code: runs without a GPU, so on CI too), worked out by hand from
// plan_paged_attention's rules: blocks = sequences x KV heads, a target of 264 (2 a SM on 132
// SMs), splits = ceil(target / blocks) capped by the context's 64-position tiles; with the cluster
// merge a count within 2 of 8 comes down to one wave (target / blocks, rounded down) and to 8,
// and splits are at least 64 positions; without it at least min_split_positions (256 here).
TEST(AttentionPlan, ClusterMergeTakesOneWaveOfOneTileSplits) {
  struct Case {
    int seqs, nkv, group, ctx;
    bool cluster;
    int splits, chunk;
    bool merged_in_cluster;
  };
  const Case cases[] = {
      // 32 blocks: ceil(264 / 32) = 9 splits, capped by 3 tiles: 3 one-tile splits, a cluster.
      {1, 32, 1, 136, true, 3, 64, true},
      // ... the merge through memory: 256 positions at least, so 1 split.
      {1, 32, 1, 136, false, 1, 192, false},
      // 128 blocks: ceil(264 / 128) = 3, but 3 x 128 = 384 blocks are two waves: 264 / 128 = 2
      // splits of 2 tiles (the last holds 8 positions).
      {4, 32, 1, 136, true, 2, 128, true},
      // 4,096 positions, 64 tiles: 9 splits come down to 8, of 8 tiles each.
      {1, 32, 1, 4096, true, 8, 512, true},
      // 8 blocks (GQA 4): ceil(264 / 8) = 33 splits, too many for a cluster: the merge through
      // memory, splits of at least 4 tiles: 16 of 256 positions.
      {1, 8, 4, 4096, true, 16, 256, false},
  };
  for (const Case& c : cases) {
    std::vector<int32_t> cu(size_t(c.seqs) + 1), ctx(size_t(c.seqs), c.ctx);
    for (int s = 0; s <= c.seqs; ++s) cu[size_t(s)] = s;
    kn::PagedAttentionArgs a;
    a.num_kv_heads = c.nkv;
    a.num_q_heads = c.nkv * c.group;
    a.head_dim = 128;
    a.ld_q = a.ld_out = int64_t(a.num_q_heads) * 128;
    a.block_size = 16;
    a.max_blocks_per_seq = 256;
    a.num_blocks = int64_t(c.seqs) * 256;
    a.num_seqs = c.seqs;
    a.scale = 0.088f;
    a.host_cu_seqlens_q = cu.data();
    a.host_context_lens = ctx.data();
    a.cluster_merge = c.cluster;
    a.min_split_positions = 256;
    const std::string what = fmt::format("{} x {} KV heads at {} positions, cluster {}", c.seqs,
                                         c.nkv, c.ctx, c.cluster);
    const kn::PagedAttentionPlan plan = kn::plan_paged_attention(a, 264, kWorkspaceBytes);
    EXPECT_TRUE(plan.decode) << what;
    EXPECT_EQ(plan.num_splits, c.splits) << what;
    EXPECT_EQ(plan.kv_chunk, c.chunk) << what;
    EXPECT_EQ(plan.cluster_merge, c.merged_in_cluster) << what;
  }
  // Fixed splits (graph mode, no host data): a cluster merge up to 8 of them.
  kn::PagedAttentionArgs g;
  g.num_kv_heads = g.num_q_heads = 32;
  g.head_dim = 128;
  g.ld_q = g.ld_out = 4096;
  g.block_size = 16;
  g.max_blocks_per_seq = 256;
  g.num_blocks = 256;
  g.num_seqs = 1;
  g.max_q_len = 1;
  g.scale = 0.088f;
  g.cluster_merge = true;
  for (const auto& [fixed, cluster] : {std::pair{6, true}, {8, true}, {9, false}, {1, false}}) {
    g.fixed_splits = fixed;
    const kn::PagedAttentionPlan plan = kn::plan_paged_attention(g, 264, kWorkspaceBytes);
    EXPECT_EQ(plan.num_splits, fixed);
    EXPECT_EQ(plan.cluster_merge, cluster) << fixed << " fixed splits";
  }
}

// Sweeps (left out of the sanitizer runs): GQA 1/3/4/8 x hd 64/128 x block sizes 16/32/64 on
// random decode batches with padding; batch sizes 1..64 at contexts up to 4096.
TEST_F(GpuBackendLarge, AttentionKernelDecodeSweep) {
  std::uniform_int_distribution<int32_t> len(1, 2500);
  for (int64_t hd : {64, 128})
    for (int64_t group : {1, 3, 4, 8})
      for (int64_t bs : {16, 32, 64}) {
        std::vector<DSeq> seqs;
        for (int i = 0; i < 12; ++i) seqs.push_back({1, len(rng()), false});
        seqs.push_back(pad());
        seqs.insert(seqs.begin() + 3, pad());
        run_case(seqs, group == 1 ? 4 : 2, group, hd, bs, false);
      }
  for (int batch : {1, 2, 5, 16, 64}) {
    std::uniform_int_distribution<int32_t> ctx(1, batch == 64 ? 1024 : 4096);
    std::vector<DSeq> seqs;
    for (int i = 0; i < batch; ++i) seqs.push_back({1, ctx(rng()), false});
    run_case(seqs, 8, 4, 128, 16, false);
  }
}

// One 32k-token decode (and a short one beside it) on both kernels, planned and fixed splits.
TEST_F(GpuBackendLarge, AttentionKernelLongDecode32k) {
  run_case(decodes({32768}), 8, 4, 128, 16, true);         // Llama-3-8B heads
  run_case(decodes({32000, 5}, 1), 4, 1, 128, 32, false);  // MHA
  run_case(decodes({32767}), 2, 3, 64, 64, false);         // SmolLM2-like group
}

}  // namespace
}  // namespace ridge::backend::gpu_test

#endif  // RIDGE_TEST_ATTENTION_KERNELS
