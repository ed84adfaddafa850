// The execution terms of the cost model (docs/PERF.md, "Execution"): kernels per step as ridge
// launches them (by its fuse list: norms and SiLU·mul folded into GEMMs of <= 16 rows or not, a
// norm only where the model folds its weight: not into biased q|k|v or a tied LM head; RoPE + KV store in one kernel or two; decode attention merging its own splits), eager vs graph
// launch cost, the achievable-efficiency factors, host copies, and
// the hardware fields that carry them. Every expected value is worked out by hand in the comment
// beside it from the model shape, data/hardware.json's figures and the formulas of docs/PERF.md,
// never from the code's own output.
#include <filesystem>

#include <gtest/gtest.h>

#include "perf/fixtures.h"

#include "ridge/backend/factory.h"
#include "ridge/core/error.h"
#include "ridge/perf/cost_model.h"

namespace ridge::perf {
namespace {

using test::db;
using test::llama2_7b;

// The fuse list before the decode fusions became the default (tests written against it).
const Fusions kRopeKvOnly = Fusions::parse("rope_kv");

TEST(Execution, EagerQueueFinishTime) {
  // Kernels of 10, 1, 1, 10 us issued at 4 us each: available at 4, 8, 12, 16 us.
  //   F0 = max(0, 4) + 10 = 14; F1 = max(14, 8) + 1 = 15; F2 = max(15, 12) + 1 = 16;
  //   F3 = max(16, 16) + 10 = 26 us: the long first kernel lets the host run ahead.
  EXPECT_DOUBLE_EQ(eager_finish({10, 1, 1, 10}, {4, 4, 4, 4}), 26);
  // Five 1 us kernels at 4 us launches: the GPU waits for each; the last is issued at 20 us and
  // ends at 21 us (a graph would take 5 us of kernels after one launch).
  EXPECT_DOUBLE_EQ(eager_finish({1, 1, 1, 1, 1}, {4, 4, 4, 4, 4}), 21);
  // Launches free: the kernels back to back.
  EXPECT_DOUBLE_EQ(eager_finish({3, 5}, {0, 0}), 8);
  EXPECT_DOUBLE_EQ(eager_finish({}, {}), 0);
  EXPECT_THROW(eager_finish({1}, {}), Error);
}

TEST(Execution, FusionsReadAsTheBackendReadsItsFuseList) {
  // BackendOptions::fuse (CLI --fuse LIST): a comma list of norm, silu, rope_kv, swiglu_gemm;
  // "none" and empty items add nothing. One reader (backend::parse_fuse_list) serves the CUDA
  // backend and this model. The backend's default is the first three, and so is Fusions{}.
  EXPECT_EQ(Fusions{}, Fusions::parse(backend::BackendOptions{}.fuse));
  EXPECT_EQ(Fusions{}, Fusions::all());
  EXPECT_EQ(Fusions::parse("none"), Fusions::none());  // --no-fusion
  EXPECT_EQ(Fusions::parse(""), Fusions::none());
  EXPECT_EQ(Fusions::parse("norm,silu,rope_kv"), Fusions::all());
  EXPECT_EQ(Fusions::parse("rope_kv,silu,norm"), Fusions::all());  // any order
  EXPECT_EQ(Fusions::parse("silu"), (Fusions{false, true, false}));
  EXPECT_EQ(Fusions::parse("none,norm"), (Fusions{true, false, false}));  // "none" adds nothing
  EXPECT_EQ(Fusions::parse("norm,,silu"), (Fusions{true, true, false}));  // nor does ""
  EXPECT_THROW(Fusions::parse("rope"), Error);
  EXPECT_THROW(Fusions::parse("Norm"), Error);
  EXPECT_THROW(backend::parse_fuse_list("norm,swiglu"), Error);
  // describe() writes the list back in the order norm, silu, rope_kv.
  EXPECT_EQ(Fusions::all().describe(), "norm,silu,rope_kv");
  EXPECT_EQ(Fusions::none().describe(), "none");
  EXPECT_EQ(Fusions{}.describe(), "norm,silu,rope_kv");
  EXPECT_EQ(Fusions::parse("silu,norm").describe(), "norm,silu");
  // swiglu_gemm is opt-in: not among the defaults, read and written back after the three.
  EXPECT_EQ(Fusions::parse("swiglu_gemm"), (Fusions{false, false, false, true}));
  EXPECT_EQ(Fusions::parse("swiglu_gemm,norm,silu,rope_kv").describe(),
            "norm,silu,rope_kv,swiglu_gemm");
}

TEST(Execution, KernelsPerStepAsRidgeLaunchesThem) {
  // LlamaModel::run_layers (src/ridge/model/llama.cpp) on the CUDA backend, Llama-2-7B (32 layers,
  // 32 heads, 32 KV heads: group 1) on an H200 (132 SMs). Decode bs1 at context 192: counted as
  // the general kernel's blocks, 1 row tile x 32 KV heads = 32 < 4 x 132 SMs = 528, and 193 KV
  // positions > one 64-position tile: the launch splits. But every sequence has 1 new token x
  // group 1 = 1 row <= 16, so the decode attention kernel runs, and it merges its splits itself:
  // 1 attention kernel per layer, no combine.
  // The default fuse list (rope_kv only), fused q|k|v and gate|up weights, T = 1, per layer:
  // attn_norm 1, qkv_proj with RoPE and the KV store in its epilogue (T <= 8: matmul_rope_kv) 1,
  // attention 1, o_proj (x += in its epilogue) 1, mlp_norm 1, gate_up_proj 1, silu_mul 1,
  // down_proj (x += in its epilogue) 1 = 8. Outside the layers: embedding 1, gather_rows of x 1,
  // final_norm 1, lm_head 1 = 4. 32 x 8 + 4 = 260.
  const Hardware& h200 = db().get("h200");
  const StepCost d1 = predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                                   CostOptions::ridge(Launch::graph, true, true, kRopeKvOnly));
  EXPECT_EQ(d1.kernels, 260);
  EXPECT_EQ(d1.op("attn_norm").kernels, 32);
  EXPECT_EQ(d1.op("qkv_proj").kernels, 32);
  EXPECT_THROW(d1.op("rope_kv_write"), Error);  // in qkv_proj
  EXPECT_EQ(d1.op("attn_decode").kernels, 32);  // split, merged in the kernel
  EXPECT_EQ(d1.op("mlp_norm").kernels, 32);
  EXPECT_EQ(d1.op("silu_mul").kernels, 32);
  EXPECT_EQ(d1.op("down_proj").kernels, 32);
  EXPECT_EQ(d1.op("gather_rows").kernels, 1);
  EXPECT_EQ(d1.op("final_norm").kernels, 1);
  EXPECT_EQ(d1.op("lm_head").kernels, 1);
  for (const char* folded : {"rope", "kv_write"}) EXPECT_THROW(d1.op(folded), Error) << folded;
  EXPECT_THROW(d1.op("sampling"), Error);  // sampled on the host
  // --fuse none (--no-fusion): the residual adds stay in the o / down epilogues (matmul_add),
  // RoPE and the KV store run apart: per layer attn_norm, qkv, rope, kv_write, attention, o,
  // mlp_norm, gate_up, silu_mul, down = 10; outside 4: 32 x 10 + 4 = 324.
  const StepCost n1 = predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                                   CostOptions::ridge(Launch::graph, true, true, Fusions::none()));
  EXPECT_EQ(n1.kernels, 324);
  EXPECT_EQ(n1.op("rope").kernels, 32);
  EXPECT_EQ(n1.op("kv_write").kernels, 32);
  EXPECT_EQ(n1.op("attn_decode").kernels, 32);
  EXPECT_THROW(n1.op("rope_kv_write"), Error);
  // --fuse norm,silu,rope_kv, T = 1 <= 8: qkv_proj with the RMSNorm as a 1/rms scale and RoPE +
  // the KV store in its epilogue 1, attention 1, o_proj 1, gate_up_proj with the RMSNorm 1,
  // down_proj with SiLU·mul in its prologue 1 = 5; outside: embedding 1 (it leaves its rows'
  // sums of squares, Backend::embedding_sumsq, so the first layer's attn_norm folds too),
  // gather_rows 1, final_norm (on the gathered rows) 1, lm_head 1 = 4. 32 x 5 + 4 = 164.
  const StepCost a1 = predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                                   CostOptions::ridge(Launch::graph, true, true, Fusions::all()));
  EXPECT_EQ(a1.kernels, 164);
  EXPECT_EQ(a1.op("qkv_proj").kernels, 32);
  EXPECT_EQ(a1.op("attn_decode").kernels, 32);
  EXPECT_EQ(a1.op("lm_head").kernels, 1);
  EXPECT_THROW(a1.op("attn_norm"), Error);
  EXPECT_EQ(a1.op("final_norm").kernels, 1);
  // Without the embedding's sums (RIDGE_EMBED_SUMSQ=0) the first layer's attn_norm runs after
  // the embedding, once a step: 32 x 5 + 5 = 165.
  CostOptions no_embed_sums = CostOptions::ridge(Launch::graph, true, true, Fusions::all());
  no_embed_sums.kernels.norm_sums_from_embedding = false;
  const StepCost a1k = predict_step(llama2_7b(), h200, StepShape::decode(1, 192), no_embed_sums);
  EXPECT_EQ(a1k.kernels, 165);
  EXPECT_EQ(a1k.op("attn_norm").kernels, 1);
  // The folded ops are not listed: their work is in the op they joined.
  for (const char* folded : {"rope", "kv_write", "rope_kv_write", "mlp_norm", "silu_mul"})
    EXPECT_THROW(a1.op(folded), Error) << folded;
  // One switch at a time. --fuse norm: qkv (norm), rope, kv_write, attention, o, gate_up (norm),
  // silu_mul, down = 8; outside embedding (with the first layer's sums), gather_rows,
  // final_norm, lm_head = 4: 32 x 8 + 4 = 260.
  // --fuse silu,rope_kv: attn_norm, qkv (RoPE + KV store), attention, o, mlp_norm, gate_up,
  // down (SiLU·mul) = 7; outside 4: 32 x 7 + 4 = 228.
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                         CostOptions::ridge(Launch::graph, true, true, Fusions::parse("norm")))
                .kernels,
            260);
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                         CostOptions::ridge(Launch::graph, true, true, Fusions::parse("silu,rope_kv")))
                .kernels,
            228);

  // Separate q, k, v and gate, up weights, the default list: per layer attn_norm 1, q k v 3,
  // rope_kv_write 1, attention 1, o 1, mlp_norm 1, gate up 2, silu_mul 1, down 1 = 12; outside 4:
  // 32 x 12 + 4 = 388.
  const auto sep = CostOptions::ridge(Launch::eager, /*fused*/ false, /*pinned*/ false, kRopeKvOnly);
  const StepCost s1 = predict_step(llama2_7b(), h200, StepShape::decode(1, 192), sep);
  EXPECT_EQ(s1.kernels, 388);
  EXPECT_EQ(s1.op("qkv_proj").kernels, 96);
  EXPECT_EQ(s1.op("gate_up_proj").kernels, 64);
  // ... with all three: a norm, and SiLU·mul, fold only into a GEMM of one launch, so both block
  // norms and SiLU·mul still run alone; the final norm never folds (ridge takes a folded norm's
  // sums from the GEMM before it). Per layer attn_norm, q k v 3, rope_kv_write, attention, o,
  // mlp_norm, gate up 2, silu_mul, down = 12; outside 4: 32 x 12 + 4 = 388.
  const StepCost s1a = predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                                    CostOptions::ridge(Launch::eager, false, false, Fusions::all()));
  EXPECT_EQ(s1a.kernels, 388);
  EXPECT_EQ(s1a.op("attn_norm").kernels, 32);
  EXPECT_EQ(s1a.op("mlp_norm").kernels, 32);
  EXPECT_EQ(s1a.op("silu_mul").kernels, 32);
  EXPECT_EQ(s1a.op("final_norm").kernels, 1);
  // ... and with none: attn_norm, q k v 3, rope, kv_write, attention, o, mlp_norm, gate up 2,
  // silu_mul, down = 13; outside 4: 32 x 13 + 4 = 420.
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(1, 192),
                         CostOptions::ridge(Launch::eager, false, false, Fusions::none()))
                .kernels,
            420);

  // Decode bs64 (64 x 32 = 2048 blocks >= 528: no split): the default list, 9 per layer + 4 =
  // 292; all three too, since T = 64 > 16 folds nothing into a GEMM and R = 64 > 16 keeps the
  // final norm: 32 x 9 + 4 = 292.
  const auto ridge = CostOptions::ridge(Launch::graph, true, true, kRopeKvOnly);
  const auto all = CostOptions::ridge(Launch::graph, true, true, Fusions::all());
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(64, 192), ridge).kernels, 292);
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(64, 192), all).kernels, 292);
  // Prefill 2048 (2048 rows > 16: the general kernel): ceil(2048 / 64) = 32 row tiles x 32 heads
  // = 1024 blocks >= 528, no split. Default: 9 per layer + 4 = 292. All three: the same (one
  // logits row, but the final norm runs on gathered rows, which no GEMM left sums for).
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::prefill(2048), ridge).kernels, 292);
  const StepCost p2048 = predict_step(llama2_7b(), h200, StepShape::prefill(2048), all);
  EXPECT_EQ(p2048.kernels, 292);
  EXPECT_EQ(p2048.op("final_norm").kernels, 1);
  EXPECT_EQ(p2048.op("attn_norm").kernels, 32);
  // swiglu_gemm (opt-in): SiLU·mul in gate_up_proj's epilogue from 1024 rows: prefill 2048 loses
  // the 32 silu_mul kernels and gate_up_proj writes [T x f] instead of [T x 2f]; prefill 512 (below
  // CudaBackend::kSwigluGemmMinTokens) keeps them.
  Fusions with_epilogue = Fusions::all();
  with_epilogue.swiglu_gemm = true;
  const auto epi = CostOptions::ridge(Launch::graph, true, true, with_epilogue);
  const StepCost e2048 = predict_step(llama2_7b(), h200, StepShape::prefill(2048), epi);
  EXPECT_EQ(e2048.kernels, 292 - 32);
  EXPECT_THROW((void)e2048.op("silu_mul"), Error);
  EXPECT_LT(e2048.op("gate_up_proj").bytes, p2048.op("gate_up_proj").bytes);
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::prefill(512), epi).op("silu_mul").kernels,
            32);
  // Prefill 512: 8 x 32 = 256 blocks < 528 and 512 positions > 64: the general kernel splits and
  // launches its combine: 32 x (9 + 1) + 4 = 324.
  const StepCost p512 = predict_step(llama2_7b(), h200, StepShape::prefill(512), ridge);
  EXPECT_EQ(p512.kernels, 324);
  EXPECT_EQ(p512.op("attn_prefill").kernels, 64);
  // The roofline's minimal engine (the default plan): 1 + 32 x 10 + 3 = 324, as before.
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(1, 192)).kernels, 324);
  // A mixed step runs one attention kernel for both kinds of rows (unified_attention): the
  // general one (512 rows > 16), 8 x 32 + 1 x 32 = 288 blocks < 528, 512 positions > 64: split,
  // so kernel + combine in attn_prefill, none in attn_decode.
  StepShape mixed;
  mixed.seqs = {{512, 0, true}, {1, 300, true}};
  const StepCost m = predict_step(llama2_7b(), h200, mixed, sep);
  EXPECT_EQ(m.op("attn_prefill").kernels, 64);
  EXPECT_EQ(m.op("attn_decode").kernels, 0);
  EXPECT_GT(m.op("attn_decode").time, 0);  // its work still counts
  // With decodes enough to fill the SMs alone (200 x 32 KV heads >= 132), ridge's plan gives
  // them a decode-kernel launch of their own (CudaBackend::attention); the minimal engine of the
  // roofline (the default plan, no unified kernel) has its own decode launch anyway.
  StepShape many = mixed;
  for (int i = 0; i < 199; ++i) many.seqs.push_back({1, 300, true});
  const StepCost mm = predict_step(llama2_7b(), h200, many, sep);
  EXPECT_EQ(mm.op("attn_decode").kernels, 32);
  EXPECT_EQ(mm.op("attn_prefill").kernels, 64);  // alone, the chunk's 256 blocks still split
  EXPECT_EQ(mm.kernels, m.kernels + 32);
  CostOptions one_launch = sep;
  one_launch.kernels.mixed_decode_launch_blocks_per_sm = 0;
  EXPECT_EQ(predict_step(llama2_7b(), h200, many, one_launch).op("attn_decode").kernels, 0);
}

