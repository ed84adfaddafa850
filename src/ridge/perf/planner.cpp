#include "ridge/perf/planner.h"

#include <cstdint>
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string ms(double s) { return fmt::format("{:.1f}", s * 1e3); }
std::string opt_num(double v, const char* f) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : std::string("n/a");
}

}  // namespace

std::vector<ServingConfig> candidate_configs(int gpus, const std::optional<Hardware>& prefill_hw,
                                             const ServeLimits& limits) {
  RIDGE_CHECK(gpus >= 1 && gpus <= 1024, "plan: --gpus {} is outside 1..1024", gpus);
  RIDGE_CHECK(
      limits.max_num_seqs >= 0 && limits.max_num_batched_tokens >= 0 && limits.kv_tokens >= 0,
      "plan: the engine's limits must be >= 0 (0: searched), got --max-num-seqs {}, "
      "--max-num-batched-tokens {}, --ctx-size {}",
      limits.max_num_seqs, limits.max_num_batched_tokens, limits.kv_tokens);
  auto pick = [](int64_t pinned, std::vector<int64_t> searched) {
    return pinned > 0 ? std::vector<int64_t>{pinned} : searched;
  };
  const int64_t budget1 = limits.max_num_batched_tokens > 0 ? limits.max_num_batched_tokens : 8192;
  const int64_t batch1 = limits.max_num_seqs > 0 ? limits.max_num_seqs : 256;
  std::vector<ServingConfig> out;
  auto add = [&](ServingConfig c) {
    c.kv_tokens = limits.kv_tokens;
    out.push_back(std::move(c));
  };
  for (int64_t budget : pick(limits.max_num_batched_tokens, {512, 2048, 8192}))
    for (int64_t batch : pick(limits.max_num_seqs, {64, 256, 512})) {
      ServingConfig c;
      c.mode = ServingConfig::Mode::aggregated;
      c.gpus = gpus, c.token_budget = budget, c.max_batch = batch;
      add(c);
    }
  for (int p = 1; p < gpus; ++p) {
    ServingConfig c;
    c.mode = ServingConfig::Mode::disagg_gpus;
    c.prefill_gpus = p, c.decode_gpus = gpus - p, c.token_budget = budget1, c.max_batch = batch1;
    add(c);
  }
  for (double f : {0.25, 0.5, 0.75}) {
    ServingConfig c;
    c.mode = ServingConfig::Mode::disagg_sms;
    c.gpus = gpus, c.prefill_fraction = f, c.token_budget = budget1, c.max_batch = batch1;
    add(c);
  }
  if (prefill_hw) {
    // Heterogeneous: the prefill device (e.g. Rubin CPX) next to the decode GPUs, as many of
    // each and half as many prefill devices; KV over PCIe when the prefill device has no NVLink.
    const std::string link = prefill_hw->links.count("nvlink") ? "nvlink" : "pcie";
    for (int p : {gpus, std::max(1, gpus / 2)}) {
      ServingConfig c;
      c.mode = ServingConfig::Mode::disagg_gpus;
      c.prefill_gpus = p, c.decode_gpus = gpus, c.token_budget = budget1, c.max_batch = batch1;
      c.prefill_hw = prefill_hw, c.kv_link = link;
      add(c);
      if (gpus == 1) break;
    }
  }
  return out;
}

