// The per-op roofline model against hand-derived numbers. Each expected value is worked out in
// the comment beside it from the model shape (ModelConfig::named) and data/hardware.json.
#include "ridge/perf/cost_model.h"

#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "perf/fixtures.h"

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

using test::db;
using test::llama2_7b;
model::ModelConfig llama3_8b() { return model::ModelConfig::named("llama-3-8b"); }

CostOptions with(const char* precision) {
  CostOptions o;
  o.precision = Precision::named(precision);
  return o;
}

TEST(CostModel, WaveQuantization) {
  // 132 SMs x 1 block: 132 tiles = 1 full wave; 133 tiles = 2 waves, 133/264 = 0.504 busy.
  EXPECT_DOUBLE_EQ(wave_efficiency(132, 132, 1), 1.0);
  EXPECT_DOUBLE_EQ(wave_efficiency(133, 132, 1), 133.0 / 264.0);
  // 2 resident blocks per SM: 264 slots; 300 tiles -> 2 waves of 264: 300/528.
  EXPECT_DOUBLE_EQ(wave_efficiency(300, 132, 2), 300.0 / 528.0);
  EXPECT_DOUBLE_EQ(wave_efficiency(5, 0, 1), 1.0);  // SM count unknown: no correction

  // Prefill of 2048 tokens on an H100, Llama-2-7B qkv GEMM: M=2048, N=3*4096=12288, K=4096,
  // tiles 128x128: 16 x 96 = 1536 tiles on 132 SMs = 11.6 -> 12 waves: 1536/1584 = 0.9697.
  const StepCost c = predict_step(llama2_7b(), db().get("h100"), StepShape::prefill(2048));
  const OpCost& qkv = c.op("qkv_proj");
  EXPECT_EQ(qkv.m, 2048);
  EXPECT_EQ(qkv.n, 12288);
  EXPECT_EQ(qkv.k, 4096);
  EXPECT_NEAR(qkv.wave_efficiency, 1536.0 / 1584.0, 1e-12);
  EXPECT_EQ(qkv.bound, Bound::compute);
  // T_math = 32 layers * 2*2048*12288*4096 / 989e12 = 6.597e12 / 989e12 = 6.670 ms; /0.9697 = 6.879 ms;
  // + 32 launches x 2 us = 64 us -> 6.943 ms.
  EXPECT_NEAR(qkv.flops, 32.0 * 2 * 2048 * 12288 * 4096, 1);
  EXPECT_NEAR(qkv.time, 6.5970e12 / 989e12 / (1536.0 / 1584.0) + 64e-6, 2e-6);
}

TEST(CostModel, EveryOpOfAStepIsThere) {
  StepShape s;
  s.seqs = {{512, 0, true}, {1, 700, true}, {1, 300, true}, {256, 1024, false}};
  const StepCost c = predict_step(llama3_8b(), db().get("h200"), s);
  for (const char* name : {"embedding", "attn_norm", "qkv_proj", "rope", "kv_write", "attn_prefill",
                           "attn_decode", "o_proj", "mlp_norm", "gate_up_proj", "silu_mul", "down_proj",
                           "final_norm", "lm_head", "sampling"}) {
    const OpCost& o = c.op(name);
    EXPECT_GE(o.time, std::max(o.t_math, o.t_mem)) << name;
    EXPECT_GT(o.bytes, 0) << name;
  }
  EXPECT_EQ(c.tokens, 512 + 1 + 1 + 256);
  EXPECT_EQ(c.logits_rows, 3);
  EXPECT_EQ(c.op("lm_head").m, 3);
  // Decode attention reads each sequence's KV once: (700+1) + (300+1) = 1002 tokens x 32 layers x
  // 2 (K,V) x 8 KV heads x 128 x 2 bytes = 1002 x 131072 B, plus q and o (2 x 2 x 4096 x 2 B x 32).
  EXPECT_NEAR(c.op("attn_decode").bytes, 1002.0 * 131072 + 32.0 * 2 * 2 * 4096 * 2, 1);
  // Prefill attention pairs: 512*513/2 + (256*1024 + 256*257/2) = 131,328 + 295,040 = 426,368;
  // FLOPs = 32 layers x 4 x 32 heads x 128 x 426,368 = 6.986e12.
  EXPECT_NEAR(c.op("attn_prefill").flops, 32.0 * 4 * 32 * 128 * 426368, 1);
  // Bounds: lower = max(sum T_math, sum T_mem) <= prediction <= sum of both + overheads.
  EXPECT_LE(c.lower_bound, c.time);
  EXPECT_LE(c.time, c.upper_bound + 1e-12);
  EXPECT_THROW(predict_step(llama3_8b(), db().get("h200"), StepShape{}), Error);
  EXPECT_THROW(predict_step(llama3_8b(), db().get("rubin"), StepShape::decode(1, 0)), Error);  // no bf16
}