TEST(Execution, DecodeAttentionMergesItsSplitsTheGeneralKernelCombines) {
  // The decode attention kernel runs when every sequence has new tokens x group <= 16 rows, and
  // merges its KV splits itself; the general kernel launches a combine after a split. Default
  // fuse list, so 9 kernels per layer + 4 outside without a combine, 10 + 4 with one.
  const Hardware& h200 = db().get("h200");
  const auto ridge = CostOptions::ridge(Launch::graph, true, true, kRopeKvOnly);
  StepShape s16, s17;
  s16.seqs = {{16, 200, true}};
  s17.seqs = {{17, 200, true}};
  EXPECT_EQ(StepAggregate::of(s16).max_new_tokens, 16);
  // Llama-2-7B (group 1): a chunk of 16 on 200 cached is 16 rows: the decode kernel. Both chunks
  // split (as the general kernel counts them: 1 row tile x 32 KV heads = 32 < 528, 216 or 217
  // positions > 64). 16: 32 x 9 + 4 = 292; 17 rows: the general kernel and its combine,
  // 32 x 10 + 4 = 324.
  EXPECT_EQ(predict_step(llama2_7b(), h200, s16, ridge).kernels, 292);
  EXPECT_EQ(predict_step(llama2_7b(), h200, s16, ridge).op("attn_prefill").kernels, 32);
  EXPECT_EQ(predict_step(llama2_7b(), h200, s17, ridge).kernels, 324);
  EXPECT_EQ(predict_step(llama2_7b(), h200, s17, ridge).op("attn_prefill").kernels, 64);
  // Llama-3-8B (32 heads on 8 KV heads: group 4, 32 layers), where the 4 and 5 tokens (<= 8) also
  // take RoPE and the KV store into qkv_proj's epilogue (one kernel a layer fewer): 4 new tokens
  // make 16 rows (decode kernel, 32 x 8 + 4 = 260), 5 make 20 (general kernel: 1 tile x 4 x 8 =
  // 32 blocks < 528, 205 positions > 64, split: 32 x 9 + 4 = 292). Decode bs1 at context 192: 4
  // rows, the decode kernel: 260.
  const model::ModelConfig l3 = model::ModelConfig::named("llama-3-8b");
  StepShape c4, c5;
  c4.seqs = {{4, 200, true}};
  c5.seqs = {{5, 200, true}};
  EXPECT_EQ(predict_step(l3, h200, c4, ridge).kernels, 260);
  EXPECT_EQ(predict_step(l3, h200, c5, ridge).kernels, 292);
  EXPECT_EQ(predict_step(l3, h200, StepShape::decode(1, 192), ridge).kernels, 260);
  // A step aggregate built without max_new_tokens (0) and with a prefill sequence is taken as
  // 2 new tokens x group 4 = 8 rows: the decode kernel, no combine (260, where the 5 tokens that
  // c5 holds give 292 above).
  StepAggregate agg = StepAggregate::of(c5);
  agg.max_new_tokens = 0;
  EXPECT_EQ(predict_step(l3, h200, agg, ridge).kernels, 260);
}

