#include "ridge/perf/plot.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write '{}'", p.string());
  f << text;
  if (!f) fail("writing '{}' failed", p.string());
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

}  // namespace

std::string gnuplot_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

void render_gnuplot(const std::string& dir, const std::vector<PlotFile>& files,
                    const std::vector<std::string>& scripts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir.empty() ? "." : dir, ec);
  if (ec) fail("cannot create the plot folder '{}': {}", dir, ec.message());
  for (const auto& f : files) write_file(fs::path(dir) / f.name, f.text);
  if (scripts.empty()) return;
  std::string names;
  for (const auto& s : scripts) names += (names.empty() ? "" : " ") + s;
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty())
    fail("--plot needs gnuplot (Debian: apt-get install gnuplot-nox); the data and scripts are in '{}': "
         "run 'gnuplot {}' there once it is installed",
         dir, names);
  std::string cmd = "cd " + shell_quote(dir.empty() ? "." : dir);
  for (const auto& s : scripts) cmd += " && " + shell_quote(gnuplot) + " " + shell_quote(s);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) fail("gnuplot failed (exit status {}) on the scripts in '{}'", rc, dir);
}

std::string find_gnuplot() {
  if (const char* g = std::getenv("RIDGE_GNUPLOT")) return g;
  const char* path = std::getenv("PATH");
  if (!path) return {};
  std::string p(path);
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::error_code ec;
    const auto cand = std::filesystem::path(dir.empty() ? "." : dir) / "gnuplot";
    if (std::filesystem::is_regular_file(cand, ec)) return cand.string();
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return {};
}

std::vector<std::string> write_plots(const PlanResult& plan, const std::vector<SplitPoint>& splits,
                                     const std::string& dir) {
  namespace fs = std::filesystem;
  const auto& q = plan.request;
  const double peak = q.hw.peak(q.opt.precision.math), bw = q.hw.memory_bw;

  // Roofline: one data block per phase (decode, prefill), op names as labels.
  std::string dat;
  const auto pts = roofline_points(plan);
  std::string phases[2];
  int block = -1;
  std::string last;
  for (const auto& p : pts) {
    if (p.phase != last) {
      if (block >= 0) dat += "\n\n";
      ++block;
      if (block < 2) phases[block] = p.phase;
      last = p.phase;
    }
    dat += fmt::format("{:.6g} {:.6g} {}\n", p.intensity, p.attained_flops, p.op);
  }
  std::string gp = fmt::format(
      "# ridge plan --plot: roofline of {} on {} ({}). Re-render: gnuplot roofline.gp\n"
      "reset\n"
      "set terminal pngcairo size 1200,800 noenhanced font 'sans,11'\n"
      "set output 'roofline.png'\n"
      "set logscale xy\n"
      "set grid\n"
      "set xlabel 'arithmetic intensity (FLOP/byte)'\n"
      "set ylabel 'attained FLOP/s'\n"
      "set title {}\n"
      "peak = {:.6g}; bw = {:.6g}; ci = peak / bw\n"
      "roof(x) = (x * bw < peak) ? x * bw : peak\n"
      "set xrange [0.1:1e5]\n"
      "set yrange [1e9:peak * 3]\n"
      "set key left top\n"
      "set arrow from ci, 1e9 to ci, peak nohead dt 2 lc rgb 'gray40'\n"
      "set label sprintf('critical intensity %.0f', ci) at ci * 1.1, 2e9 tc rgb 'gray40'\n"
      "plot roof(x) title sprintf('roofline: %.0f TFLOP/s, %.2f TB/s', peak / 1e12, bw / 1e12) lw 2 lc rgb 'black', \\\n"
      "  'roofline.dat' index 0 using 1:2 with points pt 7 ps 1.6 lc rgb '#1f77b4' title {}, \\\n"
      "  '' index 0 using 1:2:3 with labels offset 1.2,0.6 font ',8' tc rgb '#1f77b4' notitle, \\\n"
      "  '' index 1 using 1:2 with points pt 5 ps 1.6 lc rgb '#d62728' title {}, \\\n"
      "  '' index 1 using 1:2:3 with labels offset 1.2,-0.6 font ',8' tc rgb '#d62728' notitle\n",
      q.model_name, q.hw.id, q.opt.precision.name,
      gnuplot_string(fmt::format("{} on {} ({}): every op of a step on the roofline", q.model_name, q.hw.name,
                         q.opt.precision.name)),
      peak, bw, gnuplot_string(phases[0]), gnuplot_string(phases[1].empty() ? "prefill" : phases[1]));

  // Goodput against the prefill share: GPU splits (block 0), SM splits (block 1).
  std::string sd = "# prefill_share goodput_per_gpu label\n";
  std::string smd;
  for (const auto& s : splits) {
    const std::string row = fmt::format("{:.6g} {:.6g} {}\n", s.prefill_share, s.per_gpu, s.label);
    (s.by_sms ? smd : sd) += row;
  }
  if (smd.empty()) smd = "nan nan none\n";
  const std::string sgp = fmt::format(
      "# ridge plan --plot: goodput vs prefill:decode split. Re-render: gnuplot splits.gp\n"
      "reset\n"
      "set terminal pngcairo size 1100,700 noenhanced font 'sans,11'\n"
      "set output 'splits.png'\n"
      "set grid\n"
      "set xlabel 'prefill share (of the GPUs, or of each GPU''s SMs)'\n"
      "set ylabel 'goodput per GPU (requests/s meeting the SLOs at {:.0f}% attainment)'\n"
      "set title {}\n"
      "set xrange [0:1]\n"
      "set yrange [0:*]\n"
      "set key right top\n"
      "plot 'splits.dat' index 0 using 1:2 with linespoints pt 7 ps 1.4 lw 2 title 'split by GPUs', \\\n"
      "  '' index 0 using 1:2:3 with labels offset 0,1 font ',8' notitle, \\\n"
      "  '' index 1 using 1:2 with linespoints pt 5 ps 1.4 lw 2 title 'split by SMs (green contexts)'\n",
      q.slo.attainment * 100,
      gnuplot_string(fmt::format("{} on {} x {}: ISL {} / OSL {}, SLO TTFT {:.0f} ms, TPOT {:.0f} ms", q.model_name,
                         q.gpus, q.hw.id, q.workload.isl.describe(), q.workload.osl.describe(),
                         q.slo.ttft_s * 1e3, q.slo.tpot_s * 1e3)));
  render_gnuplot(dir,
                 {{"roofline.dat", dat}, {"roofline.gp", gp}, {"splits.dat", sd + "\n\n" + smd},
                  {"splits.gp", sgp}},
                 {"roofline.gp", "splits.gp"});
  return {(fs::path(dir) / "roofline.png").string(), (fs::path(dir) / "splits.png").string()};
}

}  // namespace ridge::perf