TEST(CostModel, DecodeTurnsComputeBoundNearTheCriticalIntensity) {
  // Scaling book: a (B x D) by (D x F) matmul has intensity 2BDF / (2DF + 2BD + 2BF) ~= B for
  // B << D, F; with weights only in the denominator it is exactly B, so decode of bf16 weights on
  // an H100 turns compute-bound at B = ceil(989e12 / 3.35e12) = ceil(295.2) = 296, and with
  // 1-byte (int8/fp8) weights and bf16 math at ceil(295.2 / 2) = 148.
  //
  // ridge's model also counts the activations each GEMM reads and writes (2 bytes each, the fp32
  // logits 4 bytes). For Llama-3-8B per decode row that is
  //   a = 32 x [(2*4096 + 2*6144) + (2*4096 + 2*4096) + (2*4096 + 2*28672) + (2*14336 + 2*4096)]
  //       + 2*4096 + 4*128256 = 4,977,664 bytes,
  // against weights P = 32 x (6144*4096 + 4096*4096 + 28672*4096 + 4096*14336) + 128256*4096
  //                    = 7,504,658,432 elements.
  // Intensity 2BP / (wb*P + a*B) >= CI  <=>  B >= CI*wb*P / (2P - CI*a):
  //   bf16 (wb=2): 295.224*2*7.5047e9 / (1.50093e10 - 295.224*4,977,664) = 327.27 -> 328
  //   w8a16 (wb=1): half of that, 163.63 -> 164
  // Both lie within 11% of the critical intensity (the activations' share), and the 1-byte weights
  // halve the batch exactly.
  const Hardware& h100 = db().get("h100");
  const int64_t b_bf16 = decode_compute_bound_batch(llama3_8b(), h100, with("bf16"));
  const int64_t b_w8 = decode_compute_bound_batch(llama3_8b(), h100, with("w8a16"));
  EXPECT_EQ(b_bf16, 328);
  EXPECT_EQ(b_w8, 164);
  EXPECT_NEAR(double(b_bf16) / h100.critical_intensity("bf16"), 1.0, 0.12);
  EXPECT_EQ(b_bf16, 2 * b_w8);
  // With fp8 math as well (w8a8, CI = 1979/3.35 = 590.7) the weights-only batch is back at 296;
  // the bf16 activations now weigh more against 1-byte weights, and the LM head (128256 x 4096 =
  // 525,336,576 elements) stays bf16 (Precision::head_bytes), so the weights' bytes are
  // P + 525,336,576 = 8,029,995,008:
  //   590.7 x 8.0300e9 / (1.50093e10 - 590.7 x 4,977,664) = 4.7437e12 / 1.2069e10 = 393.05 -> 394.
  const int64_t b_fp8 = decode_compute_bound_batch(llama3_8b(), h100, with("fp8"));
  EXPECT_EQ(b_fp8, 394);

  // At batch 64 every GEMM is memory-bound, at 1024 every one but the thinnest is compute-bound.
  const StepCost d64 = predict_step(llama3_8b(), h100, StepShape::decode(64, 0));
  for (const char* g : {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"})
    EXPECT_EQ(d64.op(g).bound, Bound::memory) << g;
  const StepCost d1k = predict_step(llama3_8b(), h100, StepShape::decode(1024, 0));
  EXPECT_EQ(d1k.op("gate_up_proj").bound, Bound::compute);
}

TEST(CostModel, PrefillFlopUtilizationRisesWhileBandwidthUtilizationFalls) {
  // One Llama-3-8B prompt of n tokens on an H100 (bf16). FLOPs by hand:
  //   GEMMs: 2 x 32 x (4096*6144 + 4096*4096 + 4096*28672 + 14336*4096) = 13.958 GFLOP per token,
  //          plus the LM head 2 x 4096 x 128256 = 1.0507 GFLOP for the one logits row;
  //   attention: 4 x 32 heads x 128 x n(n+1)/2 per layer, x 32 layers.
  // n = 32768: GEMMs 4.5737e14 + 1.05e9, attention 16384 x 32 x 536,887,296 = 2.8149e14,
  //   total 7.3886e14; attention share 0.381. T_math >= 7.3886e14 / 989e12 = 0.747 s.
  // n = 131072: attention 16384 x 32 x 8,590,000,128 = 4.5036e15, GEMMs 1.8295e15, share 0.711.
  // The memory-bound ops (norms, rope, silu, KV writes: bytes ~ linear in n) and the launch
  // overheads weigh less and less against the quadratic attention, so the FLOP utilization climbs
  // toward 100%, while bytes grow ~linearly and time quadratically: the bandwidth utilization falls.
  // That is the case for a GDDR prefill chip (Rubin CPX): HBM bandwidth is idle during prefill.
  const Hardware& h100 = db().get("h100");
  const auto cfg = llama3_8b();
  auto hand_flops = [](double n) {
    return 13.958e9 * n + 1.0507e9 + 32.0 * 4 * 32 * 128 * n * (n + 1) / 2;
  };
  double prev_fu = 0, prev_bu = 2;
  std::printf("  Llama-3-8B prefill on H100 (bf16)\n  %8s %10s %8s %8s %10s\n", "tokens", "time s",
              "FLOP %", "BW %", "attn share");
  for (int64_t n : {512, 2048, 8192, 32768, 65536, 131072}) {
    const StepCost c = predict_step(cfg, h100, StepShape::prefill(n));
    EXPECT_NEAR(c.flops / hand_flops(double(n)), 1.0, 0.002) << n;
    std::printf("  %8ld %10.4f %8.1f %8.1f %10.3f\n", long(n), c.time, 100 * c.flop_utilization,
                100 * c.bw_utilization, c.op("attn_prefill").flops / c.flops);
    EXPECT_GT(c.flop_utilization, prev_fu) << n;
    EXPECT_LT(c.bw_utilization, prev_bu) << n;
    prev_fu = c.flop_utilization, prev_bu = c.bw_utilization;
    EXPECT_LE(c.flop_utilization, 1.0);
  }
  const StepCost c32 = predict_step(cfg, h100, StepShape::prefill(32768));
  EXPECT_NEAR(c32.op("attn_prefill").flops / c32.flops, 0.381, 0.002);
  EXPECT_GT(c32.flop_utilization, 0.9);          // past ~32k: > 90% of peak
  EXPECT_GT(c32.time, 7.3886e14 / 989e12);       // and never faster than the roofline
  const StepCost c128 = predict_step(cfg, h100, StepShape::prefill(131072));
  EXPECT_GT(c128.flop_utilization, 0.95);
  EXPECT_LT(c128.bw_utilization, 0.10);          // > 90% of the HBM bandwidth idle
  const StepCost c512 = predict_step(cfg, h100, StepShape::prefill(512));
  EXPECT_GT(c512.bw_utilization, 0.5);
}

TEST(CostModel, EnergyPerTokenAndTheHousehold) {
  // Llama-2-7B decode at 1,024 tokens of context, bf16, power at the TDP (the datasheets give no
  // idle figure; a measured profile refines it). Bytes per step by hand:
  //   weights 2 x 6,738,415,616 params = 13,476,831,232 B, less the embedding table, of which only
  //   the B looked-up rows are read (32000 x 4096 x 2 = 262,144,000 B): 13,214,687,232 B;
  //   KV read: B x 1025 tokens x 32 layers x 2 x 4096 x 2 B = B x 537,395,200 B;
  //   activations: ~11 MB at B=1, ~0.7 GB at B=64 (taken from the model, < 2% of the total).
  // Launch overhead: 324 kernels (1 + 32 x 10 + 3) x 2 us = 0.648 ms.
  //   H100, B=1: (13.2147e9 + 0.5374e9 + 0.0115e9) / 3.35e12 = 4.108 ms + 0.648 = 4.756 ms;
  //              x 700 W = 3.33 J per token.
  //   H100, B=64: (13.2147e9 + 34.393e9 + 0.727e9) / 3.35e12 = 14.43 ms + 0.648 = 15.08 ms;
  //              x 700 W / 64 = 0.165 J per token.
  //   H200 (4.8 TB/s): B=1 13.763e9 / 4.8e12 + 0.648 ms = 3.515 ms -> 2.46 J;
  //                    B=64 48.335e9 / 4.8e12 + 0.648 ms = 10.72 ms -> 0.117 J.
  // One US household: 10,791 kWh/year x 3.6e6 J/kWh = 3.8848e10 J, which buys
  //   H100: 3.8848e10 / 3.33 = 1.17e10 tokens at batch 1, / 0.165 = 2.36e11 at batch 64.
  const auto cfg = llama2_7b();
  struct Case { const char* hw; int64_t batch; double joules; };
  const double household_j = 10791.0 * 3.6e6;
  std::printf("  Llama-2-7B decode, 1k context, power at TDP\n  %-8s %5s %10s %10s %16s\n", "GPU",
              "batch", "step ms", "J/token", "tokens/household");
  for (const Case& k : {Case{"h100", 1, 3.33}, Case{"h100", 64, 0.165}, Case{"h200", 1, 2.46},
                        Case{"h200", 64, 0.117}}) {
    const StepCost c = predict_step(cfg, db().get(k.hw), StepShape::decode(k.batch, 1024));
    const double jpt = c.energy_j / double(k.batch);
    std::printf("  %-8s %5ld %10.3f %10.4f %16.3e\n", k.hw, long(k.batch), c.time * 1e3, jpt,
                household_j / jpt);
    EXPECT_TRUE(c.energy_at_tdp);
    EXPECT_NEAR(jpt / k.joules, 1.0, 0.01) << k.hw << " " << k.batch;
  }
  const double j1 = predict_step(cfg, db().get("h100"), StepShape::decode(1, 1024)).energy_j;
  EXPECT_NEAR(household_j / j1 / 1.17e10, 1.0, 0.01);
  const double j64 = predict_step(cfg, db().get("h100"), StepShape::decode(64, 1024)).energy_j / 64;
  EXPECT_NEAR(household_j / j64 / 2.36e11, 1.0, 0.01);

  // With a measured idle power the model draws less than the TDP when units idle: the project's
  // H200 profile (80 W idle) at batch 1, where HBM is busy ~80% of the step.
  HardwareDb copy = db();
  const Hardware r = copy.resolve(std::string(RIDGE_SOURCE_DIR) + "/data/profiles/h200-ridge.json");
  const StepCost m = predict_step(cfg, r, StepShape::decode(1, 1024));
  EXPECT_FALSE(m.energy_at_tdp);
  EXPECT_GT(m.power_w, 80);
  EXPECT_LT(m.power_w, 700);
}

TEST(CostModel, PrecisionsAndBytes) {
  // Llama-3-8B KV per token: 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B; fp8 KV halves it.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(llama3_8b(), Precision::named("bf16")), 131072);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(llama3_8b(), Precision::named("fp8")), 65536);
  EXPECT_DOUBLE_EQ(Precision::named("fp4").weight_bytes, 0.5625);  // 4 bits + 8-bit scale / 16
  EXPECT_EQ(Precision::named("int8").name, "w8a16");
  EXPECT_THROW(Precision::named("fp3"), Error);
  auto q8 = llama2_7b();
  q8.weight_dtype = DType::q8_0;
  EXPECT_DOUBLE_EQ(Precision::of(q8).weight_bytes, 34.0 / 32.0);  // GGUF q8_0 block
}

TEST(CostModel, Fp8KeepsTheEmbeddingAndHeadInBf16) {
  // fp8 as ridge's --quantization fp8 (and vLLM's) holds it: the layers' projections in E4M3,
  // the embedding table and the LM head in bf16 at the bf16 peak.
  const auto cfg = llama2_7b();  // untied: 2 x 32000 x 4096 head/embedding parameters
  const Precision fp8 = Precision::named("fp8"), bf16 = Precision::named("bf16");
  const double head = 2.0 * 32000 * 4096, layers = double(cfg.param_count()) - head;
  EXPECT_DOUBLE_EQ(weight_bytes(cfg, fp8), layers * 1.0 + head * 2.0);
  EXPECT_DOUBLE_EQ(weight_bytes(cfg, bf16), double(cfg.param_count()) * 2.0);
  const Hardware h200 = db().get("h200");
  CostOptions o8, o16;
  o8.precision = fp8;
  o16.precision = bf16;
  const StepShape s = StepShape::decode(1, 512);
  const StepCost c8 = predict_step(cfg, h200, s, o8), c16 = predict_step(cfg, h200, s, o16);
  // The head reads the same bytes in both; each projection half of them.
  EXPECT_DOUBLE_EQ(c8.op("lm_head").bytes, c16.op("lm_head").bytes);
  EXPECT_DOUBLE_EQ(c8.op("embedding").bytes, c16.op("embedding").bytes);
  EXPECT_NEAR(c8.op("down_proj").bytes - 32.0 * 4096 * 11008 * 1.0,
              c16.op("down_proj").bytes - 32.0 * 4096 * 11008 * 2.0, 1.0);
  // And the head's math runs at the bf16 peak: the same compute term as the bf16 run's.
  EXPECT_DOUBLE_EQ(c8.op("lm_head").t_math, c16.op("lm_head").t_math);
  EXPECT_LT(c8.op("down_proj").t_math, c16.op("down_proj").t_math);

  // ridge's fp8 matmuls quantize their inputs in a kernel each (KernelPlan::activation_quant):
  // 4 a layer with fused q|k|v and gate|up; at 3 tokens each reads 3 x K bf16 values and writes
  // 3 x K codes and 3 scales: K = 4096 (h), 4096 (attention out), 4096 (h), 11008 (SwiGLU out).
  CostOptions q = o8;
  q.kernels.activation_quant = true;
  const StepCost cq = predict_step(cfg, h200, StepShape::decode(3, 512), q);
  const OpCost& qa = cq.op("quantize_act");
  EXPECT_EQ(qa.kernels, 32 * 4);
  EXPECT_DOUBLE_EQ(qa.bytes, 32.0 * (3.0 * (3 * 4096 + 11008) * 3.0 + 4.0 * 3 * 4));
  EXPECT_THROW(c8.op("quantize_act"), Error);  // not without the flag
  // Below activation_quant_min_rows the GEMV quantizes its own input: no op, and the step is that
  // much cheaper.
  CostOptions g = q;
  g.kernels.activation_quant_min_rows = 5;
  const StepCost cg = predict_step(cfg, h200, StepShape::decode(3, 512), g);
  EXPECT_THROW(cg.op("quantize_act"), Error);
  EXPECT_LT(cg.time, cq.time);
  EXPECT_EQ(predict_step(cfg, h200, StepShape::decode(5, 512), g).op("quantize_act").kernels,
            32 * 4);
}

}  // namespace
}  // namespace ridge::perf