// The decode attention kernel's dependent chain (docs/KERNELS.md, "Run 42"; Hardware::
// attention_block 2 us, attention_tile 0.67 us, attention_merge 1.5 us by default): a floor under
// its memory time where few (sequence, KV head) blocks each walk several tiles, split as ridge
// splits them (one wave of 2 blocks a SM, splits of at least 256 positions), in the achievable
// model only.
TEST(Execution, DecodeAttentionLatencyAtFewBlocks) {
  const Hardware& h200 = db().get("h200");  // 132 SMs: 264 resident attention blocks
  const CostOptions ridge = CostOptions::ridge(Launch::graph);
  // Batch 1 at context 192: 193 positions, 4 tiles; 32 blocks would split 9 ways (264 / 32,
  // rounded up) but splits are at least 4 tiles: 1 split, one wave of 32 blocks of 4 tiles:
  // 2 + 4 x 0.67 = 4.68 us a layer, 149.76 us over 32 layers. Its KV, 32 x 193 x 16 KB = 101 MB,
  // streams in 101e6 / (4.8e12 x 0.7) = 30 us: latency-bound.
  const OpCost b1 =
      predict_step(llama2_7b(), h200, StepShape::decode(1, 192), ridge).op("attn_decode");
  EXPECT_EQ(b1.bound, Bound::latency);
  EXPECT_NEAR(b1.t_latency, 32 * 4.68e-6, 1e-12);
  EXPECT_NEAR(b1.time, 32 * 4.68e-6 + 32 * 2e-6, 1e-12);  // + 32 kernels' overhead
  // Batch 1 at context 2047: 2048 positions, 32 tiles; 9 splits rounded to one wave, 8 (264 /
  // 32), of 4 tiles: 8 active splits, 256 blocks, one wave: 2 + 4 x 0.67 + the merge 1.5 = 6.18 us
  // a layer.
  const OpCost b1l =
      predict_step(llama2_7b(), h200, StepShape::decode(1, 2047), ridge).op("attn_decode");
  EXPECT_NEAR(b1l.t_latency, 32 * 6.18e-6, 1e-12);
  // Batch 4 at context 1023: 1024 positions, 16 tiles; 128 blocks would split 3 ways (264 / 128,
  // rounded up). A graph launch rounds a count of 2-10 down to one wave (264 / 128 = 2), as
  // kernels::graph_attention_splits does: chunks of 8 tiles, 2 active, 256 blocks, one wave:
  // 2 + 8 x 0.67 + 1.5 = 8.86 us a layer. An eager launch keeps 3: chunks of max(ceil(16 / 3),
  // 4) = 6 tiles, 3 active, 384 blocks in 2 waves: 2 x (2 + 6 x 0.67) + 1.5 = 13.54 us.
  const OpCost b4g =
      predict_step(llama2_7b(), h200, StepShape::decode(4, 1023), ridge).op("attn_decode");
  EXPECT_NEAR(b4g.t_latency, 32 * 8.86e-6, 1e-12);
  const OpCost b4e =
      predict_step(llama2_7b(), h200, StepShape::decode(4, 1023), CostOptions::ridge(Launch::eager))
          .op("attn_decode");
  EXPECT_NEAR(b4e.t_latency, 32 * 13.54e-6, 1e-12);
  // Batch 1 at context 2047 eager: 9 splits of ceil(32 / 9) = 4 tiles, 8 active: the same 6.18
  // us as the graph's 8.
  EXPECT_NEAR(
      predict_step(llama2_7b(), h200, StepShape::decode(1, 2047), CostOptions::ridge(Launch::eager))
          .op("attn_decode")
          .t_latency,
      32 * 6.18e-6, 1e-12);
  // 512 sequences at context 1024: 16,384 blocks unsplit, 17 tiles each, 63 waves of 264: 63 x
  // (2 + 17 x 0.67) = 843.57 us a layer; their KV, 512 x 1025 x 16 KB = 8.6 GB a layer, takes 2.56
  // ms at 4.8 TB/s x 0.7: memory-bound, the floor below it.
  const OpCost big =
      predict_step(llama2_7b(), h200, StepShape::decode(512, 1024), ridge).op("attn_decode");
  EXPECT_EQ(big.bound, Bound::memory);
  EXPECT_NEAR(big.t_latency, 32 * 63 * 13.39e-6, 1e-9);
  EXPECT_GT(big.time, big.t_latency);
  // Streaming, the first blocks' chain before the KV flows (one block and one tile, 2.67 us a
  // layer) adds to the stream: batch 16 at context 192, 512 blocks unsplit (>= 264 slots) in 2
  // waves of 4.68 us (9.36 us a layer of chain) against 16 x 193 x 16 KB + q and out = 50.86 MB a
  // layer at 4.8 TB/s x 0.7 = 15.1 us: memory-bound at 15.1 + 2.67 us a layer.
  const OpCost b16 =
      predict_step(llama2_7b(), h200, StepShape::decode(16, 192), ridge).op("attn_decode");
  EXPECT_EQ(b16.bound, Bound::memory);
  EXPECT_NEAR(b16.bytes, 32.0 * (16 * 193 * 16384 + 2 * 16 * 4096 * 2), 1);
  EXPECT_NEAR(b16.t_latency, 32 * 2 * 4.68e-6, 1e-12);
  EXPECT_NEAR(b16.t_fill, 32 * 2.67e-6, 1e-12);
  EXPECT_NEAR(b16.time, b16.bytes / (4.8e12 * 0.7) + 32 * 2.67e-6 + 32 * 2e-6, 1e-12);
  // The roofline (no efficiencies) has no floor: the bare KV stream.
  CostOptions roof = ridge;
  roof.achievable = false;
  const OpCost r1 =
      predict_step(llama2_7b(), h200, StepShape::decode(1, 192), roof).op("attn_decode");
  EXPECT_EQ(r1.bound, Bound::memory);
  EXPECT_LT(r1.time, b1.time);
  EXPECT_NEAR(
      predict_step(llama2_7b(), h200, StepShape::decode(16, 192), roof).op("attn_decode").time,
      b16.bytes / 4.8e12 + 32 * 2e-6, 1e-12);  // no fill either
  // The minimal engine's plan models no chain.
  CostOptions minimal;
  minimal.achievable = true;
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(1, 192), minimal)
                .op("attn_decode")
                .t_latency,
            0.0);
  // The figures are hardware fields: a profile overrides them.
  Hardware slow = h200;
  slow.attention_tile_s = 2e-6;
  EXPECT_NEAR(
      predict_step(llama2_7b(), slow, StepShape::decode(1, 192), ridge).op("attn_decode").t_latency,
      32 * 10e-6, 1e-12);
}

