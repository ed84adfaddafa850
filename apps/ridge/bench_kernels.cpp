// ridge bench kernels: the kernel benchmarks (built with -DRIDGE_BENCH=ON, which keeps CI fast):
// runs bin/ridge-bench-gemm beside this binary with the arguments given, e.g.
//   ridge bench kernels --op gemm --models llama2-7b,llama3-8b --m 1,8,32,128,512,2048,8192
// then sets the cost model's prediction for each shape (perf::predict_gemm, on the ceilings the
// benchmark measured in the same run, with the database's efficiency factors) next to the
// measured times, with the error, and adds the predictions to its JSON (--json FILE).
// --hardware ID|FILE predicts for a database entry or a profile instead of the same-run ceilings.
// Then, for each token count and K whose shapes are all memory-bound, each kernel's fixed cost and
// streaming rate over those shapes (perf/stream_fit.h), against the same run's read ceiling.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/perf/cost_model.h"
#include "ridge/perf/hardware.h"
#include "ridge/perf/stream_fit.h"
#include "subcommand.h"

namespace {

namespace fs = std::filesystem;

int run_child(const fs::path& tool, const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::string name = tool.string();
  std::vector<char*> argv;
  argv.push_back(name.data());
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  RIDGE_CHECK(pid >= 0, "cannot fork to run {}", name);
  if (pid == 0) {
    execv(name.c_str(), argv.data());
    std::perror(name.c_str());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The hardware the shapes are predicted for: --hardware, else the database entry of the GPU with
// the ceilings measured in the same run (copy bandwidth, cuBLASLt 8192^3) in place of its
// datasheet figures.
ridge::perf::Hardware hardware_for(const nlohmann::json& run, const std::string& spec) {
  using namespace ridge::perf;
  const HardwareDb db = HardwareDb::load_default();
  if (!spec.empty()) return db.resolve(spec);
  const std::string gpu = run.contains("meta") ? run["meta"].value("gpu", std::string()) : std::string();
  std::string id = match_entry(db, gpu);
  if (id.empty()) id = "h200";
  Hardware hw = db.get(id);
  if (run.contains("ceilings")) {
    const auto& c = run["ceilings"];
    const double bw = std::max(c.value("copy_tbps", 0.0), c.value("read_tbps", 0.0)) * 1e12;
    const double peak = c.value("cublas_bf16_8192_tflops", 0.0) * 1e12;
    if (bw > 0) hw.memory_bw = bw;
    if (peak > 0) hw.dense_flops["bf16"] = peak;
    hw.id += "+same-run-ceilings";
    hw.measured = true;
  }
  if (run.contains("meta") && run["meta"].contains("sms")) hw.sms = run["meta"]["sms"].get<int>();
  return hw;
}

// Each kernel's time over the memory-bound shapes of one token count M and one K, as a fixed cost
// plus bytes ÷ a streaming rate (perf::fit_stream; at least three sizes), printed beside the read
// ceiling of the same run and returned as JSON. Kernels: "ours", "cublas" and every "alt_*".
nlohmann::json stream_fits(const nlohmann::json& run,
                           const std::set<std::pair<int64_t, int64_t>>& not_memory_bound) {
  using Key =
      std::tuple<int64_t, int64_t, int, std::string>;  // M, K, order (ours, cuBLAS, alts), kernel
  std::map<Key, std::vector<std::pair<double, double>>> groups;
  for (const auto& r : run["shapes"]) {
    const int64_t M = r.value("M", 0), K = r.value("K", 0);
    const double bytes = r.value("min_bytes", 0.0);
    if (M <= 0 || K <= 0 || bytes <= 0 || not_memory_bound.count({M, K})) continue;
    for (auto it = r.begin(); it != r.end(); ++it) {
      const std::string& kernel = it.key();
      if (kernel != "ours" && kernel != "cublas" && kernel.rfind("alt_", 0) != 0) continue;
      if (!it->is_object() || !it->value("ok", false) || it->value("us", 0.0) <= 0) continue;
      const int order = kernel == "ours" ? 0 : kernel == "cublas" ? 1 : 2;
      groups[{M, K, order, kernel}].emplace_back(bytes, it->value("us", 0.0) * 1e-6);
    }
  }
  const double read_tbps = run.contains("ceilings") ? run["ceilings"].value("read_tbps", 0.0) : 0.0;
  nlohmann::json out = nlohmann::json::array();
  bool header = false;
  for (const auto& [key, points] : groups) {
    std::set<double> sizes;
    for (const auto& pt : points) sizes.insert(pt.first);
    if (sizes.size() < 3) continue;
    const auto& [M, K, order, kernel] = key;
    const ridge::perf::StreamFit f = ridge::perf::fit_stream(points);
    const double tbps = f.bytes_per_s / 1e12;
    const std::string name = kernel.rfind("alt_", 0) == 0 ? kernel.substr(4) : kernel;
    if (!header) {
      fmt::print(
          "\nfixed cost and streaming rate (least squares over the memory-bound shapes of one "
          "M and K: t = fixed + bytes / rate; read ceiling {:.2f} TB/s)\n",
          read_tbps);
      fmt::print("{:>5} {:>6} {:<14} {:>6} | {:>8} {:>7} {:>6} {:>6}\n", "M", "K", "kernel",
                 "shapes", "fixed_us", "TB/s", "%read", "r2");
      header = true;
    }
    fmt::print("{:>5} {:>6} {:<14} {:>6} | {:>8.2f} {:>7.2f} {:>6} {:>6.3f}\n", M, K, name,
               sizes.size(), f.fixed_s * 1e6, tbps,
               read_tbps > 0 && tbps > 0 ? fmt::format("{:.0f}", 100 * tbps / read_tbps) : "-",
               f.r2);
    out.push_back({{"M", M},
                   {"K", K},
                   {"kernel", name},
                   {"shapes", sizes.size()},
                   {"points", f.points},
                   {"fixed_us", f.fixed_s * 1e6},
                   {"stream_tbps", tbps},
                   {"pct_read", read_tbps > 0 ? 100 * tbps / read_tbps : 0.0},
                   {"r2", f.r2}});
  }
  return out;
}

void predict(const fs::path& json_path, const std::string& spec) {
  using namespace ridge;
  std::ifstream in(json_path);
  if (!in) return;  // the benchmark wrote nothing (e.g. --help)
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json run = nlohmann::json::parse(ss.str(), nullptr, false);
  if (run.is_discarded() || !run.contains("shapes")) return;
  const perf::Hardware hw = hardware_for(run, spec);
  perf::CostOptions ach;
  ach.achievable = true;
  const perf::CostOptions roof;
  fmt::print("\npredicted (perf::predict_gemm on {}: {:.2f} TB/s, {:.0f} TFLOP/s bf16; one launch "
             "with its kernel overhead, as timed in a graph) vs measured\n",
             hw.id, hw.memory_bw / 1e12, hw.peak("bf16") / 1e12);
  fmt::print("{:<10} {:<8} {:>5} {:>6} {:>6} | {:>11} {:>9} {:>7} | {:>9} {:>7} {:>9} {:>7} | {}\n", "model",
             "layer", "M", "N", "K", "roofline_us", "pred_us", "bound", "ours_us", "err", "cublas_us",
             "err", "beyond ±25%");
  int outside = 0, rows = 0;
  std::set<std::pair<int64_t, int64_t>> not_memory_bound;  // (M, K) with a compute-bound shape
  for (auto& r : run["shapes"]) {
    const int64_t M = r.value("M", 0), N = r.value("N", 0), K = r.value("K", 0);
    if (M <= 0 || N <= 0 || K <= 0) continue;
    const perf::OpCost p = perf::predict_gemm(hw, M, N, K, ach);
    const perf::OpCost rl = perf::predict_gemm(hw, M, N, K, roof);
    if (p.bound != perf::Bound::memory) not_memory_bound.insert({M, K});
    auto us_of = [&](const char* who) {
      return r.contains(who) && r[who].value("ok", false) ? r[who].value("us", 0.0) : 0.0;
    };
    const double ours = us_of("ours"), cub = us_of("cublas");
    const double best = ours > 0 && cub > 0 ? std::min(ours, cub) : std::max(ours, cub);
    auto err = [&](double us) { return us > 0 ? fmt::format("{:+.0f}%", 100 * (p.time * 1e6 - us) / us) : std::string("-"); };
    const bool off = best > 0 && std::abs(p.time * 1e6 - best) / best > 0.25;
    outside += off ? 1 : 0;
    rows += best > 0 ? 1 : 0;
    fmt::print("{:<10} {:<8} {:>5} {:>6} {:>6} | {:>11.2f} {:>9.2f} {:>7} | {:>9.2f} {:>7} {:>9.2f} {:>7} | {}\n",
               r.value("model", ""), r.value("layer", ""), M, N, K, rl.time * 1e6, p.time * 1e6,
               perf::bound_name(p.bound), ours, err(ours), cub, err(cub), off ? "yes (vs the faster)" : "");
    r["predicted"] = {{"hardware", hw.id},
                      {"us", p.time * 1e6},
                      {"roofline_us", rl.time * 1e6},
                      {"bound", perf::bound_name(p.bound)},
                      {"wave_efficiency", p.wave_efficiency},
                      {"split_k", p.split_k},
                      {"error_vs_ours", ours > 0 ? (p.time * 1e6 - ours) / ours : 0.0},
                      {"error_vs_cublas", cub > 0 ? (p.time * 1e6 - cub) / cub : 0.0}};
  }
  fmt::print("{} of {} shapes predicted within ±25% of the faster kernel\n", rows - outside, rows);
  run["prediction_hardware"] = hw.describe();
  run["stream_fits"] = stream_fits(run, not_memory_bound);
  std::ofstream(json_path) << run.dump(1) << "\n";
}

// `--op attention` (or --op=attention): the paged decode attention benchmark, whose own output
// already reports KV bandwidth against the copy ceiling of the same run.
bool wants_attention(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--op=attention" ||
        (args[i] == "--op" && i + 1 < args.size() && args[i + 1] == "attention"))
      return true;
  return false;
}

void run(const std::vector<std::string>& args_in) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (wants_attention(args_in)) {
    const fs::path tool = self.parent_path() / "ridge-bench-attention";
    RIDGE_CHECK(!ec && fs::exists(tool, ec),
                "{} is not built: configure with -DRIDGE_BENCH=ON (and CUDA) to build the kernel "
                "benchmarks",
                tool.string());
    const int rc = run_child(tool, args_in);
    if (rc != 0) throw ridge::app::Exit{rc};
    return;
  }
  const fs::path tool = self.parent_path() / "ridge-bench-gemm";
  RIDGE_CHECK(!ec && fs::exists(tool, ec),
              "{} is not built: configure with -DRIDGE_BENCH=ON (and CUDA) to build the kernel "
              "benchmarks",
              tool.string());
  // --hardware is ours; everything else goes to the benchmark, plus a JSON path to read back.
  std::vector<std::string> args;
  std::string hardware, json_path;
  bool help = false;
  for (size_t i = 0; i < args_in.size(); ++i) {
    const std::string& a = args_in[i];
    if ((a == "--hardware" || a == "--hardware-file") && i + 1 < args_in.size()) {
      hardware = args_in[++i];
      continue;
    }
    if (a.rfind("--hardware=", 0) == 0) {
      hardware = a.substr(11);
      continue;
    }
    if (a == "--json" && i + 1 < args_in.size()) json_path = args_in[i + 1];
    if (a.rfind("--json=", 0) == 0) json_path = a.substr(7);
    if (a == "-h" || a == "--help") help = true;
    args.push_back(a);
  }
  fs::path tmp;
  if (json_path.empty() && !help) {
    tmp = fs::temp_directory_path() / fmt::format("ridge-bench-gemm-{}.json", ::getpid());
    args.push_back("--json");
    args.push_back(tmp.string());
    json_path = tmp.string();
  }
  const int rc = run_child(tool, args);
  if (rc == 0 && !help) predict(json_path, hardware);
  if (!tmp.empty()) fs::remove(tmp, ec);
  if (rc != 0) throw ridge::app::Exit{rc};
}

void setup(CLI::App& sub) {
  sub.allow_extras();
  sub.prefix_command();  // everything after `kernels` goes to the benchmark binary
  sub.fallthrough(false);  // (inherited from the top app, it would hand --op etc. up, unparsed)
  sub.callback([&sub] { run(sub.remaining()); });
}

const ridge::app::BenchRegistrar reg(
    "kernels",
    "Kernel benchmarks with ceilings (--op gemm: vs cuBLAS with predicted times; --op attention: "
    "paged decode attention; needs -DRIDGE_BENCH=ON)",
    &setup);

}  // namespace