PlanResult plan(const PlanRequest& req) {
  // The workload's and the SLOs' own errors reach the caller as they are: only a configuration
  // that cannot run a valid workload is skipped below.
  req.workload.validate();
  req.slo.validate();
  if (req.limits.kv_tokens > 0) {  // once here, not once per configuration that fails on it
    try {
      check_kv_cache_fits(req.model, req.hw, req.opt.precision, req.limits.kv_tokens);
    } catch (const Error& e) {
      fail("plan: --ctx-size {}: {}", req.limits.kv_tokens, e.what());
    }
  }
  PlanResult r;
  r.request = req;
  const auto& w = req.workload;
  const int64_t isl = std::max<int64_t>(1, int64_t(std::llround(w.isl.mean())));
  const int64_t osl = std::max<int64_t>(1, int64_t(std::llround(w.osl.mean())));
  r.decode_batch = 64;
  r.decode_step = predict_step(req.model, req.hw, StepShape::decode(r.decode_batch, isl + osl / 2), req.opt);
  r.prefill_step = predict_step(req.model, req.hw, StepShape::prefill(isl), req.opt);
  r.compute_bound_batch = decode_compute_bound_batch(req.model, req.hw, req.opt);

  std::vector<std::string> skipped;  // why configurations were skipped, each reason once
  for (const auto& c : candidate_configs(req.gpus, req.prefill_hw, req.limits)) {
    PlanCandidate k;
    k.config = c;
    try {
      k.at_rate = simulate(req.model, req.hw, w, c, req.opt, req.slo);
    } catch (const Error& e) {
      // A configuration that cannot run this workload (a link the device lacks, KV that does not
      // fit a partition) is skipped, not fatal.
      if (std::find(skipped.begin(), skipped.end(), e.what()) == skipped.end())
        skipped.emplace_back(e.what());
      continue;
    }
    k.meets = k.at_rate.slo_attainment >= req.slo.attainment;
    r.ranked.push_back(std::move(k));
  }
  RIDGE_CHECK(!r.ranked.empty(), "plan: no configuration can serve this workload on {}: {}",
              req.hw.id, fmt::join(skipped, "; "));
  auto cost = [](const PlanCandidate& k) {
    return std::isfinite(k.at_rate.usd_per_mtok) ? k.at_rate.usd_per_mtok : k.at_rate.gpu_hours;
  };
  // At an offered rate below capacity every good configuration serves everything, so the
  // headroom decides: the highest sustainable rate per GPU, searched for the configurations that
  // meet the SLOs (or, when none does, for the `top` closest).
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.meets != b.meets) return a.meets;
    return a.at_rate.slo_attainment > b.at_rate.slo_attainment;
  });
  int searched = 0;
  for (auto& k : r.ranked) {
    if (searched >= req.top || (!k.meets && searched > 0 && r.ranked.front().meets)) break;
    k.best = max_goodput(req.model, req.hw, w, k.config, req.opt, req.slo, req.search_iterations);
    ++searched;
  }
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [&](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.meets != b.meets) return a.meets;
    if (a.best.has_value() != b.best.has_value()) return a.best.has_value();
    if (a.best && b.best && a.best->rate_per_gpu != b.best->rate_per_gpu)
      return a.best->rate_per_gpu > b.best->rate_per_gpu;
    if (a.at_rate.slo_attainment != b.at_rate.slo_attainment) return a.at_rate.slo_attainment > b.at_rate.slo_attainment;
    return cost(a) < cost(b);
  });
  return r;
}

std::vector<SplitPoint> split_sweep(const model::ModelConfig& cfg, const Hardware& hw, const Workload& w,
                                    int gpus, const CostOptions& opt, const Slo& slo,
                                    const std::vector<double>& sm_fractions, int iterations) {
  std::vector<SplitPoint> out;
  for (int p = 1; p < gpus; ++p) {
    ServingConfig c;
    c.mode = ServingConfig::Mode::disagg_gpus;
    c.prefill_gpus = p, c.decode_gpus = gpus - p, c.token_budget = 8192, c.max_batch = 256;
    const GoodputResult g = max_goodput(cfg, hw, w, c, opt, slo, iterations);
    out.push_back({fmt::format("{}P:{}D", p, gpus - p), double(p) / gpus, false, g.rate, g.rate_per_gpu, g.at.binding});
  }
  for (double f : sm_fractions) {
    ServingConfig c;
    c.mode = ServingConfig::Mode::disagg_sms;
    c.gpus = gpus, c.prefill_fraction = f, c.token_budget = 8192, c.max_batch = 256;
    const GoodputResult g = max_goodput(cfg, hw, w, c, opt, slo, iterations);
    out.push_back({fmt::format("SM {:.0f}%", f * 100), f, true, g.rate, g.rate_per_gpu, g.at.binding});
  }
  return out;
}

std::vector<RooflinePoint> roofline_points(const PlanResult& r) {
  std::vector<RooflinePoint> out;
  auto add = [&](const StepCost& c, const std::string& phase) {
    for (const auto& o : c.ops) {
      if (o.flops <= 0) continue;
      out.push_back({phase, std::string(o.name), o.intensity, o.flops / o.time, o.time,
                     std::string(bound_name(o.bound))});
    }
  };
  add(r.decode_step, fmt::format("decode bs{}", r.decode_batch));
  add(r.prefill_step, fmt::format("prefill {}", r.prefill_step.tokens));
  return out;
}