TEST(Execution, RidgeFoldsNormsAndSiluIntoGemmsUpTo16Tokens) {
  // Llama-2-7B (h = q = kv = 4096, f = 11008, V = 32000, 32 layers, bf16: 2 bytes everywhere),
  // ridge with fused weights and all three fusions, decode at context 0 (1 KV position: no
  // split). The arithmetic below at the skinny kernel's limit of 16 tokens; ridge runs the
  // fusions up to 8 (CudaBackend::kFusedMaxTokens), checked at the end.
  const Hardware& h200 = db().get("h200");
  auto ridge = CostOptions::ridge(Launch::graph, true, true, Fusions::all());
  ridge.kernels.norm_prologue_max_rows = ridge.kernels.silu_prologue_max_rows = 16;
  const StepCost t16 = predict_step(llama2_7b(), h200, StepShape::decode(16, 0), ridge);
  const StepCost t17 = predict_step(llama2_7b(), h200, StepShape::decode(17, 0), ridge);
  // Kernels: T = 16: 6 per layer (qkv, rope_kv_write, attention, o, gate_up, down) + embedding
  // (its rows' sums of squares kept for the first layer's folded attn norm), gather_rows,
  // final_norm, lm_head = 32 x 6 + 4 = 196. T = 17: 9 per layer + 4 = 292.
  EXPECT_EQ(t16.kernels, 196);
  EXPECT_EQ(t17.kernels, 292);
  for (const char* folded : {"mlp_norm", "silu_mul"}) {
    EXPECT_THROW(t16.op(folded), Error) << folded;
    EXPECT_NO_THROW(t17.op(folded)) << folded;
  }
  EXPECT_THROW(t16.op("attn_norm"), Error);
  EXPECT_EQ(t17.op("attn_norm").kernels, 32);
  // The embedding at T = 16: table rows 16 x 4096 x 2 = 131,072 read, x 131,072 written, and
  // the sums for the first layer's norm, 16 rows x ceil(4096 / 256) = 16 partial sums x 4 =
  // 1,024 B: 263,168 B; at T = 17 (nothing folded) 2 x 17 x 4096 x 2 = 278,528 B.
  EXPECT_NEAR(t16.op("embedding").bytes, 263168.0, 1e-6);
  EXPECT_NEAR(t17.op("embedding").bytes, 278528.0, 1e-6);
  // qkv_proj at T = 16 with the norm as a 1/rms scale, per layer: weights 12288 x 4096 x 2 =
  // 100,663,296 + x 16 x 4096 x 2 = 131,072 + the sums of squares left by down_proj, 16 rows x
  // 4096 / 16 partial sums x 4 = 16,384 + out 16 x 12288 x 2 = 393,216 = 101,203,968 B.
  EXPECT_NEAR(t16.op("qkv_proj").bytes, 32.0 * 101203968, 1);
  // FLOPs: 2 x 16 x 12288 x 4096 = 1,610,612,736 (the norm's own arithmetic is gone).
  EXPECT_NEAR(t16.op("qkv_proj").flops, 32.0 * 1610612736.0, 1);
  // T = 17: 100,663,296 + 17 x 4096 x 2 = 139,264 + 17 x 12288 x 2 = 417,792 = 101,220,352 B; the
  // norm alone (plain RMSNorm: read x, write h, and its weight): 2 x 17 x 4096 x 2 + 8,192 =
  // 286,720 B.
  EXPECT_NEAR(t17.op("qkv_proj").bytes, 32.0 * 101220352, 1);
  EXPECT_NEAR(t17.op("attn_norm").bytes, 32.0 * 286720, 1);
  // o_proj reads and writes the residual stream in its epilogue, at T = 1: 4096 x 4096 x 2 =
  // 33,554,432 + in 8,192 + out 8,192 + the residual read 8,192 + the sums of squares for the MLP
  // norm, 256 x 4 = 1,024 = 33,580,032 B (the minimal engine's o_proj: 33,570,816, its add in
  // the norm).
  const StepCost t1 = predict_step(llama2_7b(), h200, StepShape::decode(1, 0), ridge);
  EXPECT_NEAR(t1.op("o_proj").bytes, 32.0 * 33580032, 1);
  // down_proj at T = 16 (SiLU·mul in gate_up_proj's epilogue): weights 4096 x 11008 x 2 =
  // 90,177,536 + its output 16 x 11008 x 2 = 352,256 + out 131,072 + residual 131,072 + sums
  // 16,384 = 90,808,320 B. T = 17: 90,177,536
  // + the SiLU·mul output 17 x 11008 x 2 = 374,272 + out 139,264 + residual 139,264 = 90,830,336,
  // and silu_mul alone 3 x 17 x 11008 x 2 = 1,122,816 B.
  EXPECT_NEAR(t16.op("down_proj").bytes, 32.0 * 90808320, 1);
  EXPECT_NEAR(t17.op("down_proj").bytes, 32.0 * 90830336, 1);
  EXPECT_NEAR(t17.op("silu_mul").bytes, 32.0 * 1122816, 1);
  // RoPE + KV store in one kernel at T = 16: q, k, v read 16 x 12288 x 2 = 393,216, q and k
  // written back 16 x 8192 x 2 = 262,144, K and V to the pool 16 x 8192 x 2 = 262,144: 917,504 B.
  EXPECT_NEAR(t16.op("rope_kv_write").bytes, 32.0 * 917504, 1);
  // The LM head of 16 rows (the final norm runs alone): 32000 x 4096 x 2 = 262,144,000 + h rows
  // 131,072 + fp32 logits 16 x 32000 x 4 = 2,048,000 = 264,323,072 B. Gather: x's 16 rows read
  // and written, 2 x 131,072 = 262,144 B. At T = 17 the final norm on 17 rows: 2 x 139,264 +
  // 8,192 = 286,720 B.
  EXPECT_NEAR(t16.op("lm_head").bytes, 264323072.0, 1);
  EXPECT_NEAR(t16.op("gather_rows").bytes, 262144.0, 1);
  EXPECT_NEAR(t17.op("final_norm").bytes, 286720.0, 1);

  // Folding saves exactly what is no longer written and read back, at the same T = 16 against
  // --fuse none: per folded norm h written and read back (2 x 16 x 4096 x 2 = 262,144 B) and the
  // norm weight (8,192), less the sums written by one GEMM and read by the next (2 x 16,384):
  // 237,568 B; SiLU·mul: the gate|up product written and read back (2 x 16 x 22016 x 2 =
  // 1,409,024, its output now the GEMM's); k re-read between RoPE and the store (16 x 4096 x 2 =
  // 131,072). The first layer's attn norm needs no kernel either (the embedding leaves its sums),
  // but the embedding writes them: 16 rows x ceil(4096 / 256) = 16 partial sums x 4 = 1,024 B.
  // The plan's per-layer ops charge the sums to all 32 layers, at h / 16 partial sums a row (the
  // model reads the embedding's 16 a row in the first layer and writes none in the last):
  //   32 x (2 x 237,568 + 1,409,024 + 131,072) - 1,024 = 64,486,400 B fewer.
  const StepCost u16 = predict_step(llama2_7b(), h200, StepShape::decode(16, 0),
                                    CostOptions::ridge(Launch::graph, true, true, Fusions::none()));
  EXPECT_EQ(u16.kernels, 32 * 10 + 4);  // 10 per layer, 4 outside
  // The attention norms: 32 kernels of 2 x 131,072 + 8,192 = 270,336 B against none, and 16,384 B
  // of sums read by each of the 32 folded qkv_projs: 32 x 270,336 - 32 x 16,384 = 8,126,464 B.
  EXPECT_NEAR(u16.op("attn_norm").bytes + u16.op("qkv_proj").bytes - t16.op("qkv_proj").bytes,
              8126464.0, 1);
  EXPECT_NEAR(u16.bytes - t16.bytes, 64486400.0, 1);
  // gate_up_proj at T = 16 with both: weights 22016 x 4096 x 2 = 180,355,072 + x 131,072 + sums
  // 16,384 + its output [16 x 11008] 352,256 = 180,854,784 B; FLOPs + 5 x 16 x 11008 = 880,640.
  EXPECT_NEAR(t16.op("gate_up_proj").bytes, 32.0 * 180854784, 1);
  EXPECT_NEAR(t16.op("gate_up_proj").flops, 32.0 * (2.0 * 16 * 22016 * 4096 + 880640), 1);
  // The default list (rope_kv only) at T = 16: 9 per layer + 4 = 292 kernels, and of those
  // savings only k's re-read: 32 x 131,072 = 4,194,304 B fewer than --fuse none.
  const StepCost d16 = predict_step(llama2_7b(), h200, StepShape::decode(16, 0),
                                    CostOptions::ridge(Launch::graph, true, true, kRopeKvOnly));
  EXPECT_EQ(d16.kernels, 292);
  EXPECT_NEAR(u16.bytes - d16.bytes, 4194304.0, 1);
  // As built (the default list): folded up to 8 tokens, RoPE + the KV store in qkv_proj too,
  // 32 x 5 + 4 = 164; at 9, 32 x 9 + 4 = 292.
  const auto as_built = CostOptions::ridge(Launch::graph);
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(8, 0), as_built).kernels, 164);
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(9, 0), as_built).kernels, 292);
}

