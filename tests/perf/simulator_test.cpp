// The step simulator and planner: determinism, hand-checked single-request timings, the
// fixed-vs-adaptive prefill:decode split and the Rubin CPX comparison.
#include "ridge/perf/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "perf/fixtures.h"

#include "ridge/core/error.h"
#include "ridge/perf/planner.h"

namespace ridge::perf {
namespace {

using test::db;

ServingConfig disagg(int p, int d) {
  ServingConfig c;
  c.mode = ServingConfig::Mode::disagg_gpus;
  c.prefill_gpus = p, c.decode_gpus = d, c.token_budget = 8192, c.max_batch = 256;
  return c;
}

TEST(Simulator, LengthDistributions) {
  EXPECT_EQ(LengthDist::parse("1024").sample(*std::make_unique<std::mt19937_64>(1)), 1024);
  EXPECT_EQ(LengthDist::parse("uniform:512:2048").mean(), 1280);
  std::mt19937_64 rng(7);
  const auto d = LengthDist::parse("exp:300");
  double s = 0;
  for (int i = 0; i < 20000; ++i) s += double(d.sample(rng));
  EXPECT_NEAR(s / 20000, 300, 10);
  EXPECT_THROW(LengthDist::parse("gamma:3"), Error);
  EXPECT_THROW(LengthDist::parse("-5"), Error);
  // Lognormal as the serving benchmark draws: mean 256, sigma 0.9 of the log, capped at 8 x 256.
  // Its median is mean x exp(-sigma^2 / 2) = 170.8; with the cap c = 8 x mean its mean is
  // mean x Phi((ln 8 - sigma^2/2) / sigma) + c x (1 - Phi((ln 8 + sigma^2/2) / sigma)) = 254.0
  // (standard error of 40,000 draws: 1.4).
  const auto ln = LengthDist::parse("lognormal:256:0.9");
  EXPECT_EQ(ln.describe(), "lognormal:256:0.9");
  std::vector<double> draws;
  for (int i = 0; i < 40000; ++i) draws.push_back(double(ln.sample(rng)));
  const double mean = std::accumulate(draws.begin(), draws.end(), 0.0) / double(draws.size());
  std::nth_element(draws.begin(), draws.begin() + 20000, draws.end());
  EXPECT_NEAR(draws[20000], 256 * std::exp(-0.81 / 2), 6);
  auto phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double capped = 256 * phi((std::log(8.0) - 0.405) / 0.9) +
                        8 * 256 * (1 - phi((std::log(8.0) + 0.405) / 0.9));
  EXPECT_NEAR(mean, capped, 6);
  EXPECT_LE(*std::max_element(draws.begin(), draws.end()), 8 * 256);
  EXPECT_THROW(LengthDist::parse("lognormal:256"), Error);
}

TEST(Simulator, DeterministicForASeed) {
  const auto cfg = model::ModelConfig::named("llama-2-7b");
  Workload w;
  w.rate = 8, w.requests = 300, w.isl = LengthDist::parse("uniform:128:2048"), w.osl = LengthDist::parse("exp:200");
  w.prefix_share = 0.25;
  ServingConfig sc;
  sc.gpus = 2;
  const SimResult a = simulate(cfg, db().get("h200"), w, sc, {}, {});
  const SimResult b = simulate(cfg, db().get("h200"), w, sc, {}, {});
  EXPECT_EQ(a.makespan_s, b.makespan_s);
  EXPECT_EQ(a.ttft_p90, b.ttft_p90);
  EXPECT_EQ(a.tpot_p50, b.tpot_p50);
  w.seed = 2;
  const SimResult c = simulate(cfg, db().get("h200"), w, sc, {}, {});
  EXPECT_NE(a.makespan_s, c.makespan_s);
}

TEST(Simulator, SingleRequestTimesAreTheCostModelsSteps) {
  // One request alone: its TTFT is exactly one prefill step (budget 8192 >= 2048 tokens), its
  // TPOT the mean of its decode steps, each predicted by predict_step.
  const auto cfg = model::ModelConfig::named("llama-2-7b");
  const Hardware& h200 = db().get("h200");
  Workload w;
  w.requests = 1, w.rate = 1, w.isl = LengthDist::fixed(2048), w.osl = LengthDist::fixed(3);
  ServingConfig sc;
  sc.token_budget = 8192;
  const SimResult r = simulate(cfg, h200, w, sc, {}, {});
  const double prefill = predict_step(cfg, h200, StepShape::prefill(2048)).time;
  const double d1 = predict_step(cfg, h200, StepShape::decode(1, 2048)).time;  // 2nd token
  const double d2 = predict_step(cfg, h200, StepShape::decode(1, 2049)).time;  // 3rd token
  EXPECT_DOUBLE_EQ(r.ttft_p50, prefill);
  EXPECT_NEAR(r.tpot_p50, (d1 + d2) / 2, 1e-12);

  // Disaggregated 1P:1D over NVLink, Llama-3-8B, 4096-token prompt: its KV is
  // 4096 x 131,072 B = 536.9 MB; NVLink 4 moves 450 GB/s each way: 536.9e6 / 450e9 = 1.193 ms,
  // the stall between the first token and the decode batch.
  const auto l3 = model::ModelConfig::named("llama-3-8b");
  w.isl = LengthDist::fixed(4096), w.osl = LengthDist::fixed(16);
  const SimResult d = simulate(l3, db().get("h100"), w, disagg(1, 1), {}, {});
  EXPECT_NEAR(d.kv_transfer_mean_s, 4096.0 * 131072 / 450e9, 1e-9);
  EXPECT_NEAR(d.stall_p90, 1.193e-3, 1e-5);
  // Over PCIe 5 (64 GB/s each way) the same KV takes 8.39 ms.
  ServingConfig pc = disagg(1, 1);
  pc.kv_link = "pcie";
  EXPECT_NEAR(simulate(l3, db().get("h100"), w, pc, {}, {}).kv_transfer_mean_s, 4096.0 * 131072 / 64e9, 1e-9);
}

TEST(Simulator, FixedSplitIsOptimalOnlyInANarrowBand) {
  // Llama-3-8B on 8 H100s, disaggregated with P prefill and 8-P decode GPUs, SLO TTFT 2 s and
  // TPOT 50 ms at 90% attainment; ISL + OSL = 1056 tokens, the ratio swept from 32:1 to 1:32.
  // Goodput = highest Poisson rate meeting the SLO. The fixed split is the one that is best at
  // 1:1; "adaptive" takes the best split for each ratio.
  //
  // Hand-checked capacity bounds at the ends:
  //  32:1 (1024 in / 32 out): a prefill of 1024 tokens costs 13.958e9 x 1024 + 1.05e9 (LM head)
  //    + 32 x 4 x 32 x 128 x 1024 x 1025 / 2 (attention) = 1.4569e13 FLOP >= 14.73 ms at 989 TF,
  //    so one prefill GPU serves <= 67.9 req/s and P of them <= 67.9 P.
  //  1:32 (32 in / 1024 out): a decode GPU holds <= 256 sequences (batch cap); a step at batch
  //    256 and mean context ~544 reads 16.06e9 B of weights + 256 x 544 x 131,072 B of KV =
  //    34.3e9 B -> >= 10.2 ms, +0.65 ms launches = 10.9 ms; a request needs 1023 such steps:
  //    <= 256 / (1023 x 10.9e-3) = 23.0 req/s per decode GPU, <= 23.0 (8-P) in all.
  // The simulated goodputs stay under these bounds (10% slack: a finite window of 20 x TTFT lets
  // a rate ~5% over capacity pass before its queue breaks the SLO, and the rate search resolves
  // to 2^(1/16) = 4.4%).
  const auto cfg = model::ModelConfig::named("llama-3-8b");
  const Hardware& h100 = db().get("h100");
  Slo slo;
  slo.ttft_s = 2.0, slo.tpot_s = 0.05;
  struct Ratio { const char* name; int64_t isl, osl; };
  const std::vector<Ratio> ratios = {{"32:1", 1024, 32}, {"4:1", 845, 211}, {"1:1", 528, 528},
                                     {"1:4", 211, 845}, {"1:32", 32, 1024}};
  std::vector<std::vector<double>> g(ratios.size());  // [ratio][P-1]
  for (size_t i = 0; i < ratios.size(); ++i) {
    Workload w;
    w.isl = LengthDist::fixed(ratios[i].isl), w.osl = LengthDist::fixed(ratios[i].osl), w.duration_s = 10;
    for (int p = 1; p < 8; ++p) g[i].push_back(max_goodput(cfg, h100, w, disagg(p, 8 - p), {}, slo, 4).rate);
  }
  auto best_p = [&](size_t i) { return int(std::max_element(g[i].begin(), g[i].end()) - g[i].begin()) + 1; };
  const int fixed_p = best_p(2);  // the split tuned for 1:1
  std::printf("  goodput (req/s) of P prefill : 8-P decode H100s, Llama-3-8B, ISL+OSL = 1056\n  %6s", "ISL:OSL");
  for (int p = 1; p < 8; ++p) std::printf(" %6dP", p);
  std::printf(" | fixed %dP  adaptive  fixed/adaptive\n", fixed_p);
  int near_optimal = 0;
  for (size_t i = 0; i < ratios.size(); ++i) {
    std::printf("  %6s", ratios[i].name);
    for (double v : g[i]) std::printf(" %7.1f", v);
    const double fixed = g[i][size_t(fixed_p - 1)], adaptive = g[i][size_t(best_p(i) - 1)];
    std::printf(" | %8.1f %9.1f %8.0f%%\n", fixed, adaptive, 100 * fixed / adaptive);
    near_optimal += fixed >= 0.9 * adaptive ? 1 : 0;
  }
  // The hand bounds.
  for (int p = 1; p < 8; ++p) {
    EXPECT_LE(g[0][size_t(p - 1)], 1.10 * 67.9 * p) << p;
    EXPECT_LE(g[4][size_t(p - 1)], 1.10 * 23.0 * (8 - p)) << p;
  }
  // The optimum moves from prefill-heavy to decode-heavy splits as the output share grows ...
  EXPECT_GE(best_p(0), 6);
  EXPECT_LE(best_p(4), 2);
  for (size_t i = 1; i < ratios.size(); ++i) EXPECT_LE(best_p(i), best_p(i - 1)) << ratios[i].name;
  // ... so the fixed split is within 10% of the optimum in a narrow band only, and far off at
  // the prefill-heavy end.
  EXPECT_LE(near_optimal, 3);
  EXPECT_LT(g[0][size_t(fixed_p - 1)], 0.5 * g[0][size_t(best_p(0) - 1)]);
}

TEST(Simulator, RubinCpxForLongPrefill) {
  // Llama-3-70B in NVFP4 (weights 0.5625 B, fp8 KV, fp4 math: the only published Rubin and CPX
  // peaks are FP4) on 128k-token prompts with 1,024-token answers: one Rubin alone (chunked
  // prefill) vs one Rubin CPX doing the prefill + the Rubin decoding, KV over PCIe Gen6 x16.
  const auto cfg = model::ModelConfig::named("llama-3-70b");
  const Hardware& rubin = db().get("rubin");
  const Hardware& cpx = db().get("rubin-cpx");
  CostOptions opt;
  opt.precision = Precision::named("fp4");

  // Hand: prefill FLOPs of 131,072 tokens
  //   GEMMs 2 x 131072 x 80 x (8192*10240 + 8192*8192 + 8192*57344 + 28672*8192)
  //         = 2 x 131072 x 80 x 855,638,016 = 1.79441e16
  //   LM head 2 x 8192 x 128256 = 2.1e9; attention 80 x 4 x 64 x 128 x 131072 x 131073 / 2
  //   = 2.25180e16; total 4.04623e16 FLOP.
  //   Rubin (33.3 PF): >= 1.215 s; CPX (20 PF): >= 2.023 s; ratio 33.3/20 = 1.665.
  // The engine is taken as an optimized one (elementwise ops fused into the GEMMs): at a critical
  // intensity of 33.3e15 / 20.5e12 = 1624 (Rubin) and 20e15 / 2e12 = 10,000 (CPX) FLOP/byte,
  // unfused bf16 norms and SiLU would cost more than the GEMMs.
  // KV of one prompt: 131,072 x 80 layers x 2 x 1024 x 1 B = 21.47 GB; over PCIe Gen6 x16
  //   (~1 Tbit/s = 125 GB/s each way): 171.8 ms.
  const double flops = 1.79441e16 + 2.1e9 + 2.25180e16;
  opt.fuse_elementwise = true;
  const StepCost pr = predict_step(cfg, rubin, StepShape::prefill(131072), opt);
  EXPECT_NEAR(pr.flops / flops, 1.0, 0.002);
  EXPECT_GT(pr.time, flops / 33.3e15);
  EXPECT_LT(pr.time, 1.1 * flops / 33.3e15);  // compute-bound: within 10% of the FLOP bound
  // Rubin's HBM idles during the prefill: the bytes left (weights once, KV, the residual stream
  // and the GEMMs' bf16 activations) fill < 20% of 20.5 TB/s x time.
  EXPECT_LT(pr.bw_utilization, 0.20);

  Workload w;
  w.isl = LengthDist::fixed(131072), w.osl = LengthDist::fixed(1024), w.requests = 24, w.rate = 0.5;
  Slo slo;
  slo.ttft_s = 5.0, slo.tpot_s = 0.05;
  ServingConfig alone;
  alone.gpus = 1, alone.token_budget = 16384, alone.max_batch = 64;
  ServingConfig split = disagg(1, 1);
  split.prefill_hw = cpx, split.kv_link = "pcie", split.token_budget = 16384;
  const SimResult a = simulate(cfg, rubin, w, alone, opt, slo);
  const SimResult b = simulate(cfg, rubin, w, split, opt, slo);
  std::printf("  Llama-3-70B NVFP4, 24 prompts of 128k at 0.5 req/s\n");
  std::printf("  %-32s %9s %9s %9s %9s %12s %12s\n", "config", "TTFT p50", "TPOT p50", "KV xfer", "makespan",
              "HBM idle", "prefill HBM");
  for (const auto* r : {&a, &b})
    std::printf("  %-32s %8.2fs %7.1fms %7.0fms %8.1fs %11.0f%% %11.0f%%\n", r->config.c_str(), r->ttft_p50,
                1e3 * r->tpot_p50, 1e3 * r->kv_transfer_mean_s, r->makespan_s, 100 * r->hbm_idle,
                100 * r->prefill_hbm_idle);
  EXPECT_NEAR(b.kv_transfer_mean_s, 131072.0 * 80 * 2 * 1024 / 125e9, 1e-6);  // 171.8 ms
  // The HBM of the Rubin doing its own prefill sits idle > 75% of its prefill time.
  EXPECT_GT(a.prefill_hbm_idle, 0.75);
  // With the CPX taking the prefills the Rubin only decodes: its decode steps no longer wait
  // behind 16k-token chunks, so TPOT drops; the first token comes later (20 vs 33.3 PF).
  EXPECT_LT(b.tpot_p50, a.tpot_p50);
  EXPECT_GT(b.ttft_p50, a.ttft_p50);
  // Capacity: the highest sustainable rate of the pair vs the Rubin alone under a 5 s TTFT SLO.
  // No public price exists for either, so the test prints rates, not dollars. The model's answer
  // for one CPX next to one Rubin: the CPX's slower prefill (20 PF and 2 TB/s for the bf16
  // activations of 128k tokens: ~3 s a prompt vs ~1.5 s on the Rubin) caps the pair's rate under
  // this TTFT SLO; what the pair buys is decode TPOT (no prefill chunks in the decode steps) and
  // the Rubin's HBM given to decoding. NVIDIA's NVL144 CPX pairs them 1:1 too.
  w.requests = 0, w.duration_s = 60;
  const GoodputResult ga = max_goodput(cfg, rubin, w, alone, opt, slo, 5);
  const GoodputResult gb = max_goodput(cfg, rubin, w, split, opt, slo, 5);
  std::printf("  sustainable at TTFT <= 5 s: Rubin alone %.3f req/s (TPOT p50 %.1f ms), CPX + Rubin %.3f "
              "req/s (TPOT p50 %.1f ms)\n",
              ga.rate, 1e3 * ga.at.tpot_p50, gb.rate, 1e3 * gb.at.tpot_p50);
  EXPECT_GT(ga.rate, 0);
  EXPECT_GT(gb.rate, 0);
  EXPECT_LT(gb.at.tpot_p50, ga.at.tpot_p50);
}

TEST(Planner, RanksConfigurationsAndNamesTheBindingResource) {
  PlanRequest q;
  q.model = model::ModelConfig::named("llama-2-7b");
  q.model_name = "llama-2-7b";
  q.hw = db().get("h200");
  q.workload.isl = LengthDist::fixed(1024), q.workload.osl = LengthDist::fixed(128);
  q.workload.rate = 10, q.workload.duration_s = 10;
  q.gpus = 2, q.top = 4, q.search_iterations = 3;
  const PlanResult r = plan(q);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_TRUE(r.ranked.front().meets);
  ASSERT_TRUE(r.ranked.front().best.has_value());
  EXPECT_FALSE(r.ranked.front().at_rate.binding.empty());
  // Ranked by the highest sustainable rate per GPU among those searched.
  for (size_t i = 1; i < r.ranked.size() && r.ranked[i].best; ++i)
    EXPECT_GE(r.ranked[i - 1].best->rate_per_gpu, r.ranked[i].best->rate_per_gpu);
  const auto j = to_json(r);
  EXPECT_EQ(j["hardware"]["id"], "h200");
  EXPECT_NEAR(j["critical_intensity"].get<double>(), 206.0, 0.1);
  EXPECT_FALSE(j["ranked"].empty());
  EXPECT_NE(format_plan(r).find("binds"), std::string::npos);
  // Calibration table: predicted next to measured, with the error.
  const std::string t = format_calibration(r.decode_step, {{"step", r.decode_step.time * 1.5}, {"qkv_proj", 1e-3}});
  EXPECT_NE(t.find("-33%"), std::string::npos);  // predicted / measured - 1 = 1/1.5 - 1
}

// The engine's limits as ridge serve takes them (--max-num-seqs, --max-num-batched-tokens,
// --ctx-size): each one given replaces the planner's candidates for it, and the KV capacity in
// tokens bounds how many sequences run at once.
TEST(Planner, EngineLimitsPinTheCandidatesAndTheKvCapacity) {
  const auto searched = candidate_configs(1, std::nullopt);
  EXPECT_EQ(std::count_if(
                searched.begin(), searched.end(),
                [](const ServingConfig& c) { return c.mode == ServingConfig::Mode::aggregated; }),
            9);
  for (const auto& c : searched) EXPECT_EQ(c.kv_tokens, 0);
  const auto pinned = candidate_configs(1, std::nullopt, {384, 4096, 163840});
  int aggregated = 0;
  for (const auto& c : pinned) {
    EXPECT_EQ(c.max_batch, 384) << c.describe();
    EXPECT_EQ(c.token_budget, 4096) << c.describe();
    EXPECT_EQ(c.kv_tokens, 163840) << c.describe();
    EXPECT_NE(c.describe().find("KV 163840 tok"), std::string::npos) << c.describe();
    aggregated += c.mode == ServingConfig::Mode::aggregated;
  }
  EXPECT_EQ(aggregated, 1);
  // One limit alone: the others are still searched.
  const auto seqs = candidate_configs(1, std::nullopt, {128, 0, 0});
  std::vector<int64_t> budgets;
  for (const auto& c : seqs) {
    EXPECT_EQ(c.max_batch, 128) << c.describe();
    if (c.mode == ServingConfig::Mode::aggregated) budgets.push_back(c.token_budget);
  }
  EXPECT_EQ(budgets, (std::vector<int64_t>{512, 2048, 8192}));
  EXPECT_THROW(candidate_configs(1, std::nullopt, {-1, 0, 0}), Error);

  // Two requests of 1,000 + 100 tokens arriving together: a KV cache of 1,100 tokens runs them
  // one after the other (the second waits for the first's whole life), 2,200 side by side.
  const auto cfg = model::ModelConfig::named("llama-2-7b");
  const Hardware& h200 = db().get("h200");
  Workload w;
  w.arrival = Workload::Arrival::burst;
  w.isl = LengthDist::fixed(1000), w.osl = LengthDist::fixed(100);
  w.requests = 1;
  ServingConfig sc;
  sc.token_budget = 8192;
  const double one = simulate(cfg, h200, w, sc, {}, {}).makespan_s;
  w.requests = 2;
  sc.kv_tokens = 1100;
  const SimResult serial = simulate(cfg, h200, w, sc, {}, {});
  EXPECT_GE(serial.makespan_s, 2 * one * 0.999);
  EXPECT_GE(serial.ttft_p99, one * 0.99);  // the second prompt starts after the first's end
  sc.kv_tokens = 2200;
  const SimResult together = simulate(cfg, h200, w, sc, {}, {});
  EXPECT_LT(together.makespan_s, 1.2 * one);
  EXPECT_LT(together.ttft_p99, 0.2 * one);
  // A request larger than the cache, and a cache larger than the memory the weights leave, are
  // refused with their numbers.
  sc.kv_tokens = 1099;
  try {
    simulate(cfg, h200, w, sc, {}, {});
    ADD_FAILURE() << "a 1,100-token request ran in a 1,099-token cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1099"), std::string::npos) << e.what();
  }
  sc.kv_tokens = 1'000'000;  // 524 GB of Llama-2-7B's bf16 KV: more than an H200 holds
  try {
    simulate(cfg, h200, w, sc, {}, {});
    ADD_FAILURE() << "a 1M-token KV cache fit an H200";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1000000 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge::perf

namespace ridge::perf {
namespace {

// The power cap (CostOptions::power_cap, Hardware::capped_flops / capped_bandwidth): a step takes
// at least flops / capped_flops + bytes / capped_bandwidth, checked by hand on the step's own
// FLOPs and bytes; a step whose roofline time is already longer is left alone; the simulator
// names the cap as what binds and its energy is the TDP's.
TEST(PowerCap, StepTakesItsEnergyAtTheCap) {
  const auto cfg = model::ModelConfig::named("llama-2-7b");
  Hardware hw = db().get("h200");
  ASSERT_TRUE(hw.tdp_w.has_value());
  hw.capped_flops = 700e12, hw.capped_bandwidth = 4.0e12;
  CostOptions on;
  on.power_cap = true;
  // A prefill of 8192 tokens: GEMM-bound; its FLOPs alone at 700 TFLOP/s exceed its roofline time
  // at the datasheet's 989 TFLOP/s.
  const StepCost free = predict_step(cfg, hw, StepShape::prefill(8192, 64));
  const StepCost capped = predict_step(cfg, hw, StepShape::prefill(8192, 64), on);
  const double t_power = free.flops / 700e12 + free.bytes / 4.0e12;
  EXPECT_GT(t_power, free.time);
  EXPECT_TRUE(capped.power_bound);
  EXPECT_DOUBLE_EQ(capped.t_power, t_power);
  EXPECT_DOUBLE_EQ(capped.time, t_power);
  EXPECT_DOUBLE_EQ(capped.power_w, *hw.tdp_w);
  EXPECT_DOUBLE_EQ(capped.energy_j, *hw.tdp_w * t_power);
  // The bounds hold the prediction (lower <= time <= upper) with the cap too.
  EXPECT_LE(capped.lower_bound, capped.time);
  EXPECT_GE(capped.upper_bound, capped.time);
  EXPECT_GT(capped.upper_bound, free.upper_bound);
  EXPECT_EQ(to_json(capped)["power_bound"], true);
  EXPECT_DOUBLE_EQ(to_json(capped)["t_power_s"].get<double>(), t_power);
  // Batch-1 decode streams the weights at ~1 FLOP a byte: with the cap's bandwidth above
  // memory_bw (8 TB/s: streaming alone stays under the cap) its bound is below the roofline time,
  // which stands.
  hw.capped_bandwidth = 8.0e12;
  const StepCost d_free = predict_step(cfg, hw, StepShape::decode(1, 512));
  const StepCost d_cap = predict_step(cfg, hw, StepShape::decode(1, 512), on);
  EXPECT_FALSE(d_cap.power_bound);
  EXPECT_DOUBLE_EQ(d_cap.time, d_free.time);
  EXPECT_NEAR(d_cap.t_power, d_free.flops / 700e12 + d_free.bytes / 8.0e12, 1e-15);
  // fp8 math: the capped rate scales with the format's peak (twice bf16's on an H200).
  hw.capped_bandwidth = 4.0e12;
  CostOptions fp8 = on;
  fp8.precision = Precision::named("fp8");
  const StepCost f8 = predict_step(cfg, hw, StepShape::prefill(8192, 64), fp8);
  const double scale = hw.peak("fp8") / hw.peak("bf16");
  EXPECT_DOUBLE_EQ(f8.t_power, f8.flops / (700e12 * scale) + f8.bytes / 4.0e12);
  // Without the fields the option changes nothing.
  const Hardware& plain = db().get("h200");
  EXPECT_FALSE(plain.capped_flops.has_value());
  EXPECT_DOUBLE_EQ(predict_step(cfg, plain, StepShape::prefill(8192, 64), on).time, free.time);

  // An SM partition gets its share of the cap, as of the TDP.
  const Hardware quarter = hw.partition(0.25);
  EXPECT_DOUBLE_EQ(*quarter.capped_flops, 700e12 * 0.25);
  EXPECT_DOUBLE_EQ(*quarter.capped_bandwidth, 4.0e12 * 0.25);

  // Offline-like load: the capped simulation is slower and says the cap binds.
  Workload w;
  w.requests = 256, w.rate = 1e5, w.isl = LengthDist::fixed(128), w.osl = LengthDist::fixed(32);
  ServingConfig sc;
  sc.max_batch = 256, sc.token_budget = 8192;
  const SimResult rf = simulate(cfg, hw, w, sc, {}, {});
  const SimResult rc = simulate(cfg, hw, w, sc, on, {});
  EXPECT_LT(rc.output_tok_s, rf.output_tok_s);
  EXPECT_EQ(rc.binding.rfind("power cap", 0), 0u) << rc.binding;
  EXPECT_EQ(rf.binding.find("power cap"), std::string::npos) << rf.binding;
}

TEST(PowerCap, ProfileFieldsAreReadAndCheckedTogether) {
  auto both = make_profile("h200-cap", "h200", "x",
                           {{"power_capped_flops", 709, "TFLOP/s", "test"},
                            {"power_capped_bandwidth", 4.24, "TB/s", "test"}});
  HardwareDb copy = db();
  copy.merge(both, "cap.json");
  EXPECT_DOUBLE_EQ(*copy.get("h200-cap").capped_flops, 709e12);
  EXPECT_DOUBLE_EQ(*copy.get("h200-cap").capped_bandwidth, 4.24e12);
  try {
    copy.merge(make_profile("h200-half", "h200", "x", {{"power_capped_flops", 709, "TFLOP/s", "t"}}),
               "half.json");
    FAIL() << "one field without the other must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power_capped_bandwidth"), std::string::npos) << e.what();
  }
  try {
    copy.merge(make_profile("h200-unit", "h200", "x",
                            {{"power_capped_flops", 709, "TB/s", "t"},
                             {"power_capped_bandwidth", 4.24, "TB/s", "t"}}),
               "unit.json");
    FAIL() << "a bandwidth unit for FLOP/s must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power_capped_flops"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge::perf