nlohmann::json to_json(const StepCost& c) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& o : c.ops) {
    ops.push_back({{"name", o.name}, {"kind", op_kind_name(o.kind)}, {"kernels", o.kernels},
                   {"m", o.m}, {"n", o.n}, {"k", o.k}, {"split_k", o.split_k},
                   {"flops", o.flops}, {"bytes", o.bytes}, {"intensity", num(o.intensity)},
                   {"t_math_s", o.t_math}, {"t_mem_s", o.t_mem}, {"wave_efficiency", o.wave_efficiency},
                   {"t_overhead_s", o.t_overhead}, {"e_math", o.e_math}, {"e_mem", o.e_mem},
                   {"time_s", o.time}, {"bound", bound_name(o.bound)}});
  }
  return {{"time_s", c.time}, {"lower_bound_s", c.lower_bound}, {"upper_bound_s", c.upper_bound},
          {"launch", launch_name(c.launch)}, {"kernels", c.kernels}, {"t_gpu_s", c.t_gpu},
          {"t_launch_stall_s", c.t_launch_stall}, {"t_host_s", c.t_host},
          {"t_power_s", c.t_power}, {"power_bound", c.power_bound},
          {"flops", c.flops}, {"bytes", c.bytes}, {"critical_intensity", c.critical_intensity},
          {"flop_utilization", c.flop_utilization}, {"bw_utilization", c.bw_utilization},
          {"power_w", num(c.power_w)}, {"energy_j", num(c.energy_j)}, {"energy_at_tdp", c.energy_at_tdp},
          {"tokens", c.tokens}, {"logits_rows", c.logits_rows}, {"ops", ops}};
}

nlohmann::json to_json(const SimResult& r) {
  return {{"config", r.config}, {"requests", r.requests}, {"makespan_s", r.makespan_s},
          {"ttft_s", {{"mean", r.ttft_mean}, {"p50", r.ttft_p50}, {"p90", r.ttft_p90}, {"p99", r.ttft_p99}}},
          {"tpot_s", {{"mean", r.tpot_mean}, {"p50", r.tpot_p50}, {"p90", r.tpot_p90}, {"p99", r.tpot_p99}}},
          {"stall_p90_s", r.stall_p90},
          {"output_tok_s", r.output_tok_s}, {"input_tok_s", r.input_tok_s},
          {"slo_attainment", r.slo_attainment}, {"goodput_rps", r.goodput_rps},
          {"energy_j", num(r.energy_j)}, {"j_per_token", num(r.j_per_token)},
          {"j_per_output_token", num(r.j_per_output_token)}, {"gpu_hours", r.gpu_hours},
          {"usd_per_mtok", num(r.usd_per_mtok)}, {"kv_transfer_mean_s", r.kv_transfer_mean_s},
          {"prefill_busy", r.prefill_busy}, {"decode_busy", r.decode_busy}, {"hbm_idle", r.hbm_idle},
          {"prefill_hbm_idle", r.prefill_hbm_idle}, {"binding", r.binding}};
}

nlohmann::json to_json(const PlanResult& r) {
  const auto& q = r.request;
  nlohmann::json ranked = nlohmann::json::array();
  for (const auto& k : r.ranked) {
    nlohmann::json j = {{"config", k.config.describe()}, {"gpus", k.config.total_gpus()},
                        {"meets_slo", k.meets}, {"at_rate", to_json(k.at_rate)}};
    if (k.best) j["max_goodput"] = {{"rate_rps", k.best->rate}, {"rate_per_gpu", k.best->rate_per_gpu},
                                    {"at", to_json(k.best->at)}};
    ranked.push_back(j);
  }
  return {{"model", {{"name", q.model_name}, {"describe", q.model.describe()}}},
          {"hardware", {{"id", q.hw.id}, {"name", q.hw.name}, {"measured", q.hw.measured}}},
          {"precision", q.opt.precision.name},
          {"critical_intensity", q.hw.critical_intensity(q.opt.precision.math)},
          {"decode_compute_bound_batch", r.compute_bound_batch},
          {"workload",
           {{"isl", q.workload.isl.describe()},
            {"osl", q.workload.osl.describe()},
            {"rate_rps", q.workload.rate},
            {"prefix_share", q.workload.prefix_share},
            {"requests", q.workload.count()},
            {"seed", q.workload.seed}}},
          {"slo",
           {{"ttft_s", q.slo.ttft_s}, {"tpot_s", q.slo.tpot_s}, {"attainment", q.slo.attainment}}},
          {"gpus", q.gpus},
          {"limits",
           {{"max_num_seqs", q.limits.max_num_seqs},
            {"max_num_batched_tokens", q.limits.max_num_batched_tokens},
            {"kv_tokens", q.limits.kv_tokens}}},
          {"decode_step", to_json(r.decode_step)},
          {"decode_batch", r.decode_batch},
          {"prefill_step", to_json(r.prefill_step)},
          {"ranked", ranked}};
}