TEST(Execution, RidgeFoldsANormOnlyWhereTheModelFoldsItsWeight) {
  // --fuse norm runs a block's input norm in the GEMM only as the 1/rms scale of a weight the norm
  // weight was folded into at load (Backend::fold_norm_weight; LlamaModel folds q|k|v only
  // without biases, gate|up always), with the sums of squares the GEMM before it left
  // (norm_sums_in_epilogue) or, in the first layer, the embedding (norm_sums_from_embedding):
  // never the final norm, which runs on gathered rows. The minimal engine's plan (the default)
  // folds wherever its rows allow; ridge's does not.
  const model::ModelConfig smol = model::ModelConfig::named("smollm2-135m");  // tied, no bias
  const model::ModelConfig qwen = model::ModelConfig::named("qwen2-7b");      // biases, untied
  ASSERT_TRUE(smol.tied_embeddings && !smol.qkv_bias);
  ASSERT_TRUE(qwen.qkv_bias && !qwen.tied_embeddings);
  KernelPlan minimal;
  minimal.norm_prologue_max_rows = 16;
  EXPECT_TRUE(minimal.attn_norm_folded(qwen, 1));
  EXPECT_TRUE(minimal.final_norm_folded(smol, 1));
  const KernelPlan plan = KernelPlan::ridge(true, true, Fusions::all());
  EXPECT_TRUE(plan.norm_sums_in_epilogue && plan.norm_sums_from_embedding);
  EXPECT_FALSE(plan.attn_norm_folded(qwen, 1));  // biased q|k|v
  EXPECT_TRUE(plan.attn_norm_folded(smol, 1));
  EXPECT_TRUE(plan.mlp_norm_folded(1));          // gate|up: always
  EXPECT_FALSE(plan.final_norm_folded(smol, 1)); // no sums for the gathered rows
  EXPECT_FALSE(plan.final_norm_folded(qwen, 1));
  EXPECT_FALSE(plan.mlp_norm_folded(17));        // 17 rows > 16
  EXPECT_FALSE(KernelPlan::ridge(true, true, Fusions::none()).attn_norm_folded(smol, 1));

  const Hardware& h200 = db().get("h200");
  const auto all = CostOptions::ridge(Launch::graph, true, true, Fusions::all());
  // SmolLM2-135M (30 layers, h = q = 576, 9 heads on 3 KV heads: group 3, kv = 192, V = 49152,
  // tied), decode bs1 at context 192: 1 row x group 3 = 3 <= 16, the decode attention kernel (no
  // combine). All three fusions: per layer qkv_proj (norm; RoPE and the KV store in its
  // epilogue) 1, attention 1, o_proj 1, gate_up_proj (norm) 1, down_proj (SiLU·mul) 1 = 5;
  // outside embedding 1 (with the first layer's sums: no attn_norm kernel), gather_rows 1,
  // final_norm 1, lm_head 1 = 4: 30 x 5 + 4 = 154, tied or not.
  const StepCost st = predict_step(smol, h200, StepShape::decode(1, 192), all);
  model::ModelConfig smol_untied = smol;
  smol_untied.tied_embeddings = false;
  const StepCost su = predict_step(smol_untied, h200, StepShape::decode(1, 192), all);
  EXPECT_EQ(st.kernels, 154);
  EXPECT_EQ(su.kernels, 154);
  for (const char* folded : {"mlp_norm", "silu_mul"}) {
    EXPECT_THROW(st.op(folded), Error) << folded;
    EXPECT_THROW(su.op(folded), Error) << folded;
  }
  EXPECT_THROW(st.op("attn_norm"), Error);
  EXPECT_EQ(st.op("final_norm").kernels, 1);
  EXPECT_EQ(su.op("final_norm").kernels, 1);
  // final_norm of R = 1 row (plain RMSNorm: read x, write h, its weight): 2 x 576 x 2 = 2,304 +
  // 576 x 2 = 1,152 = 3,456 B; 4 x 576 = 2,304 FLOPs.
  EXPECT_NEAR(st.op("final_norm").bytes, 3456.0, 1e-6);
  EXPECT_NEAR(st.op("final_norm").flops, 2304.0, 1e-6);
  // lm_head, tied or not: weights 49152 x 576 x 2 = 56,623,104 + h 576 x 2 = 1,152 + fp32 logits
  // 49152 x 4 = 196,608 = 56,820,864 B; 2 x 49152 x 576 = 56,623,104 FLOPs.
  EXPECT_NEAR(st.op("lm_head").bytes, 56820864.0, 1e-6);
  EXPECT_NEAR(st.op("lm_head").flops, 56623104.0, 1e-6);
  EXPECT_NEAR(su.op("lm_head").bytes, 56820864.0, 1e-6);

  // Qwen2-7B (28 layers, h = q = 3584, 28 heads on 4 KV heads: group 7, kv = 512, f = 18944,
  // q|k|v biases, untied), decode bs1 at context 192: 7 rows <= 16, the decode kernel. All three:
  // per layer attn_norm 1 (biased q|k|v: it runs alone), qkv_proj 1, rope_kv_write 1 (biased:
  // not in qkv_proj's epilogue either), attention 1, o_proj 1, gate_up_proj (norm) 1, down_proj
  // (SiLU·mul) 1 = 7; outside embedding, gather_rows, final_norm, lm_head = 4: 28 x 7 + 4 = 200.
  // Without biases the attention norm folds too, the first layer's with the embedding's sums,
  // and RoPE + the KV store join qkv_proj: 28 x 5 + 4 = 144.
  const StepCost qb = predict_step(qwen, h200, StepShape::decode(1, 192), all);
  model::ModelConfig qwen_nobias = qwen;
  qwen_nobias.qkv_bias = false;
  const StepCost qn = predict_step(qwen_nobias, h200, StepShape::decode(1, 192), all);
  EXPECT_EQ(qb.kernels, 200);
  EXPECT_EQ(qn.kernels, 144);
  EXPECT_EQ(qb.op("attn_norm").kernels, 28);
  EXPECT_THROW(qn.op("attn_norm"), Error);
  for (const char* folded : {"mlp_norm", "silu_mul"}) {
    EXPECT_THROW(qb.op(folded), Error) << folded;
    EXPECT_THROW(qn.op(folded), Error) << folded;
  }
  // attn_norm per layer: 2 x 3584 x 2 = 14,336 + 3584 x 2 = 7,168 = 21,504 B.
  EXPECT_NEAR(qb.op("attn_norm").bytes, 28.0 * 21504, 1e-6);
  // qkv_proj per layer, N = 3584 + 2 x 512 = 4608: weights 4608 x 3584 x 2 = 33,030,144 + h 3584
  // x 2 = 7,168 + out 4608 x 2 = 9,216 = 33,046,528 B. Folded (no biases): + the sums of
  // squares, 3584 / 16 = 224 partial sums x 4 = 896 B, + K and V to the pool from the epilogue,
  // 2 x 512 x 2 = 2,048 B: 33,049,472 B.
  EXPECT_NEAR(qb.op("qkv_proj").bytes, 28.0 * 33046528, 1e-6);
  EXPECT_NEAR(qn.op("qkv_proj").bytes, 28.0 * 33049472, 1e-6);
  // Without biases the step saves per layer the attention norm (21,504 B), less the sums read by
  // qkv_proj and written by down_proj (2 x 896), less the sums the embedding writes for the
  // first layer's (ceil(3584 / 256) = 14 partial sums x 4 = 56 B): 28 x 21,504 - 28 x 1,792 - 56
  // = 551,880 B; and the rope_kv_write kernel's traffic but for the pool writes, which
  // qkv_proj's epilogue makes: q, k and v read (4608 x 2 = 9,216) and q and k written back (4096
  // x 2 = 8,192): 28 x 17,408 = 487,424 B. 1,039,304 B in all.
  EXPECT_NEAR(qb.bytes - qn.bytes, 1039304.0, 1e-3);
}

