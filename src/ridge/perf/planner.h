// perf/planner: `ridge plan` as a library. Enumerates serving configurations of a cluster of
// `gpus` GPUs, simulates each at the offered rate, finds the highest sustainable rate (SLO
// attainment kept) of those that meet the SLOs, and ranks them: meets, then that rate per GPU,
// then cost. Also the sweep of
// goodput over prefill:decode splits, the roofline placement of every op, and the JSON form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/perf/simulator.h"

namespace ridge::perf {

// The engine's limits as `ridge serve` would be given them (--max-num-seqs,
// --max-num-batched-tokens, --ctx-size): each one set (> 0) replaces the planner's candidates for
// it, so that a configuration already chosen can be predicted as it will run.
struct ServeLimits {
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t kv_tokens = 0;  // a GPU's KV capacity in tokens
};

struct PlanRequest {
  model::ModelConfig model;
  std::string model_name;
  Hardware hw;
  std::optional<Hardware> prefill_hw;  // offer disaggregation onto this device as well
  CostOptions opt;
  Workload workload;
  Slo slo;
  int gpus = 8;
  int top = 16;            // at most this many configurations get a max-goodput search
  ServeLimits limits;
  int search_iterations = 5;
};

struct PlanCandidate {
  ServingConfig config;
  SimResult at_rate;       // at the offered rate
  bool meets = false;      // attainment >= slo.attainment at the offered rate
  std::optional<GoodputResult> best;  // highest sustainable rate (the top few only)
};

struct SplitPoint {
  std::string label;       // "2P:6D" or "SM 25%"
  double prefill_share;    // of the GPUs or of the SMs
  bool by_sms;
  double goodput_rps;      // highest rate meeting the attainment
  double per_gpu;
  std::string binding;
};

struct RooflinePoint {
  std::string phase;       // "decode bs64 @ctx" or "prefill 2048"
  std::string op;
  double intensity, attained_flops, time;
  std::string bound;
};

struct PlanResult {
  PlanRequest request;
  std::vector<PlanCandidate> ranked;
  StepCost decode_step;    // one decode step at a typical batch and the mean context
  StepCost prefill_step;   // one prompt of the mean input length
  int64_t decode_batch = 0;
  int64_t compute_bound_batch = -1;  // decode batch where the GEMMs turn compute-bound
};

std::vector<ServingConfig> candidate_configs(int gpus, const std::optional<Hardware>& prefill_hw,
                                             const ServeLimits& limits = {});
PlanResult plan(const PlanRequest& req);

// Goodput of every prefill:decode split of `gpus` GPUs (1..gpus-1 prefill GPUs) and, with
// sm_fractions, of SM splits of each GPU.
std::vector<SplitPoint> split_sweep(const model::ModelConfig& cfg, const Hardware& hw, const Workload& w,
                                    int gpus, const CostOptions& opt, const Slo& slo,
                                    const std::vector<double>& sm_fractions = {}, int iterations = 6);

std::vector<RooflinePoint> roofline_points(const PlanResult& r);

nlohmann::json to_json(const StepCost& c);
nlohmann::json to_json(const SimResult& r);
nlohmann::json to_json(const PlanResult& r);
// The human-readable report of `ridge plan`.
std::string format_plan(const PlanResult& r);
// Predicted vs measured per op (or phase): the calibration table `ridge bench` prints.
struct Measured {
  std::string name;   // an op name of StepCost, or a phase ("step")
  double seconds;
};
std::string format_calibration(const StepCost& predicted, const std::vector<Measured>& measured);

}  // namespace ridge::perf