std::string format_plan(const PlanResult& r) {
  const auto& q = r.request;
  std::string s;
  auto line = [&](const std::string& t) { s += t + "\n"; };
  line(fmt::format("model     {} — {}", q.model_name, q.model.describe()));
  line(fmt::format("hardware  {}", q.hw.describe()));
  line(fmt::format("precision {} (weights {} B, KV {} B, math {}): critical intensity {:.0f} FLOP/byte; "
                   "decode GEMMs turn compute-bound at batch {}",
                   q.opt.precision.name, q.opt.precision.weight_bytes, q.opt.precision.kv_bytes,
                   q.opt.precision.math, q.hw.critical_intensity(q.opt.precision.math), r.compute_bound_batch));
  line(fmt::format("workload  ISL {} / OSL {}, {:.2f} req/s (Poisson), prefix share {:.0f}%, {} requests; "
                   "SLO TTFT {} ms, TPOT {} ms, {:.0f}% of requests",
                   q.workload.isl.describe(), q.workload.osl.describe(), q.workload.rate,
                   q.workload.prefix_share * 100, q.workload.count(), ms(q.slo.ttft_s), ms(q.slo.tpot_s),
                   q.slo.attainment * 100));
  line("");
  auto step = [&](const StepCost& c, const std::string& title) {
    line(fmt::format("{}: {} ms predicted (bounds {}..{} ms), {:.0f}% of peak FLOP/s, {:.0f}% of HBM "
                     "bandwidth",
                     title, fmt::format("{:.3f}", c.time * 1e3), fmt::format("{:.3f}", c.lower_bound * 1e3),
                     fmt::format("{:.3f}", c.upper_bound * 1e3), 100 * c.flop_utilization, 100 * c.bw_utilization));
    line(fmt::format("  {:<13} {:>10} {:>10} {:>9} {:>10} {:>6} {:>8}", "op", "GFLOP", "MB", "FLOP/B",
                     "time us", "waves", "bound"));
    for (const auto& o : c.ops)
      line(fmt::format("  {:<13} {:>10.2f} {:>10.2f} {:>9.1f} {:>10.1f} {:>6.2f} {:>8}", o.name, o.flops / 1e9,
                       o.bytes / 1e6, std::isfinite(o.intensity) ? o.intensity : 0.0, o.time * 1e6,
                       o.wave_efficiency, bound_name(o.bound)));
  };
  step(r.decode_step, fmt::format("decode step, batch {} at context {}", r.decode_batch,
                                  r.decode_step.tokens > 0 ? int64_t(std::llround(q.workload.isl.mean() + q.workload.osl.mean() / 2)) : 0));
  step(r.prefill_step, fmt::format("prefill of {} tokens", r.prefill_step.tokens));
  line("");
  line(fmt::format("configurations on {} x {} at {:.2f} req/s (best first):", q.gpus, q.hw.id, q.workload.rate));
  line(fmt::format("  {:<44} {:>5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}  {}", "config", "SLO%", "TTFTp90", "TPOTp90",
                   "out tok/s", "good/s", "J/tok", "$/Mtok", "binds"));
  for (const auto& k : r.ranked) {
    const auto& a = k.at_rate;
    line(fmt::format("  {:<44} {:>5.0f} {:>9} {:>9} {:>9.0f} {:>8.2f} {:>8} {:>8}  {}", k.config.describe(),
                     100 * a.slo_attainment, ms(a.ttft_p90), ms(a.tpot_p90), a.output_tok_s, a.goodput_rps,
                     opt_num(a.j_per_output_token, "{:.3f}"), opt_num(a.usd_per_mtok, "{:.3f}"), a.binding));
  }
  line("");
  line("highest sustainable rate (>= attainment) of the best configurations:");
  for (const auto& k : r.ranked) {
    if (!k.best) continue;
    line(fmt::format("  {:<44} {:>8.2f} req/s ({:.2f} per GPU), {:.0f} out tok/s, binds: {}", k.config.describe(),
                     k.best->rate, k.best->rate_per_gpu, k.best->at.output_tok_s, k.best->at.binding));
  }
  return s;
}

std::string format_calibration(const StepCost& predicted, const std::vector<Measured>& measured) {
  std::string s = fmt::format("  {:<14} {:>12} {:>12} {:>8}  {}\n", "op/phase", "predicted us", "measured us",
                              "error", "bound");
  for (const auto& m : measured) {
    double p = 0;
    std::string bound = "-";
    if (m.name == "step") {
      p = predicted.time;
    } else {
      bool found = false;
      for (const auto& o : predicted.ops)
        if (o.name == m.name) p = o.time, bound = std::string(bound_name(o.bound)), found = true;
      if (!found) {
        s += fmt::format("  {:<14} {:>12} {:>12.1f} {:>8}  (not an op of this step: folded into another, or not run)\n", m.name, "-", m.seconds * 1e6, "-");
        continue;
      }
    }
    const double err = m.seconds > 0 ? (p - m.seconds) / m.seconds : 0.0;
    s += fmt::format("  {:<14} {:>12.1f} {:>12.1f} {:>+7.0f}%  {}{}\n", m.name, p * 1e6, m.seconds * 1e6, 100 * err,
                     bound, std::abs(err) > 0.25 ? "  (> ±25%)" : "");
  }
  return s;
}

}  // namespace ridge::perf