// A 2-layer model on a device so fast that every kernel's work is negligible next to its 2 us
// overhead, so that step times are launch costs alone.
struct Tiny {
  model::ModelConfig cfg;
  Hardware hw;
  Tiny() {
    cfg = llama2_7b();
    cfg.n_layers = 2, cfg.hidden = 64, cfg.n_heads = 1, cfg.n_kv_heads = 1, cfg.head_dim = 64;
    cfg.ffn = 128, cfg.vocab = 256;
    hw = db().get("h200");
    hw.memory_bw = 1e14;            // the largest bytes of a step (the 64 KiB LM head) take < 1 ns
    hw.dense_flops["bf16"] = 1e17;
    hw.kernel_overhead_s = 2e-6;
    hw.launch_overhead_s = 10e-6;
    hw.gemm_launch_overhead_s = 20e-6;
  }
};

TEST(Execution, EagerLaunchesStallTheGpuGraphsDoNot) {
  const Tiny t;
  // Default plan, 2 layers: embedding 1 + 2 x 10 + final norm, LM head, sampling 3 = 24 kernels,
  // 9 of them GEMMs (4 per layer + the LM head). Each kernel: 2 us of GPU time.
  CostOptions graph, eager;
  eager.launch = Launch::eager;
  const StepCost g = predict_step(t.cfg, t.hw, StepShape::decode(1, 10), graph);
  const StepCost e = predict_step(t.cfg, t.hw, StepShape::decode(1, 10), eager);
  EXPECT_EQ(g.kernels, 24);
  // Graph: one launch (10 us) then 24 nodes of 2 us = 58 us.
  EXPECT_NEAR(g.time, 58e-6, 0.01e-6);
  EXPECT_NEAR(g.t_launch_stall, 10e-6, 1e-12);
  // Eager: the GPU always waits for the host, so the step ends 2 us after the last issue:
  //   15 launches x 10 us + 9 GEMM calls x 20 us + 2 us = 332 us.
  EXPECT_NEAR(e.time, 332e-6, 0.01e-6);
  EXPECT_NEAR(e.t_launch_stall, 332e-6 - 48e-6, 0.01e-6);
  EXPECT_NEAR(e.t_gpu, 48e-6, 0.01e-6);
  // Without a measured cuBLASLt cost GEMMs launch like any kernel: 24 x 10 + 2 = 242 us.
  Hardware plain = t.hw;
  plain.gemm_launch_overhead_s.reset();
  EXPECT_NEAR(predict_step(t.cfg, plain, StepShape::decode(1, 10), eager).time, 242e-6, 0.01e-6);
}

TEST(Execution, RidgeFusedDecodeOnTheTinyModel) {
  const Tiny t;
  // ridge (fused weights), decode bs1 at context 10 (11 KV positions <= 64: no split). The
  // default list (rope_kv only): per layer attn_norm, qkv_proj (RoPE and the KV store in its
  // epilogue), attention, o_proj, mlp_norm, gate_up_proj, silu_mul, down_proj = 8; outside:
  // embedding, gather_rows, final_norm, lm_head = 4. 2 x 8 + 4 = 20 kernels, 9 of them GEMMs (4
  // per layer + the LM head). The work (< 100 KB at 1e14 B/s) is below 10 ns in all.
  const StepCost g = predict_step(t.cfg, t.hw, StepShape::decode(1, 10),
                                  CostOptions::ridge(Launch::graph, true, true, kRopeKvOnly));
  const StepCost e = predict_step(t.cfg, t.hw, StepShape::decode(1, 10),
                                  CostOptions::ridge(Launch::eager, true, true, kRopeKvOnly));
  EXPECT_EQ(g.kernels, 20);
  // The decode attention kernel's chain (Hardware defaults, docs/KERNELS.md "Run 42" to "Run
  // 44"): one wave of (sequence, KV head) blocks of 1 tile (11 positions), attention_block 2 us +
  // 1 x attention_tile 0.67 us = 2.67 us a layer, far above its work.
  EXPECT_EQ(g.op("attn_decode").bound, Bound::latency);
  EXPECT_NEAR(g.op("attn_decode").t_latency, 2 * 2.67e-6, 1e-12);
  // Graph: one launch 10 us + 20 nodes x 2 us + 2 layers x 2.67 us of attention = 55.34 us.
  EXPECT_NEAR(g.t_gpu + g.t_launch_stall, 55.34e-6, 0.02e-6);
  // Eager: 11 launches x 10 us + 9 GEMM calls x 20 us + the last kernel's 2 us = 292 us.
  EXPECT_NEAR(e.t_gpu + e.t_launch_stall, 292e-6, 0.02e-6);
  // All three fusions: per layer qkv_proj, attention, o_proj, gate_up_proj, down_proj = 5;
  // outside: embedding (with the first layer's sums: no attn_norm kernel), gather_rows,
  // final_norm, lm_head = 4. 2 x 5 + 4 = 14 kernels, still 9 GEMMs. Graph: 10 + 14 x 2 + 2 x
  // 2.67 (attention's chain) = 43.34 us (the minimal engine's 24 kernels: 58 us); eager: 5 x 10
  // + 9 x 20 + 2 = 232 us (332 us), attention's 2.67 us hidden behind the next launch's 10.
  const auto all = Fusions::all();
  const StepCost ga = predict_step(t.cfg, t.hw, StepShape::decode(1, 10),
                                   CostOptions::ridge(Launch::graph, true, true, all));
  const StepCost ea = predict_step(t.cfg, t.hw, StepShape::decode(1, 10),
                                   CostOptions::ridge(Launch::eager, true, true, all));
  EXPECT_EQ(ga.kernels, 14);
  EXPECT_NEAR(ga.t_gpu + ga.t_launch_stall, 43.34e-6, 0.02e-6);
  EXPECT_NEAR(ea.t_gpu + ea.t_launch_stall, 232e-6, 0.02e-6);
}

TEST(Execution, HostCopiesOfTheStep) {
  // ridge as built without pinned staging: 7 pageable plan uploads at host_copy_latency 10 us,
  // then the logits down: 10 us + R x V x 4 bytes at host_copy_bandwidth 10 GB/s.
  // Llama-2-7B decode bs64: 64 x 32000 x 4 = 8,192,000 B -> 819.2 us; t_host = 70 + 10 + 819.2.
  const Hardware& h200 = db().get("h200");
  const StepCost p = predict_step(llama2_7b(), h200, StepShape::decode(64, 192),
                                  CostOptions::ridge(Launch::eager, false, false));
  EXPECT_NEAR(p.t_host, 899.2e-6, 0.01e-6);
  // Pinned staging: one packed upload queued like a launch (launch_overhead 4 us), the logits
  // into pinned memory at 25 GB/s: 8.192e6 / 25e9 = 327.68 us; 4 + 10 + 327.68 = 341.68 us.
  const StepCost q = predict_step(llama2_7b(), h200, StepShape::decode(64, 192),
                                  CostOptions::ridge(Launch::graph, true, true));
  EXPECT_NEAR(q.t_host, 341.68e-6, 0.01e-6);
  // The roofline charges none.
  EXPECT_EQ(predict_step(llama2_7b(), h200, StepShape::decode(64, 192)).t_host, 0);
}

TEST(Execution, AchievableEfficiencies) {
  const Hardware& h200 = db().get("h200");
  // o_proj of Llama-2-7B at one token (memory-bound): per layer 4096 x 4096 x 2 B of weights +
  // 4096 x 2 B in + 4096 x 2 B out = 33,570,816 B; x 32 layers = 1,074,266,112 B.
  //   roofline: / 4.8e12 B/s = 223.806 us, + 32 kernels x 2 us = 287.806 us;
  //   achievable (gemm_memory 0.9 in data/hardware.json): 223.806 / 0.9 = 248.673 us + 64 us.
  CostOptions ach;
  ach.achievable = true;
  const StepCost r = predict_step(llama2_7b(), h200, StepShape::decode(1, 192));
  const StepCost a = predict_step(llama2_7b(), h200, StepShape::decode(1, 192), ach);
  EXPECT_NEAR(r.op("o_proj").time, 287.806e-6, 0.001e-6);
  EXPECT_NEAR(a.op("o_proj").time, 312.673e-6, 0.001e-6);
  EXPECT_DOUBLE_EQ(a.op("o_proj").e_mem, 0.9);
  // Prefill 2048 on an H100, the qkv GEMM (compute-bound): T_math 6.670 ms / wave efficiency
  // 1536/1584 (see CostModel.WaveQuantization) / gemm_math 0.97 + 64 us.
  const StepCost q = predict_step(llama2_7b(), db().get("h100"), StepShape::prefill(2048), ach);
  EXPECT_NEAR(q.op("qkv_proj").time, 6.5970e12 / 989e12 / (1536.0 / 1584.0) / 0.97 + 64e-6, 2e-6);
  // Decode attention (memory-bound, attention_memory 0.7): Llama-2-7B bs1 at context 192 reads
  // 193 tokens x 32 layers x 2 x 4096 x 2 B = 101,187,584 B of KV + q and out 32 x 2 x 4096 x 2 B
  // = 524,288 B: 101,711,872 B / 4.8e12 = 21.190 us / 0.7 = 30.271 us + 32 x 2 us.
  EXPECT_NEAR(a.op("attn_decode").time, 101711872.0 / 4.8e12 / 0.7 + 64e-6, 0.001e-6);
  // Elementwise (0.6): silu_mul at one token: 32 x 3 x 11008 x 2 B = 2,113,536 B -> 0.4403 us
  // / 0.6 = 0.7338 us + 64 us.
  EXPECT_NEAR(a.op("silu_mul").time, 2113536.0 / 4.8e12 / 0.6 + 64e-6, 0.001e-6);
}

TEST(Execution, SplitLaunchesAddUp) {
  // q, k, v as three launches at one token on an H200 (all memory-bound): the bytes of the three
  // (3 x 4096 x 4096 x 2 + 3 x 4096 x 2 in + 3 x 4096 x 2 out per layer) equal those of the fused
  // launch but for the input, read three times: per layer 100,663,296 + 24,576 + 24,576 B vs
  // 100,663,296 + 8,192 + 24,576. Times: bytes / 4.8e12 + kernels x 2 us.
  const Hardware& h200 = db().get("h200");
  CostOptions sep, fused;
  sep.kernels.qkv_matmuls = 3;
  const OpCost s = predict_step(llama2_7b(), h200, StepShape::decode(1, 0), sep).op("qkv_proj");
  const OpCost f = predict_step(llama2_7b(), h200, StepShape::decode(1, 0), fused).op("qkv_proj");
  EXPECT_NEAR(s.bytes, 32.0 * (100663296 + 24576 + 24576), 1);
  EXPECT_NEAR(f.bytes, 32.0 * (100663296 + 8192 + 24576), 1);
  EXPECT_EQ(s.kernels, 96);
  EXPECT_NEAR(s.time, 32.0 * (100663296 + 24576 + 24576) / 4.8e12 + 96 * 2e-6, 1e-9);
  EXPECT_EQ(s.n, 12288);
}

TEST(Execution, OneGemmForTheKernelBenchmark) {
  // M=1, N=K=4096 on an H200: 4096 x 4096 x 2 + 4096 x 2 + 4096 x 2 = 33,570,816 B / 4.8e12 =
  // 6.99392 us + 2 us of kernel overhead; achievable: 6.99392 / 0.9 + 2 = 9.77102 us.
  const Hardware& h200 = db().get("h200");
  EXPECT_NEAR(predict_gemm(h200, 1, 4096, 4096).time, 8.99392e-6, 1e-11);
  CostOptions ach;
  ach.achievable = true;
  EXPECT_NEAR(predict_gemm(h200, 1, 4096, 4096, ach).time, 9.77102e-6, 1e-11);
  // M=N=K=8192 (compute-bound): 2 x 8192^3 = 1.0995e12 FLOP / 989e12 = 1.11173 ms; tiles
  // 64 x 64 = 4096 on 132 SMs = 31.03 -> 32 waves: 4096 / 4224 = 0.96970.
  const OpCost big = predict_gemm(h200, 8192, 8192, 8192);
  EXPECT_EQ(big.bound, Bound::compute);
  EXPECT_NEAR(big.wave_efficiency, 4096.0 / 4224.0, 1e-12);
  EXPECT_NEAR(big.time, 2.0 * 8192.0 * 8192 * 8192 / 989e12 / (4096.0 / 4224.0) + 2e-6, 1e-9);
  EXPECT_THROW(predict_gemm(h200, 0, 1, 1), Error);
}

TEST(Execution, HardwareCarriesLaunchHostAndEfficiencyFields) {
  // data/hardware.json defaults: kernel_overhead 2 us, launch_overhead 4 us, host_copy_latency
  // 10 us, host_copy_bandwidth 10 GB/s, pinned 25 GB/s; efficiencies 0.97 0.9 0.4 0.7 0.6.
  const Hardware& h = db().get("h200");
  EXPECT_DOUBLE_EQ(h.kernel_overhead_s, 2e-6);
  EXPECT_DOUBLE_EQ(h.launch_overhead_s, 4e-6);
  EXPECT_FALSE(h.gemm_launch_overhead_s.has_value());
  EXPECT_DOUBLE_EQ(h.gemm_launch_s(), 4e-6);
  EXPECT_DOUBLE_EQ(h.host_copy_latency_s, 10e-6);
  EXPECT_DOUBLE_EQ(h.host_copy_bw, 10e9);
  EXPECT_DOUBLE_EQ(h.pinned_copy_bw, 25e9);
  EXPECT_DOUBLE_EQ(h.efficiency.gemm_math, 0.97);
  EXPECT_DOUBLE_EQ(h.efficiency.gemm_memory, 0.9);
  EXPECT_DOUBLE_EQ(h.efficiency.attention_math, 0.4);
  EXPECT_DOUBLE_EQ(h.efficiency.attention_memory, 0.7);
  EXPECT_DOUBLE_EQ(h.efficiency.elementwise, 0.6);
  EXPECT_DOUBLE_EQ(to_si("fraction", 85, "%"), 0.85);

  // What `ridge bench ceilings --out` writes (the same fields and units), merged over h200.
  auto prof = make_profile("h200-measured", "h200", "NVIDIA H200 (measured by ridge bench ceilings)",
                           {{"memory_bandwidth", 4.31, "TB/s", "test"},
                            {"dense_flops.bf16", 801.5, "TFLOP/s", "test"},
                            {"memory", 140.4, "GiB", "test"},
                            {"l2", 60, "MiB", "test"},
                            {"sms", 132, "count", "test"},
                            {"kernel_overhead", 1.25, "us", "test"},
                            {"launch_overhead", 2.5, "us", "test"},
                            {"gemm_launch_overhead", 6.0, "us", "test"},
                            {"host_copy_latency", 12, "us", "test"},
                            {"host_copy_bandwidth", 9.5, "GB/s", "test"},
                            {"pinned_copy_bandwidth", 48, "GB/s", "test"},
                            {"efficiency.attention_memory", 55, "%", "test"}});
  prof["measurements"] = {{"read_bw_bytes_s", 4.31e12}};  // raw figures beside the entry
  const auto path = (std::filesystem::temp_directory_path() / "ridge-perf-ceilings-test.json").string();
  write_profile(path, prof);
  const Hardware m = db().resolve(path);
  std::filesystem::remove(path);
  EXPECT_EQ(m.id, "h200-measured");
  EXPECT_DOUBLE_EQ(m.memory_bw, 4.31e12);
  EXPECT_DOUBLE_EQ(m.peak("bf16"), 801.5e12);
  EXPECT_DOUBLE_EQ(m.peak("fp8"), 1979e12);  // inherited
  EXPECT_DOUBLE_EQ(m.memory_bytes, 140.4 * 1073741824.0);
  EXPECT_DOUBLE_EQ(*m.l2_bytes, 60.0 * 1048576);
  EXPECT_DOUBLE_EQ(m.kernel_overhead_s, 1.25e-6);
  EXPECT_DOUBLE_EQ(m.launch_overhead_s, 2.5e-6);
  EXPECT_DOUBLE_EQ(m.gemm_launch_s(), 6e-6);
  EXPECT_DOUBLE_EQ(m.host_copy_latency_s, 12e-6);
  EXPECT_DOUBLE_EQ(m.host_copy_bw, 9.5e9);
  EXPECT_DOUBLE_EQ(m.pinned_copy_bw, 48e9);
  EXPECT_DOUBLE_EQ(m.efficiency.attention_memory, 0.55);
  EXPECT_DOUBLE_EQ(m.efficiency.gemm_memory, 0.9);  // the default, not overridden

  // Without a base the profile must hold every required field; then it stands alone.
  auto alone = make_profile("lab-gpu", "", "A lab GPU",
                            {{"memory_bandwidth", 1, "TB/s", "t"}, {"dense_flops.bf16", 100, "TFLOP/s", "t"},
                             {"memory", 24, "GiB", "t"}});
  HardwareDb copy = db();
  copy.merge(alone, "alone.json");
  EXPECT_DOUBLE_EQ(copy.get("lab-gpu").memory_bw, 1e12);
  EXPECT_DOUBLE_EQ(copy.get("lab-gpu").launch_overhead_s, 4e-6);  // the defaults apply

  // Errors name the field.
  nlohmann::json bad = make_profile("x", "h200", "x", {{"efficiency.gemm", 0.5, "fraction", "t"}});
  try {
    copy.merge(bad, "bad.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("efficiency.gemm"), std::string::npos) << e.what();
  }
  bad = make_profile("y", "h200", "y", {{"efficiency.gemm_math", 2.5, "fraction", "t"}});
  EXPECT_THROW(copy.merge(bad, "bad.json"), Error);  // above 1.5: not plausible
}

TEST(Execution, GpuNamesMatchTheirEntries) {
  // Names as cudaGetDeviceProperties reports them.
  EXPECT_EQ(match_entry(db(), "NVIDIA H200"), "h200");
  EXPECT_EQ(match_entry(db(), "NVIDIA H100 80GB HBM3"), "h100-sxm");
  EXPECT_EQ(match_entry(db(), "NVIDIA A100-SXM4-80GB"), "a100-sxm");
  EXPECT_EQ(match_entry(db(), "NVIDIA B200"), "b200");
  EXPECT_EQ(match_entry(db(), "NVIDIA GB200"), "gb200");  // not b200 inside gb200
  EXPECT_EQ(match_entry(db(), "NVIDIA GeForce RTX 4090"), "");
}

TEST(Execution, PersistentDecodeKernelIsOneOpOfTheLayersBytes) {
  // BackendOptions::decode_kernel (KernelPlan::persistent_decode): a batch-1 decode step runs every
  // layer in one kernel. Llama-2-7B on the h200 entry (4.8 TB/s, gemm_memory 0.9, kernel_overhead
  // 2 us) with layer_sync set to 16 us, decode bs1 at context 192, ridge's plan with the default
  // fusions.
  Hardware h200 = db().get("h200");
  h200.layer_sync_s = 16e-6;
  const StepShape s = StepShape::decode(1, 192);
  const StepCost chain =
      predict_step(llama2_7b(), h200, s, CostOptions::ridge(Launch::graph, true, true, Fusions{}));
  const StepCost kern = predict_step(llama2_7b(), h200, s,
                                     CostOptions::ridge(Launch::graph, true, true, Fusions{}, true));
  // Outside the layers: embedding, gather_rows of x, final_norm, lm_head (the logits go to the
  // host): with the layers' one kernel, 5 launches; no per-layer op is left.
  std::vector<std::string> names;
  for (const OpCost& o : kern.ops) names.emplace_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding", "decode_layers", "gather_rows",
                                             "final_norm", "lm_head"}));
  EXPECT_EQ(kern.kernels, 5);
  const OpCost& dl = kern.op("decode_layers");
  EXPECT_EQ(dl.kernels, 1);
  // Its bytes are the bytes of what it replaced: every per-layer op of the layer-by-layer plan
  // (the first layer's norm runs in its q|k|v GEMV there too, on the embedding's sums: no op of
  // its own).
  EXPECT_THROW(chain.op("attn_norm"), Error);
  double folded = 0, folded_flops = 0;
  for (const OpCost& o : chain.ops)
    if (o.per_layer) folded += o.bytes, folded_flops += o.flops;
  EXPECT_DOUBLE_EQ(dl.bytes, folded);
  EXPECT_DOUBLE_EQ(dl.flops, folded_flops);
  // By hand: weights per layer (12288 + 4096 + 22016) x 4096 + 4096 x 11008 = 202,375,168 at 2
  // bytes, x 32 = 12.952 GB; the KV of 193 positions, 2 x 4096 x 2 bytes each, x 32 = 0.101 GB;
  // activations a few MB: ~13.058 GB.
  EXPECT_NEAR(dl.bytes, 13.058e9, 0.01e9);
  // Memory-bound at the GEMV's efficiency, one kernel's overhead, 32 x 16 us of layer sync:
  // 13.058e9 / (4.8e12 x 0.9) = 3.0227 ms + 2 us + 0.512 ms = 3.5367 ms.
  EXPECT_EQ(dl.bound, Bound::memory);
  EXPECT_NEAR(dl.time, dl.bytes / (4.8e12 * 0.9) + 2e-6 + 32 * 16e-6, 1e-12);
  EXPECT_NEAR(dl.time, 3.5367e-3, 0.005e-3);
  EXPECT_NEAR(dl.t_overhead, 2e-6 + 32 * 16e-6, 1e-12);
  // The ops outside the layers are the chain's, unchanged.
  for (const char* name : {"embedding", "gather_rows", "final_norm", "lm_head"})
    EXPECT_DOUBLE_EQ(kern.op(name).time, chain.op(name).time) << name;

  // Only batch-1 decode steps run it: a batch of 2 and a prefill are costed as before.
  for (const StepShape& other : {StepShape::decode(2, 192), StepShape::prefill(128)}) {
    const StepCost a = predict_step(llama2_7b(), h200, other,
                                    CostOptions::ridge(Launch::graph, true, true, Fusions{}));
    const StepCost b = predict_step(llama2_7b(), h200, other,
                                    CostOptions::ridge(Launch::graph, true, true, Fusions{}, true));
    EXPECT_EQ(a.ops.size(), b.ops.size());
    EXPECT_DOUBLE_EQ(a.time, b.time);
  }

  // One layer: the final norm and the LM head also run once per layer, and stay outside. By hand:
  // 202,375,168 weights at 2 bytes = 404.75 MB, the KV 3.16 MB, activations ~0.2 MB: ~408.1 MB.
  model::ModelConfig one = llama2_7b();
  one.n_layers = 1;
  const StepCost k1 = predict_step(one, h200, s,
                                   CostOptions::ridge(Launch::graph, true, true, Fusions{}, true));
  names.clear();
  for (const OpCost& o : k1.ops) names.emplace_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding", "decode_layers", "gather_rows",
                                             "final_norm", "lm_head"}));
  EXPECT_NEAR(k1.op("decode_layers").bytes, 408.1e6, 0.5e6);
  EXPECT_NEAR(k1.op("decode_layers").t_overhead, 2e-6 + 16e-6, 1e-12);

  // The field as a profile sets it (and data/hardware.json's estimate); out of range is refused
  // naming it.
  EXPECT_DOUBLE_EQ(db().get("h200").layer_sync_s, 16e-6);
  EXPECT_DOUBLE_EQ(db().get("h200").attention_tile_s, 0.67e-6);
  EXPECT_DOUBLE_EQ(db().get("h200").attention_block_s, 2e-6);
  EXPECT_DOUBLE_EQ(db().get("h200").attention_merge_s, 1.5e-6);
  auto prof = make_profile("h200-sync", "h200", "x", {{"layer_sync", 18.5, "us", "test"}});
  HardwareDb copy = db();
  copy.merge(prof, "sync.json");
  EXPECT_DOUBLE_EQ(copy.get("h200-sync").layer_sync_s, 18.5e-6);
  try {
    copy.merge(make_profile("h200-bad", "h200", "x", {{"layer_sync", 2, "ms", "t"}}), "bad.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_sync"), std::string::npos) << e.what();
  }
  copy.merge(make_profile("h200-attn", "h200", "x", {{"attention_tile", 1.3, "us", "test"}}),
             "attn.json");
  EXPECT_DOUBLE_EQ(copy.get("h200-attn").attention_tile_s, 1.3e-6);
  EXPECT_DOUBLE_EQ(copy.get("h200-attn").attention_block_s, 2e-6);  // the base's
  try {
    copy.merge(make_profile("h200-bad2", "h200", "x", {{"attention_merge", 1, "ms", "t"}}),
               "bad2.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_merge"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge::perf
